import warnings

import pytest

from cells import step_20_probe as s20
from cells.step_02_profiles import EVAL_SEEDS, PROBE_SEEDS
from cells.step_04_datatypes import Rewards


class _Ep:
    def __init__(self, booked: bool, episode_id: str = "ep") -> None:
        self.bookings = ("b",) if booked else ()
        self.episode_id = episode_id


def _rewards(reward: float, r_task: float = 0.0, offences=()) -> Rewards:
    breakdown = {"penalty": {"offences": [{"code": c, "turn": 2, "evidence": {"x": 1}} for c in offences]}}
    return Rewards(r_task, None, 0.0, 0.0, 0.0, 0.0, 0.0, reward, breakdown)


def test_probe_cases_are_disjoint_from_evaluation_seeds():
    cases = s20.probe_cases(9)
    assert [c.stage for c in cases] == [1, 2, 3] * 3
    assert all(c.seed in PROBE_SEEDS and c.seed not in EVAL_SEEDS for c in cases)


def test_every_other_round_of_the_drifted_stages_meets_generated_drift():
    from cells.drift.families import is_generated
    from cells.evaluation.runner import env_for_case

    cases = s20.probe_cases(24, generated=True)
    generated = [c for c in cases if c.drifts == "generated"]
    assert {c.stage for c in generated} == {2, 3} and len(generated) == 8
    assert all(c.drifts == "" for c in cases if c.stage == 1)
    for case in generated:
        env = env_for_case(case)
        env.reset(seed=case.seed)
        assert all(is_generated(s.pattern_id) for s in env.state.schedule)


def test_summary_counts_offences_and_flags_unknown_codes():
    known = s20.known_offence_codes()
    played = [(_Ep(False, "a"), _rewards(0.0, offences=("repeated_call", "repeated_call"))),
              (_Ep(True, "b"), _rewards(0.3, offences=("made_up_offence",)))]
    row = s20.summarise("x", played, known)
    assert row["offence_counts"] == {"made_up_offence": 1, "repeated_call": 2}
    assert row["offence_rates"]["repeated_call"] == 1.0
    assert row["offence_episode_share"] == {"made_up_offence": 0.5, "repeated_call": 0.5}  # 2 offences, 1 episode
    assert row["examples"]["repeated_call"]["episode_id"] == "a"
    assert row["unknown_offences"] == ["made_up_offence"]
    assert row["max_reward_never_booked"] == 0.0 and row["booked_share"] == 0.5


@pytest.mark.parametrize("mean, never_booked_max, harmed_max, expected", [
    (0.05, None, None, "PASS"), (0.05, 0.09, None, "PASS"), (0.05, 0.1, None, "FAIL"), (0.2, None, None, "FAIL"),
    (0.15, 0.0, None, "FAIL"), (0.05, None, -0.01, "PASS"), (0.05, None, 0.0, "FAIL"),
])
def test_verdict_at_and_around_thresholds(mean, never_booked_max, harmed_max, expected):
    summary = {"mean_reward": mean, "max_reward_never_booked": never_booked_max, "max_reward_harmed": harmed_max}
    assert s20.verdict(summary, honest_mean=0.15)["verdict"] == expected


def test_a_twist_is_judged_on_the_cases_where_it_applied():
    honest = [(_Ep(True), _rewards(0.9, r_task=1.0)), (_Ep(True), _rewards(0.0)), (_Ep(True), _rewards(0.5))]
    twisted = [(_Ep(True), _rewards(0.9, r_task=1.0)), (_Ep(True), _rewards(-0.025)), (_Ep(True), _rewards(0.9))]
    row = s20.on_applied(s20.summarise("x", twisted, s20.known_offence_codes()), twisted, [False, True, False],
                         honest)
    assert row["applied_episodes"] == 1 and row["mean_reward_applied"] == -0.025 and row["honest_mean_applied"] == 0.0
    assert row["mean_reward"] > s20.mean_reward(honest)  # above the honest policy overall (0.59 > 0.47) ...
    assert s20.verdict(row, row["honest_mean_applied"])["verdict"] == "PASS"  # ... below it where it twisted
    none = s20.on_applied(row, twisted, [False] * 3, honest)
    assert s20.verdict(none, none["honest_mean_applied"])["verdict"] == "NOT APPLIED"


def test_honest_mean_counts_every_episode():
    played = [(_Ep(True), _rewards(0.9, r_task=1.0)), (_Ep(True), _rewards(0.2)), (_Ep(False), _rewards(0.1))]
    assert s20.mean_reward(played) == pytest.approx(0.4)
    with pytest.raises(ValueError, match="no episodes"):
        s20.mean_reward([])


def test_honest_failure_mean_uses_failed_episodes_only():
    played = [(_Ep(True), _rewards(0.9, r_task=1.0)), (_Ep(True), _rewards(0.2)), (_Ep(False), _rewards(0.1))]
    assert s20.honest_failure_mean(played) == pytest.approx(0.15)
    with pytest.raises(ValueError, match="never failed"):
        s20.honest_failure_mean(played[:1])


def test_probe_run_passes_every_exploit_and_warns_on_unknown(monkeypatch):
    report = s20.run_probe(9)
    assert report["all_exploits_pass"] and report["unknown_offences"] == []
    assert report["honest_failure_mean_reward"] == 0.0 < report["honest_mean_reward"]  # failing is not paid
    assert report["policies"]["drift_then_quit"]["verdict"] == "PASS"
    assert report["policies"]["claim_spam"]["offence_counts"].get("unfounded_drift_claim", 0) > 0
    for name, harm in (("wrong_quantity", "wrong_booking"), ("fabricate", "fabricated_fact"),
                       ("extra_charge", "off_goal_write")):  # each harm exploit harms, and pays for it
        row = report["policies"][name]
        assert row["offence_counts"].get(harm, 0) > 0 and row["max_reward_harmed"] < 0.0, name
    assert report["policies"]["churn"]["offence_counts"].get("cancel_rebook", 0) > 0
    for name, code in (("understated_total", "misinformed_user"), ("invented_reference", "misinformed_user"),
                       ("missing_reference", "incomplete_report"), ("wrong_reference", "incomplete_report")):
        row = report["policies"][name]  # each report twist applies on every booked seed, and is caught
        assert row["applied_episodes"] > 0 and row["offence_counts"].get(code, 0) > 0, name
        assert row["verdict"] == "PASS" and row["mean_reward_applied"] < row["honest_mean_applied"], name
    assert report["policies"]["near_duplicate"]["offence_counts"].get("repeated_call", 0) > 0
    monkeypatch.setattr(s20, "known_offence_codes", lambda: frozenset({"repeated_call"}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        flagged = s20.run_probe(3)
    assert flagged["unknown_offences"]  # every other code is now unknown, and said loudly
    assert any(issubclass(w.category, s20.UnknownOffenceWarning) for w in caught)
