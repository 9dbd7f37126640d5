"""Step 16 machinery: a stage continues the previous one (step count, cosine LR, adapter), and
metrics.csv holds exactly one row per step across stages and resumes.

Real `trl.GRPOTrainer` on the tiny Gemma 3 model from `tests/tiny.py`.
"""

from __future__ import annotations

import csv
import math

import pytest
import torch
from safetensors.torch import load_file
from tiny import Interrupted, crash_at_step_begin, grpo_factory
from transformers import TrainerCallback

from cells.training.checkpoints import adapter_state, latest_checkpoint, read_meta
from cells.training.curriculum import CurriculumError, run_stage, stage_plans, total_steps
from cells.training.metrics import COLUMNS, MetricsSchemaError, logs_to_row, read_metrics_csv

LR0 = 5e-3  # tests/tiny.py grpo_config learning rate


def cosine_lr(step: int, total: int) -> float:
    """LR HF uses for optimiser step `step` (1-based) of a cosine schedule without warmup."""
    return LR0 * 0.5 * (1 + math.cos(math.pi * (step - 1) / total))


class AdapterAtTrainBegin(TrainerCallback):
    """Record the adapter weights the trainer starts from (after checkpoint loading)."""

    def __init__(self) -> None:
        self.state = None
        self.global_step = None

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.state = adapter_state(model)
        self.global_step = state.global_step




def test_stage_plans_are_cumulative():
    assert [(p.start_step, p.end_step) for p in stage_plans((2, 3, 4))] == [(0, 2), (2, 5), (5, 9)]
    assert total_steps((2, 3, 4)) == 9
    with pytest.raises(CurriculumError):
        stage_plans((1, -1, 2))


def test_stage2_continues_stage1_and_metrics_survive_a_resume(tmp_path):
    steps = (2, 3)
    total = total_steps(steps)
    metrics = tmp_path / "metrics.csv"
    s1 = run_stage(1, grpo_factory(total), tmp_path / "stage1", None, 2, metrics_path=metrics)
    assert s1.final_step == 2 and s1.checkpoint.name == "checkpoint-2"

    # stage 2 crashes after step 4 was trained and logged; with save_steps=3 its latest checkpoint is 3
    with pytest.raises(Interrupted):
        run_stage(2, grpo_factory(total, save_steps=3), tmp_path / "stage2", s1.checkpoint, total,
                  metrics_path=metrics, extra_callbacks=[crash_at_step_begin(4)])
    assert latest_checkpoint(tmp_path / "stage2") == tmp_path / "stage2" / "checkpoint-3"
    assert [r["step"] for r in read_metrics_csv(metrics)] == [1, 2, 3, 4]  # step 4 logged, not saved

    start = AdapterAtTrainBegin()
    s2 = run_stage(2, grpo_factory(total, save_steps=3), tmp_path / "stage2", s1.checkpoint, total,
                   metrics_path=metrics, extra_callbacks=[start])
    assert s2.resumed_from == tmp_path / "stage2" / "checkpoint-3"
    assert (s2.start_step, s2.final_step, s2.trained_steps) == (2, 5, 2)
    assert start.global_step == 3
    assert read_meta(s2.checkpoint).stage == 2 and read_meta(s1.checkpoint).stage == 1

    rows = read_metrics_csv(metrics)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]  # no duplicated step 4 after the resume
    assert [r["stage"] for r in rows] == [1, 1, 2, 2, 2]
    with metrics.open() as fh:
        assert tuple(next(csv.reader(fh))) == COLUMNS
    # the whole curriculum follows one cosine curve over `total` steps
    assert [r["learning_rate"] for r in rows] == pytest.approx([cosine_lr(t, total) for t in range(1, 6)])
    for r in rows:
        for col in ("reward", "reward_std", "kl", "beta", "clip_ratio", "zero_std_group_frac", "tokens_per_s",
                    "learning_rate", "loss", "grad_norm"):
            assert r[col] is not None, (col, r)
        assert r["beta"] == pytest.approx(0.04)
        assert r["reward/task"] is None and r["reward/lang/hi"] is None  # not logged by the toy reward
        assert "completions/max_length" in r["extra"]


def test_stage2_starts_from_stage1_adapter_on_a_fresh_model(tmp_path):
    total = 3
    s1 = run_stage(1, grpo_factory(total), tmp_path / "stage1", None, 1, metrics_path=tmp_path / "m.csv")
    start = AdapterAtTrainBegin()
    # the stage-2 trainer is built on a freshly initialised model: its weights must come from the checkpoint
    run_stage(2, grpo_factory(total), tmp_path / "stage2", s1.checkpoint, total, metrics_path=tmp_path / "m.csv",
              extra_callbacks=[start])
    assert start.global_step == 1
    saved = load_file(str(s1.checkpoint / "adapter_model.safetensors"))
    assert saved.keys() == start.state.keys()
    for k, v in saved.items():
        torch.testing.assert_close(start.state[k], v)
    assert any(float(v.abs().max()) > 0 for k, v in saved.items() if "lora_B" in k)  # fresh lora_B is zero


def test_schedule_and_boundary_mismatches_are_refused(tmp_path):
    s1 = run_stage(1, grpo_factory(3), tmp_path / "stage1", None, 1, metrics_path=tmp_path / "m.csv")
    with pytest.raises(CurriculumError, match="max_steps=3 but this trainer has max_steps=4"):
        run_stage(2, grpo_factory(4), tmp_path / "stage2", s1.checkpoint, 3, metrics_path=tmp_path / "m.csv")
    with pytest.raises(CurriculumError, match="max_steps=3 < stage end 5"):
        run_stage(2, grpo_factory(3), tmp_path / "stage2b", s1.checkpoint, 5, metrics_path=tmp_path / "m.csv")
    with pytest.raises(CurriculumError, match="past stage"):
        run_stage(1, grpo_factory(3), tmp_path / "stage2c", s1.checkpoint, 0, metrics_path=tmp_path / "m.csv")


def test_metrics_row_mapping_and_schema_guard(tmp_path):
    row = logs_to_row({"reward/mean": 0.5, "reward/r_task": 1.0, "drift/fired_rate": 0.25,
                       "reward/lang/hi": 0.7, "groups/zero_std_frac": 0.0, "episode/parse_failure_rate": 0.1,
                       "rollout/tokens_per_s": 12.0, "mystery": 3}, stage=2, step=7)
    assert list(row) == list(COLUMNS)
    assert (row["stage"], row["step"], row["reward"], row["reward/task"]) == ("2", "7", "0.5", "1.0")
    assert (row["drift_fired_rate"], row["reward/lang/hi"], row["parse_failure_rate"]) == ("0.25", "0.7", "0.1")
    assert row["tokens_per_s"] == "12.0" and row["zero_std_group_frac"] == "0.0"
    assert row["kl"] == "" and row["extra"] == '{"mystery":3}'
    bad = tmp_path / "metrics.csv"
    bad.write_text("stage,step\n1,1\n")
    from cells.training.metrics import MetricsCallback

    class S:
        global_step = 1
        num_input_tokens_seen = 0
        is_world_process_zero = True

    with pytest.raises(MetricsSchemaError, match="expected"):
        MetricsCallback(bad, 1).on_train_begin(None, S(), None)


# ---------------------------------------------------------------- progress bars (issue 9)


def test_notebook_progress_bar_spans_each_stage_and_survives_stopping_short(tmp_path, monkeypatch):
    """In a Jupyter kernel `Trainer` uses HF's `NotebookProgressCallback`. A stage that stops at its
    boundary two steps in, short of `max_steps`, made it format `1 / None` at train end (TypeError,
    the notebook's step 15 cell died). The stage runner swaps in a bar over the stage window."""
    import transformers.utils.notebook as notebook

    shown = []
    original = notebook.NotebookTrainingTracker.display

    def record(self):
        shown.append((self.prefix, self.value, self.total, self.label))
        original(self)

    monkeypatch.setattr(notebook.NotebookTrainingTracker, "display", record)
    total = total_steps((2, 2, 2))  # cpu-smoke's shape: every stage stops two steps in
    s1 = run_stage(1, grpo_factory(total), tmp_path / "stage1", None, 2, metrics_path=tmp_path / "m.csv",
                   extra_callbacks=[notebook.NotebookProgressCallback()])  # what a kernel's Trainer adds
    stage1 = [s for s in shown if s[0] == "GRPO stage 1"]
    assert stage1 and stage1[0][1:3] == (0, 2) and stage1[-1][1:3] == (2, 2)
    assert "global step 2/6" in stage1[-1][3]
    shown.clear()
    s2 = run_stage(2, grpo_factory(total), tmp_path / "stage2", s1.checkpoint, 4, metrics_path=tmp_path / "m.csv",
                   extra_callbacks=[notebook.NotebookProgressCallback()])
    assert s2.trained_steps == 2
    assert {s[0] for s in shown} == {"GRPO stage 2"}  # HF's max_steps-sized bar is gone
    assert shown[0][1:3] == (0, 2) and shown[-1][1:3] == (2, 2)  # resumed at global step 2: counts 0..2
