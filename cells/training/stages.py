"""Context-level glue shared by steps 15-17: directories, previous-stage lookup, result recording.

Layout under `ctx.run_dir`:

    training/warm_start/adapter/     SFT adapter (step 15)
    training/stage{1,2,3}/checkpoint-<global_step>/   adapter-only checkpoints + sidecar
    training/metrics.csv             one row per GRPO optimiser step, all stages

`ctx.trainer_state` gets `warm_start` (WarmStartResult) and `stage1..3` (StageResult);
`ctx.artifacts` gets `warm_start_adapter`, `stage{n}_checkpoint` and `metrics_csv`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from cells.training.checkpoints import checkpoint_step, latest_checkpoint, load_adapter_weights
from cells.training.curriculum import CurriculumError, StageResult, run_stage, stage_plans, total_steps

# (ctx, stage, output_dir, callbacks) -> a transformers Trainer; each step module owns one.
StageTrainerBuilder = Callable[[Any, int, Path, list[Any]], Any]
REFERENCE_ADAPTER = "ref"  # the frozen copy TRL's GRPOTrainer adds to a peft model when beta != 0


def training_root(ctx: Any) -> Path:
    return Path(ctx.run_dir) / "training"


def stage_dir(ctx: Any, stage: int) -> Path:
    return training_root(ctx) / f"stage{stage}"


def metrics_path(ctx: Any) -> Path:
    return training_root(ctx) / "metrics.csv"


def curriculum_max_steps(ctx: Any) -> int:
    """`max_steps` for every stage's GRPO config: the whole curriculum (one cosine curve)."""
    return total_steps(ctx.profile.steps_per_stage)


def previous_stage_checkpoint(ctx: Any, stage: int) -> Path | None:
    """Final checkpoint of stage-1 (from this context, else from disk); None for stage 1."""
    if stage == 1:
        return None
    prev: StageResult | None = ctx.trainer_state.get(f"stage{stage - 1}")
    if prev is not None:
        return prev.checkpoint
    boundary = stage_plans(ctx.profile.steps_per_stage)[stage - 2].end_step
    found = latest_checkpoint(stage_dir(ctx, stage - 1))
    if found is None or checkpoint_step(found) != boundary:
        raise CurriculumError(
            f"stage {stage} needs stage {stage - 1}'s final checkpoint (step {boundary}) under "
            f"{stage_dir(ctx, stage - 1)}, found {found}; run step {14 + stage - 1} first"
        )
    return found


def drop_reference_adapter(model: Any) -> None:
    """Remove TRL's `ref` adapter left by a previous GRPOTrainer on this model.

    A new GRPOTrainer adds it again (it raises if it exists); resuming then restores the saved
    `ref/` adapter from the checkpoint, so the KL reference stays the warm-start policy.
    """
    peft_config = getattr(model, "peft_config", None)
    if isinstance(peft_config, dict) and REFERENCE_ADAPTER in peft_config:
        model.delete_adapter(REFERENCE_ADAPTER)


def run_context_stage(ctx: Any, stage: int, builder: StageTrainerBuilder) -> StageResult:
    """Run GRPO curriculum `stage` for `ctx` with `builder`, record it and return the result."""
    plan = stage_plans(ctx.profile.steps_per_stage)[stage - 1]
    previous = previous_stage_checkpoint(ctx, stage)
    drop_reference_adapter(ctx.model)

    def factory(output_dir: Path, callbacks: list[Any]) -> Any:
        return builder(ctx, stage, output_dir, callbacks)

    result = run_stage(
        stage, factory, stage_dir(ctx, stage), previous, plan.end_step,
        metrics_path=metrics_path(ctx), profile_name=ctx.profile.name,
    )
    if result.trained_steps == 0 and ctx.model is not None:  # skipped: bring the model up to date
        load_adapter_weights(ctx.model, result.checkpoint)
    ctx.trainer_state[f"stage{stage}"] = result
    ctx.artifacts[f"stage{stage}_checkpoint"] = result.checkpoint
    ctx.artifacts["metrics_csv"] = result.metrics_path
    print(f"[stage {stage}] steps {plan.start_step}->{result.final_step} "
          f"({result.trained_steps} trained, {result.seconds:.1f}s) checkpoint={result.checkpoint}")
    return result
