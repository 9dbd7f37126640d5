import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cells.step_04_datatypes import (
    MODEL_TYPES,
    ActionRecord,
    ActionType,
    Booking,
    Constraint,
    DriftCallAction,
    DriftCallObservation,
    DriftCallState,
    DriftEvent,
    Episode,
    GoalSpec,
    ModelValidationError,
    Rewards,
    ScheduledDrift,
    TerminatedBy,
    ToolDoc,
    ToolResult,
    ToolStatus,
    UserFacts,
    UserMessage,
    canonical_json,
    rng_for,
    stable_id,
    stable_int,
)

SCRIPTS = ["मुझे कल दिल्ली जाना है", "நாளை சென்னைக்கு டிக்கெட்", "ನಾಳೆ ಬೆಂಗಳೂರಿಗೆ", "Book a cab", "kal Pune jaana hai"]


def _goal(text="मुझे कल दिल्ली जाना है"):
    return GoalSpec(
        goal_id="g-1", seed=7, stage=2, template_id="airline_budget", domain="airline", intent="book_flight",
        slots={"from": "HYD", "to": "DEL", "date": "2026-05-02", "passengers": 1},
        constraints=(Constraint("total_inr", "le", 6000),), language="hi", seed_utterance=text,
        user=UserFacts(passenger_names=("अनु",), mfa_code="123456", gstin=None, preferences={"diet": "veg"}),
        now="2026-05-01T10:00:00+05:30",
    )


def _samples():
    action = DriftCallAction(ActionType.TOOL_CALL, "airline.search", {"from": "HYD", "to": "DEL"})
    result = ToolResult("airline.book", ToolStatus.SCHEMA_ERROR,
                        {"error_code": "MISSING_REQUIRED_FIELD", "field_name": "passenger_count"}, 2, 40, 3)
    booking = Booking("BK-1", "airline", "airline.book", "confirmed", {"flight_id": "6E-1"}, 5400, 4)
    event = DriftEvent("airline_pax", "schema", "airline", 3, "passenger_count required")
    sched = ScheduledDrift("airline_pax", "schema", "airline", 2)
    records = (ActionRecord(1, action), ActionRecord(2, None, raw_text="garbage", parse_error="no JSON object"))
    episode = Episode("ep", 7, 2, _goal(), 12, 2, records, (result,), (event,),
                      (UserMessage(2, "ठीक है", "hi"),), (booking,), 1, TerminatedBy.SUBMIT, (sched,))
    state = DriftCallState("ep", 7, 2, _goal(), 2, 12, {"airline": 2}, {"airline": {"price_field": "price"}},
                           (sched,), (event,), records, (result,), (booking,), 1, True, TerminatedBy.ABORT)
    obs = DriftCallObservation(1, 11, "मुझे", UserMessage(1, "வணக்கம்", "ta"), result,
                               (ToolDoc("airline.search", "Search flights", {"from": "IATA"}, ("from",)),))
    rewards = Rewards(1.0, None, 0.5, 1.0, -0.25, 0.9, 0.01, 0.6, {"task": {"ok": True}})
    return [action, result, booking, event, sched, records[1], episode, state, obs, rewards, _goal(),
            UserFacts(), Constraint("rating", "ge", 4), UserMessage(0, "ನಮಸ್ಕಾರ", "kn"),
            ToolDoc("x.y", "d", {})]


def test_every_model_type_round_trips_through_json():
    samples = _samples()
    assert {type(s) for s in samples} == set(MODEL_TYPES)
    for sample in samples:
        text = sample.to_json()
        assert type(sample).from_json(text) == sample
        assert json.loads(text) == json.loads(canonical_json(sample.to_dict()))


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(SCRIPTS), st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=30))
def test_unicode_messages_round_trip(prefix, suffix):  # control chars and lone surrogates are refused (step 10)
    action = DriftCallAction(ActionType.SPEAK, message=prefix + suffix + "x")
    assert DriftCallAction.from_json(action.to_json()) == action
    assert prefix in action.to_json()  # ensure_ascii=False keeps scripts readable


@pytest.mark.parametrize("kwargs, field", [
    (dict(action_type="fly"), "action_type"),
    (dict(action_type=ActionType.TOOL_CALL, tool_name="airline"), "tool_name"),
    (dict(action_type=ActionType.TOOL_CALL, tool_name="bank.rob"), "tool_name"),
    (dict(action_type=ActionType.PROBE_SCHEMA, tool_name="airline.search"), "tool_name"),
    (dict(action_type=ActionType.SPEAK, message="  "), "message"),
    (dict(action_type=ActionType.SUBMIT, confidence=1.5), "confidence"),
    (dict(action_type=ActionType.SUBMIT, confidence=True), "confidence"),
    (dict(action_type=ActionType.SPEAK, message="hi", confidence=0.5), "confidence"),
    (dict(action_type=ActionType.ABORT, tool_name="cab.book"), "tool_name"),
    (dict(action_type=ActionType.ABORT, rationale="x" * 201), "rationale"),
    (dict(action_type=ActionType.TOOL_CALL, tool_name="cab.book", tool_args={"x": object()}), "tool_args"),
])
def test_invalid_actions_name_the_field(kwargs, field):
    with pytest.raises(ModelValidationError) as err:
        DriftCallAction(**kwargs)
    assert err.value.field_name == field


def test_other_validation_rules():
    with pytest.raises(ModelValidationError, match="error_code"):
        ToolResult("airline.book", "schema_error", {}, 1, 1, 1)
    with pytest.raises(ModelValidationError, match="integer INR"):
        Booking("b", "cab", "cab.book", "confirmed", {}, 10.5, 1)
    with pytest.raises(ModelValidationError, match="min_turn"):
        ScheduledDrift("p", "schema", "cab", 1)
    with pytest.raises(ModelValidationError, match="reward"):
        Rewards(0, None, 0, 0, 0, 0, 0, 1.5, {})
    with pytest.raises(ModelValidationError, match="unknown field"):
        UserFacts.from_dict({"bogus": 1})
    with pytest.raises(ModelValidationError, match="language"):
        GoalSpec(**{**_goal().__dict__, "language": "fr"})


def test_submit_confidence_and_episode_helpers():
    sub = DriftCallAction(ActionType.SUBMIT, message="done", confidence=1)
    assert isinstance(sub.confidence, float) and sub.domain is None
    ep = _samples()[6]
    assert ep.submitted is None  # last action did not parse
    ep2 = Episode.from_dict({**ep.to_dict(), "actions": [ActionRecord(3, sub).to_dict()]})
    assert ep2.submitted == sub


def test_stable_randomness_is_process_independent_values():
    # fixed expectations computed once; blake2b of canonical JSON never changes between processes
    assert stable_int(1, "a") == stable_int(1, "a") != stable_int(1, "b")
    assert rng_for(3, "x").random() == rng_for(3, "x").random()
    assert stable_id("BK", {"b": 1, "a": 2}) == stable_id("BK", {"a": 2, "b": 1})
    assert stable_id("BK", 1).startswith("BK-") and len(stable_id("BK", 1)) == 11


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.integers(), st.text(), st.sampled_from(['"', "\\", "\n", "\x00", "\u2028", "ಕ"])),
                max_size=6))
def test_canonical_json_fast_path_is_byte_identical_to_json_dumps(parts):
    """Seeds and ids hash canonical_json of [int | str, ...]; its shortcut must not move any digest."""
    assert canonical_json(parts) == json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)



@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**64 - 1))
def test_seeded_random_is_random_random(seed):
    """Every seeded decision draws from `seeded_random`: it must be exactly `random.Random(seed)`."""
    import random

    from cells.seeding import seeded_random

    ours, ref = seeded_random(seed), random.Random(seed)
    assert ours.getstate() == ref.getstate()
    assert [ours.random(), ours.randrange(10**6), ours.gauss(0, 1)] == [ref.random(), ref.randrange(10**6), ref.gauss(0, 1)]


def test_the_agents_view_of_a_result_drops_only_the_schema_version():
    """The judge's record keeps the version (it moves when a drift fires); the agent's copy has none, else equal."""
    from cells.step_04_datatypes import ToolResult, ToolStatus

    judged = ToolResult("airline.search", ToolStatus.OK, {"flights": [{"flight_id": "6E-1"}]}, 2, 40, 3)
    seen = judged.for_agent()
    assert seen.schema_version is None and judged.schema_version == 2
    assert seen.to_dict() == {**judged.to_dict(), "schema_version": None}
    assert seen.for_agent() is seen
