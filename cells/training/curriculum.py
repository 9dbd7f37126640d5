"""Stage runner: GRPO stages 1-3 as one continuous run, cut at stage boundaries.

How continuity works (one idea, three parts):
- every stage's trainer is built with the SAME `max_steps = sum(steps_per_stage)`, so the cosine
  schedule `lr(t)` is one curve over the whole curriculum (HF rebuilds the lambda from
  `max_steps` and restores `last_epoch` from `scheduler.pt`);
- `StageStopCallback` stops training (and forces a checkpoint) at the stage's cumulative
  boundary, e.g. steps (2, 3, 4) -> boundaries 2, 5, 9;
- each stage calls `trainer.train(resume_from_checkpoint=...)` on the previous stage's final
  checkpoint, or on the latest checkpoint in its own directory when it was interrupted, so the
  adapter (and TRL's frozen `ref` adapter), optimiser moments, scheduler, RNG and global_step
  all continue.

`run_stage` refuses a resume point whose recorded `max_steps` differs from the trainer's (the
cosine curve would silently jump), refuses its own stage's checkpoint when the knobs recorded in
its sidecar differ from this run's (`checkpoints.check_reusable`, before any weights are loaded),
and skips training when the stage is already complete. The caller checks the previous stage's
checkpoint the same way (`grpo_stage.run_grpo_stage`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from cells.errors import DriftCallError
from cells.training.checkpoints import (
    assert_adapter_only,
    build_meta,
    check_reusable,
    checkpoint_step,
    latest_checkpoint,
    read_trainer_state,
    write_meta,
)
from cells.training.metrics import MetricsCallback
from cells.training.stage_bars import use_stage_progress

TrainerFactory = Callable[[Path, list[Any]], Any]  # (output_dir, callbacks) -> transformers.Trainer


class CurriculumError(DriftCallError, RuntimeError):
    """A stage cannot run or resume consistently (schedule mismatch, missing checkpoint, ...)."""


@dataclass(frozen=True)
class StagePlan:
    """Global-step window of one stage: trains steps start_step+1 .. end_step."""

    stage: int
    start_step: int
    end_step: int


@dataclass(frozen=True)
class StageResult:
    """What a finished stage leaves behind."""

    stage: int
    start_step: int
    final_step: int
    checkpoint: Path
    metrics_path: Path
    resumed_from: Path | None
    trained_steps: int  # optimiser steps run by this call (0 when the stage was already complete)
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "start_step": self.start_step,
            "final_step": self.final_step,
            "checkpoint": str(self.checkpoint),
            "metrics_path": str(self.metrics_path),
            "resumed_from": None if self.resumed_from is None else str(self.resumed_from),
            "trained_steps": self.trained_steps,
            "seconds": round(self.seconds, 3),
        }


def stage_plans(steps_per_stage: Sequence[int]) -> tuple[StagePlan, ...]:
    """Cumulative windows, e.g. (2, 3, 4) -> (1: 0..2, 2: 2..5, 3: 5..9)."""
    plans, start = [], 0
    for i, steps in enumerate(steps_per_stage, start=1):
        if steps < 0:
            raise CurriculumError(f"stage {i} has {steps} steps; steps per stage must be >= 0")
        plans.append(StagePlan(i, start, start + steps))
        start += steps
    return tuple(plans)


def total_steps(steps_per_stage: Sequence[int]) -> int:
    """`max_steps` every stage's config must use (one cosine curve over the whole curriculum)."""
    return sum(steps_per_stage)


class StageStopCallback(TrainerCallback):
    """Stop training, with a checkpoint, once `global_step` reaches the stage boundary.

    Also re-applies this trainer's logging/eval/save intervals on resume: HF restores them from
    the checkpoint's `trainer_state.json`, so a stage's own `save_steps` would otherwise be ignored.
    """

    def __init__(self, stop_step: int) -> None:
        self.stop_step = stop_step

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        state.compute_steps(args, state.max_steps)
        return control

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if state.global_step >= self.stop_step:
            control.should_training_stop = True
            control.should_save = True
        return control


class CheckpointMetaCallback(TrainerCallback):
    """After each HF save: check the checkpoint is adapter-only and write the metadata sidecar."""

    def __init__(self, profile: str, stage: int, knobs: dict[str, Any] | None = None,
                 resolved_profile: dict[str, Any] | None = None) -> None:
        self.profile = profile
        self.stage = stage
        self.knobs = knobs
        self.resolved_profile = resolved_profile

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:  # several processes: the one that saved the weights writes the sidecar
            return
        ckpt = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        assert_adapter_only(ckpt)
        write_meta(ckpt, build_meta(self.profile, self.stage, state.global_step, self.knobs, self.resolved_profile))


def resume_point(stage_dir: Path, previous_checkpoint: Path | None) -> Path | None:
    """The stage's own latest checkpoint (interrupted run) or else the previous stage's final one."""
    own = latest_checkpoint(stage_dir)
    if own is not None:
        return own
    if previous_checkpoint is not None and not Path(previous_checkpoint).is_dir():
        raise CurriculumError(f"previous stage checkpoint {previous_checkpoint} does not exist; rerun that stage")
    return previous_checkpoint


def _check_trainer(trainer: Any, stage_dir: Path, stage_end_step: int, resume: Path | None) -> None:
    args = trainer.args
    if Path(args.output_dir).resolve() != stage_dir.resolve():
        raise CurriculumError(f"trainer output_dir {args.output_dir} must be the stage directory {stage_dir}")
    if args.max_steps < stage_end_step:
        raise CurriculumError(
            f"max_steps={args.max_steps} < stage end {stage_end_step}: set max_steps to the whole curriculum "
            "(total_steps(profile.steps_per_stage)) in every stage's config"
        )
    if str(args.save_strategy).split(".")[-1].lower() == "no":
        raise CurriculumError("save_strategy='no' leaves nothing to resume from; use save_strategy='steps'")
    if resume is not None:
        saved_max = read_trainer_state(resume).get("max_steps")
        if saved_max != args.max_steps:
            raise CurriculumError(
                f"checkpoint {resume} was trained with max_steps={saved_max} but this trainer has "
                f"max_steps={args.max_steps}; the cosine LR would jump. Use the same total in every stage"
            )


def run_stage(
    stage: int,
    trainer_factory: TrainerFactory,
    stage_dir: str | Path,
    previous_checkpoint: str | Path | None,
    stage_end_step: int,
    *,
    metrics_path: str | Path,
    profile_name: str = "unknown",
    knobs: dict[str, Any] | None = None,
    resolved_profile: dict[str, Any] | None = None,
    extra_callbacks: Sequence[Any] = (),
) -> StageResult:
    """Train curriculum `stage` up to global step `stage_end_step`, resuming wherever possible.

    `trainer_factory(stage_dir, callbacks)` must build a Trainer whose `output_dir` is `stage_dir`,
    with the callbacks passed in and `max_steps` equal to the curriculum total. `knobs` (default:
    just the profile name) is recorded in every checkpoint's sidecar; the stage's own latest
    checkpoint is resumed or reused only when it was recorded with the same knobs.
    """
    t0 = time.perf_counter()
    stage_dir = Path(stage_dir)
    knobs = {"profile": profile_name} if knobs is None else knobs
    own = latest_checkpoint(stage_dir)
    if own is not None:  # reads the sidecar only: refused before the trainer loads any weights
        check_reusable(own, knobs, f"GRPO stage {stage} checkpoint")
    previous = None if previous_checkpoint is None else Path(previous_checkpoint)
    resume = resume_point(stage_dir, previous)
    start_step = 0 if previous is None else checkpoint_step(previous)
    resumed_step = 0 if resume is None else checkpoint_step(resume)
    if resumed_step > stage_end_step:
        raise CurriculumError(
            f"resume checkpoint {resume} is at step {resumed_step}, past stage {stage}'s end {stage_end_step}"
        )
    if resume is not None and resumed_step == stage_end_step:  # already complete: nothing to train
        return StageResult(stage, start_step, resumed_step, resume, Path(metrics_path), resume, 0,
                           time.perf_counter() - t0)
    stage_dir.mkdir(parents=True, exist_ok=True)
    callbacks = [
        StageStopCallback(stage_end_step),
        CheckpointMetaCallback(profile_name, stage, knobs, resolved_profile),
        MetricsCallback(metrics_path, stage),
        *extra_callbacks,
    ]
    trainer = trainer_factory(stage_dir, callbacks)
    _check_trainer(trainer, stage_dir, stage_end_step, resume)
    use_stage_progress(trainer, stage, start_step, stage_end_step)  # HF's bars assume a run ends at max_steps
    trainer.train(resume_from_checkpoint=None if resume is None else str(resume))
    final = latest_checkpoint(stage_dir)
    if final is None or checkpoint_step(final) != stage_end_step:
        raise CurriculumError(
            f"stage {stage} stopped at step {trainer.state.global_step}, not {stage_end_step} "
            f"(latest checkpoint {final}); is the training dataset long enough for max_steps?"
        )
    return StageResult(stage, start_step, stage_end_step, final, Path(metrics_path), resume,
                       stage_end_step - resumed_step, time.perf_counter() - t0)
