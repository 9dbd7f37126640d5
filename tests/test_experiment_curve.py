"""`python -m cells curve`: a finished run's GRPO checkpoints on held-out episodes of its pattern sets."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from cells.experiments import curve
from cells.step_02_profiles import get_profile


def _checkpoint(policy, path, scale):
    """A GRPO checkpoint on disk whose LoRA moves the model (B != 0), as the trainer saves one."""
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.fill_(scale)
    policy.save_pretrained(path)
    (path / "trainer_state.json").write_text("{}")


def _run_with_checkpoints(tmp_path, steps):
    from cells.modeling.tiny import build_or_load_tiny
    from cells.step_12_model import attach_adapter

    profile = get_profile("cpu-rl")
    run = tmp_path / "cpu-rl"
    (run / "training" / "warm_start").mkdir(parents=True)
    (run / "profile.json").write_text(json.dumps(dataclasses.asdict(profile)))
    base, _, _ = build_or_load_tiny(profile.tiny, run / "tiny_model", profile.seed)
    base.save_pretrained(run / "training" / "warm_start" / "model")
    policy = attach_adapter(base, profile)
    for stage, step in steps:
        _checkpoint(policy, run / "training" / f"stage{stage}" / f"checkpoint-{step}", 0.05 * step)
    return run


def test_curve_keeps_checkpoints_at_least_every_steps_apart_and_always_the_last(tmp_path):
    run = _run_with_checkpoints(tmp_path, [(1, 5), (2, 10), (2, 15), (2, 20), (3, 25), (3, 27)])
    kept = [(stage, step) for stage, step, _ in curve.curve_checkpoints(run, every=10)]
    assert kept == [(1, 5), (2, 15), (3, 25), (3, 27)]
    assert [s for _, s, _ in curve.curve_checkpoints(run, every=1)] == [5, 10, 15, 20, 25, 27]
    with pytest.raises(curve.CurveError, match="--every"):
        curve.curve_checkpoints(run, every=0)
    with pytest.raises(curve.CurveError, match="no GRPO checkpoints"):
        curve.curve_checkpoints(tmp_path, every=1)


def test_curve_plays_the_warm_start_then_each_checkpoint_on_the_same_held_out_cases(tmp_path, monkeypatch):
    from cells.evaluation import runner

    run = _run_with_checkpoints(tmp_path, [(2, 10), (3, 20)])
    played, weights = [], []
    real = runner.play_greedy

    def recording(model, tokenizer, cases, profile):
        played.append(tuple(cases))
        weights.append(sum(float(p.detach().abs().sum()) for n, p in model.named_parameters() if "lora_B" in n))
        return real(model, tokenizer, cases, profile)

    monkeypatch.setattr(runner, "play_greedy", recording)
    out = curve.learning_curve(run, per_set=2, every=1, sets=("reinforced", "demonstrated"))
    assert [(p["stage"], p["step"], p["pattern_set"]) for p in out["points"]] == [
        (0, 0, "reinforced"), (0, 0, "demonstrated"), (2, 10, "reinforced"), (2, 10, "demonstrated"),
        (3, 20, "reinforced"), (3, 20, "demonstrated")]
    assert played[0] == played[2] == played[4] and played[1] == played[3] and played[0] != played[1]
    assert weights[0] == 0.0 and 0.0 < weights[2] < weights[4]  # warm start, then each checkpoint's own LoRA
    assert all(p["n"] == 2 and 0.0 <= p["low"] <= p["success"] <= p["high"] <= 1.0 for p in out["points"])
    assert json.loads((run / curve.CURVE_FILE).read_text()) == out
    assert (run / "plots" / curve.CURVE_PLOT).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    docs = curve.write_docs(out, run, tmp_path / "docs" / "results.md")
    text = docs.read_text()
    assert "<!-- curve:cpu-rl:begin" in text and "| 20 | 3 |" in text and "results/curve_cpu-rl.png" in text
    assert (tmp_path / "docs" / "results" / "curve_cpu-rl.png").is_file()
    assert curve.write_docs(out, run, tmp_path / "docs" / "results.md").read_text() == text  # rewritten in place
    with pytest.raises(curve.CurveError, match="--sets"):
        curve.learning_curve(run, per_set=2, sets=("nonsense",))
