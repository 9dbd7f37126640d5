"""Step 21: figures are written as real PNGs from synthetic metrics.csv and reports."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from cells import step_21_plots as plots
from cells.evaluation.synthetic import synthetic_reports

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def reports():
    return synthetic_reports(resamples=100)


def _write_metrics(path: Path, *, with_controls: bool = True) -> Path:
    cols = ["step", "stage", "reward", "reward_std", "reward/task", "reward/drift", "reward/format"]
    cols += ["kl", "beta"] if with_controls else []
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(cols)
        for step in range(30):
            stage = 1 + step // 10
            row = [step, stage, 0.2 + step / 50, 0.1, step / 30, "" if stage == 1 else 0.5, 0.9, 0.01 * step,
                   0.04 * math.exp(-step / 30)]
            w.writerow(row[: len(cols)])
    return path


def _is_png(path: Path) -> bool:
    data = path.read_bytes()
    return data[:8] == PNG_MAGIC and len(data) > 5_000


def test_run_writes_all_figures(tmp_path, reports):
    from cells.context import Context

    (tmp_path / "training").mkdir()
    _write_metrics(tmp_path / "training" / "metrics.csv")
    ctx = Context(profile=None, run_dir=tmp_path, reports=reports)  # type: ignore[arg-type]
    ctx = plots.run(ctx)
    names = {k.removeprefix("plot/") for k in ctx.artifacts}
    assert names == {"training_curves", "language_before_after", "drift_kind_before_after", "reliability",
                     "drift_gap"}
    for path in ctx.artifacts.values():
        assert path.parent == tmp_path / "plots" and _is_png(path), path


def test_read_metrics_csv_blank_cells_are_none(tmp_path):
    m = plots.read_metrics_columns(_write_metrics(tmp_path / "metrics.csv", with_controls=False))
    assert m["reward/drift"][0] is None and m["reward/drift"][-1] == 0.5 and "kl" not in m
    assert plots.plot_training_curves(m, tmp_path / "c.png") is not None and _is_png(tmp_path / "c.png")


def test_missing_inputs_skip_figures(tmp_path, reports):
    assert plots.make_plots({}, tmp_path / "p") == {}
    assert plots.plot_training_curves({"step": [1.0, 2.0], "other": [1.0, 2.0]}, tmp_path / "x.png") is None
    only_ref = {"reference": reports["reference"]}
    made = plots.make_plots(only_ref, tmp_path / "q", tmp_path / "absent.csv")
    assert set(made) == {"reliability", "drift_gap"}  # no before/after bars without baseline/final
