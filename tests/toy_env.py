"""A toy multi-turn env with the DriftCallEnv text protocol, for trainer and rollout tests.

Each episode has `turns` assistant turns. After each turn the env answers with a fixed user line.
The reward is the mean over turns of `score(text)`: the share of the turn's non-space characters
that are ASCII digits, so it depends only on what the model wrote and has a graded signal.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

LANGS = ("hi", "ta", "kn", "en", "hinglish")


def digit_share(text: str) -> float:
    """Share of non-space characters that are ASCII digits (0 for empty text)."""
    chars = [c for c in text if not c.isspace()]
    return sum(c in "0123456789" for c in chars) / len(chars) if chars else 0.0


@dataclass(frozen=True)
class ToyGoal:
    goal_id: str
    seed_utterance: str
    language: str


@dataclass(frozen=True)
class ToyObs:
    turn: int
    text: str
    done: bool = False
    reward: float | None = None


@dataclass(frozen=True)
class ToyEpisode:
    seed: int
    goal: ToyGoal
    texts: tuple[str, ...]
    reward: float
    components: dict[str, float] = field(default_factory=dict)
    parse_failures: int = 0
    turns_used: int = 0
    drifts: tuple[str, ...] = ()


def toy_goal(seed: int, stage: int = 1, language_weights: Any = None) -> ToyGoal:
    lang = LANGS[seed % len(LANGS)]
    return ToyGoal(goal_id=f"toy-{seed}", seed_utterance=f"Please give me numbers ({seed}).", language=lang)


class ToyEnv:
    """`reset(seed) -> obs`, `step_text(text) -> obs`, `episode()`; reward = mean digit share per turn."""

    def __init__(self, turns: int = 2, scorer: Any = digit_share) -> None:
        self.turns = turns
        self.scorer = scorer
        self.goal: ToyGoal | None = None
        self.seed = 0
        self.texts: list[str] = []

    def reset(self, seed: int = 0) -> ToyObs:
        self.seed, self.texts = seed, []
        self.goal = toy_goal(seed)
        return ToyObs(turn=0, text=self.goal.seed_utterance)

    def step_text(self, text: str) -> ToyObs:
        if self.goal is None or len(self.texts) >= self.turns:
            raise RuntimeError("step_text after the episode ended (or before reset)")
        self.texts.append(text)
        done = len(self.texts) >= self.turns
        reward = self.episode().reward if done else None
        return ToyObs(turn=len(self.texts), text=f"[user] more numbers please (turn {len(self.texts)})",
                      done=done, reward=reward)

    def episode(self) -> ToyEpisode:
        assert self.goal is not None
        scores = [self.scorer(t) for t in self.texts]
        reward = sum(scores) / self.turns
        return ToyEpisode(
            seed=self.seed, goal=self.goal, texts=tuple(self.texts), reward=reward,
            components={"r_format": float(bool(self.texts))}, parse_failures=sum(not t.strip() for t in self.texts),
            turns_used=len(self.texts), drifts=("toy-drift",) if self.seed % 2 else (),
        )


class FixedRewardEnv(ToyEnv):
    """Like ToyEnv, but episode `i` created by the same factory gets `rewards[i % len(rewards)]` (and, with
    `tasks`, the judge's `r_task` `tasks[i % len(tasks)]`: 1.0 a success)."""

    def __init__(self, rewards: list[float], counter: list[int], turns: int = 2,
                 tasks: list[float] | None = None) -> None:
        super().__init__(turns=turns)
        self.fixed = rewards[counter[0] % len(rewards)]
        self.task = None if tasks is None else tasks[counter[0] % len(tasks)]
        counter[0] += 1

    def episode(self) -> ToyEpisode:
        base = super().episode()
        components = base.components if self.task is None else {**base.components, "r_task": self.task}
        return dataclasses.replace(base, reward=self.fixed, components=components)
