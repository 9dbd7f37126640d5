"""Steps 15-17 `run(ctx)`: warm start + three GRPO stages on one Context, with the wiring
(`grpo_stage.build_stage_trainer`, `expert_conversations_for`) swapped for a real `trl.GRPOTrainer` on the
tiny model, a toy reward and fixed conversations.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest
import torch
from tiny import a_reward, grpo_config, prompt_dataset, tiny_model, tiny_tokenizer

from cells import step_15_train_stage1, step_16_train_stage2, step_17_train_stage3
from cells.pipeline import make_context, run_step
from cells.training import grpo_stage
from cells.training.checkpoints import adapter_state, load_adapter_weights, read_meta
from cells.training.curriculum import CurriculumError, StageResult
from cells.training.metrics import read_metrics_csv
from cells.training.stages import curriculum_max_steps

CONV = [
    {"role": "system", "content": "you are a concierge"},
    {"role": "user", "content": "book a flight"},
    {"role": "assistant", "content": '{"action":"submit","message":"done","confidence":0.8}'},
]


def _tiny_builder(ctx, stage, output_dir, callbacks):
    from trl import GRPOTrainer

    return GRPOTrainer(
        model=ctx.model, reward_funcs=a_reward, processing_class=ctx.tokenizer, train_dataset=prompt_dataset(),
        args=grpo_config(output_dir, curriculum_max_steps(ctx), save_steps=ctx.profile.save_every),
        callbacks=callbacks,
    )


def _context(tmp_path):
    ctx = make_context("cpu-smoke", tmp_path / "run")
    ctx.profile = dataclasses.replace(ctx.profile, steps_per_stage=(2, 1, 1), sft_episodes=4,
                                      sft_learning_rate=3e-3, sft_epochs=1, sft_batch_size=4, sft_stages=(1,),
                                      warm_start_full=False, copy_pretrain_max_steps=0,  # this test pins the LoRA warm start (GPU path)
                                      warm_start_eval_per_cell=0)
    ctx.tokenizer = tiny_tokenizer()
    ctx.model = tiny_model(ctx.tokenizer)
    return ctx


@pytest.fixture
def wired(monkeypatch):
    monkeypatch.setattr(grpo_stage, "build_stage_trainer", _tiny_builder)
    monkeypatch.setattr(step_15_train_stage1, "expert_conversations_for", lambda ctx, n, stage: [CONV] * n)


def test_steps_15_to_17_train_the_curriculum_on_one_context(tmp_path, wired):
    ctx = _context(tmp_path)
    ctx = step_15_train_stage1.run(ctx)
    warm = ctx.trainer_state["warm_start"]
    assert warm.examples == 4 and warm.steps == 1
    stage1_weights = {k: v.clone() for k, v in adapter_state(ctx.model).items()}
    sft_saved = tiny_model(ctx.tokenizer)
    load_adapter_weights(sft_saved, ctx.artifacts["warm_start_adapter"])
    ctx = step_16_train_stage2.run(ctx)
    ctx = step_17_train_stage3.run(ctx)

    results = [ctx.trainer_state[f"stage{n}"] for n in (1, 2, 3)]
    assert all(isinstance(r, StageResult) for r in results)
    assert [(r.start_step, r.final_step) for r in results] == [(0, 2), (2, 3), (3, 4)]
    assert results[1].resumed_from == results[0].checkpoint and results[2].resumed_from == results[1].checkpoint
    assert [read_meta(r.checkpoint).stage for r in results] == [1, 2, 3]
    assert read_meta(results[2].checkpoint).profile == "cpu-smoke"
    assert ctx.artifacts["stage3_checkpoint"] == results[2].checkpoint
    rows = read_metrics_csv(ctx.artifacts["metrics_csv"])
    assert [(r["stage"], r["step"]) for r in rows] == [(1, 1), (1, 2), (2, 3), (3, 4)]
    # the KL reference stays the warm-start policy through every stage (restored from ref/ on resume)
    ref = adapter_state(ctx.model, "ref")
    for k, v in adapter_state(sft_saved).items():
        torch.testing.assert_close(ref[k], v)
    assert any(not torch.equal(adapter_state(ctx.model)[k], stage1_weights[k]) for k in stage1_weights)


def test_rerun_in_a_fresh_process_skips_done_stages_and_loads_weights(tmp_path, wired):
    ctx = _context(tmp_path)
    for step in (step_15_train_stage1, step_16_train_stage2):
        ctx = step.run(ctx)
    final = adapter_state(ctx.model)

    fresh = _context(tmp_path)  # same run dir, new model: as after a kernel restart
    fresh = step_16_train_stage2.run(fresh)  # stage 1 found on disk, stage 2 already complete
    assert fresh.trainer_state["stage2"].trained_steps == 0
    for k, v in adapter_state(fresh.model).items():
        torch.testing.assert_close(v, final[k])


def test_a_rerun_that_only_reloads_training_keeps_the_recorded_step_times(tmp_path, wired):
    ctx = _context(tmp_path)
    for number in (15, 16):
        ctx = run_step(ctx, number)
    timings = tmp_path / "run" / "timings.json"
    trained = json.loads(timings.read_text())
    assert set(trained) == {"step_15_train_stage1", "step_16_train_stage2"} and not ctx.reused_steps

    again = _context(tmp_path)  # a new session on the same run dir: warm start and stages 1-2 are on disk
    for number in (15, 16, 17):
        again = run_step(again, number)
    assert again.reused_steps == {"step_15_train_stage1", "step_16_train_stage2"}  # stage 3 trained
    recorded = json.loads(timings.read_text())
    assert {k: recorded[k] for k in trained} == trained  # the reloads' seconds did not replace the training's
    assert recorded["step_17_train_stage3"] == round(again.timings["step_17_train_stage3"], 3)


def test_stage2_without_stage1_names_the_missing_step(tmp_path, wired):
    with pytest.raises(CurriculumError, match="run step 15 first"):
        step_16_train_stage2.run(_context(tmp_path))


@pytest.mark.parametrize("module", ["cells.step_15_train_stage1", "cells.step_16_train_stage2",
                                    "cells.step_17_train_stage3"])
def test_step_modules_import_light(module):
    code = (f"import sys, importlib; importlib.import_module({module!r}); "
            "print([m for m in ('torch', 'transformers', 'trl', 'peft') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
