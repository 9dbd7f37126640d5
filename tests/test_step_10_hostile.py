"""DriftCallEnv (step 10) under hostile model output: any string is data, never a crash.

A hypothesis fuzz mixes expert play (so episodes reach drifts and bookings) with adversarial
completions: deep nesting in text and arguments, integers past Python's int-to-str limit, floats
past the float range, NaN/Infinity, lone surrogates and control characters in tool names,
arguments, keys and messages, brace floods, over-long outputs, and well-formed calls with strange
but valid values. Every step must return an observation that is valid UTF-8 JSON; rejected
outputs must change nothing but the counted turn; rewards and every component stay finite and in
range; episodes end within their budget.
"""

from __future__ import annotations

import json
import math
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cells.actions import MAX_ACTION_CHARS, MAX_ACTION_DEPTH, ActionParseError, parse_action
from cells.agent.policies import ExpertPolicy, GoalReader
from cells.step_04_datatypes import (
    MAX_ABS_NUMBER,
    MIN_REWARD,
    ActionType,
    DriftCallAction,
    ModelValidationError,
)
from cells.step_05_vendors import TOOL_NAMES
from cells.step_10_env import DriftCallEnv

ARG_KEYS = ("from", "to", "date", "city", "pickup", "drop", "pickup_time", "vehicle_class", "flight_id",
            "passengers", "passenger_count", "items", "restaurant_id", "hotel_id", "room_type", "check_in",
            "check_out", "rooms", "gst_number", "payment_token", "mfa_code", "scope", "amount_inr",
            "payment_id", "booking_id", "order_id", "diet", "idempotency_key")
BAD_ESCAPES = ("\\ud800", "\\udfff", "\\udc00x", "\\u0000", "\\u001b[31m", "\\u007f", "\\u0085")


def _nest(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


def _deep_obj(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


NUMBERS = st.one_of(
    st.integers(17, 6000).map(lambda n: "9" * n),  # past MAX_ABS_NUMBER and past Python's 4,300-digit limit
    st.integers(16, 400).map(lambda e: f"1e{e}"),
    st.sampled_from(["1e999", "-1e999", "NaN", "Infinity", "-Infinity", "1.7976931348623159e308",
                     str(MAX_ABS_NUMBER), str(-MAX_ABS_NUMBER), "0.1e-400", "-0"]),
)
HOSTILE_VALUES = st.one_of(
    NUMBERS,
    st.sampled_from(BAD_ESCAPES).map(lambda e: f'"x{e}y"'),
    st.integers(MAX_ACTION_DEPTH - 2, 1500).map(_nest),
    st.integers(MAX_ACTION_DEPTH - 2, 1000).map(_deep_obj),
    st.sampled_from(['"2026-02-30"', '"9999-12-31"', '"0000-00-00"', '"२०२६-०५-०२"', '""', "true", "null",
                     "[]", "{}", '"payments.v2"', '"tok_payments.v2_0000"', "-5", "0", "3.5", '"BLR"',
                     '[{"dish_id":"D01","qty":-1}]', '[{"dish_id":"D01","qty":1e999}]']),
)


@st.composite
def hostile_texts(draw: st.DrawFn) -> str:
    """One adversarial completion (most are invalid; some are valid calls with strange values)."""
    tool = draw(st.sampled_from([*TOOL_NAMES, "airline.\\ud800", "x\\u0000.search", "payment"]))
    key = draw(st.sampled_from([*ARG_KEYS, "\\ud800", "k\\u0001"]))
    value = draw(HOSTILE_VALUES)
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return f'{{"action":"tool_call","tool":"{tool}","args":{{"{key}":{value}}}}}'
    if kind == 1:
        return f'{{"action":"submit","message":"done","confidence":{draw(NUMBERS)}}}'
    if kind == 2:
        return f'{{"action":"speak","message":"hi {draw(st.sampled_from(BAD_ESCAPES))}"}}'
    if kind == 3:
        return f'{{"action":"speak","message":"hi","rationale":{value}}}'
    if kind == 4:
        return '{"action":"speak","message":"ok"}' + _nest(draw(st.integers(8, 3000)))
    if kind == 5:
        return draw(st.sampled_from(["{" * 5000, "[" * 7000, "}" * 100 + "{", '"' * 300,
                                     "x" * (MAX_ACTION_CHARS + 1), "\ud800\udc00\ud800", "{\"action\":"]))
    if kind == 6:
        return f'{{"action":{value}}}'
    if kind == 7:  # a valid call with strange but in-range values: the vendors must answer, not raise
        args = draw(st.dictionaries(st.sampled_from(ARG_KEYS), st.one_of(
            st.integers(-MAX_ABS_NUMBER, MAX_ABS_NUMBER), st.floats(-1e15, 1e15, allow_nan=False),
            st.booleans(), st.none(), st.text(max_size=12).filter(lambda t: t.isprintable()),
            st.lists(st.integers(-3, 3), max_size=3), st.just([{"dish_id": "D01", "qty": 2.5}])), max_size=6))
        return json.dumps({"action": "tool_call", "tool": draw(st.sampled_from(TOOL_NAMES)), "args": args})
    if kind == 8:
        return f'{{"action":"probe_schema","domain":{value}}}'
    return draw(st.text(max_size=80))


def _world_view(env: DriftCallEnv) -> str:
    """Everything but the counters a rejected output may change (turn, actions, parse failures)."""
    s = env.state
    return json.dumps([s.vendor_flags, s.schema_versions, [b.to_dict() for b in s.bookings],
                       [e.to_dict() for e in s.fired], [r.to_dict() for r in s.results], s.done], sort_keys=True)


def _strict_json(text: str) -> object:
    def refuse(name: str) -> None:
        raise AssertionError(f"observation holds {name}, which is not JSON")

    return json.loads(text, parse_constant=refuse)


def _check_rewards(env: DriftCallEnv) -> None:
    r = env.rewards()
    for name in ("r_task", "r_constraints", "r_format", "confidence", "brier"):
        value = getattr(r, name)
        assert math.isfinite(value) and 0.0 <= value <= 1.0, (name, value)
    assert math.isfinite(r.reward) and MIN_REWARD <= r.reward <= 1.0, r.reward  # a failure's offences go below 0
    assert r.r_drift is None or (math.isfinite(r.r_drift) and 0.0 <= r.r_drift <= 1.0)
    assert math.isfinite(r.r_penalty) and -1.0 <= r.r_penalty <= 0.0
    _strict_json(r.to_json())  # the breakdown is JSON too
    _strict_json(env.episode().to_json())


FUZZ_EXAMPLES, MAX_STEPS = 120, 16  # ~1,500 env steps, a few seconds on one core


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(data=st.data(), seed=st.integers(0, 50_000), stage=st.sampled_from([1, 2, 3]),
       language=st.sampled_from(["hi", "ta", "kn", "en", "hinglish"]))
def test_hostile_outputs_never_crash_and_change_nothing_but_the_turn(data: st.DataObject, seed: int, stage: int,
                                                                     language: str) -> None:
    env = DriftCallEnv(stage, {language: 1.0})
    obs = env.reset(seed=seed)
    expert = ExpertPolicy()
    expert.reset(obs, GoalReader.from_goal(env.goal))
    for _ in range(MAX_STEPS):
        text = expert.act(obs)
        if data.draw(st.booleans(), label="hostile"):
            text = data.draw(hostile_texts(), label="text")
        before, turn = _world_view(env), env.state.turn
        obs = env.step_text(text)  # must not raise, whatever the text
        encoded = obs.to_json().encode("utf-8")  # raises on a lone surrogate
        _strict_json(encoded.decode("utf-8"))
        state = env.state
        assert state.turn == turn + 1 == obs.turn <= state.max_turns
        assert len(state.actions) == state.turn
        if obs.parse_error is not None:
            assert state.actions[-1].action is None and state.actions[-1].parse_error == obs.parse_error
            if not obs.done:  # a rejection that ends the episode adds the termination, nothing else
                assert _world_view(env) == before
        if state.turn == state.max_turns:
            assert obs.done
        if obs.done:
            _check_rewards(env)
            assert obs.reward == env.rewards().reward
            return


@pytest.mark.parametrize("text", [
    '{"action":"tool_call","tool":"airline.search","args":{"from":' + _nest(1500) + "}}",
    '{"action":"tool_call","tool":"airline.search","args":{"from":' + _deep_obj(900) + "}}",
    '{"action":"speak","message":"x","extra":' + _nest(2000) + "}",
    '{"action":"submit","message":"x","confidence":' + "1" * 5000 + "}",
    '{"action":"tool_call","tool":"airline.search","args":{"from":' + "9" * 5000 + "}}",
    '{"action":"submit","message":"x","confidence":1e400}',
    '{"action":"tool_call","tool":"payment.charge","args":{"amount_inr":1e999}}',
    '{"action":"tool_call","tool":"airline.search","args":{"from":"\\ud800"}}',
    '{"action":"tool_call","tool":"airline.search","args":{"\\udfff":"BLR"}}',
    '{"action":"tool_call","tool":"airline.\\ud800","args":{}}',
    '{"action":"speak","message":"a\\u0000b"}',
    '{"action":"submit","message":"x","confidence":NaN}',
])
def test_each_crash_class_from_the_fuzz_report_is_a_format_error(text: str) -> None:
    """The six classes the issue's fuzz run found, each rejected with a reason, nothing half-stepped."""
    with pytest.raises(ActionParseError):
        parse_action(text)
    for stage in (1, 2, 3):
        env = DriftCallEnv(stage)
        env.reset(seed=7)
        before = _world_view(env)
        obs = env.step_text(text)
        assert obs.parse_error and obs.turn == 1 and not obs.done
        assert env.state.actions[0].action is None and env.state.parse_failures == 1
        assert _world_view(env) == before
        _strict_json(obs.to_json().encode("utf-8").decode("utf-8"))
        _strict_json(env.state.to_json().encode("utf-8").decode("utf-8"))


def test_rejections_name_the_rule() -> None:
    cases = {
        '{"action":"speak","message":"x","k":' + _nest(50) + "}": f"nested deeper than {MAX_ACTION_DEPTH}",
        '{"action":"submit","message":"x","confidence":' + "7" * 20 + "}": "out of range",
        '{"action":"submit","message":"x","confidence":1e999}': "non-finite",
        '{"action":"submit","message":"x","confidence":Infinity}': "Infinity is not valid JSON",
        '{"action":"speak","message":"\\ud800"}': "lone surrogate U+D800",
        '{"action":"speak","message":"\\u001b"}': "control character U+001B",
    }
    for text, fragment in cases.items():
        with pytest.raises(ActionParseError, match=re.escape(fragment)):
            parse_action(text)


@pytest.mark.parametrize("depth, ok", [(MAX_ACTION_DEPTH, True), (MAX_ACTION_DEPTH + 1, False)])
def test_nesting_limit_at_and_above(depth: int, ok: bool) -> None:
    # the action object is level 1, args level 2, so depth - 2 more levels fit inside "args"
    text = '{"action":"tool_call","tool":"restaurant.order","args":{"items":' + _nest(depth - 2, '"D01"') + "}}"
    if ok:
        assert parse_action(text).tool_args["items"]
    else:
        with pytest.raises(ActionParseError, match="nested deeper"):
            parse_action(text)


@pytest.mark.parametrize("value, ok", [(MAX_ABS_NUMBER, True), (-MAX_ABS_NUMBER, True), (MAX_ABS_NUMBER + 1, False)])
def test_number_bound_at_and_above(value: int, ok: bool) -> None:
    text = json.dumps({"action": "tool_call", "tool": "payment.charge", "args": {"amount_inr": value}})
    if ok:
        assert parse_action(text).tool_args["amount_inr"] == value
    else:
        with pytest.raises(ActionParseError, match="out of range"):
            parse_action(text)


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    message = "[" * 40 + "{" * 40
    action = parse_action(json.dumps({"action": "speak", "message": message}))
    assert action.message == message


def test_the_data_model_applies_the_same_rules_to_scripted_actions() -> None:
    """step(DriftCallAction(...)) is validated at construction, so it cannot half-step either."""
    for bad in ({"from": "\ud800"}, {"from": float("inf")}, {"from": 10**20}, {"from": [[[[[[["x"]]]]]]]},
                {1: "x"}, {"from": {1, 2}}):
        with pytest.raises(ModelValidationError):
            DriftCallAction(ActionType.TOOL_CALL, tool_name="airline.search", tool_args=bad)
    with pytest.raises(ModelValidationError, match="control character"):
        DriftCallAction(ActionType.SPEAK, message="bell\x07")
    assert DriftCallAction(ActionType.SPEAK, message="line\nbreak\ttab").message == "line\nbreak\ttab"


def test_rejected_raw_text_is_kept_encodable() -> None:
    env = DriftCallEnv(1)
    env.reset(seed=3)
    env.step_text("garbage \ud800 " + "z" * 5000)
    kept = env.state.actions[0].raw_text
    assert kept is not None and len(kept) <= 2000 and "\ufffd" in kept
    kept.encode("utf-8")
