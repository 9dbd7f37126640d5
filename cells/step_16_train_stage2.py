"""Step 16 - train stage 2: GRPO with one drift per episode.

Resumes stage 1's final checkpoint (adapter, TRL's frozen reference adapter, optimiser,
scheduler, RNG, global_step) and trains up to global step `sum(steps_per_stage[:2])` on the
same cosine schedule, checkpointing adapter-only under `training/stage2/` and appending to
`training/metrics.csv`. An interrupted stage resumes from its own latest checkpoint on rerun.

Reads `ctx.profile`, `ctx.model`, `ctx.tokenizer`, `ctx.env_factory`,
`ctx.trainer_state["stage1"]` (or stage 1's checkpoints on disk).
Writes `ctx.trainer_state["stage2"]`, `ctx.artifacts["stage2_checkpoint"|"metrics_csv"]`.
Run alone (after stage 1): `python -m cells run --profile cpu-smoke --steps 16`.
Time: cpu-smoke seconds; cpu-learn a few minutes (45 steps; measured per phase in docs/results.md); cpu-gemma about a minute (one step);
colab-t4 has not been run on a GPU yet: estimated at 100 steps of ~15-25 s each (docs/experiments/2026-12-04-cpu-gemma.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from cells.context import Context

STAGE = 2


def run(ctx: Context) -> Context:
    """GRPO stage 2, continuing from stage 1."""
    from cells.training.grpo_stage import run_grpo_stage
    from cells.training.stages import note_if_reused

    result = run_grpo_stage(ctx, STAGE)  # the stage runner and trainer wiring every GRPO stage shares
    note_if_reused(ctx, __name__, result.trained_steps)
    return ctx
