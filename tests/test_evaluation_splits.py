"""Evaluation by drift split: the set an episode counts in, stratified case plans, and the split reaching the
env through the profile (GRPO's episodes) and the warm start's plan (its demonstrations)."""

from __future__ import annotations

import dataclasses

import pytest

from cells.evaluation.splits import (
    SplitPlanError,
    episode_set,
    reach_by_pattern,
    scheduled_patterns,
    scheduled_set,
    split_cases,
)
from cells.step_02_profiles import PROBE_SEEDS, SeedRange, get_profile
from cells.step_06_drift import DriftPool, demonstration_pool, drift_split, reinforcement_pool

SPLIT = drift_split("latin")


def test_an_episode_counts_in_the_least_demonstrated_set_of_its_drifts():
    assert episode_set(SPLIT, []) is None
    assert episode_set(SPLIT, ["payment_scope_upgrade"]) == "demonstrated"
    assert episode_set(SPLIT, ["payment_scope_upgrade", "cab_city_required"]) == "reinforced"
    assert episode_set(SPLIT, ["cab_city_required", "cab_tolls_unbundled"]) == "unseen"
    with pytest.raises(KeyError, match="no drift pattern"):
        episode_set(SPLIT, ["no_such_drift"])


def test_split_cases_fill_each_set_from_the_range_with_cases_whose_schedule_belongs_there():
    cases = split_cases(SPLIT, 12, PROBE_SEEDS, start=123)
    assert {k: len(v) for k, v in cases.items()} == {"demonstrated": 12, "reinforced": 12, "unseen": 12}
    seeds = [c.seed for v in cases.values() for c in v]
    assert len(set(seeds)) == 36 and all(s in PROBE_SEEDS and s >= PROBE_SEEDS.seed(123) for s in seeds)
    for which, chosen in cases.items():
        assert {c.stage for c in chosen} == {2, 3}
        assert all(scheduled_set(SPLIT, c.seed, c.stage, c.language) == which for c in chosen)
    assert split_cases(SPLIT, 12, PROBE_SEEDS, start=123) == cases  # deterministic
    assert list(split_cases(SPLIT, 2, PROBE_SEEDS, sets=["reinforced"])) == ["reinforced"]
    with pytest.raises(SplitPlanError, match="too few cases"):
        split_cases(SPLIT, 5, SeedRange("tiny", 0, 1_000_000), start=0, stages=(1,))  # stage 1 has no drift


def test_grpo_envs_draw_from_the_reinforcement_pool_and_the_warm_start_from_the_demonstrated_one():
    from cells.step_10_env import stage_env_factories
    from cells.training.sft_data import sft_plan_item

    oracle = get_profile("cpu-smoke")
    assert stage_env_factories(oracle)[2]().drift_pool is None and sft_plan_item(oracle, 4, 2, 1).drift_pool is None
    profile = dataclasses.replace(oracle, drift_split="latin", grpo_reinforced_share=0.7)
    env = stage_env_factories(profile)[3]()
    assert env.drift_pool == reinforcement_pool(SPLIT, 0.7)
    drawn = set()
    for seed in range(150):
        env.reset(seed=seed)
        drawn |= {s.pattern_id for s in env.state.schedule}
    assert drawn <= SPLIT.ids("demonstrated") | SPLIT.ids("reinforced") and drawn & SPLIT.ids("reinforced")
    assert sft_plan_item(profile, 4, 2, 1).drift_pool == demonstration_pool(SPLIT)
    with pytest.raises(ValueError, match="grpo_reinforced_share"):
        dataclasses.replace(profile, grpo_reinforced_share=1.5)


def test_the_plans_pool_reaches_the_experts_episodes():
    """Only the scope upgrade allowed: every stage-2 conversation meets it (the error names the new scope)."""
    from cells.training.sft_data import EpisodePlanItem, generate_conversations

    only = DriftPool(frozenset({"payment_scope_upgrade"}))
    item = EpisodePlanItem(2, 5, (("en", 1.0),), 0, booking_drills=0.4, drift_pool=only)
    for conv in generate_conversations([item]):
        if conv[0]["role"] == "system" and conv[0]["content"].startswith("Now: "):
            continue  # a drill ends at the first booking call, before the gateway refuses it
        assert any("AUTH_SCOPE_INSUFFICIENT" in m["content"] or "UNSUPPORTED_SCOPE" in m["content"] for m in conv)


def test_group_size_table_gives_unbiased_pass_at_g_and_the_share_of_all_equal_groups():
    from cells.evaluation.splits import group_size_table

    # Two cases of 4 samples: one solved twice, one never.
    table = group_size_table([2, 0], samples=4)
    assert set(table) == {"2", "4"}
    # case 1: pass@2 = 1 - C(2,2)/C(4,2) = 5/6, all-equal = (C(2,2)+C(2,2))/6 = 1/3; case 2: 0 and 1
    assert table["2"] == {"pass_at": round((5 / 6 + 0) / 2, 4), "all_same_success": round((1 / 3 + 1) / 2, 4)}
    assert table["4"] == {"pass_at": 0.5, "all_same_success": 0.5}  # a group of all 4 draws: case 1 mixed
    assert group_size_table([], samples=4) == {}


def test_a_generated_instance_plan_plays_goals_admitting_it_with_only_that_drift_under_its_split_set():
    from cells.evaluation.runner import env_for_case
    from cells.step_07_tasks import generate

    held = "gen/required_item_field/airline/passenger_list/assistance_needs"  # a value latin-gen holds out (c)
    shown = "gen/required_item_field/airline/passenger_list/meal_preferences"
    gen = drift_split("latin-gen")
    cases = split_cases(gen, 4, PROBE_SEEDS, start=40_000, pattern=held)
    assert list(cases) == ["gen-unseen-c"] and len(cases["gen-unseen-c"]) == 4
    assert list(split_cases(gen, 1, PROBE_SEEDS, start=40_000, pattern=shown)) == [gen.set_of(shown)]
    assert list(split_cases(SPLIT, 1, PROBE_SEEDS, start=40_000, pattern=held)) == ["generated"]  # latin places none
    for case in cases["gen-unseen-c"]:
        assert case.drifts == held and case.stage in (2, 3)
        env = env_for_case(case)
        env.reset(seed=case.seed)
        assert env.goal == generate(seed=case.seed, stage=case.stage, language_weights={case.language: 1.0})
        assert env.goal.domain == "airline" and [d.pattern_id for d in env.state.schedule] == [held]
    assert split_cases(gen, 4, PROBE_SEEDS, start=40_000, pattern=held) == cases  # deterministic
    with pytest.raises(SplitPlanError, match="too few cases admitting"):
        split_cases(gen, 1, SeedRange("tiny", 0, 1_000_000), stages=(1,), pattern=held)  # stage 1 has no drift


def test_a_pattern_plan_holds_only_cases_scheduling_it_and_reach_splits_by_the_sets_own_patterns():
    rare = "restaurant_min_order_raised"  # reinforced in the latin split, in a few percent of drifted schedules
    cases = split_cases(SPLIT, 3, PROBE_SEEDS, start=40_000, pattern=rare)
    assert list(cases) == ["reinforced"] and len(cases["reinforced"]) == 3
    assert all(rare in scheduled_patterns(c.seed, c.stage, c.language) for c in cases["reinforced"])
    assert split_cases(SPLIT, 3, PROBE_SEEDS, start=40_000, pattern=rare) == cases  # deterministic
    with pytest.raises(SplitPlanError, match=f"scheduling '{rare}'"):
        split_cases(SPLIT, 1, SeedRange("tiny", 0, 1_000_000), stages=(1,), pattern=rare)

    mixed = split_cases(SPLIT, 6, PROBE_SEEDS, start=40_000, sets=["reinforced"])["reinforced"]
    per_case = [i % 3 for i in range(len(mixed))]  # successes of 2 draws each
    table = reach_by_pattern(SPLIT, "reinforced", mixed, per_case, samples=2)
    assert set(table) <= SPLIT.ids("reinforced") and table  # demonstrated patterns beside them are left out
    counted = {p: [k for c, k in zip(mixed, per_case, strict=True)
                   if p in scheduled_patterns(c.seed, c.stage, c.language)] for p in table}
    for p, row in table.items():
        assert row["cases"] == len(counted[p])
        assert row["sampled_success"] == round(sum(counted[p]) / (2 * len(counted[p])), 4)
        assert row["by_group_size"]["2"]["pass_at"] == round(sum(k > 0 for k in counted[p]) / len(counted[p]), 4)

