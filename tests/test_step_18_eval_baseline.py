import dataclasses

import pytest

from cells.evaluation.runner import (
    EvalCase,
    EvalMismatchError,
    check_same_spec,
    eval_plan,
    evaluate,
    make_spec,
    report_for,
)
from cells.pipeline import make_context
from cells.step_02_profiles import EVAL_SEEDS, get_profile
from cells.step_07_tasks import generate


def test_eval_plan_is_stratified_frozen_and_held_out():
    plan = eval_plan(2)
    assert len(plan) == 2 * 3 * 5 and plan == eval_plan(2)
    for case in plan:
        assert case.seed in EVAL_SEEDS
        assert generate(seed=case.seed, stage=case.stage, language_weights={case.language: 1.0}).language == case.language
    later = eval_plan(2, offset=2)
    assert not {c.seed for c in plan} & {c.seed for c in later}


def test_spec_mismatch_names_the_field():
    profile = get_profile("cpu-smoke")
    spec = make_spec(profile, eval_plan(1)).to_dict()
    check_same_spec(spec, dict(spec))
    with pytest.raises(EvalMismatchError, match="cases"):
        check_same_spec(spec, make_spec(profile, eval_plan(1, offset=1)).to_dict())
    other = make_spec(dataclasses.replace(profile, max_new_tokens_per_turn=8), eval_plan(1)).to_dict()
    with pytest.raises(EvalMismatchError, match="max_new_tokens_per_turn"):
        check_same_spec(spec, other)


def test_scripted_sampled_trials_repeat_trial_zero():
    from cells.step_11_agent import ExpertPolicy

    spec = make_spec(get_profile("cpu-smoke"), (EvalCase(EVAL_SEEDS.seed(3), 2, "hi"),), sampled_trials=3)
    greedy, sampled = evaluate("expert", spec, policy_factory=ExpertPolicy)
    assert len(greedy) == 1 and [r.trial for r in sampled] == [0, 1, 2]
    assert {r.reward for r in sampled} == {greedy[0].reward}
    report = report_for(greedy, sampled, dataclasses.replace(get_profile("cpu-smoke"), pass_k=3))
    assert report["policies"]["expert"]["pass_k"]["3"] == pytest.approx(float(greedy[0].success))
    with pytest.raises(ValueError, match="exactly one"):
        evaluate("x", spec)


def test_reference_rows_order_and_drift_gaps(tmp_path):
    from cells import step_18_eval_baseline as s18

    profile = dataclasses.replace(get_profile("cpu-smoke"), eval_episodes_per_cell=4, bootstrap_resamples=200)
    ctx = make_context("cpu-smoke", tmp_path)
    ctx.profile = profile
    ctx = s18.run(ctx)  # no model booted: reference rows only
    assert "baseline" not in ctx.reports and (tmp_path / "eval_reference.json").is_file()
    rows = ctx.reports["reference"]["policies"]
    success = {name: rows[name]["success"]["value"] for name in ("expert", "naive", "random")}
    assert success["expert"] >= success["naive"] >= success["random"]
    assert success["expert"] > 0.95 and success["random"] == 0.0
    assert rows["naive"]["drift_gap"]["gap"]["value"] > 0.3  # drift bites the non-adapting player
    assert abs(rows["expert"]["drift_gap"]["gap"]["value"]) < 0.05  # and not the expert
