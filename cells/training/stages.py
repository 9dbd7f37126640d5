"""Context-level glue shared by steps 15-17: directories, reuse guards, the previous stage's checkpoint.

Layout under `ctx.run_dir`:

    training/warm_start/adapter/     SFT adapter (step 15, GPU profiles) + sidecar
    training/warm_start/model/       the whole warm-started tiny model (step 15, CPU profiles) + sidecar
    training/stage{1,2,3}/checkpoint-<global_step>/   adapter-only checkpoints + sidecar
    training/metrics.csv             one row per GRPO optimiser step, all stages

`ctx.trainer_state` gets `warm_start` (WarmStartResult) and `stage1..3` (StageResult);
`ctx.artifacts` gets `warm_start_adapter`, `stage{n}_checkpoint` and `metrics_csv`.

Reuse is guarded: the warm start (`guard_warm_start`) and each stage (`grpo_stage.run_grpo_stage`) reuse
what `training/` holds only when its sidecar records the knobs this profile has now
(`checkpoints.stage_knobs`), else `RunDirMismatchError`. With `ctx.fresh` (`--fresh`), the first
training step of the run deletes `training/` instead, so everything retrains from the warm start.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from cells.distributed import is_main_process, wait_for_everyone
from cells.training.checkpoints import (
    ADAPTER_FILES,
    FULL_MODEL_FILES,
    build_meta,
    check_reusable,
    checkpoint_step,
    latest_checkpoint,
    stage_knobs,
    write_meta,
)
from cells.training.curriculum import CurriculumError, StageResult, stage_plans, total_steps

REFERENCE_ADAPTER = "ref"  # the frozen copy TRL's GRPOTrainer adds to a peft model when beta != 0
WARM_START_DIRS = ("adapter", "model")  # what step 15 saves: a LoRA adapter (GPU) or the whole tiny model (CPU)


def training_root(ctx: Any) -> Path:
    return Path(ctx.run_dir) / "training"


def stage_dir(ctx: Any, stage: int) -> Path:
    return training_root(ctx) / f"stage{stage}"


def metrics_path(ctx: Any) -> Path:
    return training_root(ctx) / "metrics.csv"


def curriculum_max_steps(ctx: Any) -> int:
    """`max_steps` for every stage's GRPO config: the whole curriculum (one cosine curve)."""
    return total_steps(ctx.profile.steps_per_stage)


def start_over_if_fresh(ctx: Any) -> None:
    """With `ctx.fresh`, delete `<run_dir>/training/` once (the first training step of the run calls this)."""
    if getattr(ctx, "fresh", False):
        if is_main_process():
            shutil.rmtree(training_root(ctx), ignore_errors=True)
        wait_for_everyone()  # no process looks under training/ before it is gone
        ctx.fresh = False  # later stages of the same run continue what this run trains
        print(f"[fresh] removed {training_root(ctx)}: warm start and GRPO stages start over")


def _holds_weights(path: Path) -> bool:
    return any((path / name).is_file() for name in (*ADAPTER_FILES, *FULL_MODEL_FILES))


def guard_warm_start(ctx: Any, warm_dir: Path) -> None:
    """Call before step 15 looks at `warm_dir` (its saved adapter or full model): honour `--fresh`,
    refuse a stale warm start.

    Saved weights are reusable only if the sidecar records this profile's warm-start knobs
    (`RunDirMismatchError` otherwise, before any weights are loaded); when there are none yet,
    the sidecar is written now, naming the knobs the warm start about to be trained comes from.
    """
    start_over_if_fresh(ctx)
    knobs = stage_knobs(ctx.profile, 0)
    if _holds_weights(warm_dir):
        check_reusable(warm_dir, knobs, "warm start")
        return
    warm_dir.mkdir(parents=True, exist_ok=True)
    if is_main_process():
        write_meta(warm_dir, build_meta(ctx.profile.name, 0, 0, knobs, ctx.profile.to_dict()))


def check_training_reusable(ctx: Any) -> None:
    """Preflight: raise `RunDirMismatchError` now for anything under `training/` that steps 15-17 would refuse.

    Reads sidecars only; `pipeline.run` and the notebook's setup cell call it before step 1, so a
    run dir of another profile is refused before step 12 loads (or downloads) a model. No-op with `ctx.fresh`.
    """
    if getattr(ctx, "fresh", False):
        return
    for name in WARM_START_DIRS:
        warm_dir = training_root(ctx) / "warm_start" / name
        if _holds_weights(warm_dir):
            check_reusable(warm_dir, stage_knobs(ctx.profile, 0), "warm start")
    for stage in (1, 2, 3):
        found = latest_checkpoint(stage_dir(ctx, stage))
        if found is not None:
            check_reusable(found, stage_knobs(ctx.profile, stage), f"GRPO stage {stage} checkpoint")


def previous_stage_checkpoint(ctx: Any, stage: int) -> Path | None:
    """Final checkpoint of stage-1 (from this context, else from disk); None for stage 1.

    Refused (`RunDirMismatchError`) unless it was produced with this profile's knobs for stage-1.
    """
    if stage == 1:
        return None
    found = _previous_stage_checkpoint(ctx, stage)
    check_reusable(found, stage_knobs(ctx.profile, stage - 1), f"GRPO stage {stage - 1} checkpoint")
    return found


def _previous_stage_checkpoint(ctx: Any, stage: int) -> Path:
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


def note_if_reused(ctx: Any, step_module: str, *trained: int) -> None:
    """Add `step_module` (a step's `__name__`) to `ctx.reused_steps` when every count in `trained` (optimiser steps
    run this session) is 0: the step only reloaded finished training, so its time is not the training's."""
    if not any(trained):
        ctx.reused_steps.add(step_module.rsplit(".", 1)[-1])
