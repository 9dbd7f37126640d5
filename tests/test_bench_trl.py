"""`python -m cells bench trl`: stock TRL's GRPOTrainer on DriftCallToolEnv against DriftCall's trainer."""

from __future__ import annotations

import pytest

from cells.bench.stock_trl import BenchInputError, learning_rows, run_bench
from cells.step_02_profiles import get_profile


def test_a_run_without_a_warm_start_says_how_to_make_one(tmp_path):
    with pytest.raises(BenchInputError, match="--steps 1-15"):
        run_bench(tmp_path, "cpu-smoke", steps=1, speed_steps=1, per_cell=1)


def test_learning_rows_give_each_step_one_drifted_stage_in_turn():
    profile = get_profile("cpu-learn")
    rows = learning_rows(4, profile)
    per_step = profile.prompts_per_step
    assert rows["stage"] == [2] * per_step + [3] * per_step + [2] * per_step + [3] * per_step
    assert len(set(rows["seed"])) == 4 * per_step


@pytest.mark.slow
def test_the_bench_runs_on_a_saved_model(tmp_path, monkeypatch, capsys):
    """A never-trained cpu-smoke model saved as a run's warm start: both trainers time a step, stock TRL trains one
    step, and the held-out table pairs the same 15 episodes."""
    from cells.bench.stock_trl import main
    from cells.trl_env import tiny_tool_model

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    model, _ = tiny_tool_model("cpu-smoke", cache_dir=str(tmp_path / "tiny_model"))
    model.save_pretrained(tmp_path / "training" / "warm_start" / "model")
    assert main(["--run-dir", str(tmp_path), "--profile", "cpu-smoke", "--steps", "1", "--speed-steps", "1",
                 "--eval-per-cell", "1"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("profile cpu-smoke") and "stock TRL GRPOTrainer + factory" in printed[4]
    assert any(line.startswith("  warm start") and "15 episodes" in line for line in printed)
    assert printed[-1].startswith("  after - before (paired, 95% CI)")
