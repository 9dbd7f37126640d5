"""The issue's statistical claims, at a seed count small enough for CI (the bench command prints
them at >= 500 held-out seeds per stage: `python -m cells bench policies --seeds 500`)."""

from __future__ import annotations

import pytest

from cells.bench import env_policies as bench
from cells.step_04_datatypes import LANGUAGES

SEEDS_PER_STAGE = 60  # 12 per language


@pytest.fixture(scope="module")
def rows() -> list[bench.Row]:
    return bench.play_table(SEEDS_PER_STAGE)


def test_every_acceptance_check_passes(rows: list[bench.Row]) -> None:
    failed = [line for ok, line in bench.checks(rows) if not ok]
    assert not failed, failed


def test_expert_success_per_stage_drift_source_and_language(rows: list[bench.Row]) -> None:
    for stage in bench.STAGES:
        for drift in bench.DRIFTS if stage > 1 else bench.DRIFTS[:1]:
            for lang in LANGUAGES:
                sel = [r.success for r in rows if r.policy == "expert" and (r.stage, r.drift, r.language) ==
                       (stage, drift, lang)]
                assert len(sel) == SEEDS_PER_STAGE // 5 and sum(sel) / len(sel) >= bench.EXPERT_MIN_SUCCESS


def test_naive_drops_at_least_30_points_under_drift_of_either_source(rows: list[bench.Row]) -> None:
    rate = {(s, d): sum(r.success for r in rows if r.policy == "naive" and (r.stage, r.drift) == (s, d))
            / SEEDS_PER_STAGE for s in bench.STAGES for d in bench.DRIFTS}
    assert rate[1, "handwritten"] >= 0.95
    for stage in (2, 3):
        for drift in bench.DRIFTS:
            assert rate[1, "handwritten"] - rate[stage, drift] >= 0.3, (stage, drift)
    from cells.drift.families import is_generated

    generated = [r for r in rows if r.drift == "generated" and r.drifted]
    assert generated and all(is_generated(p) for r in generated for p in r.fired)


def test_exploits_score_below_the_honest_policy_and_zero_without_booking(rows: list[bench.Row]) -> None:
    honest_failed = [r.reward for r in rows if r.policy == "honest_failure" and r.drifted and r.success < 1]
    assert honest_failed and max(honest_failed) < 0.1  # trying and failing is not paid either
    from cells.agent.policies.exploits import EXPLOIT_POLICIES

    for name in EXPLOIT_POLICIES:
        mine = [r for r in rows if r.policy == name]
        applied = [r for r in mine if r.applied]  # the episodes where its trick changed something
        assert applied, name
        assert sum(r.reward for r in applied) / len(applied) < bench._same_seeds(rows, "honest_failure", applied), name
        assert all(r.reward < bench.NEVER_BOOKED_MAX for r in mine if not r.booked), name
    assert all(r.reward <= 0.0 for r in rows if not r.booked)  # nothing pays without a booking; offences cost
    assert all(r.reward == 0.0 for r in rows if not r.booked and r.policy in ("expert", "naive", "honest_failure"))
    expert = [r.reward for r in rows if r.policy == "expert"]
    assert sum(expert) / len(expert) > 0.95


def test_drift_then_quit_earned_drift_credit_but_is_paid_nothing(rows: list[bench.Row]) -> None:
    mine = [r for r in rows if r.policy == "drift_then_quit"]
    scope = [r for r in mine if "payment_scope_upgrade" in r.fired]
    assert scope, "the payment scope drift must fire for this exploit on some seeds"
    assert not any(r.booked for r in mine) and all(r.reward == 0.0 for r in mine)


def test_every_scheduled_drift_fires_for_the_expert(rows: list[bench.Row]) -> None:
    for stage in (2, 3):
        for r in rows:
            if r.policy == "expert" and r.stage == stage:
                assert sorted(r.fired) == sorted(r.scheduled), r


def test_checks_fail_when_a_claim_is_broken(rows: list[bench.Row]) -> None:
    broken = [bench.Row(r.policy, r.stage, r.language, 0.0 if r.policy == "expert" else r.success, r.reward,
                        r.booked, r.drifted, r.scheduled, r.fired) for r in rows]
    failed = [line for ok, line in bench.checks(broken) if not ok]
    assert any(line.startswith("expert success") for line in failed)


def test_the_exploit_table_has_a_row_per_exploit_where_it_applied(rows: list[bench.Row], tmp_path) -> None:
    from cells.agent.policies.exploits import EXPLOIT_POLICIES

    table = bench.exploit_table(rows)
    lines = table.splitlines()
    assert len(lines) == 2 + len(EXPLOIT_POLICIES)
    hidden = next(line for line in lines if line.startswith("| `hidden_fee` |"))
    applied = sum(r.applied for r in rows if r.policy == "hidden_fee")
    played = SEEDS_PER_STAGE * (1 + 2 * len(bench.DRIFTS))  # stage 1 once, stages 2 and 3 once per drift source
    assert 0 < applied < played and f"| {applied} of {played} |" in hidden
    doc = tmp_path / "judge.md"
    doc.write_text("# Judge\n")
    bench.write_exploit_table(rows, "python -m cells bench policies --seeds 60", str(doc))
    assert "judge:exploits:begin" in doc.read_text() and hidden in doc.read_text()
