"""The episode stream GRPO trains on (`EpisodeDatasetAdapter`) and the callables the trainer is built with.

Record `i` = curriculum step `i` = `{"prompt", "_meta": {goal, episode_seed, stage, language_weights}}`, derived
purely from `i` (stateless; `peek`, `__len__`, `__getitem__`, `__iter__`); the seed is `stage_base_seed + i`, or
`seeds[i % len(seeds)]` when a seed list is given (the failure curriculum, `cells/training/failures.py`). TRL wants a
`datasets.Dataset`, so `DriftCallGRPOTrainer` feeds TRL a dataset of step indices and materialises the records
itself. Light on purpose (no torch, no trl): step 14 re-exports everything here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from cells.agent.chat import render_initial_prompt
from cells.errors import DriftCallError

LanguageCode = Literal["hi", "ta", "kn", "en", "hinglish"]


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

    def step_index_dataset(self, args: Any) -> Any:
        """What TRL is given instead: a `datasets.Dataset` of step indices long enough for `args.max_steps`
        (a `GRPOConfig`) without wrapping."""
        from datasets import Dataset

        if args is None or args.max_steps <= 0:
            raise TrainerSetupError("an EpisodeDatasetAdapter needs args=GRPOConfig(max_steps > 0)")
        rows = args.max_steps * args.gradient_accumulation_steps * args.generation_batch_size // args.num_generations
        return Dataset.from_dict({"step": list(range(min(len(self), max(1, rows))))})
