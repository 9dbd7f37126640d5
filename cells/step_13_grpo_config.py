"""Step 13 - GRPO config: a real `trl.GRPOConfig` per profile and stage, `BETA_KL`, and `reward_fn`.

`build_grpo_config(profile, stage)` maps the profile's knobs onto TRL: learning rate, cosine schedule,
G = `num_generations`, `per_device_train_batch_size = prompts_per_step * G` (one optimiser step sees
`prompts_per_step` whole groups), generation lengths, `beta = BETA_KL`, bf16 only where the GPU
supports it, fp32 + `use_cpu=True` on CPU profiles, `report_to="none"`, adapter-friendly save
settings, `remove_unused_columns=False` (rows carry `_meta`), `shuffle_dataset=False` (row i is
curriculum step i). `reward_fn` turns the env's `Episode`s into one float each.

Reads `ctx.profile`, `ctx.run_dir`; writes `ctx.trainer_state["grpo_configs"]` ({stage: GRPOConfig}).
Run alone: `python -m cells run --profile cpu-smoke --steps 13` (~5 s: importing trl).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cells.distributed import launched_processes
from cells.errors import DriftCallError
from cells.modeling.adaptive_kl import BETA_KL  # re-exported: declared with the controller that retargets it
from cells.modeling.episode_rewards import episode_rewards, field_of, is_finite_number
from cells.step_02_profiles import Profile

if TYPE_CHECKING:  # pragma: no cover
    from cells.context import Context

STAGES: tuple[int, ...] = (1, 2, 3)


class GRPOConfigError(DriftCallError, ValueError):
    """A stage or override is invalid; the message names the rule and the fix."""


def _bf16_supported() -> bool:
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())


def _precision_kwargs(profile: Profile) -> dict[str, Any]:
    """fp32 + use_cpu on CPU profiles; bf16 only where supported; fp16 on GPUs without bf16."""
    if profile.is_cpu:
        return {"use_cpu": True, "bf16": False, "fp16": False}
    if profile.precision == "bf16" and _bf16_supported():
        return {"bf16": True, "fp16": False}
    if profile.precision in ("bf16", "fp16"):
        return {"bf16": False, "fp16": True}  # e.g. a T4: no bf16, fp16 autocast instead
    return {"bf16": False, "fp16": False}


def _per_process_batch(episodes: int) -> int:
    """The profile's episodes per step split over the launched processes: the global batch (and so the
    groups, advantages and updates) stays what one process would train on."""
    processes = launched_processes()
    if episodes % processes:
        raise GRPOConfigError(f"{episodes} episodes per step (prompts_per_step x num_generations) do not split over "
                              f"{processes} processes; launch a number of processes that divides it")
    return episodes // processes


def build_grpo_config(
    profile: Profile, stage: int, output_dir: str | Path | None = None, **overrides: Any
) -> Any:
    """A `trl.GRPOConfig` for `profile` and curriculum `stage` (1, 2 or 3); `overrides` win."""
    from trl import GRPOConfig

    if stage not in STAGES:
        raise GRPOConfigError(f"stage must be one of {STAGES}, got {stage!r}")
    out = Path(output_dir) if output_dir is not None else Path(profile.run_root) / profile.name / f"stage{stage}"
    g = profile.num_generations
    kwargs: dict[str, Any] = {
        "output_dir": str(out),
        "learning_rate": profile.learning_rate,
        "lr_scheduler_type": "cosine",
        "warmup_steps": 0,
        "max_grad_norm": profile.max_grad_norm,
        "num_generations": g,
        "per_device_train_batch_size": _per_process_batch(profile.prompts_per_step * g),
        "gradient_accumulation_steps": profile.gradient_accumulation_steps,
        "max_completion_length": profile.max_episode_tokens,
        "temperature": profile.temperature,
        "top_p": profile.top_p,
        "beta": BETA_KL if profile.grpo_reference else 0.0,  # 0: TRL skips the reference model's pass
        "epsilon_high": profile.grpo_clip_high,
        "num_iterations": profile.grpo_iterations,
        "scale_rewards": profile.grpo_scale_rewards,
        "max_steps": max(1, profile.steps_per_stage[stage - 1]),
        "logging_steps": 1,
        "save_strategy": "steps",
        "save_steps": max(1, profile.save_every),
        "save_only_model": False,  # keep optimiser/scheduler/RNG so a stage resumes where it stopped
        "report_to": "none",
        "remove_unused_columns": False,  # rows carry `_meta` (goal, seed) the rollout needs
        "shuffle_dataset": False,  # row i is curriculum step i; determinism over randomness here
        "seed": profile.seed,
        "data_seed": profile.seed,
        "dataloader_num_workers": 0,
        "disable_dropout": True,
        # TRL's default, named as transformers 5 names it (TRL's own `gradient_checkpointing=True` warns each run)
        "activation_checkpointing": True,
        **_precision_kwargs(profile),
    }
    kwargs.update(overrides)
    return GRPOConfig(**kwargs)


# ---------------------------------------------------------------------------------------------
# Rewards from episodes (read by `cells.modeling.episode_rewards`)
# ---------------------------------------------------------------------------------------------


def reward_fn(
    prompts: Sequence[Any],
    completions: Sequence[Any],
    _meta: Sequence[Any] | None,
    episodes: Sequence[Any],
    **_kwargs: Any,
) -> list[float]:
    """One reward per episode, computed from the env's `Episode` (never from the completion text)."""
    if len(episodes) != len(completions):
        raise GRPOConfigError(f"got {len(episodes)} episodes for {len(completions)} completions; must match")
    values = []
    for i, episode in enumerate(episodes):
        value = field_of(episode_rewards(episode), "reward")
        if not is_finite_number(value):
            raise GRPOConfigError(f"episode {i} has no finite numeric reward (got {value!r})")
        values.append(float(value))
    return values


def run(ctx: Context) -> Context:
    """Build and print the three stage configs."""
    configs = {s: build_grpo_config(ctx.profile, s, Path(ctx.run_dir) / f"stage{s}") for s in STAGES}
    ctx.trainer_state["grpo_configs"] = configs
    for s, cfg in configs.items():
        print(
            f"[grpo-config] stage {s}: lr={cfg.learning_rate} G={cfg.num_generations} "
            f"batch={cfg.per_device_train_batch_size} steps={cfg.max_steps} beta={cfg.beta} "
            f"bf16={cfg.bf16} fp16={cfg.fp16} cpu={cfg.use_cpu}"
        )
    return ctx
