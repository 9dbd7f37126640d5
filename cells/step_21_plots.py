"""Step 21 - plots: training curves, before/after bars with CIs, reliability diagram, drift gap.

Reads `ctx.reports` ("baseline", "final", "reference": `build_eval_report` dicts; "paired":
`compare_reports` dict, optional) and the training `metrics.csv` (`ctx.artifacts["metrics_csv"]`,
default `run_dir/training/metrics.csv`) when it exists. Writes PNGs
under `ctx.run_dir / "plots"`, records each in `ctx.artifacts` as `plot/<name>`, and shows them
inline when running under IPython. A figure whose inputs are missing is skipped, not faked.

Run alone (after steps 18-20 in the same run): `python -m cells run --profile cpu-smoke --steps 21`.
Time: about 2-4 s on any profile (matplotlib, Agg backend).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from cells.context import Context

# Column names of the training metrics.csv (`cells.training.metrics.COLUMNS`).
REWARD_COLUMNS: tuple[str, ...] = ("reward", "reward/task", "reward/drift", "reward/constraints",
                                   "reward/format", "reward/penalty")
STD_COLUMN = "reward_std"
CONTROL_COLUMNS: tuple[str, ...] = ("kl", "beta")
BEFORE_AFTER: tuple[str, ...] = ("untrained", "baseline", "final")  # "untrained": CPU full warm starts only


def _figure(figsize: tuple[float, float]) -> Any:
    """A Figure on its own Agg canvas: no pyplot state, no backend switch inside notebooks."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    return fig


def read_metrics_columns(path: Path) -> dict[str, list[float | None]]:
    """Column name -> values (None where blank) from a training metrics.csv (read by `cells.training.metrics`)."""
    from cells.training.metrics import read_metrics_csv

    rows = read_metrics_csv(path)
    columns = [c for c in (rows[0] if rows else {}) if c != "extra"]
    return {c: [None if r.get(c) is None else float(r[c]) for r in rows] for c in columns}


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def plot_training_curves(metrics: Mapping[str, list[float | None]], path: Path) -> Path | None:
    """Reward components (mean ± std band), then KL and beta, against step; stage boundaries dashed."""
    present = [c for c in REWARD_COLUMNS if any(v is not None for v in metrics.get(c, ()))]
    controls = [c for c in CONTROL_COLUMNS if any(v is not None for v in metrics.get(c, ()))]
    if not present and not controls:
        return None
    n = len(metrics.get("step") or next(iter(metrics.values())))
    steps = [s if s is not None else i for i, s in enumerate(metrics.get("step") or [None] * n)]
    fig = _figure((8, 4 + 2.5 * bool(controls)))
    axes = fig.subplots(1 + bool(controls), 1, squeeze=False)
    ax = axes[0][0]
    for col in present:
        pts = [(s, v) for s, v in zip(steps, metrics[col], strict=False) if v is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=col, lw=2 if col == "reward" else 1)
    std = metrics.get(STD_COLUMN)
    if "reward" in present and std is not None:
        band = [(s, m, d) for s, m, d in zip(steps, metrics["reward"], std, strict=False)
                if m is not None and d is not None]
        ax.fill_between([b[0] for b in band], [b[1] - b[2] for b in band], [b[1] + b[2] for b in band], alpha=0.15)
    ax.set(title="Training reward by component", xlabel="step", ylabel="reward")
    ax.legend(fontsize=7, loc="best")
    if controls:
        for col in controls:
            axes[1][0].plot(steps, [float("nan") if v is None else v for v in metrics[col]], label=col)
        axes[1][0].set(xlabel="step", title="KL and beta")
        axes[1][0].legend(fontsize=7)
    stage = metrics.get("stage")
    if stage:
        for i in range(1, len(stage)):
            if stage[i] is not None and stage[i] != stage[i - 1]:
                for row in axes:
                    row[0].axvline(steps[i], color="grey", ls="--", lw=0.8)
                ax.annotate(f"stage {int(stage[i])}", (steps[i], 1), xycoords=("data", "axes fraction"),
                            fontsize=7, va="top")
    return _save(fig, path)


def _policies(reports: Mapping[str, Any], keys: tuple[str, ...]) -> list[tuple[str, dict[str, Any]]]:
    """(label, policy_report) for every policy of the named reports, in key order."""
    out = []
    for key in keys:
        for name, pol in ((reports.get(key) or {}).get("policies") or {}).items():
            out.append((name if key == "reference" else f"{name} ({key})", pol))
    return out


def _yerr(est: Mapping[str, Any]) -> tuple[float, float]:
    v, lo, hi = est.get("value"), est.get("low"), est.get("high")
    if v is None or lo is None or hi is None:
        return (0.0, 0.0)
    return (max(0.0, v - lo), max(0.0, hi - v))


def plot_group_bars(reports: Mapping[str, Any], table: str, path: Path, *, metric: str = "success") -> Path | None:
    """Grouped bars (groups from `table`, e.g. by_language) per baseline/final policy, with CI whiskers."""
    pols = _policies(reports, BEFORE_AFTER)
    groups = sorted({g for _, p in pols for g in p.get(table, {})})
    if not pols or not groups:
        return None
    fig = _figure((max(6, 0.6 * len(groups) * len(pols) + 3), 4))
    ax = fig.subplots()
    width = 0.8 / len(pols)
    for j, (label, pol) in enumerate(pols):
        ests = [pol.get(table, {}).get(g, {}).get(metric, {}) for g in groups]
        vals = [e.get("value") or 0.0 for e in ests]
        errs = list(zip(*[_yerr(e) for e in ests], strict=True))
        xs = [i + (j - (len(pols) - 1) / 2) * width for i in range(len(groups))]
        ax.bar(xs, vals, width, yerr=errs, capsize=3, label=label)
    ax.set_xticks(range(len(groups)), groups, rotation=30 if len(groups) > 6 else 0, fontsize=8)
    ax.set(ylabel=f"{metric} (95% CI)", title=f"{metric} {table.replace('_', ' ')}: before vs after", ylim=(0, 1.05))
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_reliability(reports: Mapping[str, Any], path: Path) -> Path | None:
    """Accuracy against mean confidence per bin, one line per policy; the diagonal is perfect."""
    pols = _policies(reports, (*BEFORE_AFTER, "reference"))
    pols = [(lbl, p) for lbl, p in pols if (p.get("calibration") or {}).get("bins")]
    if not pols:
        return None
    fig = _figure((5, 5))
    ax = fig.subplots()
    ax.plot([0, 1], [0, 1], color="grey", ls="--", lw=1, label="perfect")
    for label, pol in pols:
        cal = pol["calibration"]
        pts = [(b["mean_confidence"], b["accuracy"]) for b in cal["bins"] if b.get("count")]
        ece = cal.get("ece")
        tag = f"{label} (ECE {ece:.3f})" if ece is not None else label
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=tag)
    ax.set(xlim=(-0.02, 1.02), ylim=(-0.02, 1.02), xlabel="mean confidence", ylabel="accuracy", title="Reliability diagram")
    ax.legend(fontsize=7)
    return _save(fig, path)


def plot_drift_gap(reports: Mapping[str, Any], path: Path) -> Path | None:
    """Drift gap (success without drift − with drift) per policy with CI whiskers."""
    pols = [(lbl, p["drift_gap"]["gap"]) for lbl, p in _policies(reports, ("reference", *BEFORE_AFTER))
            if (p.get("drift_gap") or {}).get("gap", {}).get("value") is not None]
    if not pols:
        return None
    fig = _figure((max(5, 1.1 * len(pols) + 2), 4))
    ax = fig.subplots()
    errs = list(zip(*[_yerr(g) for _, g in pols], strict=True))
    ax.bar(range(len(pols)), [g["value"] for _, g in pols], yerr=errs, capsize=3, color="tab:orange")
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(range(len(pols)), [lbl for lbl, _ in pols], rotation=20, fontsize=8)
    ax.set(ylabel="success(no drift) − success(drift)", title="Drift gap (95% CI; lower is better)")
    return _save(fig, path)


def make_plots(reports: Mapping[str, Any], plot_dir: Path, metrics_csv: Path | None = None) -> dict[str, Path]:
    """Write every figure the inputs allow; returns name -> PNG path."""
    made: dict[str, Path | None] = {}
    if metrics_csv is not None and metrics_csv.exists():
        made["training_curves"] = plot_training_curves(read_metrics_columns(metrics_csv),
                                                       plot_dir / "training_curves.png")
    made["language_before_after"] = plot_group_bars(reports, "by_language", plot_dir / "language_before_after.png")
    made["drift_kind_before_after"] = plot_group_bars(reports, "by_drift_kind",
                                                      plot_dir / "drift_kind_before_after.png")
    made["reliability"] = plot_reliability(reports, plot_dir / "reliability.png")
    made["drift_gap"] = plot_drift_gap(reports, plot_dir / "drift_gap.png")
    return {k: v for k, v in made.items() if v is not None}


def _display(paths: Mapping[str, Path]) -> None:
    try:
        from IPython import get_ipython
        from IPython.display import Image, display
    except ImportError:
        return
    if get_ipython() is None:
        return
    for path in paths.values():
        display(Image(filename=str(path)))


def run(ctx: Context) -> Context:
    """Draw the figures from ctx.reports and metrics.csv; store their paths in ctx.artifacts."""
    metrics_csv = ctx.artifacts.get("metrics_csv", Path(ctx.run_dir) / "training" / "metrics.csv")
    paths = make_plots(ctx.reports, Path(ctx.run_dir) / "plots", Path(metrics_csv))
    for name, path in paths.items():
        ctx.artifacts[f"plot/{name}"] = path
    print(f"[plots] {len(paths)} figures in {Path(ctx.run_dir) / 'plots'}: {', '.join(sorted(paths)) or 'none'}")
    _display(paths)
    return ctx
