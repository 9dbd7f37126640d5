"""Step 14 - trainer: the episode dataset, the multi-turn GRPO trainer, and adaptive KL.

- `EpisodeDatasetAdapter`: record `i` = curriculum step `i` = `{"prompt", "_meta": {goal, episode_seed,
  stage, language_weights}}`, derived purely from `i` (stateless; `peek`, `__len__`, `__getitem__`,
  `__iter__`); the seed is `stage_base_seed + i`, or `seeds[i % len(seeds)]` when a seed list is given
  (the failure curriculum, `cells/training/failures.py`). TRL wants a `datasets.Dataset`, so the trainer feeds TRL a dataset of step indices and
  materialises the records itself.
- `make_driftcall_grpo_trainer_cls()` -> `DriftCallGRPOTrainer(trl.GRPOTrainer)` (method bodies in
  `cells/modeling/multiturn_grpo.py`). Its
  `_generate_and_score_completions` runs G multi-turn episodes per distinct prompt through
  `rollout_group_fn` (token-level: `cells/agent/groups.py` over `cells/agent/rollout.py`), scores them with
  `reward_fn_driftcall` (step 13) and returns exactly what TRL's `_compute_loss` reads: `prompt_ids`/`prompt_mask`
  (left-padded), `completion_ids`/`completion_mask` (right-padded; the completion is the whole episode
  after the turn-0 prompt), `tool_mask` (1 = model token, 0 = env/template token; TRL multiplies it into
  the loss mask), group-relative `advantages`, `num_items_in_batch`, and `old_per_token_logps` /
  `ref_per_token_logps` exactly when TRL would compute them. Loss, KL, clipping and the optimiser step
  are TRL's own; `_compute_loss` and `_get_per_token_logps_and_entropies` only make TRL's log-prob pass
  project the model's own tokens through the LM head, not every env/template position
  (`cells/modeling/model_token_logps.py`: the same log-probs where the loss reads them).
  Dynamic sampling (`resample_rounds=N`): a group whose G rewards are all equal carries no gradient, so it is
  replaced by a fresh dataset record and played again, up to N times per step; `groups/zero_std_first_frac`
  (first draw), `groups/zero_std_frac` (what the loss saw) and, with `group_labels`, both per label are logged.
  `resample_on="success"` also replaces a group whose episodes all succeed or all fail (its gradient comes from
  partial credit and penalties only); `groups/success_uniform_first_frac` / `_frac` are logged either way.
  `success_advantage=λ` adds λ to each successful episode's advantage after scaling (a RAFT-like pull towards the
  policy's own successes inside the same loss; 0 = off).
- `AdaptiveKLCallback`: `beta *= exp(clamp(kp * (kl - target) / target, +-50))`, clamped to
  `[beta_min, beta_max]`, on each log that carries `kl`; it writes the trainer's `beta` (what TRL's
  loss reads) as well as `args.beta`. With peft the reference is the adapter-disabled base model, so
  beta may change at any time; TRL only logs `kl` when beta != 0, so a run started at beta 0 stays there.

Reads only the profile's adaptive-KL settings from the Context (steps 15-17 build the trainer); `run(ctx)`
prints the API summary with them. Run alone: `python -m cells run --profile cpu-smoke --steps 14` (instant).
One GRPO step on the tiny model (G=4, 3 turns) takes about a second on 2 CPU cores.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from cells.agent.chat import render_initial_prompt  # re-exported: step 14's API
from cells.agent.prompt import PINNED_SYSTEM_PROMPT  # seed API re-export
from cells.errors import DriftCallError
from cells.step_13_grpo_config import BETA_KL

if TYPE_CHECKING:  # pragma: no cover
    from cells.pipeline import Context

LanguageCode = Literal["hi", "ta", "kn", "en", "hinglish"]

DEFAULT_BETA_MIN: float = 0.001
DEFAULT_BETA_MAX: float = 1.0
DEFAULT_KP: float = 2.0


class TrainerSetupError(DriftCallError, ValueError):
    """The trainer was given inputs it cannot train on; the message says what to change."""


class EpisodeSampler(Protocol):
    """Draws a `GoalSpec` for one prompt slot."""

    def __call__(self, step: int) -> Any: ...


class EnvFactory(Protocol):
    """Returns a fresh env (`reset/step_text/episode`) per rollout."""

    def __call__(self) -> Any: ...


class RolloutGroupFn(Protocol):
    """Runs `num_generations` multi-turn episodes sharing one goal and seed.

    Returns `(episodes, trajectories)`, `num_generations` each; trajectories are
    `cells.agent.rollout.TrajectoryTokens` (token ids + assistant mask): text alone cannot be trained on.
    Under several processes a group of G may be split between them: the trainer then asks for part of it,
    `num_generations` episodes starting at episode `first_generation` of the group (a function without
    that keyword is only ever asked for whole groups, on one process).
    """

    def __call__(self, *, model: Any, tokenizer: Any, goal: Any, episode_seed: int, num_generations: int,
                 env_factory: EnvFactory, first_generation: int = 0) -> tuple[tuple[Any, ...], tuple[Any, ...]]: ...


@dataclass(frozen=True)
class AdapterRecord:
    """Frozen view of one `EpisodeDatasetAdapter` record."""

    prompt: str
    goal: Any
    episode_seed: int
    stage: Literal[1, 2, 3]
    language_weights: dict[LanguageCode, float]


class EpisodeDatasetAdapter:
    """Stateless, logically infinite episode stream: record `i` is a pure function of `i`."""

    LENGTH = 1_000_000  # sampler sizing only; the run length is GRPOConfig.max_steps

    def __init__(self, *, task_gen: Callable[..., Any], env_factory: EnvFactory, stage: Literal[1, 2, 3],
                 stage_base_seed: int, language_weights: dict[LanguageCode, float], tokenizer: Any,
                 seeds: tuple[int, ...] = ()) -> None:
        if stage not in (1, 2, 3):
            raise TrainerSetupError(f"stage must be 1, 2 or 3, got {stage!r}")
        self.task_gen = task_gen
        self.env_factory = env_factory
        self.stage: Literal[1, 2, 3] = stage
        self.stage_base_seed = int(stage_base_seed)
        self.language_weights = dict(language_weights)
        self.tokenizer = tokenizer
        self.seeds = tuple(int(s) for s in seeds)  # when given, record i plays seeds[i % len(seeds)]

    def seed_of(self, step: int) -> int:
        """The episode seed of curriculum step `step`: `stage_base_seed + step`, or the given seed list, cycled."""
        return self.seeds[int(step) % len(self.seeds)] if self.seeds else self.stage_base_seed + int(step)

    def _build_record(self, step: int) -> dict[str, Any]:
        seed = self.seed_of(step)
        goal = self.task_gen(seed=seed, stage=self.stage, language_weights=dict(self.language_weights))
        meta = {"goal": goal, "episode_seed": seed, "stage": self.stage,
                "language_weights": dict(self.language_weights)}
        return {"prompt": render_initial_prompt(self.tokenizer, goal), "_meta": meta}

    def __len__(self) -> int:
        return self.LENGTH

    def __getitem__(self, idx: int) -> dict[str, Any]:
        if not 0 <= int(idx) < self.LENGTH:
            raise IndexError(f"step {idx} outside [0, {self.LENGTH})")
        return self._build_record(int(idx))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        step = 0
        while True:
            yield self._build_record(step)
            step += 1

    def peek(self, step: int) -> AdapterRecord:
        rec = self._build_record(step)
        meta = rec["_meta"]
        return AdapterRecord(prompt=rec["prompt"], goal=meta["goal"], episode_seed=meta["episode_seed"],
                             stage=meta["stage"], language_weights=meta["language_weights"])


# ---------------------------------------------------------------------------------------------
# Adaptive KL
# ---------------------------------------------------------------------------------------------


class AdaptiveKLCallback:
    """Proportional log-space controller retargeting beta to the measured KL on every `on_log`.

    A duck-typed `transformers.TrainerCallback` (every other `on_*` event is a no-op), so importing this
    module never imports transformers. Pass `trainer=` (the trainer does) so the update reaches
    `trainer.beta`, which TRL's loss reads; `args.beta` is kept in step.
    """

    def __init__(self, target_kl: float = BETA_KL, *, kp: float = DEFAULT_KP, beta_min: float = DEFAULT_BETA_MIN,
                 beta_max: float = DEFAULT_BETA_MAX, trainer: Any = None) -> None:
        if not target_kl > 0.0:
            raise ValueError(f"target_kl must be > 0; got {target_kl}")
        if not (beta_min > 0.0 and beta_max > 0.0):
            raise ValueError(f"beta bounds must be > 0; got min={beta_min}, max={beta_max}")
        if beta_min > beta_max:
            raise ValueError(f"beta_min ({beta_min}) must be <= beta_max ({beta_max})")
        self.target_kl, self.kp = float(target_kl), float(kp)
        self.beta_min, self.beta_max = float(beta_min), float(beta_max)
        self.trainer = trainer

    def __getattr__(self, name: str) -> Any:
        if name.startswith("on_"):  # every other TrainerCallback event: no-op
            return lambda *args, **kwargs: None
        raise AttributeError(name)

    @staticmethod
    def _coerce_kl(raw: Any) -> float | None:
        if isinstance(raw, bool):
            return None
        try:
            value = float(raw)
        except (TypeError, ValueError):
            return None
        return value if math.isfinite(value) else None

    def _next_beta(self, beta: float, kl: float) -> tuple[float, bool, bool]:
        """`(new_beta, clamped_to_min, clamped_to_max)`."""
        exponent = max(-50.0, min(50.0, self.kp * (kl - self.target_kl) / self.target_kl))
        scaled = beta * math.exp(exponent)
        if scaled <= self.beta_min:
            return self.beta_min, True, False
        if scaled >= self.beta_max:
            return self.beta_max, False, True
        return scaled, False, False

    def on_log(self, args: Any, state: Any, control: Any, *, logs: dict[str, Any] | None = None,
               **_kwargs: Any) -> Any:
        """Update beta from `logs["kl"]` and add the five `train/*` diagnostics; no-op on bad input."""
        if logs is None or "kl" not in logs:
            return control
        kl = self._coerce_kl(logs["kl"])
        if kl is None:
            return control
        current = getattr(self.trainer, "beta", None) if self.trainer is not None else None
        beta = float(current if current is not None else getattr(args, "beta", BETA_KL))
        new_beta, low, high = self._next_beta(beta, kl)
        args.beta = new_beta
        if self.trainer is not None:
            self.trainer.beta = new_beta
        extra = {"train/beta_adaptive": new_beta, "train/kl_measured": kl, "train/kl_target": self.target_kl,
                 "train/beta_clamped_to_min": int(low), "train/beta_clamped_to_max": int(high)}
        logs.update(extra)
        history = getattr(state, "log_history", None)
        if history and history[-1].get("kl") == logs["kl"]:  # Trainer.log stored a copy before calling us
            history[-1].update(extra)
        return control


# ---------------------------------------------------------------------------------------------
# The trainer
# ---------------------------------------------------------------------------------------------


def _import_grpo_trainer() -> type[Any]:
    from trl import GRPOTrainer

    return GRPOTrainer


def _placeholder_reward(completions: Any = None, **_unused: Any) -> list[float]:
    """Satisfies GRPOTrainer's `reward_funcs`; never called (rewards come from episodes)."""
    return [0.0] * (len(completions) if completions is not None else 0)


def _step_index_dataset(adapter: EpisodeDatasetAdapter, args: Any) -> Any:
    """A `datasets.Dataset` of step indices long enough for `args.max_steps` without wrapping."""
    from datasets import Dataset

    if args is None or args.max_steps <= 0:
        raise TrainerSetupError("an EpisodeDatasetAdapter needs args=GRPOConfig(max_steps > 0)")
    rows = args.max_steps * args.gradient_accumulation_steps * args.generation_batch_size // args.num_generations
    return Dataset.from_dict({"step": list(range(min(len(adapter), max(1, rows))))})


def _make_driftcall_init(base_cls: type[Any]) -> Callable[..., None]:
    def __init__(self: Any, *args: Any, rollout_group_fn: RolloutGroupFn, env_factory: EnvFactory,
                 reward_fn_driftcall: Callable[..., list[float]], enable_adaptive_kl: bool = True,
                 adaptive_kl_target: float | None = None, adaptive_kl_kp: float = DEFAULT_KP,
                 adaptive_kl_beta_min: float = DEFAULT_BETA_MIN, adaptive_kl_beta_max: float = DEFAULT_BETA_MAX,
                 resample_rounds: int = 0, resample_on: str = "reward", group_labels: Any = None,
                 success_advantage: float = 0.0, **kwargs: Any) -> None:
        from cells.step_02_profiles import MAX_RESAMPLE_ROUNDS, RESAMPLE_CRITERIA

        if not 0 <= int(resample_rounds) <= MAX_RESAMPLE_ROUNDS:
            raise TrainerSetupError(f"resample_rounds must be in [0, {MAX_RESAMPLE_ROUNDS}], got {resample_rounds!r}")
        if resample_on not in RESAMPLE_CRITERIA:
            raise TrainerSetupError(f"resample_on must be one of {RESAMPLE_CRITERIA}, got {resample_on!r}")
        if success_advantage < 0:
            raise TrainerSetupError(f"success_advantage must be >= 0, got {success_advantage!r}")
        kwargs.setdefault("reward_funcs", [_placeholder_reward])
        self.resample_rounds = int(resample_rounds)  # dynamic sampling: replays of a zero-variance group per step
        self.resample_on = resample_on  # which groups count as without signal: equal rewards, or equal successes
        self.group_labels = group_labels  # a grpo_batch.GroupLabels: per-label zero-variance counts in the logs
        self.success_advantage = float(success_advantage)  # added to each successful episode's advantage
        self.episode_dataset = None
        if isinstance(kwargs.get("train_dataset"), EpisodeDatasetAdapter):
            self.episode_dataset = kwargs["train_dataset"]
            kwargs["train_dataset"] = _step_index_dataset(self.episode_dataset, kwargs.get("args"))
        base_cls.__init__(self, *args, **kwargs)
        self.rollout_group_fn = rollout_group_fn
        self.env_factory = env_factory
        self.reward_fn_driftcall = reward_fn_driftcall
        self.adaptive_kl_callback = None
        if enable_adaptive_kl:
            target = adaptive_kl_target if adaptive_kl_target is not None else BETA_KL
            self.adaptive_kl_callback = AdaptiveKLCallback(
                target, kp=adaptive_kl_kp, beta_min=adaptive_kl_beta_min, beta_max=adaptive_kl_beta_max,
                trainer=self)
            register_first(self, self.adaptive_kl_callback)

    return __init__


def register_first(trainer: Any, callback: Any) -> None:
    """Register `callback` through the trainer's public `add_callback`, then move it first in line.

    First, so reporters (and the metrics.csv writer) see the five `train/*` keys it adds to the logs.
    A base with `add_callback` but no `callback_handler` (the seed API's minimal test base) just gets
    the `add_callback` call.
    """
    add = getattr(trainer, "add_callback", None)
    if not callable(add):
        raise TrainerSetupError(f"{type(trainer).__name__} has no add_callback; enable_adaptive_kl needs one "
                                "(pass enable_adaptive_kl=False, or build on a transformers Trainer)")
    add(callback)
    callbacks = getattr(getattr(trainer, "callback_handler", None), "callbacks", None)
    if isinstance(callbacks, list) and callback in callbacks:
        callbacks.remove(callback)
        callbacks.insert(0, callback)


def make_driftcall_grpo_trainer_cls(base_cls: type[Any] | None = None) -> type[Any]:
    """Build `DriftCallGRPOTrainer` on `base_cls` (default `trl.GRPOTrainer`, imported lazily)."""
    from cells.modeling import multiturn_grpo as impl

    resolved = base_cls if base_cls is not None else _import_grpo_trainer()
    return type("DriftCallGRPOTrainer", (resolved,), {
        "__init__": _make_driftcall_init(resolved),
        "_generate_and_score_completions": impl.generate_and_score_completions,
        "_driftcall_rows": impl.materialise_runs,
        "_driftcall_logps": impl.old_and_ref_logps,
        **impl.scoring_methods(resolved),
        "__doc__": "GRPOTrainer whose completions are whole multi-turn DriftCall episodes.",
    })


def driftcall_grpo_trainer_methods() -> tuple[str, ...]:
    """The TRL methods the subclass overrides."""
    return ("__init__", "_generate_and_score_completions", "_compute_loss", "_get_per_token_logps_and_entropies")


def run(ctx: Context) -> Context:
    """Print the trainer API and the profile's adaptive-KL settings (the trainer itself is built by steps 15-17)."""
    t0 = time.perf_counter()
    profile = ctx.profile
    kl = (f"adaptive KL target={profile.adaptive_kl_target} kp={DEFAULT_KP} "
          f"beta in [{DEFAULT_BETA_MIN}, {profile.adaptive_kl_beta_max}]" if profile.adaptive_kl
          else f"fixed beta={BETA_KL}")
    print(f"[trainer] DriftCallGRPOTrainer overrides {driftcall_grpo_trainer_methods()}; {kl} "
          f"({time.perf_counter() - t0:.3f}s)")
    return ctx


__all__ = [
    "DEFAULT_BETA_MAX", "DEFAULT_BETA_MIN", "DEFAULT_KP", "PINNED_SYSTEM_PROMPT", "AdapterRecord",
    "AdaptiveKLCallback", "EnvFactory", "EpisodeDatasetAdapter", "EpisodeSampler", "LanguageCode",
    "RolloutGroupFn", "driftcall_grpo_trainer_methods", "make_driftcall_grpo_trainer_cls", "render_initial_prompt",
]
