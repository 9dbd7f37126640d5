"""Step 17 - train stage 3: GRPO with compound drift (several drifts per episode).

Resumes stage 2's final checkpoint (adapter, TRL's frozen reference adapter, optimiser,
scheduler, RNG, global_step) and trains up to global step `sum(steps_per_stage[:3])` on the
same cosine schedule, checkpointing adapter-only under `training/stage3/` and appending to
`training/metrics.csv`. An interrupted stage resumes from its own latest checkpoint on rerun.

Reads `ctx.profile`, `ctx.model`, `ctx.tokenizer`, `ctx.env_factory`,
`ctx.trainer_state["stage2"]` (or stage 2's checkpoints on disk).
Writes `ctx.trainer_state["stage3"]`, `ctx.artifacts["stage3_checkpoint"|"metrics_csv"]`.
Run alone (after stage 2): `python -m cells run --profile cpu-smoke --steps 17`.
Time: cpu-smoke seconds; cpu-learn a few minutes (45 steps; measured per phase in docs/results.md); cpu-gemma none (0 steps);
colab-t4 has not been run on a GPU yet: estimated at 100 steps of ~15-25 s each (docs/experiments/2026-12-04-cpu-gemma.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from cells.context import Context

STAGE = 3


def run(ctx: Context) -> Context:
    """GRPO stage 3, continuing from stage 2."""
    from cells.training.grpo_stage import run_grpo_stage
    from cells.training.stages import note_if_reused

    result = run_grpo_stage(ctx, STAGE)  # the stage runner and trainer wiring every GRPO stage shares
    note_if_reused(ctx, __name__, result.trained_steps)
    return ctx
