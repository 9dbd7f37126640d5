"""GRPO signal per stage: how many groups carried an advantage at all.

A group whose G episodes all earn the same reward has zero advantage everywhere, so it trains nothing
(`groups/zero_std_frac`, logged by the trainer every step). `SignalReport` folds those logs over one
stage and prints `[stage N] zero-variance groups: ...` at the end of it (the target: <= 30% in
stages 2-3), next to the stage's mean reward; `ctx.trainer_state["stage{N}_signal"]` keeps the numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ZERO_VARIANCE_TARGET = 0.30  # share of groups with identical rewards, stages 2-3 (the learning run's target)


@dataclass(frozen=True)
class StageSignal:
    """Step-averaged GRPO signal over one stage's optimiser steps."""

    stage: int
    steps: int
    zero_variance_groups: float  # mean over steps of the share of groups with identical rewards
    mean_reward: float

    def line(self) -> str:
        target = f" (target <= {100 * ZERO_VARIANCE_TARGET:.0f}%)" if self.stage >= 2 else ""
        return (f"[stage {self.stage}] zero-variance groups: {100 * self.zero_variance_groups:.0f}% over "
                f"{self.steps} steps{target}; mean reward {self.mean_reward:.3f}")

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "steps": self.steps, "zero_variance_groups": self.zero_variance_groups,
                "mean_reward": self.mean_reward}


def fold_signal(stage: int, logs: list[dict[str, Any]]) -> StageSignal | None:
    """`StageSignal` over the training logs that carry `groups/zero_std_frac`; None when there are none."""
    rows = [r for r in logs if "groups/zero_std_frac" in r]
    if not rows:
        return None
    zero = sum(float(r["groups/zero_std_frac"]) for r in rows) / len(rows)
    reward = sum(float(r.get("reward/mean", r.get("reward", 0.0))) for r in rows) / len(rows)
    return StageSignal(stage, len(rows), zero, reward)


class SignalReport:
    """Duck-typed `TrainerCallback`: collect each step's logs, print and store the stage's signal at the end."""

    def __init__(self, stage: int, sink: dict[str, Any] | None = None) -> None:
        self.stage = stage
        self.sink = sink if sink is not None else {}
        self.logs: list[dict[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("on_"):  # every other TrainerCallback event: no-op
            return lambda *args, **kwargs: None
        raise AttributeError(name)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **_: Any) -> Any:
        if logs:
            self.logs.append(dict(logs))
        return control

    def on_train_end(self, args: Any, state: Any, control: Any, **_: Any) -> Any:
        signal = fold_signal(self.stage, self.logs)
        if signal is not None:
            self.sink[f"stage{self.stage}_signal"] = signal
            print(signal.line())
        return control
