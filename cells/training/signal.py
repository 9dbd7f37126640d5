"""GRPO signal per stage: how many groups carried an advantage at all.

A group whose G episodes all earn the same reward has zero advantage everywhere, so it trains nothing
(`groups/zero_std_frac`, logged by the trainer every step). With dynamic sampling (`grpo_resample_rounds`)
such a group is replaced by a fresh episode before the loss sees it: `groups/zero_std_first_frac` is the share
at the first draw, `groups/zero_std_frac` what the loss saw. With a drift split (`pattern_set_labels`) both are
also counted per pattern set of the group's episode (`groups/<set>/...`). `SignalReport` folds those logs over
one stage and prints `[stage N] zero-variance groups: ...` at the end of it (the target: <= 30% in stages 2-3),
next to the stage's mean reward; `ctx.trainer_state["stage{N}_signal"]` keeps the numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ZERO_VARIANCE_TARGET = 0.30  # share of groups with identical rewards, stages 2-3 (the learning run's target)
NO_DRIFT = "no_drift"  # the label of a group whose episode schedules no drift


def pattern_set_labels(profile: Any) -> Any:
    """`GroupLabels` naming each GRPO group by the pattern set of its scheduled drifts (step 6's
    `DriftSplit.episode_set`, or `NO_DRIFT`); None when the profile has no `drift_split`."""
    if not profile.drift_split:
        return None
    from cells.modeling.grpo_batch import GroupLabels
    from cells.step_06_drift import PATTERN_SETS, drift_split

    split = drift_split(profile.drift_split)

    def label(episode: Any) -> str:
        return split.episode_set(s.pattern_id for s in episode.schedule) or NO_DRIFT

    return GroupLabels((*PATTERN_SETS, NO_DRIFT), label)


@dataclass(frozen=True)
class SetSignal:
    """One label's groups over a stage: how many, and the share with zero variance at the first draw and after
    resampling."""

    groups: int
    first_zero: float
    zero: float


@dataclass(frozen=True)
class StageSignal:
    """Step-averaged GRPO signal over one stage's optimiser steps."""

    stage: int
    steps: int
    zero_variance_groups: float  # mean over steps of the share of groups with identical rewards (what the loss saw)
    mean_reward: float
    first_zero_variance_groups: float | None = None  # the same at the first draw (dynamic sampling only)
    resampled_groups: int = 0
    by_set: dict[str, SetSignal] = field(default_factory=dict)

    def line(self) -> str:
        target = f" (target <= {100 * ZERO_VARIANCE_TARGET:.0f}%)" if self.stage >= 2 else ""
        first = ("" if self.first_zero_variance_groups is None else
                 f" ({100 * self.first_zero_variance_groups:.0f}% at the first draw, {self.resampled_groups} "
                 "groups resampled)")
        sets = "".join(f"; {name} {100 * s.zero:.0f}% of {s.groups} (first draw {100 * s.first_zero:.0f}%)"
                       for name, s in self.by_set.items() if s.groups)
        return (f"[stage {self.stage}] zero-variance groups: {100 * self.zero_variance_groups:.0f}%{first} over "
                f"{self.steps} steps{target}{sets}; mean reward {self.mean_reward:.3f}")

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "steps": self.steps, "zero_variance_groups": self.zero_variance_groups,
                "mean_reward": self.mean_reward, "first_zero_variance_groups": self.first_zero_variance_groups,
                "resampled_groups": self.resampled_groups,
                "by_set": {name: vars(s) for name, s in self.by_set.items()}}


def fold_sets(rows: list[dict[str, Any]]) -> dict[str, SetSignal]:
    """Per-label `SetSignal` from logs (or metrics.csv `extra` dicts) carrying `groups/<label>/{first_,}{n,zero}`
    counts: sums over steps, then shares."""
    totals: dict[str, dict[str, float]] = {}
    for row in rows:
        for key, value in row.items():
            parts = key.split("/")
            if len(parts) == 3 and parts[0] == "groups" and parts[2] in ("n", "zero", "first_n", "first_zero"):
                totals.setdefault(parts[1], {}).setdefault(parts[2], 0.0)
                totals[parts[1]][parts[2]] += float(value)

    def share(t: dict[str, float], prefix: str) -> float:
        n = t.get(f"{prefix}n", 0.0)
        return t.get(f"{prefix}zero", 0.0) / n if n else 0.0

    return {name: SetSignal(int(t.get("n", 0.0)), share(t, "first_"), share(t, ""))
            for name, t in sorted(totals.items())}


def fold_signal(stage: int, logs: list[dict[str, Any]]) -> StageSignal | None:
    """`StageSignal` over the training logs that carry `groups/zero_std_frac`; None when there are none."""
    rows = [r for r in logs if "groups/zero_std_frac" in r]
    if not rows:
        return None
    zero = sum(float(r["groups/zero_std_frac"]) for r in rows) / len(rows)
    reward = sum(float(r.get("reward/mean", r.get("reward", 0.0))) for r in rows) / len(rows)
    first_rows = [float(r["groups/zero_std_first_frac"]) for r in rows if "groups/zero_std_first_frac" in r]
    resampled = sum(int(float(r.get("groups/resampled", 0))) for r in rows)
    first = sum(first_rows) / len(first_rows) if first_rows and resampled else None
    return StageSignal(stage, len(rows), zero, reward, first, resampled, fold_sets(rows))


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
