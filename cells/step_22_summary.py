"""Step 22 - summary: one markdown report (`report.md` in the run directory) with every table.

Reads `ctx.profile` (knobs), `ctx.runtime` (versions, step 1), `ctx.reports` ("reference",
"untrained", "baseline", "final": `build_eval_report` dicts; "paired_warm_start" (the SFT effect,
CPU full warm starts), "paired" (final − baseline; the GRPO effect there): `compare_reports` dicts; "probe": the
probe's dict, one row per player and its offences in a second table) and the `plot/*` entries of `ctx.artifacts`
(step 21). No table is wider than `evaluation.markdown.MAX_COLUMNS` columns: what a reader compares, with the detail
in a second table or the JSON beside the report.
Writes `ctx.run_dir / "report.md"` and `ctx.artifacts["report_md"]`; shows it inline under
IPython. Every number in the results sections is formatted from those JSON dicts (no arithmetic
here), which tests/test_step_22_summary.py checks cell by cell.

Run alone (after steps 18-21 in the same run): `python -m cells run --profile cpu-smoke --steps 22`.
Time: well under a second on any profile.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cells.step_02_profiles import Profile

if TYPE_CHECKING:  # pragma: no cover
    from cells.context import Context

# Knobs declared with `report=False` (step 2's `knob`): too long for the configuration table.
SKIPPED_KNOBS: frozenset[str] = frozenset(f.name for f in dataclasses.fields(Profile) if not f.metadata["report"])


def _cell(value: Any) -> str:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, (tuple, list)):
        return ", ".join(str(v) for v in value)
    return "—" if value is None else str(value)


def configuration_section(profile: Any) -> str:
    """Every knob of the profile but those declared `report=False` (the language weights: too long)."""
    from cells.evaluation.markdown import table

    if profile is None or not dataclasses.is_dataclass(profile):
        return "_No profile on the context._\n"
    rows = [[f.name, f"`{_cell(getattr(profile, f.name))}`"] for f in dataclasses.fields(profile)
            if f.name not in SKIPPED_KNOBS]
    return table(["knob", "value"], rows)


def versions_section(runtime: Any) -> str:
    """Python, device and key package versions from step 1's RuntimeInfo."""
    from cells.evaluation.markdown import table

    if runtime is None:
        return "_Runtime not recorded (run step 1 first)._\n"
    rows = [["python", f"`{getattr(runtime, 'python', '—')}`"],
            ["device", f"`{getattr(runtime, 'device', '—')}` {getattr(runtime, 'gpu_name', None) or ''}".rstrip()],
            ["git sha", f"`{getattr(runtime, 'git_sha', None) or '—'}`"]]
    rows += [[name, f"`{version}`"] for name, version in getattr(runtime, "versions", ())]
    return table(["component", "version"], rows)


def _plots_section(artifacts: Mapping[str, Any], run_dir: Path) -> str:
    plots = {k.removeprefix("plot/"): Path(v) for k, v in artifacts.items() if k.startswith("plot/")}
    if not plots:
        return "_No plots (run step 21)._\n"
    lines = []
    for name, path in sorted(plots.items()):
        rel = os.path.relpath(path, run_dir) if path.is_absolute() else str(path)
        lines.append(f"![{name}]({Path(rel).as_posix()})")
    return "\n\n".join(lines) + "\n"


def build_summary_markdown(reports: Mapping[str, Any], *, profile: Any = None, runtime: Any = None,
                           artifacts: Mapping[str, Any] | None = None, run_dir: Path | None = None) -> str:
    """The whole report as a markdown string."""
    from cells.evaluation import markdown as md

    rows = md.policy_rows(reports)
    # Reading order: the results a reader came for first, how they were produced (configuration,
    # versions) last.
    parts = ["# DriftCall evaluation report\n",
             "Intervals are 95 %: Wilson for success rates, percentile bootstrap for means and differences. "
             "Drift gap = success without drift − success with drift.\n",
             "## Results\n"]
    if not rows:
        parts.append("_No evaluation reports on the context (run steps 18-19)._\n")
    else:
        parts += ["### Headline\n", md.headline(rows),
                  "### pass^k (all k trials succeed)\n", md.pass_k_table(rows),
                  "### Calibration of the submitted confidence\n", md.calibration_table(rows),
                  "### Reward components (mean [95% CI])\n", md.components_table(rows),
                  "### Success by language\n", md.group_table(rows, "by_language"),
                  "### Success by stage\n", md.group_table(rows, "by_stage"),
                  "### Success by drift kind\n", md.group_table(rows, "by_drift_kind"),
                  "### Success by drift pattern\n", md.group_table(rows, "by_pattern"),
                  "### Drift handling latency\n", md.latency_table(rows)]
    if reports.get("paired_warm_start"):
        parts += ["### Paired difference: warm start − untrained (the SFT effect)\n",
                  md.paired_section(reports["paired_warm_start"], "warm start − untrained")]
    if reports.get("paired"):
        title = "trained − warm start (the GRPO effect)" if reports.get("paired_warm_start") else "final − baseline"
        parts += [f"### Paired difference: {title}\n", md.paired_section(reports["paired"], title)]
    if reports.get("probe"):
        parts += ["### Reward-hacking probe\n", md.probe_section(reports["probe"])]
    if reports.get("voice"):
        parts += ["### With the voice boundary\n", md.voice_section(reports["voice"])]
    parts += ["## Plots\n", _plots_section(artifacts or {}, run_dir or Path(".")),
              "## Configuration\n", configuration_section(profile),
              "## Versions\n", versions_section(runtime)]
    return "\n".join(p if p.endswith("\n") else p + "\n" for p in parts)


def _display(text: str) -> None:
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display
    except ImportError:
        return
    if get_ipython() is not None:
        display(Markdown(text))


def run(ctx: Context) -> Context:
    """Write report.md from the context's reports and show it."""
    run_dir = Path(ctx.run_dir)
    text = build_summary_markdown(ctx.reports, profile=ctx.profile, runtime=ctx.runtime,
                                  artifacts=ctx.artifacts, run_dir=run_dir)
    path = run_dir / "report.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    ctx.artifacts["report_md"] = path
    print(f"[summary] wrote {path} ({len(text.splitlines())} lines)")
    _display(text)
    return ctx
