"""`metrics.csv`: one row per optimiser step, fixed columns, appended across stages and resumes.

`MetricsCallback` maps whatever the trainer logs (TRL's GRPO keys, DriftCall's own `reward/task`,
`drift/fired_rate`, ...) onto the declared `COLUMNS` through `ALIASES`; a missing value is an empty
cell; numeric keys no column claims go into the last column, `extra`, as compact JSON (so the
header never changes mid-file). On `on_train_begin` rows past the resumed global step are dropped,
so an interrupted-then-resumed stage never leaves duplicated step rows.
"""

from __future__ import annotations

import csv
import json
import math
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from cells.errors import DriftCallError
from cells.step_04_datatypes import LANGUAGES

LANG_COLUMNS = tuple(f"reward/lang/{lang}" for lang in LANGUAGES)
COMPONENT_COLUMNS = ("reward/task", "reward/drift", "reward/constraints", "reward/format", "reward/penalty")
COLUMNS: tuple[str, ...] = (
    "stage",
    "step",
    "epoch",
    "reward",
    "reward_std",
    *COMPONENT_COLUMNS,
    "kl",
    "beta",
    "clip_ratio",
    "parse_failure_rate",
    "drift_fired_rate",
    "zero_std_group_frac",
    *LANG_COLUMNS,
    "completion_length",
    "tokens_per_s",
    "learning_rate",
    "loss",
    "grad_norm",
    "extra",
)

# Column -> log keys that feed it, first present wins: DriftCall's trainer names (cells/modeling,
# step 14), then TRL 1.16 GRPO's. `beta` falls back to `args.beta` (the beta in effect for the step).
ALIASES: dict[str, tuple[str, ...]] = {
    "epoch": ("epoch",),
    "reward": ("reward", "reward/mean"),
    "reward_std": ("reward_std", "reward/std"),
    **{c: (c, f"reward/r_{c.split('/')[1]}", f"rewards/{c.split('/')[1]}/mean") for c in COMPONENT_COLUMNS},
    "kl": ("kl",),
    "beta": ("beta",),
    "clip_ratio": ("clip_ratio/region_mean", "clip_ratio"),
    "parse_failure_rate": ("episode/parse_failure_rate", "parse_failure_rate"),
    "drift_fired_rate": ("drift/fired_rate", "drift_fired_rate"),
    "zero_std_group_frac": ("groups/zero_std_frac", "frac_reward_zero_std"),
    **{c: (c, f"rewards/lang/{c.rsplit('/', 1)[1]}") for c in LANG_COLUMNS},
    "completion_length": ("completions/mean_length",),
    "tokens_per_s": ("rollout/tokens_per_s", "tokens_per_s"),  # else derived from TRL's num_tokens
    "learning_rate": ("learning_rate",),
    "loss": ("loss",),
    "grad_norm": ("grad_norm",),
}
# Log keys that only describe the run as a whole (the end-of-train summary), never a step.
_SUMMARY_KEYS = ("train_runtime", "train_loss", "total_flos")


class MetricsSchemaError(DriftCallError, RuntimeError):
    """An existing metrics.csv has a different header than `COLUMNS`."""


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return repr(float(value)) if isinstance(value, float) else str(value)


def logs_to_row(logs: dict[str, Any], stage: int, step: int, extra: dict[str, Any] | None = None) -> dict[str, str]:
    """Map one `on_log` payload onto `COLUMNS` (strings; '' where missing)."""
    merged = {**logs, **(extra or {})}
    row = {c: "" for c in COLUMNS}
    row["stage"], row["step"] = str(stage), str(step)
    claimed: set[str] = set()
    for column, keys in ALIASES.items():
        for key in keys:
            if key in merged and merged[key] is not None:
                row[column] = _cell(merged[key])
                claimed.update(k for k in keys if k in merged)
                break
    leftovers = {
        k: v for k, v in sorted(merged.items()) if k not in claimed and k != "step" and isinstance(v, (int, float))
    }
    row["extra"] = json.dumps(leftovers, separators=(",", ":"), sort_keys=True) if leftovers else ""
    return row


MetricsSource = str | Path | list[dict[str, Any]]  # a metrics.csv, or its rows as `read_metrics_csv` gives them


def _metric_rows(metrics: MetricsSource) -> list[dict[str, Any]]:
    return metrics if isinstance(metrics, list) else read_metrics_csv(metrics)


def grpo_compute_seconds(metrics: MetricsSource) -> tuple[dict[int, float], str]:
    """GRPO's compute per curriculum stage, and its measure: the CPU seconds of its optimiser steps (`step_cpu`,
    rollouts included: what the equal-compute controls are given, robust to other work sharing the cores), or,
    in a run logged before they were, the steps' wall seconds (`step_time`)."""
    rows = _metric_rows(metrics)
    key = "step_cpu" if rows and all("step_cpu" in (r.get("extra") or {}) for r in rows) else "step_time"
    out: dict[int, float] = {}
    for row in rows:
        out[int(row["stage"])] = out.get(int(row["stage"]), 0.0) + float((row.get("extra") or {}).get(key) or 0.0)
    return dict(sorted(out.items())), ("cpu" if key == "step_cpu" else "wall")


def grpo_episodes(metrics: MetricsSource, profile: Any) -> int:
    """Environment episodes GRPO played: the logged `episodes/played` of the steps that generated a batch (with
    `grpo_iterations` > 1 the others reuse it and log none); in a run logged before that metric, prompts_per_step
    groups of G per step, plus resampled groups of G."""
    rows = _metric_rows(metrics)
    logged = [(row.get("extra") or {}).get("episodes/played") for row in rows]
    if any(n is not None for n in logged):
        return int(sum(float(n) for n in logged if n is not None))
    groups = sum(profile.prompts_per_step + int(float((row.get("extra") or {}).get("groups/resampled") or 0))
                 for row in rows)
    return groups * profile.num_generations


def read_metrics_csv(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a metrics.csv: `stage`/`step` as int, numbers as float, '' as None, `extra` as dict."""
    out: list[dict[str, Any]] = []
    with Path(path).open(newline="", encoding="utf-8") as fh:
        for raw in csv.DictReader(fh):
            row: dict[str, Any] = {}
            for key, value in raw.items():
                if key in ("stage", "step"):
                    row[key] = int(value)
                elif key == "extra":
                    row[key] = json.loads(value) if value else {}
                else:
                    row[key] = float(value) if value != "" else None
            out.append(row)
    return out


def _read_raw(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        if tuple(reader.fieldnames or ()) != COLUMNS:
            raise MetricsSchemaError(
                f"{path} has columns {reader.fieldnames}, expected {list(COLUMNS)}; "
                "move the old file away or use a fresh run directory"
            )
        return list(reader)


def _write_all(path: Path, rows: list[dict[str, str]]) -> None:
    tmp = path.with_suffix(".csv.tmp")
    with tmp.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(path)


class MetricsCallback(TrainerCallback):
    """Write one `metrics.csv` row per optimiser step of curriculum `stage`.

    `beta` falls back to `args.beta` when the trainer does not log it; `tokens_per_s` is derived
    from TRL's cumulative `num_tokens` over wall time between logs.
    """

    def __init__(self, path: str | Path, stage: int) -> None:
        self.path = Path(path)
        self.stage = stage
        self._last_tokens: float | None = None
        self._last_time = 0.0
        self._last_step = -1

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:  # several processes: one writer; its logs are the gathered ones
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        rows = _read_raw(self.path) if self.path.exists() else []
        kept = [r for r in rows if int(r["step"]) <= state.global_step]  # drop steps a crash left behind
        _write_all(self.path, kept)
        self._last_step = int(kept[-1]["step"]) if kept else -1
        self._last_tokens = float(getattr(state, "num_input_tokens_seen", 0) or 0)
        self._last_time = time.perf_counter()

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        logs = logs or {}
        if any(k in logs for k in _SUMMARY_KEYS) or any(k.startswith("eval_") for k in logs):
            return
        now = time.perf_counter()
        extra: dict[str, Any] = {}
        if "num_tokens" in logs and self._last_tokens is not None and now > self._last_time:
            extra["tokens_per_s"] = (float(logs["num_tokens"]) - self._last_tokens) / (now - self._last_time)
            self._last_tokens = float(logs["num_tokens"])
        self._last_time = now
        if "beta" not in logs and getattr(args, "beta", None) is not None:
            extra["beta"] = float(args.beta)
        row = logs_to_row(logs, self.stage, state.global_step, extra)
        if state.global_step == self._last_step:  # a second log at the same step: merge into its row
            rows = _read_raw(self.path)
            rows[-1] = {c: row[c] or rows[-1][c] for c in COLUMNS}
            _write_all(self.path, rows)
            return
        with self.path.open("a", newline="", encoding="utf-8") as fh:
            csv.DictWriter(fh, fieldnames=COLUMNS).writerow(row)
        self._last_step = state.global_step
