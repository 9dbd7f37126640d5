"""A run directory remembers what produced it: knob digests in the sidecars, refusal, `--fresh`.

Real `trl.GRPOTrainer` / peft adapters on the tiny Gemma 3 model from `tests/tiny.py`; the
profiles are the real presets (`cpu-smoke`, `cpu-learn`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest
from tiny import grpo_factory, tiny_model, tiny_tokenizer

from cells.context import Context
from cells.step_02_profiles import get_profile
from cells.step_04_datatypes import canonical_json
from cells.training.checkpoints import (
    META_NAME,
    RunDirMismatchError,
    check_reusable,
    knobs_digest,
    read_meta,
    stage_knobs,
)
from cells.training.curriculum import run_stage
from cells.training.grpo_stage import run_grpo_stage
from cells.training.stages import guard_warm_start, stage_dir, training_root

SMOKE = get_profile("cpu-smoke")


# ---------------------------------------------------------------- which knobs each stage depends on


def test_knobs_per_stage_and_a_stable_digest():
    warm, s1, s3 = stage_knobs(SMOKE, 0), stage_knobs(SMOKE, 1), stage_knobs(SMOKE, 3)
    assert warm["profile"] == "cpu-smoke" and warm["tiny.hidden_size"] == 64
    assert warm["sft_episodes"] == SMOKE.sft_episodes and warm["sft_learning_rate"] == SMOKE.sft_learning_rate
    # the warm start ignores GRPO-only knobs; nothing depends on evaluation sizes or bookkeeping
    assert "learning_rate" not in warm and "steps_per_stage" not in warm
    assert s1["learning_rate"] == SMOKE.learning_rate and s1["steps_per_stage"] == [2, 2, 2]
    assert not {"pass_k", "eval_episodes_per_cell", "run_root", "save_every"} & (set(warm) | set(s3))
    assert s1 == s3 and "language_weights" in warm  # one continuous run; the warm start samples goals with them
    # digest: sha256 of canonical JSON, identical for equal knobs, different for any changed knob
    assert knobs_digest(s1) == hashlib.sha256(canonical_json(s1).encode()).hexdigest()
    assert knobs_digest(stage_knobs(get_profile("cpu-smoke"), 1)) == knobs_digest(s1)
    lr = dataclasses.replace(SMOKE, learning_rate=1e-3)
    assert knobs_digest(stage_knobs(lr, 1)) != knobs_digest(s1)
    assert knobs_digest(stage_knobs(lr, 0)) == knobs_digest(warm)  # the warm start does not read it
    evals = dataclasses.replace(SMOKE, pass_k=3, eval_episodes_per_cell=5)
    assert all(stage_knobs(evals, s) == stage_knobs(SMOKE, s) for s in range(4))


# ---------------------------------------------------------------- GRPO stages: reuse, refuse


class CountingFactory:
    """A `grpo_factory` that counts how often a trainer is built (weights load only after that)."""

    def __init__(self, max_steps: int) -> None:
        self.inner, self.calls = grpo_factory(max_steps), 0

    def __call__(self, output_dir, callbacks):
        self.calls += 1
        return self.inner(output_dir, callbacks)


def test_stage_resume_reuses_with_same_knobs_and_refuses_a_changed_knob(tmp_path):
    knobs = stage_knobs(SMOKE, 1)
    kw = {"metrics_path": tmp_path / "m.csv", "profile_name": "cpu-smoke", "resolved_profile": SMOKE.to_dict()}
    first = run_stage(1, grpo_factory(2), tmp_path / "stage1", None, 2, knobs=knobs, **kw)
    meta = read_meta(first.checkpoint)
    assert meta.knobs == knobs and meta.knobs_digest == knobs_digest(knobs)
    assert meta.resolved_profile["name"] == "cpu-smoke"
    assert json.loads((first.checkpoint / META_NAME).read_text())["knobs_digest"] == knobs_digest(knobs)

    same = CountingFactory(2)
    again = run_stage(1, same, tmp_path / "stage1", None, 2, knobs=stage_knobs(get_profile("cpu-smoke"), 1), **kw)
    assert again.trained_steps == 0 and again.checkpoint == first.checkpoint and same.calls == 0

    changed = CountingFactory(2)
    new_knobs = stage_knobs(dataclasses.replace(SMOKE, learning_rate=1e-3, sft_epochs=SMOKE.sft_epochs + 1), 1)
    with pytest.raises(RunDirMismatchError) as info:
        run_stage(1, changed, tmp_path / "stage1", None, 2, knobs=new_knobs, **kw)
    assert changed.calls == 0  # refused before any trainer (or weights) was built
    epochs = SMOKE.sft_epochs
    assert info.value.differences == {"learning_rate": (0.0005, 0.001), "sft_epochs": (epochs, epochs + 1)}
    message = str(info.value)
    assert "learning_rate: 0.0005 -> 0.001" in message and f"sft_epochs: {epochs} -> {epochs + 1}" in message
    assert "--run-dir" in message and "--fresh" in message and "GRPO stage 1 checkpoint" in message


def test_a_checkpoint_without_recorded_knobs_is_not_reused(tmp_path):
    first = run_stage(1, grpo_factory(1), tmp_path / "stage1", None, 1, metrics_path=tmp_path / "m.csv")
    raw = json.loads((first.checkpoint / META_NAME).read_text())
    raw.pop("knobs"), raw.pop("knobs_digest")  # a sidecar written before run dirs recorded knobs
    (first.checkpoint / META_NAME).write_text(json.dumps(raw))
    with pytest.raises(RunDirMismatchError, match="predates recorded settings"):
        check_reusable(first.checkpoint, {"profile": "unknown"}, "stage 1")
    (first.checkpoint / META_NAME).unlink()
    with pytest.raises(RunDirMismatchError, match=r"has no driftcall_meta\.json"):
        check_reusable(first.checkpoint, {"profile": "unknown"}, "stage 1")


# ---------------------------------------------------------------- context level: warm start, profiles, --fresh


def _ctx(tmp_path, profile=SMOKE, **changes):
    profile = dataclasses.replace(profile, steps_per_stage=(2, 1, 1), **changes)
    ctx = Context(profile=profile, run_dir=tmp_path)
    ctx.tokenizer = tiny_tokenizer()
    ctx.model = tiny_model(ctx.tokenizer)
    return ctx


def _builder(ctx, stage, output_dir, callbacks):
    return grpo_factory(sum(ctx.profile.steps_per_stage))(output_dir, callbacks)


def _warm_dir(ctx):
    """Where step 15 saves the warm start: the whole tiny model (CPU profiles) or a LoRA adapter."""
    return training_root(ctx) / "warm_start" / ("model" if getattr(ctx.profile, "warm_start_full", False) else "adapter")


def _save_warm_start(ctx):
    """What step 15 does on a first run: guard (records the sidecar), then SFT saves its weights there."""
    warm = _warm_dir(ctx)
    guard_warm_start(ctx, warm)
    model = tiny_model(ctx.tokenizer, lora=False) if warm.name == "model" else ctx.model
    model.save_pretrained(str(warm))
    return warm


def test_warm_start_of_another_profile_is_refused_before_loading_weights(tmp_path):
    from cells import step_15_train_stage1

    warm = _save_warm_start(_ctx(tmp_path))
    meta = read_meta(warm)
    assert meta.stage == 0 and meta.knobs == stage_knobs(dataclasses.replace(SMOKE, steps_per_stage=(2, 1, 1)), 0)
    # cpu-learn's model has other shapes; ctx.model is None, so anything that touched weights before
    # the refusal would fail differently (AttributeError / size mismatch), not with RunDirMismatchError
    learn = Context(profile=get_profile("cpu-learn"), run_dir=tmp_path)
    with pytest.raises(RunDirMismatchError) as info:
        step_15_train_stage1.warm_start(learn)
    diffs = info.value.differences
    assert diffs["profile"] == ("cpu-smoke", "cpu-learn") and diffs["tiny.hidden_size"][0] == 64
    assert diffs["tiny.hidden_size"][1] == get_profile("cpu-learn").tiny.hidden_size != 64
    assert "warm start" in str(info.value) and "--fresh" in str(info.value)
    # the same knobs pass (step 15 then loads the saved warm start), and the sidecar is kept as recorded
    guard_warm_start(_ctx(tmp_path), warm)
    assert read_meta(warm) == meta


def test_cli_refuses_another_profile_before_any_step_runs(tmp_path, capsys):
    from cells.__main__ import main

    _save_warm_start(_ctx(tmp_path))
    capsys.readouterr()  # drop the save's own progress output
    code = main(["run", "--profile", "cpu-learn", "--steps", "12-17", "--run-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: ") and "profile: \"cpu-smoke\" -> \"cpu-learn\"" in err
    assert "--run-dir" in err and "--fresh" in err and "Traceback" not in err and "size mismatch" not in err
    assert not (tmp_path / "runtime.json").exists()  # preflight: not even step 1 ran, let alone step 12's model


def test_preflight_only_guards_runs_that_train(tmp_path):
    from cells.pipeline import check_run_dir

    _save_warm_start(_ctx(tmp_path))
    learn = Context(profile=get_profile("cpu-learn"), run_dir=tmp_path)
    check_run_dir(learn, (1, 2, 18, 19))  # no training step selected: nothing under training/ is used
    with pytest.raises(RunDirMismatchError, match=r"\(warm start\) is not reused"):
        check_run_dir(learn, (16,))
    learn.fresh = True
    check_run_dir(learn, (15, 16, 17))  # --fresh: step 15 will delete it instead
    assert _warm_dir(Context(profile=SMOKE, run_dir=tmp_path)).is_dir()  # ... but not before then


def test_stages_reuse_same_knobs_refuse_changed_ones_and_fresh_starts_over(tmp_path):
    ctx = _ctx(tmp_path)
    _save_warm_start(ctx)
    s1 = run_grpo_stage(ctx, 1, _builder)
    s2 = run_grpo_stage(ctx, 2, _builder)
    assert (s1.trained_steps, s2.trained_steps) == (2, 1)

    # same knobs, new session: both stages reused, nothing trained
    rerun = _ctx(tmp_path)
    assert run_grpo_stage(rerun, 1, _builder).trained_steps == 0
    assert run_grpo_stage(rerun, 2, _builder).trained_steps == 0

    # a changed GRPO knob: stage 1 refuses; stage 2 refuses its predecessor (stage 1) the same way
    changed = _ctx(tmp_path, learning_rate=1e-3)
    with pytest.raises(RunDirMismatchError, match=r"learning_rate: 0\.0005 -> 0\.001"):
        run_grpo_stage(changed, 1, _builder)
    with pytest.raises(RunDirMismatchError, match="GRPO stage 1 checkpoint"):
        run_grpo_stage(changed, 2, _builder)
    # another profile: refused by the GRPO stage too, not only by the warm start
    with pytest.raises(RunDirMismatchError, match='profile: "cpu-smoke" -> "cpu-learn"'):
        run_grpo_stage(_ctx(tmp_path, profile=get_profile("cpu-learn")), 1, _builder)

    # --fresh: the first training step deletes training/, then everything trains under the new knobs
    changed.fresh = True
    adapter = _save_warm_start(changed)
    assert changed.fresh is False and not (stage_dir(changed, 2)).exists()
    assert read_meta(adapter).knobs_digest == knobs_digest(stage_knobs(changed.profile, 0))
    assert run_grpo_stage(changed, 1, _builder).trained_steps == 2  # not wiped again by stage 2
    assert run_grpo_stage(changed, 2, _builder).trained_steps == 1
    meta = read_meta(changed.trainer_state["stage2"].checkpoint)
    assert meta.knobs["learning_rate"] == 1e-3 and meta.stage == 2


def test_cli_passes_fresh_seed_and_knobs_through(monkeypatch):
    import cells.pipeline
    from cells.__main__ import main

    seen = {}

    def fake_run(profile, steps=None, run_dir=None, fresh=False, model=None, seed=None, knobs=()):
        seen.update(profile=profile, steps=steps, fresh=fresh, seed=seed, knobs=tuple(knobs))
        return Context(profile=SMOKE, run_dir=run_dir)

    monkeypatch.setattr(cells.pipeline, "run", fake_run)
    assert main(["run", "--profile", "cpu-smoke", "--steps", "2", "--fresh", "--seed", "7",
                 "--set", "learning_rate=0.003", "--set", "grpo_resample_on=success"]) == 0
    assert seen == {"profile": "cpu-smoke", "steps": "2", "fresh": True, "seed": 7,
                    "knobs": ("learning_rate=0.003", "grpo_resample_on=success")}
    assert main(["run", "--steps", "2"]) == 0 and seen["fresh"] is False and seen["seed"] is None
    assert seen["knobs"] == ()


def test_a_knob_added_later_at_its_default_does_not_refuse_an_older_checkpoint(tmp_path):
    """A sidecar written before `turn_budgets` and `sft_search_drills` existed is reused while this run keeps them at
    their defaults (what the code did then), and refused once one of them moves."""
    knobs = stage_knobs(SMOKE, 1)
    older = {k: v for k, v in knobs.items() if k not in ("turn_budgets", "sft_search_drills")}
    kw = {"metrics_path": tmp_path / "m.csv", "profile_name": "cpu-smoke", "resolved_profile": SMOKE.to_dict()}
    first = run_stage(1, grpo_factory(2), tmp_path / "stage1", None, 2, knobs=older, **kw)
    assert "turn_budgets" not in read_meta(first.checkpoint).knobs
    same = CountingFactory(2)
    again = run_stage(1, same, tmp_path / "stage1", None, 2, knobs=knobs, **kw)
    assert again.trained_steps == 0 and same.calls == 0
    moved = stage_knobs(dataclasses.replace(SMOKE, turn_budgets=(8, 12, 20)), 1)
    with pytest.raises(RunDirMismatchError) as info:
        run_stage(1, CountingFactory(2), tmp_path / "stage1", None, 2, knobs=moved, **kw)
    assert set(info.value.differences) == {"turn_budgets"}


def test_a_full_warm_start_is_reused_across_the_loras_shape_and_an_adapter_warm_start_is_not(tmp_path):
    """The LoRA's knobs shape GRPO's adapter, and the warm start only when the warm start trains that adapter."""
    full, lora_only = SMOKE, dataclasses.replace(SMOKE, warm_start_full=False, copy_pretrain_max_steps=0)
    assert full.warm_start_full
    ctx = _ctx(tmp_path / "full", profile=full)
    warm = _save_warm_start(ctx)
    assert warm.name == "model" and "lora_r" not in read_meta(warm).knobs
    guard_warm_start(_ctx(tmp_path / "full", profile=full, lora_r=64, lora_alpha=128), warm)  # reused
    # a sidecar recorded before the warm start dropped the LoRA's knobs: reused too, whatever its LoRA
    raw = json.loads((warm / META_NAME).read_text())
    raw["knobs"] = stage_knobs(lora_only, 0) | {"warm_start_full": True,
                                                "copy_pretrain_max_steps": full.copy_pretrain_max_steps}
    raw["knobs_digest"] = knobs_digest(raw["knobs"])
    (warm / META_NAME).write_text(json.dumps(raw))
    assert read_meta(warm).knobs["lora_r"] == 16
    guard_warm_start(_ctx(tmp_path / "full", profile=full, lora_r=64), warm)
    with pytest.raises(RunDirMismatchError, match="sft_epochs"):  # a knob it reads still refuses
        guard_warm_start(_ctx(tmp_path / "full", profile=full, sft_epochs=full.sft_epochs + 1), warm)

    adapter = _save_warm_start(_ctx(tmp_path / "adapter", profile=lora_only))
    assert adapter.name == "adapter" and read_meta(adapter).knobs["lora_r"] == 16
    with pytest.raises(RunDirMismatchError, match=r"lora_r: 16 -> 64"):
        guard_warm_start(_ctx(tmp_path / "adapter", profile=lora_only, lora_r=64), adapter)
