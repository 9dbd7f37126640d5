"""A GRPO curriculum stage, read top-down: steps 15, 16 and 17 each call `run_grpo_stage(ctx, stage)`.

1. `run_grpo_stage`: honour `--fresh`, find the previous stage's final checkpoint (refused if made with other
   knobs), then `curriculum.run_stage` resumes it, trains to the stage's cumulative boundary on the one cosine
   schedule and checkpoints; the result is recorded on the Context.
2. `build_stage_trainer`: the one place a stage's trainer is wired: step 13's `GRPOConfig` and `reward_fn`, step 10's
   env factory, the stage's episodes (`EpisodeDatasetAdapter`, on the failure curriculum's seeds when the profile
   asks) and the `DriftCallGRPOTrainer` itself (`cells/modeling/grpo_trainer.py`).
3. One GRPO step is then `DriftCallGRPOTrainer._generate_and_score_completions` -> `cells/agent/groups.py`
   (G episodes per goal in one batched rollout) -> `cells/agent/rollout.py` (the turn-by-turn driver).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from cells.training.checkpoints import load_adapter_weights, stage_knobs
from cells.training.curriculum import StageResult, run_stage, stage_plans
from cells.training.signal import GROUP_TRACE
from cells.training.stages import (
    curriculum_max_steps,
    drop_reference_adapter,
    metrics_path,
    previous_stage_checkpoint,
    stage_dir,
    start_over_if_fresh,
    training_root,
)

# (ctx, stage, output_dir, callbacks) -> a transformers Trainer: `build_stage_trainer`, or a test's own
StageTrainerBuilder = Callable[[Any, int, Path, list[Any]], Any]
GRPO_STAGE_SEED_STRIDE = 100_000_000  # GRPO's training seeds of stage s start at TRAIN_SEEDS.seed((s-1) * stride)


def run_grpo_stage(ctx: Any, stage: int, builder: StageTrainerBuilder | None = None) -> StageResult:
    """Run GRPO curriculum `stage` for `ctx` (its trainer from `builder`, default `build_stage_trainer`), record it
    on the Context (`trainer_state["stage<N>"]`, `artifacts["stage<N>_checkpoint"|"metrics_csv"]`) and return it."""
    build = builder or build_stage_trainer  # looked up per call: a test may replace the module's builder
    start_over_if_fresh(ctx)
    plan = stage_plans(ctx.profile.steps_per_stage)[stage - 1]
    previous = previous_stage_checkpoint(ctx, stage)
    drop_reference_adapter(ctx.model)

    def factory(output_dir: Path, callbacks: list[Any]) -> Any:
        return build(ctx, stage, output_dir, callbacks)

    result = run_stage(
        stage, factory, stage_dir(ctx, stage), previous, plan.end_step,
        metrics_path=metrics_path(ctx), profile_name=ctx.profile.name,
        knobs=stage_knobs(ctx.profile, stage), resolved_profile=ctx.profile.to_dict(),
    )
    if result.trained_steps == 0 and ctx.model is not None:  # skipped: bring the model up to date
        load_adapter_weights(ctx.model, result.checkpoint)
    ctx.trainer_state[f"stage{stage}"] = result
    ctx.artifacts[f"stage{stage}_checkpoint"] = result.checkpoint
    ctx.artifacts["metrics_csv"] = result.metrics_path
    print(f"[stage {stage}] steps {plan.start_step}->{result.final_step} "
          f"({result.trained_steps} trained, {result.seconds:.1f}s) checkpoint={result.checkpoint}")
    return result


def first_grpo_seed(stage: int) -> int:
    """The first training seed GRPO's episodes of `stage` play: a disjoint block of `TRAIN_SEEDS` per stage."""
    from cells.step_02_profiles import TRAIN_SEEDS

    return TRAIN_SEEDS.seed((stage - 1) * GRPO_STAGE_SEED_STRIDE)


def build_stage_trainer(ctx: Any, stage: int, output_dir: Path, callbacks: list[Any]) -> Any:
    """The `DriftCallGRPOTrainer` for `stage`: what `curriculum.run_stage` relies on is that `output_dir` is the
    trainer's output_dir, `callbacks` are passed through, `max_steps` is the curriculum total and checkpoints are
    saved by steps."""
    from cells.agent.groups import rollout_group_fn_for_profile
    from cells.modeling.grpo_trainer import DriftCallGRPOTrainer
    from cells.step_07_tasks import generate
    from cells.step_10_env import stage_env_factories
    from cells.step_13_grpo_config import build_grpo_config, reward_fn
    from cells.step_14_trainer import EpisodeDatasetAdapter
    from cells.training.failures import stage_failure_seeds
    from cells.training.signal import SignalReport, pattern_set_labels

    config = build_grpo_config(
        ctx.profile, stage, output_dir=str(output_dir),
        max_steps=curriculum_max_steps(ctx),  # one cosine curve over all stages
        save_strategy="steps", save_steps=ctx.profile.save_every,
    )
    env_factory = (ctx.env_factory or stage_env_factories(ctx.profile))[stage]  # step 10's, or the same built here
    first_seed = first_grpo_seed(stage)
    ensure_grpo_policy(ctx)
    dataset = EpisodeDatasetAdapter(
        task_gen=generate, env_factory=env_factory, stage=stage, stage_base_seed=first_seed,
        language_weights=ctx.profile.languages_for_stage(stage), tokenizer=ctx.tokenizer,
        seeds=stage_failure_seeds(ctx.model, ctx.tokenizer, ctx.profile, env_factory, first_seed, output_dir),
    )
    return DriftCallGRPOTrainer(
        model=ctx.model,
        processing_class=ctx.tokenizer,
        args=config,
        train_dataset=dataset,
        rollout_group_fn=rollout_group_fn_for_profile(ctx.profile),
        env_factory=env_factory,
        reward_fn_driftcall=reward_fn,
        enable_adaptive_kl=ctx.profile.adaptive_kl and ctx.profile.grpo_reference,
        adaptive_kl_target=ctx.profile.adaptive_kl_target,
        adaptive_kl_beta_max=ctx.profile.adaptive_kl_beta_max,
        resample_rounds=ctx.profile.grpo_resample_rounds,
        resample_on=ctx.profile.grpo_resample_on,
        success_advantage=ctx.profile.grpo_success_advantage,
        keep=ctx.profile.grpo_keep,
        step_advantage=ctx.profile.grpo_step_advantage,
        advantage_on=ctx.profile.grpo_advantage_on,
        group_trace=str(Path(output_dir) / GROUP_TRACE),
        group_labels=pattern_set_labels(ctx.profile),
        callbacks=[*callbacks, SignalReport(stage, ctx.trainer_state)],  # prints the stage's zero-variance share
    )


def ensure_grpo_policy(ctx: Any) -> None:
    """With `warm_start_full`, GRPO trains a LoRA over the warm-started model: load the saved one if `ctx.model` is
    still the plain boot (e.g. `--steps 12,16` in a new process after step 15 ran)."""
    if not ctx.profile.warm_start_full or hasattr(ctx.model, "peft_config"):
        return
    from cells.step_12_model import attach_adapter
    from cells.training.warm_start import load_full_warm_start

    model_dir = training_root(ctx) / "warm_start" / "model"
    if not (model_dir / "model.safetensors").is_file():
        raise RuntimeError(f"profile {ctx.profile.name!r} trains GRPO on the warm-started model, but {model_dir} "
                           "has none: run step 15 first")
    ctx.model = attach_adapter(load_full_warm_start(ctx.model, ctx.tokenizer, model_dir), ctx.profile)
