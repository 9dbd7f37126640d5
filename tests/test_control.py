"""`python -m cells control`: the SFT-only control continues a run's warm start for GRPO's minutes and pairs it."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from cells.bench import control
from cells.step_02_profiles import TRAIN_SEEDS, get_profile
from cells.training.metrics import COLUMNS
from cells.training.sft_data import WarmStartError


def _metrics_csv(path, step_times):
    header = ",".join(COLUMNS)
    rows = []
    for i, t in enumerate(step_times, 1):
        values = {"stage": "1", "step": str(i), "extra": json.dumps({"step_time": t}).replace('"', '""')}
        rows.append(",".join(f'"{values[c]}"' if c == "extra" else values.get(c, "") for c in COLUMNS))
    path.write_text("\n".join([header, *rows]) + "\n")


def test_grpo_seconds_sums_step_times(tmp_path):
    _metrics_csv(tmp_path / "metrics.csv", [1.5, 2.0, 0.5])
    assert control.grpo_seconds(tmp_path / "metrics.csv") == pytest.approx(4.0)
    with pytest.raises(control.ControlError, match="no GRPO steps"):
        control.grpo_seconds(tmp_path / "absent.csv")


def test_control_data_never_reuses_warm_start_seeds():
    from cells.step_15_train_stage1 import SFT_STAGE_SEED_STRIDE

    profile = get_profile("cpu-smoke")
    convs = control.control_conversations(profile, 6)
    assert len(convs) == 6
    first = profile.seed + control.CONTROL_SEED_BLOCK * SFT_STAGE_SEED_STRIDE
    warm_start_blocks = range(profile.seed, profile.seed + 3 * SFT_STAGE_SEED_STRIDE)
    assert first not in warm_start_blocks and TRAIN_SEEDS.seed(first) >= 0


def test_control_data_follow_the_warm_starts_recipe_with_its_drills():
    """Same recipe as step 15 (both kinds of drills, turn budgets), so the control's length per example is the warm
    start's."""
    from cells.step_15_train_stage1 import sft_plan_item
    from cells.training.sft_data import generate_conversations

    profile = get_profile("cpu-learn")
    assert (profile.sft_search_drills, profile.sft_booking_drills, profile.sft_recovery_drills,
            profile.sft_year_turn_drills) == (1.0, 0.6, 0.45, 0.15)
    convs = control.control_conversations(profile, 30)  # ten conversations per stage, each with its drills
    warm_recipe = generate_conversations([sft_plan_item(profile, 10, 2, control.CONTROL_SEED_BLOCK + 1)])
    # search, booking, recovery, year-turn drills
    assert sum(m[0]["content"].startswith("Now: ") for m in warm_recipe) == 10 + 6 + 4 + 2
    assert [m for m in convs if m in warm_recipe] == warm_recipe  # stage 2's share is exactly step 15's recipe
    assert len(convs) == 28 + 32 + 32  # stage 1 draws no recovery drills
    # here ten conversations round (half to even) 4.5 recovery drills to 4 and 1.5 year-turn drills to 2; at the
    # profile's scale: a conversation, a search drill, 0.6 booking drills, 0.15 year-turn drills, and 0.45 recovery
    # drills in two stages of three
    assert control.examples_per_conversation(profile) == pytest.approx(1 + 1 + 0.6 + 0.15 + 0.45 * 2 / 3, rel=1e-3)


def test_control_is_cut_to_its_token_budget():
    from datasets import Dataset

    warm = {"tokens": 40_000, "examples": 100, "tokens_per_s": 5_000.0}
    budget = control.control_token_budget(2.0, warm)
    assert budget == 10_000
    assert control.conversations_for_budget(budget, warm, epochs=1, batch_size=8) == 28  # 25 + 10% margin
    assert control.conversations_for_budget(budget, warm, epochs=2, batch_size=8) == 56  # tokens counted both passes
    assert control.conversations_for_budget(budget, warm, epochs=1, batch_size=8, per_conversation=3.0) == 10  # + 20 drills
    data = Dataset.from_dict({"length": [400] * 28})
    assert len(control.take_token_budget(data, budget, batch_size=8)) == 25
    assert len(control.take_token_budget(data, 100, batch_size=8)) == 8  # at least one batch


def test_refuses_a_run_without_a_full_warm_start(tmp_path):
    (tmp_path / "profile.json").write_text(json.dumps(dataclasses.asdict(get_profile("cpu-smoke"))))
    with pytest.raises(WarmStartError, match="no full warm start"):
        control.run_control(tmp_path)


@pytest.mark.slow
def test_control_trains_evaluates_and_pairs_on_the_runs_own_spec(tmp_path):
    """A miniature finished run (cpu-smoke model, 2 held-out cases, one 2-second GRPO step), then the control."""
    from cells.evaluation.records import save_records_jsonl
    from cells.evaluation.report import save_report_json
    from cells.evaluation.runner import EvalCase, evaluate, make_spec, report_for
    from cells.modeling.tiny import build_or_load_tiny
    from cells.step_07_tasks import eval_seeds

    profile = get_profile("cpu-smoke")
    run = tmp_path / "run"
    (run / "training" / "warm_start").mkdir(parents=True)
    (run / "profile.json").write_text(json.dumps(dataclasses.asdict(profile)))
    base, tok, _ = build_or_load_tiny(profile.tiny, run / "tiny_model", profile.seed)
    tok.padding_side = "left"
    base.save_pretrained(run / "training" / "warm_start" / "model")
    (run / "training" / "warm_start" / "warm_start.json").write_text(json.dumps(
        {"training": {"examples": 100, "tokens": 40_000, "trained_tokens": 5_000, "steps": 13, "seconds": 8.0,
                      "tokens_per_s": 5_000.0}}))
    _metrics_csv(run / "training" / "metrics.csv", [2.0])  # 2 s of GRPO at 5,000 tok/s -> a 10,000-token budget
    cases = tuple(EvalCase(s, 1, "en") for s in eval_seeds(2, 1, "en"))
    spec = make_spec(profile, cases)
    for name, file in (("baseline", "baseline"), ("trained", "final")):
        greedy, sampled = evaluate(name, spec, model=base, tokenizer=tok)
        report = report_for(greedy, sampled, profile)
        report["eval_spec"] = spec.to_dict()
        save_report_json(report, run / f"eval_{file}.json")
        save_records_jsonl(greedy, run / f"records_{file}.jsonl")

    out = control.run_control(run)

    saved = json.loads((run / "eval_sft_control.json").read_text())
    assert saved["eval_spec"]["cases"] == [dataclasses.asdict(c) for c in cases]  # the run's own seeds
    assert saved["control"]["token_budget"] == 10_000 and saved["control"]["steps"] > 0
    assert saved["control"]["tokens"] <= 10_000 or saved["control"]["examples"] == profile.sft_batch_size
    assert out["control_vs_warm_start"]["final_policy"] == "sft_control"
    assert out["grpo_vs_control"]["baseline_policy"] == "sft_control"
    assert out["grpo_vs_control"]["n_pairs"] == len(cases)
    assert (run / "eval_paired_grpo_vs_control.json").is_file()
    assert (run / "training" / "sft_control" / "model" / "model.safetensors").is_file()


def test_a_runs_warm_start_is_read_with_the_tokenizer_it_was_trained_on(tmp_path):
    """The tiny tokenizer is learnt from the project's text: after a fixture edit the cache builds another one, so
    the run's readers (control, diagnose, splits) take the tokenizer saved with the warm start."""
    from cells.modeling.tiny import build_or_load_tiny, corpus_texts
    from cells.training.warm_start import load_run_warm_start

    profile = get_profile("cpu-smoke")
    run = tmp_path / "run"
    (run / "profile.json").parent.mkdir(parents=True)
    (run / "profile.json").write_text(json.dumps(dataclasses.asdict(profile)))
    texts = tuple(t.replace("a", "q") for t in corpus_texts())  # as if a fixture had changed since the run
    base, trained_with, _ = build_or_load_tiny(profile.tiny, tmp_path / "then", profile.seed, texts=texts)
    base.save_pretrained(run / "training" / "warm_start" / "model")
    trained_with.save_pretrained(run / "training" / "warm_start" / "model")
    _, now, _ = build_or_load_tiny(profile.tiny, run / "tiny_model", profile.seed)
    assert now.get_vocab() != trained_with.get_vocab()
    _, _, tokenizer = load_run_warm_start(run)
    assert tokenizer.get_vocab() == trained_with.get_vocab() and tokenizer.padding_side == "left"
