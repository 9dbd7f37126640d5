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

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ZERO_VARIANCE_TARGET = 0.30  # share of groups with identical rewards, stages 2-3 (the learning run's target)
NO_DRIFT = "no_drift"  # the label of a group whose episode schedules no drift
GROUP_TRACE = "groups.jsonl"  # in a stage's directory: one line per GRPO group played (`group_trace_report`)
# Step means folded into a stage's `where` (where its gradient and seconds went), by the names the trainer logs.
WHERE_KEYS: tuple[str, ...] = ("groups/contrast_frac", "episodes/contrast_frac", "tokens/contrast_frac",
                               "tokens/updated_frac", "time/rollout_s", "time/logps_s", "step_time", "step_cpu",
                               "episodes/played")


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
    where: dict[str, float] = field(default_factory=dict)  # step means of `WHERE_KEYS` (those logged)

    def line(self) -> str:
        target = f" (target <= {100 * ZERO_VARIANCE_TARGET:.0f}%)" if self.stage >= 2 else ""
        first = ("" if self.first_zero_variance_groups is None else
                 f" ({100 * self.first_zero_variance_groups:.0f}% at the first draw, {self.resampled_groups} "
                 "groups resampled)")
        sets = "".join(f"; {name} {100 * s.zero:.0f}% of {s.groups} (first draw {100 * s.first_zero:.0f}%)"
                       for name, s in self.by_set.items() if s.groups)
        contrast = ("" if "groups/contrast_frac" not in self.where else
                    f"; groups with a success contrast {100 * self.where['groups/contrast_frac']:.0f}% (their "
                    f"tokens {100 * self.where.get('tokens/contrast_frac', 0.0):.0f}%, tokens updated "
                    f"{100 * self.where.get('tokens/updated_frac', 1.0):.0f}%)")
        return (f"[stage {self.stage}] zero-variance groups: {100 * self.zero_variance_groups:.0f}%{first} over "
                f"{self.steps} steps{target}{sets}{contrast}; mean reward {self.mean_reward:.3f}")

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "steps": self.steps, "zero_variance_groups": self.zero_variance_groups,
                "mean_reward": self.mean_reward, "first_zero_variance_groups": self.first_zero_variance_groups,
                "resampled_groups": self.resampled_groups,
                "by_set": {name: vars(s) for name, s in self.by_set.items()}, "where": dict(self.where)}


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
    where = {key: sum(float(r[key]) for r in rows if key in r) / n
             for key in WHERE_KEYS if (n := sum(key in r for r in rows))}
    return StageSignal(stage, len(rows), zero, reward, first, resampled, fold_sets(rows), where)


def read_group_trace(stage_dir: str | Path) -> list[dict[str, Any]]:
    """The groups a stage's GRPO played (`GROUP_TRACE`, every process's file), the last record of each (step,
    group, first generation): a resumed stage replays its interrupted step."""
    lines: dict[tuple[int, int, int], dict[str, Any]] = {}
    for path in sorted(Path(stage_dir).glob(GROUP_TRACE + "*")):
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            lines[(record["step"], record["group"], record["first_generation"])] = record
    return [lines[key] for key in sorted(lines)]


def group_trace_report(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per drift pattern (and `NO_DRIFT`), over the groups that scheduled it: how many, the share with at least one
    success, the share with a success contrast, the success rate of its episodes, and the mean advantage its
    successful and failed episodes got: whether GRPO samples a pattern's successes, and what credit they earn."""
    rows: dict[str, dict[str, list[float]]] = {}
    for record in records:
        for pattern in record["patterns"] or [NO_DRIFT]:
            row = rows.setdefault(pattern, {"groups": [], "any": [], "contrast": [], "success": [], "adv_success": [],
                                            "adv_failure": []})
            wins = [s >= 1.0 for s in record["successes"]]
            row["groups"].append(1.0)
            row["any"].append(float(any(wins)))
            row["contrast"].append(float(any(wins) and not all(wins)))
            row["success"].extend(map(float, wins))
            for won, advantage in zip(wins, record["advantages"], strict=True):
                row["adv_success" if won else "adv_failure"].append(float(advantage))

    def mean(values: list[float]) -> float:
        return sum(values) / len(values) if values else float("nan")

    return {pattern: {"groups": float(len(row["groups"])), "any_success": mean(row["any"]),
                      "success_contrast": mean(row["contrast"]), "success_rate": mean(row["success"]),
                      "advantage_of_successes": mean(row["adv_success"]),
                      "advantage_of_failures": mean(row["adv_failure"])}
            for pattern, row in sorted(rows.items())}


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


# --- a finished run: where GRPO's gradient and seconds went (`python -m cells diagnose --signal`) ------------------


def _stage_rows(run_dir: Path) -> dict[int, list[dict[str, Any]]]:
    """metrics.csv's rows by stage, each a flat dict (its `extra` merged in)."""
    from cells.training.metrics import read_metrics_csv

    out: dict[int, list[dict[str, Any]]] = {}
    for row in read_metrics_csv(run_dir / "training" / "metrics.csv"):
        out.setdefault(int(row["stage"]), []).append({**{k: v for k, v in row.items() if k != "extra"},
                                                      **(row.get("extra") or {})})
    return out


def _sum(rows: list[dict[str, Any]], key: str) -> float:
    return sum(float(r[key]) for r in rows if r.get(key) is not None)


def _mean(rows: list[dict[str, Any]], key: str) -> float:
    values = [float(r[key]) for r in rows if r.get(key) is not None]
    return sum(values) / len(values) if values else float("nan")


def stage_table(run_dir: Path) -> str:
    """Per GRPO stage: steps, episodes played, the share of groups (and of their episodes and model tokens) with a
    success contrast, the share of model tokens the update saw, and seconds per episode in the rollout, the
    log-prob passes (old policy, reference) and the update (the step's wall time less the other two). Seconds are
    summed over the stage before dividing by its episodes: with `grpo_iterations` > 1 only a batch's generating step
    logs a rollout and its episodes, while every step logs its wall time."""
    rows = ["| stage | steps | episodes | groups with a success contrast | their episodes | their model tokens | "
            "model tokens updated | s/episode: rollout | log-probs | update |", "|" + "---|" * 10]
    for stage, steps in sorted(_stage_rows(run_dir).items()):
        played = _sum(steps, "episodes/played")
        episodes = played or float("nan")  # seconds per episode: nan for a stage that logged no episodes
        rollout, logps, step = _sum(steps, "time/rollout_s"), _sum(steps, "time/logps_s"), _sum(steps, "step_time")
        rows.append(f"| {stage} | {len(steps)} | {played:,.0f} | {100 * _mean(steps, 'groups/contrast_frac'):.0f}% | "
                    f"{100 * _mean(steps, 'episodes/contrast_frac'):.0f}% | "
                    f"{100 * _mean(steps, 'tokens/contrast_frac'):.0f}% | "
                    f"{100 * _mean(steps, 'tokens/updated_frac'):.0f}% | {rollout / episodes:.2f} | {logps / episodes:.2f} | "
                    f"{(step - rollout - logps) / episodes:.2f} |")
    return "\n".join(rows)


def raft_line(run_dir: Path) -> str | None:
    """RAFT's seconds per episode (sampling, training) when its control ran in `run_dir`."""
    path = run_dir / "eval_raft_control.json"
    if not path.is_file():
        return None
    tally = json.loads(path.read_text(encoding="utf-8")).get("control", {})
    episodes = float(tally.get("episodes") or 0.0)
    if not episodes:
        return None
    return (f"RAFT in the same compute: {episodes:,.0f} episodes, {tally.get('kept', 0):,} kept; seconds per episode "
            f"(on its {tally.get('grpo_measure', 'wall')} clock): sampling "
            f"{float(tally.get('sample_seconds', 0.0)) / episodes:.2f}, training "
            f"{float(tally.get('train_seconds', 0.0)) / episodes:.2f}.")


def pattern_table(run_dir: Path, split_name: str | None) -> str | None:
    """Per drift pattern over the drifted stages' traced groups (`group_trace_report`), with its set in the run's
    split; None when no stage traced its groups."""
    records = [r for stage in (2, 3) for r in read_group_trace(run_dir / "training" / f"stage{stage}")]
    if not records:
        return None
    sets: dict[str, str] = {}
    if split_name:
        from cells.step_06_drift import drift_split

        split = drift_split(split_name)
        sets = {p: split.set_of(p) for p in {p for r in records for p in r["patterns"]}}
    rows = ["| pattern | set | groups | with a success | with a contrast | success rate | advantage of a success | "
            "of a failure |", "|" + "---|" * 8]
    for pattern, row in group_trace_report(records).items():
        rows.append(f"| `{pattern}` | {sets.get(pattern, '')} | {row['groups']:.0f} | {100 * row['any_success']:.0f}% "
                    f"| {100 * row['success_contrast']:.0f}% | {100 * row['success_rate']:.0f}% | "
                    f"{_signed(row['advantage_of_successes'])} | {_signed(row['advantage_of_failures'])} |")
    return "\n".join(rows)


def _signed(value: float) -> str:
    """`+0.70`, or `—` for a mean over nothing (a pattern whose groups sampled no success)."""
    return "—" if value != value else f"{value:+.2f}"


def signal_markdown(run_dir: str | Path) -> str:
    """Where a finished run's GRPO gradient and seconds went: the stage table, RAFT's line, the pattern table."""
    from cells.step_02_profiles import load_run_profile

    run_dir = Path(run_dir)
    profile = load_run_profile(run_dir)
    parts = [stage_table(run_dir)]
    for extra in (raft_line(run_dir), pattern_table(run_dir, profile.drift_split)):
        if extra:
            parts += ["", extra]
    return "\n".join(parts) + "\n"
