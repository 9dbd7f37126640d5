import dataclasses

import pytest

from cells import step_19_eval_final as s19
from cells.evaluation.runner import EvalMismatchError, eval_plan, make_spec
from cells.evaluation.synthetic import make_record
from cells.pipeline import make_context


def _ctx(tmp_path, spec):
    ctx = make_context("cpu-smoke", tmp_path)
    ctx.model, ctx.tokenizer = object(), object()  # never used: the checks fire before any rollout
    ctx.reports["eval_spec"] = spec
    ctx.reports["baseline_records"] = [make_record("baseline", 1)]
    return ctx


def test_final_refuses_other_decoding_than_baseline(tmp_path):
    ctx = make_context("cpu-smoke", tmp_path)
    stored = make_spec(dataclasses.replace(ctx.profile, max_new_tokens_per_turn=7), eval_plan(1)).to_dict()
    with pytest.raises(EvalMismatchError, match="max_new_tokens_per_turn"):
        s19.run(_ctx(tmp_path, stored))


def test_final_refuses_other_pass_k_trials(tmp_path):
    ctx = make_context("cpu-smoke", tmp_path)
    stored = make_spec(ctx.profile, eval_plan(1), sampled_trials=ctx.profile.pass_k + 1).to_dict()
    with pytest.raises(EvalMismatchError, match="sampled_trials"):
        s19.run(_ctx(tmp_path, stored))


def test_final_needs_baseline_and_model(tmp_path):
    with pytest.raises(s19.MissingStepError, match="step 18"):
        s19.run(make_context("cpu-smoke", tmp_path))
