import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cells.actions import ActionParseError, extract_json_objects, format_action, parse_action
from cells.step_04_datatypes import ActionType, DriftCallAction


@pytest.mark.parametrize("text, kind, tool", [
    ('{"action":"tool_call","tool":"airline.search","args":{"from":"HYD","to":"BLR","date":"2026-05-02"}}',
     ActionType.TOOL_CALL, "airline.search"),
    ('```json\n{"action":"speak","message":"ठीक है"}\n```', ActionType.SPEAK, None),
    ('Sure! Here you go: {"action":"clarify","message":"OTP?"} thanks', ActionType.CLARIFY, None),
    ('{"action":"probe_schema","domain":"cab"}', ActionType.PROBE_SCHEMA, "cab"),
    ('{"action":"submit","message":"done","confidence":0.8}', ActionType.SUBMIT, None),
    ('{"action":"abort"}', ActionType.ABORT, None),
])
def test_accepts_one_object_with_fences_and_prose(text, kind, tool):
    action = parse_action(text)
    assert action.action_type is kind and action.tool_name == tool


@pytest.mark.parametrize("text, fragment", [
    ("", "no JSON object"),
    ("hello", "no JSON object"),
    ('{"action": "speak", "message": "x"', "unbalanced"),
    ('{"action":"speak","message":"a"} {"action":"speak","message":"b"}', "exactly one"),
    ('{"tool":"airline.search"}', '"action" key'),
    ('[1, 2]', "no JSON object"),
    ('{"action":"dance"}', "must be one of"),
    ('{"action":"speak","message":"x","tool":"cab.book"}', "unexpected key"),
    ('{"action":"tool_call","tool":"airline.search","args":[1]}', "JSON object"),
    ('{"action":"tool_call","tool":"search","args":{}}', "domain.verb"),
    ('{"action":"submit","message":"x","confidence":2}', "confidence"),
    ('{"action":"submit","message":"x"}', "confidence"),
    ('{"action":"speak"}', "message"),
    ("{" * 9000, "too long"),
])
def test_rejects_with_precise_reason(text, fragment):
    with pytest.raises(ActionParseError) as err:
        parse_action(text)
    assert fragment in err.value.reason


def test_format_then_parse_is_identity():
    actions = [
        DriftCallAction(ActionType.TOOL_CALL, "hotel.book", {"hotel_id": "H-1", "rooms": 1}),
        DriftCallAction(ActionType.SUBMIT, message="பதிவு செய்தேன்", confidence=0.9),
        DriftCallAction(ActionType.PROBE_SCHEMA, "payment"),
        DriftCallAction(ActionType.ABORT, rationale="user left"),
    ]
    for action in actions:
        assert parse_action(format_action(action)) == action


def test_extract_skips_garbage_between_objects():
    assert extract_json_objects('x {bad} y {"a": 1} z') == [{"a": 1}]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text_parses_or_raises_documented_error(text):
    try:
        action = parse_action(text)
    except ActionParseError as err:
        assert err.reason
    else:
        assert isinstance(action, DriftCallAction)
