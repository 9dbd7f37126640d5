"""Step 16 - train stage 2: GRPO with one drift per episode.

Resumes stage 1's final checkpoint (adapter, TRL's frozen reference adapter, optimiser,
scheduler, RNG, global_step) and trains up to global step `sum(steps_per_stage[:2])` on the
same cosine schedule, checkpointing adapter-only under `training/stage2/` and appending to
`training/metrics.csv`. An interrupted stage resumes from its own latest checkpoint on rerun.

Reads `ctx.profile`, `ctx.model`, `ctx.tokenizer`, `ctx.env_factory`,
`ctx.trainer_state["stage1"]` (or stage 1's checkpoints on disk).
Writes `ctx.trainer_state["stage2"]`, `ctx.artifacts["stage2_checkpoint"|"metrics_csv"]`.
Run alone (after stage 1): `python -m cells run --profile cpu-smoke --steps 16`.
Time: cpu-smoke < 1 min; cpu-learn ~4 min (90 steps, measured), cpu-gemma ~1 min (measured); colab-t4 ~1 h (estimate).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cells import step_15_train_stage1

if TYPE_CHECKING:  # pragma: no cover
    from cells.pipeline import Context

STAGE = 2


def run(ctx: Context) -> Context:
    """GRPO stage 2, continuing from stage 1."""
    from cells.training.stages import note_if_reused, run_context_stage

    result = run_context_stage(ctx, STAGE, step_15_train_stage1.build_stage_trainer)  # same wiring for every stage
    note_if_reused(ctx, __name__, result.trained_steps)
    return ctx
