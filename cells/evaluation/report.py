"""JSON evaluation reports built from `EvalRecord`s: one per evaluation run, one per paired comparison.

`build_eval_report(records)` -> {"schema", "bootstrap_resamples", "seed", "ci_level", "ece_bins",
"policies": {policy: POLICY}} where POLICY holds every table of docs/design.md#10-evaluation (see `policy_report`).
`compare_reports(baseline_records, final_records)` -> {"schema", "baseline_policy", "final_policy",
"n_pairs", "metrics": {metric: PAIRED}, "by_language" | "by_stage" | "by_drift_kind" | "by_drift" (none /
drifted): {group: {metric: PAIRED}}}.
A pair's drift kind is the task's *scheduled* drift (`scheduled_drift_kinds`), not what fired in either
episode: both sides of a pair then fall in the same group, even when one side never reached the drift.
Both are plain JSON (str keys, no NaN); `save_report_json` writes them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from cells.evaluation import stats
from cells.evaluation.records import EvalRecord

REPORT_SCHEMA = "driftcall.eval_report/1"
PAIRED_SCHEMA = "driftcall.paired_report/1"
COMPONENTS: tuple[str, ...] = ("reward", "r_task", "r_drift", "r_constraints", "r_format", "r_penalty",
                               "confidence")
PAIRED_METRICS: tuple[str, ...] = ("success", "reward", "r_constraints", "r_format", "r_penalty")
GROUPINGS: tuple[str, ...] = ("language", "stage", "drift_kind", "pattern")


def policy_report(records: Sequence[EvalRecord], *, bootstrap_resamples: int = 1000, seed: int = 0,
                  ece_bins: int = 10, k_max: int | None = None) -> dict[str, Any]:
    """Every statistic for the records of one policy."""
    kw = {"resamples": bootstrap_resamples, "seed": seed}
    components = {
        c: stats.mean_ci([getattr(r, c) for r in records if getattr(r, c) is not None], tag=c, **kw).to_dict()
        for c in COMPONENTS
    }
    return {
        "n_episodes": len(records),
        "n_tasks": len({r.task_key for r in records}),
        "success": stats.success_ci([r.success for r in records]).to_dict(),
        "components": components,
        **{f"by_{g}": stats.group_table(records, g, **kw) for g in GROUPINGS},
        "drift_gap": stats.drift_gap(records, **kw),
        "drift_latency": stats.drift_latency(records),
        "pass_k": stats.pass_hat_k(records, k_max),
        "calibration": stats.calibration(records, bins=ece_bins),
        "parse_failures": stats.parse_failure_stats(records),
        "terminated_by": stats.counts(r.terminated_by.value for r in records),
        "offences": stats.counts(code for r in records for code in r.offences),
    }


def build_eval_report(records: Iterable[EvalRecord], *, bootstrap_resamples: int = 1000, seed: int = 0,
                      ece_bins: int = 10, k_max: int | None = None) -> dict[str, Any]:
    """A JSON-serialisable report with one `policy_report` per policy found in `records`."""
    records = list(records)
    if not records:
        raise ValueError("build_eval_report needs at least one EvalRecord")
    policies = {
        name: policy_report(rs, bootstrap_resamples=bootstrap_resamples, seed=seed, ece_bins=ece_bins,
                            k_max=k_max)
        for name, rs in stats.by_policy(records).items()
    }
    return _json_safe({"schema": REPORT_SCHEMA, "bootstrap_resamples": bootstrap_resamples, "seed": seed,
                       "ci_level": stats.CI_LEVEL, "ece_bins": ece_bins, "policies": policies})


def _single_policy(records: Sequence[EvalRecord], side: str) -> str:
    names = sorted({r.policy for r in records})
    if len(names) != 1:
        raise stats.SeedMismatchError(f"{side} records must come from exactly one policy, found {names}")
    return names[0]


def compare_reports(baseline_records: Iterable[EvalRecord], final_records: Iterable[EvalRecord], *,
                    bootstrap_resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Paired final − baseline statistics; raises `SeedMismatchError` when the keys differ."""
    base, fin = list(baseline_records), list(final_records)
    stats._pairs(base, fin)  # fail fast, before any per-metric work
    kw = {"resamples": bootstrap_resamples, "seed": seed}
    kinds = {key: scheduled_drift_kinds(*key) for key in {(r.seed, r.stage, r.language) for r in base}}
    groupers: dict[str, Any] = {
        "by_language": lambda r: (r.language,),
        "by_stage": lambda r: (str(r.stage),),
        "by_drift_kind": lambda r: kinds[(r.seed, r.stage, r.language)] or ("none",),
        "by_drift": lambda r: ("drifted",) if kinds[(r.seed, r.stage, r.language)] else ("none",),
    }
    grouped = {name: _paired_by_group(base, fin, fn, kw) for name, fn in groupers.items()}
    return _json_safe({
        "schema": PAIRED_SCHEMA,
        "baseline_policy": _single_policy(base, "baseline"),
        "final_policy": _single_policy(fin, "final"),
        "n_pairs": len(base),
        "bootstrap_resamples": bootstrap_resamples, "seed": seed, "ci_level": stats.CI_LEVEL,
        "test": stats.PAIRED_TEST,
        "metrics": {m: stats.paired_difference(base, fin, metric=m, **kw) for m in PAIRED_METRICS},
        **grouped,
    })


def _paired_by_group(base: Sequence[EvalRecord], fin: Sequence[EvalRecord], groups_of: Any,
                     kw: dict[str, Any]) -> dict[str, Any]:
    """{group: {metric: PAIRED}} for success and reward; a record counts in every group `groups_of` names."""
    out: dict[str, Any] = {}
    for group in sorted({g for r in base for g in groups_of(r)}):
        b = [r for r in base if group in groups_of(r)]
        f = [r for r in fin if group in groups_of(r)]
        out[group] = {m: stats.paired_difference(b, f, metric=m, **kw) for m in ("success", "reward")}
    return out


def scheduled_drift_kinds(seed: int, stage: int, language: str) -> tuple[str, ...]:
    """Drift kinds the environment schedules for this task (the same goal and schedule `DriftCallEnv.reset`
    builds for a one-language eval env); () for a task without drift."""
    from cells.step_06_drift import build_schedule
    from cells.step_07_tasks import generate

    goal = generate(seed=seed, stage=stage, language_weights={language: 1.0})
    return tuple(sorted({d.drift_type for d in build_schedule(stage, seed, goal)}))


def _json_safe(value: Any) -> Any:
    """Recursively turn tuples into lists, keys into str and non-finite floats into None."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy scalars
        return _json_safe(value.item())
    return value


def save_report_json(report: dict[str, Any], path: str | Path) -> Path:
    """Write `report` as indented, key-sorted UTF-8 JSON (strict: NaN is rejected)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(_json_safe(report), indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False)
    path.write_text(text + "\n", encoding="utf-8")
    return path


def load_report_json(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text(encoding="utf-8"))
