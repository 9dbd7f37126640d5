"""What a finished cpu-smoke run directory holds, checked once per whole-pipeline run the suite makes.

The suite runs the whole cpu-smoke pipeline twice, each through the real TRL SFTTrainer and GRPOTrainer: the
notebook in a Jupyter kernel (`test_notebook.py`, one process) and `accelerate launch ... -m cells run` (the CLI,
`test_step_14_multiprocess.py`, two processes). Both call `check_finished_smoke_run` on their run directory
rather than paying for a third run of their own.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path


def check_finished_smoke_run(run_dir: Path) -> None:
    """Training wrote one metrics row per optimiser step over the three stages and adapter-only checkpoints with
    their sidecars; evaluation, the reference players, the probe, the plots and the report are all there and agree."""
    from cells.training.checkpoints import assert_adapter_only, latest_checkpoint, read_meta

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
    assert f"{reference['expert']['success']['value']:.3f}" in report
