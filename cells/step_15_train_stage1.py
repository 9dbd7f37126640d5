"""Step 15 - train stage 1: supervised warm start on expert trajectories, then GRPO without drift.

1. Warm start: the expert policy (step 11) plays `profile.sft_episodes` stage-1 episodes; their
   conversations train the LoRA adapter with TRL's `SFTTrainer`, loss on assistant tokens only
   (`cells.training.warm_start`). The adapter is saved to `training/warm_start/adapter`; a rerun
   with that adapter present loads it instead of training again.
2. GRPO stage 1 (no drift) up to global step `steps_per_stage[0]`, checkpointing adapter-only
   with a `driftcall_meta.json` sidecar under `training/stage1/`, a row per step in
   `training/metrics.csv`. An interrupted stage resumes from its latest checkpoint on rerun.

Reads `ctx.profile`, `ctx.model` (peft model), `ctx.tokenizer`.
Writes `ctx.trainer_state["warm_start"|"stage1"]`, `ctx.artifacts["warm_start_adapter"|
"stage1_checkpoint"|"metrics_csv"]`; `ctx.model` holds the trained adapter afterwards.
Run alone (after steps 1-14): `python -m cells run --profile cpu-smoke --steps 15`.
Time: cpu-smoke ~1 min; cpu-learn ~10-20 min; colab-t4 ~1 h (estimates, not yet measured end to end).

`build_stage_trainer` is the single place that wires the env, expert and trainer classes;
steps 16 and 17 call it too.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from cells.pipeline import Context
    from cells.training.warm_start import WarmStartResult

STAGE = 1


def expert_conversations_for(ctx: Context, n: int, stage: int) -> list[list[dict[str, Any]]]:
    """Expert-policy conversations (chat `messages` lists). The only import of step 11's expert."""
    from cells.step_11_agent import expert_conversations

    return [list(c) for c in expert_conversations(n, stage=stage, tokenizer=ctx.tokenizer, seed=ctx.profile.seed)]


def build_stage_trainer(ctx: Context, stage: int, output_dir: Path, callbacks: list[Any]) -> Any:
    """Build the DriftCall GRPO trainer for `stage` (wiring point; the lead adjusts it here).

    Contract the stage runner relies on: `output_dir` is the trainer's output_dir, `callbacks` are
    passed through, `max_steps` is the curriculum total, checkpoints are saved by steps.
    """
    from cells.agent.rollout import rollout_group_fn_for_profile
    from cells.step_02_profiles import TRAIN_SEEDS
    from cells.step_07_tasks import generate
    from cells.step_10_env import make_env_factory
    from cells.step_13_grpo_config import build_grpo_config, reward_fn
    from cells.step_14_trainer import EpisodeDatasetAdapter, make_driftcall_grpo_trainer_cls
    from cells.training.stages import curriculum_max_steps

    config = build_grpo_config(
        ctx.profile, stage, output_dir=str(output_dir),
        max_steps=curriculum_max_steps(ctx),  # one cosine curve over all stages
        save_strategy="steps", save_steps=ctx.profile.save_every,
    )
    languages = ctx.profile.languages_for_stage(stage)
    env_factory = make_env_factory(stage, languages)
    dataset = EpisodeDatasetAdapter(
        task_gen=generate, env_factory=env_factory, stage=stage,
        stage_base_seed=TRAIN_SEEDS.seed((stage - 1) * 100_000_000),  # disjoint seed block per stage
        language_weights=languages, tokenizer=ctx.tokenizer,
    )
    trainer_cls = make_driftcall_grpo_trainer_cls()
    return trainer_cls(
        model=ctx.model,
        processing_class=ctx.tokenizer,
        args=config,
        train_dataset=dataset,
        rollout_group_fn=rollout_group_fn_for_profile(ctx.profile),
        env_factory=env_factory,
        reward_fn_driftcall=reward_fn,
        enable_adaptive_kl=ctx.profile.adaptive_kl,
        adaptive_kl_target=ctx.profile.adaptive_kl_target,
        adaptive_kl_beta_max=ctx.profile.adaptive_kl_beta_max,
        callbacks=callbacks,
    )


def warm_start(ctx: Context) -> WarmStartResult:
    """SFT the adapter on expert stage-1 conversations (or reuse a saved warm-start adapter)."""
    from cells.training.checkpoints import load_adapter_weights
    from cells.training.stages import training_root
    from cells.training.warm_start import WarmStartResult, sft_warm_start

    out = training_root(ctx) / "warm_start"
    adapter = out / "adapter"
    if (adapter / "adapter_model.safetensors").is_file():
        load_adapter_weights(ctx.model, adapter)
        result = WarmStartResult(adapter, 0, 0, 0, 0, ())
    else:
        p = ctx.profile
        conversations = expert_conversations_for(ctx, p.sft_episodes, STAGE)
        result = sft_warm_start(
            ctx.model, ctx.tokenizer, conversations, out,
            learning_rate=p.sft_learning_rate, epochs=p.sft_epochs, batch_size=p.num_generations,
            max_length=p.max_episode_tokens, seed=p.seed, use_cpu=p.is_cpu, bf16=p.precision == "bf16",
            fp16=p.precision == "fp16",
        )
    ctx.trainer_state["warm_start"] = result
    ctx.artifacts["warm_start_adapter"] = adapter
    return result


def run(ctx: Context) -> Context:
    """Warm start, then GRPO stage 1."""
    from cells.training.stages import run_context_stage

    result = warm_start(ctx)
    first = f"{result.losses[0]:.3f}" if result.losses else "-"
    last = f"{result.losses[-1]:.3f}" if result.losses else "-"
    print(f"[warm start] {result.examples} conversations, {result.steps} steps, loss {first} -> {last}")
    run_context_stage(ctx, STAGE, build_stage_trainer)
    return ctx
