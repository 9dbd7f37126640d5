"""What each model of a run cost and bought: GRPO from its metrics, the controls from their tallies."""

from __future__ import annotations

import dataclasses
import json

from cells.evaluation.split_report import compute_markdown
from cells.experiments import compute
from cells.experiments.drift_split import MODEL_WORDS
from cells.step_02_profiles import get_profile
from cells.training.metrics import _write_all, logs_to_row


def _run(tmp_path, steps, controls=True):
    """A run dir holding what `run_compute` reads: the profile, GRPO's metrics rows and the controls' tallies."""
    run = tmp_path / "run"
    (run / "training").mkdir(parents=True)
    profile = get_profile("cpu-gen")  # prompts_per_step 2, G 8: 16 episodes in a step's batch
    (run / "profile.json").write_text(json.dumps(dataclasses.asdict(profile)))
    _write_all(run / "training" / "metrics.csv",
               [logs_to_row({"loss": 0.1}, stage, i + 1, extra) for i, (stage, extra) in enumerate(steps)])
    if controls:
        (run / "eval_sft_control.json").write_text(json.dumps({"control": {
            "grpo_measure": "cpu", "cpu_seconds": 29.5, "seconds": 15.0, "examples": 300, "trained_tokens": 40_000}}))
        (run / "eval_raft_control.json").write_text(json.dumps({"control": {
            "grpo_measure": "cpu", "seconds": 31.0, "episodes": 96, "kept": 12, "trained_tokens": 2_500}}))
    return run


def test_grpo_and_both_controls_report_seconds_episodes_sequences_and_tokens_trained(tmp_path):
    steps = [(1, {"step_cpu": 10.0, "groups/resampled": 1.0, "tokens/updated": 800.0, "episodes/updated": 8.0}),
             (2, {"step_cpu": 20.0, "groups/resampled": 0.0, "tokens/updated": 1200.0, "episodes/updated": 16.0})]
    rows = compute.run_compute(_run(tmp_path, steps))
    assert [r.model for r in rows] == ["trained", "sft_control", "raft_control"]
    grpo, sft, raft = rows
    # episodes: 2 prompts' groups a step plus the resampled group, G = 8 each
    assert (grpo.seconds, grpo.measure, grpo.episodes, grpo.examples, grpo.tokens_trained) == (30.0, "cpu", 40, 24, 2000)
    assert (sft.seconds, sft.measure, sft.episodes, sft.examples, sft.tokens_trained) == (29.5, "cpu", None, 300, 40_000)
    assert (raft.seconds, raft.episodes, raft.examples, raft.tokens_trained) == (31.0, 96, 12, 2_500)
    table = compute_markdown([r.to_dict() for r in rows], MODEL_WORDS, run="cpu-gen")
    assert table[2] == "| cpu-gen | after GRPO | 30 (cpu) | 40 | 24 | 2,000 |"
    assert table[3] == "| cpu-gen | SFT-only control | 30 (cpu) | — | 300 | 40,000 |"


def test_a_run_logged_before_updated_tokens_derives_them_and_leaves_the_sequences_uncounted(tmp_path):
    steps = [(2, {"step_cpu": 5.0, "rollout/model_tokens_mean": 100.0, "tokens/updated_frac": 0.25})]
    (grpo,) = compute.run_compute(_run(tmp_path, steps, controls=False))
    assert grpo.tokens_trained == 100 * 16 * 0.25 and grpo.examples is None and grpo.episodes == 16


def test_a_run_without_grpo_metrics_or_controls_has_no_rows(tmp_path):
    (tmp_path / "empty").mkdir()
    assert compute.run_compute(tmp_path / "empty") == []
