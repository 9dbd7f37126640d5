"""Step 17 - train stage 3: GRPO with compound drift (several drifts per episode).

Resumes stage 2's final checkpoint (adapter, TRL's frozen reference adapter, optimiser,
scheduler, RNG, global_step) and trains up to global step `sum(steps_per_stage[:3])` on the
same cosine schedule, checkpointing adapter-only under `training/stage3/` and appending to
`training/metrics.csv`. An interrupted stage resumes from its own latest checkpoint on rerun.

Reads `ctx.profile`, `ctx.model`, `ctx.tokenizer`, `ctx.env_factory`,
`ctx.trainer_state["stage2"]` (or stage 2's checkpoints on disk).
Writes `ctx.trainer_state["stage3"]`, `ctx.artifacts["stage3_checkpoint"|"metrics_csv"]`.
Run alone (after stage 2): `python -m cells run --profile cpu-smoke --steps 17`.
Time: cpu-smoke < 1 min; cpu-learn ~4 min (90 steps, measured), cpu-gemma ~1 min (measured); colab-t4 ~1 h (estimate).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cells import step_15_train_stage1

if TYPE_CHECKING:  # pragma: no cover
    from cells.pipeline import Context

STAGE = 3


def run(ctx: Context) -> Context:
    """GRPO stage 3, continuing from stage 2."""
    from cells.training.stages import note_if_reused, run_context_stage

    result = run_context_stage(ctx, STAGE, step_15_train_stage1.build_stage_trainer)  # same wiring for every stage
    note_if_reused(ctx, __name__, result.trained_steps)
    return ctx
