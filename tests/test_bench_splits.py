"""`python -m cells splits`: a finished run's models on held-out episodes stratified by drift split, paired."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from cells.bench import splits
from cells.step_02_profiles import get_profile


def _finished_run(tmp_path, profile):
    """A miniature finished run: the profile's untrained tiny model saved as warm start and SFT control."""
    from cells.modeling.tiny import build_or_load_tiny

    run = tmp_path / "cpu-rl"
    (run / "training" / "warm_start").mkdir(parents=True)
    (run / "profile.json").write_text(json.dumps(dataclasses.asdict(profile)))
    base, tok, _ = build_or_load_tiny(profile.tiny, run / "tiny_model", profile.seed)
    for where in (run / "training" / "warm_start" / "model", run / "training" / "sft_control" / "model"):
        base.save_pretrained(where)
    return run, base, tok


def test_split_evaluation_pairs_every_model_on_each_pattern_set_and_writes_its_block(tmp_path, monkeypatch):
    profile = get_profile("cpu-rl")  # a run reloads its preset by name
    run, base, tok = _finished_run(tmp_path, profile)
    with pytest.raises(splits.SplitEvalError, match="export"):
        splits.evaluate_split(run, per_set=2)
    (run / "export").mkdir()
    monkeypatch.setattr("cells.step_24_export.load_export", lambda path: (base, tok))  # the export's own loader is
    # tested in test_step_24_export.py; here the same weights stand in for the trained model
    result = splits.evaluate_split(run, per_set=2)
    assert result["split"] == "latin" and result["trained_with_split"] == "latin"
    assert list(result["sets"]) == ["demonstrated", "reinforced", "unseen"]
    for block in result["sets"].values():
        assert set(block["success"]) == {"warm_start", "trained", "sft_control"}
        assert all(e["n"] == 2 for e in block["success"].values())
        assert set(block["paired"]) == {"trained - warm_start", "trained - sft_control"}
        assert all(p["n_pairs"] == 2 and p["diff"]["value"] == 0.0 for p in block["paired"].values())  # same weights
        assert 0.0 <= block["fired_in_set"] <= 1.0
    assert json.loads((run / "eval_splits.json").read_text()) == result
    docs = splits.write_docs(result, run, tmp_path / "results.md")
    text = docs.read_text()
    assert "<!-- splits:cpu-rl:begin" in text and "| reinforced |" in text and "GRPO − warm start" in text
    (run / "profile.json").write_text(json.dumps(dataclasses.asdict(get_profile("cpu-learn"))))  # the oracle
    with pytest.raises(splits.SplitEvalError, match="without a drift_split"):
        splits.evaluate_split(run, per_set=2)
