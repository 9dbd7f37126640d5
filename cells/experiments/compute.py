"""What each model of a run cost, side by side: GRPO and its equal-compute controls.

The controls are given GRPO's compute: the CPU seconds of its optimiser steps, rollouts included
(`training.metrics.grpo_compute_seconds`). Equal seconds can buy very different training, so each row says what
the method bought with them: environment episodes played, sequences trained on and tokens trained, i.e. the
tokens a loss reached in a backward pass:

- GRPO: the model tokens of the episodes that reached the update (`tokens/updated`, `episodes/updated` in
  `training/metrics.csv`; a run logged before those were derives the tokens from `rollout/model_tokens_mean` x
  the step's episodes x `tokens/updated_frac`, and cannot count the episodes);
- SFT-only control (`eval_sft_control.json`): the labelled tokens of its expert conversations; it plays no
  episode;
- RAFT control (`eval_raft_control.json`): the labelled tokens of the kept (successful) episodes among those it
  sampled.

`splits` writes the rows into `eval_splits.json` (`compute`), so pooled seeds report them per seed
(`evaluation.split_report.compute_markdown` draws the table).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class MethodCompute:
    """One model's training after the warm start: its seconds and what they bought."""

    model: str  # the key `splits` uses: trained (GRPO), sft_control, raft_control
    seconds: float
    measure: str  # the clock of `seconds`: "cpu" (process CPU time) or "wall"
    episodes: int | None  # environment episodes played (None: the method plays none)
    examples: int | None  # sequences trained on (None: not logged by the run)
    tokens_trained: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def grpo_compute(run_dir: Path) -> MethodCompute | None:
    """GRPO's row from `training/metrics.csv`; None when the run has no GRPO metrics."""
    from cells.step_02_profiles import load_run_profile
    from cells.training.metrics import grpo_compute_seconds, grpo_episodes, read_metrics_csv

    path = Path(run_dir) / "training" / "metrics.csv"
    if not path.is_file():
        return None
    profile = load_run_profile(run_dir)
    metrics = read_metrics_csv(path)
    rows = [row.get("extra") or {} for row in metrics]
    per_step = profile.prompts_per_step * profile.num_generations  # the episodes a step's batch holds
    tokens = sum(float(x["tokens/updated"]) if x.get("tokens/updated") is not None else
                 float(x.get("rollout/model_tokens_mean") or 0.0) * per_step * float(x.get("tokens/updated_frac", 1.0))
                 for x in rows)
    logged = all(x.get("episodes/updated") is not None for x in rows)
    seconds, measure = grpo_compute_seconds(metrics)
    return MethodCompute("trained", round(sum(seconds.values()), 1), measure, grpo_episodes(metrics, profile),
                         int(sum(float(x["episodes/updated"]) for x in rows)) if logged else None, round(tokens))


def _tally(run_dir: Path, name: str) -> dict[str, Any] | None:
    path = Path(run_dir) / name
    return json.loads(path.read_text(encoding="utf-8")).get("control") if path.is_file() else None


def sft_control_compute(run_dir: Path) -> MethodCompute | None:
    """The SFT-only control's row; None when it was not run."""
    tally = _tally(run_dir, "eval_sft_control.json")
    if not tally:
        return None
    cpu = tally.get("grpo_measure") == "cpu" and tally.get("cpu_seconds") is not None
    return MethodCompute("sft_control", float(tally["cpu_seconds"] if cpu else tally["seconds"]),
                         "cpu" if cpu else "wall", None, tally.get("examples"), int(tally.get("trained_tokens", 0)))


def raft_compute(run_dir: Path) -> MethodCompute | None:
    """The RAFT control's row (its rounds are timed on GRPO's clock); None when it was not run."""
    tally = _tally(run_dir, "eval_raft_control.json")
    if not tally:
        return None
    return MethodCompute("raft_control", float(tally["seconds"]), tally.get("grpo_measure", "wall"),
                         int(tally["episodes"]), int(tally["kept"]), int(tally.get("trained_tokens", 0)))


def run_compute(run_dir: Path) -> list[MethodCompute]:
    """The rows of every method the run trained: GRPO, then the controls that ran."""
    rows = (grpo_compute(run_dir), sft_control_compute(run_dir), raft_compute(run_dir))
    return [r for r in rows if r is not None]
