"""Generated drift played: the expert solves every site of every family by reading the API, the naive player does
not, the judge scores the recovery and what the user was told, and `bench drift`'s checks say so (the bench plays
every instance: `python -m cells bench drift`)."""

from __future__ import annotations

import pytest

from cells.agent.play import play_episode
from cells.agent.policies import ExpertPolicy, NaivePolicy
from cells.bench import drift_instances as bench
from cells.drift.families import load_families, site_instances
from cells.step_10_env import DriftCallEnv


def _one_per_site() -> list[str]:
    """The first and the last instance of every site of every family (its first and last values)."""
    out = []
    for fam in load_families().values():
        for site in fam.sites:
            ids = [i.id for i in site_instances(fam, site)]
            out += sorted({ids[0], ids[-1]})
    return out


@pytest.fixture(scope="module")
def rows() -> list[bench.DriftRow]:
    return bench.play(bench.bench_cases(_one_per_site(), 1), progress=False)


def test_every_site_is_met_solved_by_the_expert_and_failed_by_the_naive_player(rows):
    table = bench.family_table(rows)
    assert set(table) == {*load_families(), "all"} and table["all"]["instances"] == len(_one_per_site())
    assert table["all"]["fired"] == 1.0
    assert bench.failures(rows) == []
    for family, row in table.items():
        assert row["expert"] == 1.0 and row["naive"] <= 0.5, (family, row)
    assert all(ok for ok, _ in bench.checks(table)[1:])  # all but the instance count, which the bench reaches


def test_the_checks_fail_a_family_the_expert_misses_and_one_the_naive_player_solves():
    table = {"fee_at_booking": {"instances": 3, "episodes": 3, "fired": 1.0, "expert": 2 / 3, "naive": 0.0},
             "terms_notice": {"instances": 3, "episodes": 3, "fired": 1.0, "expert": 1.0, "naive": 1.0},
             "all": {"instances": 6, "episodes": 6, "fired": 1.0, "expert": 5 / 6, "naive": 0.5}}
    failed = [line for ok, line in bench.checks(table) if not ok]
    assert any("instances played" in f for f in failed)
    assert any("expert success fee_at_booking" in f for f in failed)
    assert any("naive below the expert terms_notice" in f for f in failed)


def _forced(pattern_id: str, policy, language: str = "en"):
    (pid, seed, lang), = bench.bench_cases([pattern_id], 1)
    env = DriftCallEnv(2, {lang: 1.0}, forced_pattern=pid)
    return play_episode(env, policy, seed)


def _first(family: str, domain: str, site: str) -> str:
    fam = load_families()[family]
    return next(next(site_instances(fam, s)).id for s in fam.sites if s.domain == domain and s.id == site)


@pytest.mark.parametrize("family, domain, site", [("fee_at_booking", "hotel", "total"),
                                                  ("terms_notice", "cab", "waiting_charge_inr"),
                                                  ("required_argument", "airline", "listing"),
                                                  ("argument_format", "cab", "datetime")])
def test_the_judge_credits_the_recovery_and_binds_what_the_user_must_hear(family, domain, site):
    _episode, rewards = _forced(_first(family, domain, site), ExpertPolicy())
    assert rewards.r_task == 1 and rewards.r_drift == 1.0, rewards.breakdown["drift"]
    report = rewards.breakdown["task"]["report"]
    assert report["complete"] and not rewards.breakdown["penalty"]["offences"], rewards.breakdown["penalty"]
    _, naive = _forced(_first(family, domain, site), NaivePolicy())
    assert naive.r_task == 0 and naive.reward < rewards.reward
    if family in ("fee_at_booking", "terms_notice"):  # the naive player booked, but never told the user
        assert naive.breakdown["task"]["report"]["missing"] == ["fees"]


class _Guesser(ExpertPolicy):
    """The expert, but it makes up the user's name instead of asking for it."""

    def _ask_fact(self, field: str, fact: str) -> None:
        self.extra[field] = "Rahul Verma"


def test_a_value_only_the_user_knows_sent_without_asking_is_a_fabricated_fact():
    _episode, rewards = _forced(_first("required_argument", "cab", "user_name"), _Guesser())
    codes = {o["code"] for o in rewards.breakdown["penalty"]["offences"]}
    assert "fabricated_fact" in codes and rewards.r_task == 0
