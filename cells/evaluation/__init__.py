"""Evaluation statistics and reports (docs/design.md#10-evaluation), independent of the environment.

- `records`: `EvalRecord` (one evaluated episode) and `record_from_episode(policy, trial, episode, rewards)`.
- `stats`: bootstrap/Wilson intervals, paired differences, group tables, drift gap and latency,
  pass^k, calibration, parse-failure rate.
- `report`: `build_eval_report`, `compare_reports`, `save_report_json`.

Names are loaded lazily so `import cells.evaluation.records` does not pull in numpy/scipy.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "EvalRecord": "records", "record_from_episode": "records", "save_records_jsonl": "records",
    "load_records_jsonl": "records",
    "Estimate": "stats", "SeedMismatchError": "stats", "mean_ci": "stats", "success_ci": "stats",
    "paired_difference": "stats", "group_table": "stats", "drift_gap": "stats", "drift_latency": "stats",
    "pass_hat_k": "stats", "calibration": "stats", "parse_failure_stats": "stats",
    "build_eval_report": "report", "compare_reports": "report", "save_report_json": "report",
    "load_report_json": "report", "policy_report": "report",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'cells.evaluation' has no attribute {name!r}")
    return getattr(importlib.import_module(f"cells.evaluation.{_EXPORTS[name]}"), name)
