"""End to end: `python -m cells run --profile cpu-smoke` through the real TRL SFTTrainer and GRPOTrainer.

One subprocess run (a few minutes on 2 cores) shared by every assertion below, exactly as a user runs it.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("smoke")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONHASHSEED": "0"}
    out = subprocess.run(
        [sys.executable, "-m", "cells", "run", "--profile", "cpu-smoke", "--run-dir", str(run_dir)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500, check=False,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return run_dir, out.stdout


def test_every_registered_step_ran(smoke_run):
    from cells.pipeline import STEPS

    _, stdout = smoke_run
    done = [line for line in stdout.splitlines() if line.startswith("done: steps")]
    assert done and all(str(s.number) in done[0] for s in STEPS)


def test_training_wrote_metrics_and_adapter_only_checkpoints(smoke_run):
    from cells.training.checkpoints import assert_adapter_only, latest_checkpoint, read_meta

    run_dir, _ = smoke_run
    with (run_dir / "training" / "metrics.csv").open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["step"]) for r in rows] == list(range(1, len(rows) + 1))
    assert {r["stage"] for r in rows} == {"1", "2", "3"}
    for stage in (1, 2, 3):
        ckpt = latest_checkpoint(run_dir / "training" / f"stage{stage}")
        assert ckpt is not None
        assert_adapter_only(ckpt)
        meta = read_meta(ckpt)
        assert meta.stage == stage and meta.profile == "cpu-smoke" and dict(meta.versions)["trl"] == "1.16.0"


def test_evaluation_probe_plots_and_report(smoke_run):
    run_dir, _ = smoke_run
    baseline = json.loads((run_dir / "eval_baseline.json").read_text())
    final = json.loads((run_dir / "eval_final.json").read_text())
    assert baseline["eval_spec"] == final["eval_spec"]  # same seeds, same decoding
    paired = json.loads((run_dir / "eval_paired.json").read_text())
    assert paired["n_pairs"] == baseline["policies"]["baseline"]["n_episodes"]
    reference = json.loads((run_dir / "eval_reference.json").read_text())["policies"]
    assert reference["expert"]["success"]["value"] >= reference["naive"]["success"]["value"]
    assert reference["naive"]["success"]["value"] >= reference["random"]["success"]["value"]
    probe = json.loads((run_dir / "probe.json").read_text())
    assert probe["all_exploits_pass"] and probe["unknown_offences"] == []
    plots = {p.stem for p in (run_dir / "plots").glob("*.png")}
    assert {"training_curves", "reliability", "language_before_after", "drift_gap"} <= plots
    report = (run_dir / "report.md").read_text(encoding="utf-8")
    expert = reference["expert"]["success"]["value"]
    assert f"{expert:.3f}" in report
