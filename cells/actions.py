"""The environment's action grammar: one JSON object per assistant turn (docs/design.md#8-agent-io), parsed here.

It lives with the environment (step 10's `step_text` parses every completion), below the agent
layer that writes actions (step 11's policies print them with `format_action`).

Accepted objects (keys beyond these are rejected so typos surface as reasons, not silent drops):

    {"action": "tool_call", "tool": "airline.search", "args": {...}}
    {"action": "probe_schema", "domain": "airline"}
    {"action": "speak" | "clarify", "message": "..."}
    {"action": "submit", "message": "...", "confidence": 0.8}
    {"action": "abort", "message": "..."}            # message optional
    any of them may carry "rationale": "..." (<= 200 chars)

The parser tolerates code fences and text around exactly one object; everything else raises
`ActionParseError` whose `reason` tells the model what to fix. Scripted policies print actions
with `format_action` and go through this same parser, exactly as a model's output does.

Any string is data, never a crash: nesting is measured before decoding (deeper than
MAX_ACTION_DEPTH is refused, so the decoder never recurses), numbers are bounded while decoding
(integer literals longer than the largest allowed value, NaN/Infinity and floats beyond
±MAX_ABS_NUMBER are refused before Python converts them), and the data model's rules on
string content (no lone surrogates or control characters) apply to every decoded value.
"""

from __future__ import annotations

import json
from typing import Any

from cells.errors import DriftCallError
from cells.step_04_datatypes import (
    MAX_ABS_NUMBER,
    MAX_ARGS_DEPTH,
    ActionType,
    DriftCallAction,
    ModelValidationError,
    number_problem,
)

ACTION_FORMAT_HELP = (
    'Reply with exactly one JSON object, e.g. {"action":"tool_call","tool":"airline.search","args":{...}}, '
    '{"action":"speak","message":"..."}, {"action":"clarify","message":"..."}, '
    '{"action":"probe_schema","domain":"airline"}, {"action":"submit","message":"...","confidence":0.8} '
    'or {"action":"abort","message":"..."}.'
)

_ALLOWED_KEYS: dict[ActionType, frozenset[str]] = {
    ActionType.TOOL_CALL: frozenset({"action", "tool", "args", "rationale"}),
    ActionType.PROBE_SCHEMA: frozenset({"action", "domain", "rationale"}),
    ActionType.SPEAK: frozenset({"action", "message", "rationale"}),
    ActionType.CLARIFY: frozenset({"action", "message", "rationale"}),
    ActionType.SUBMIT: frozenset({"action", "message", "confidence", "rationale"}),
    ActionType.ABORT: frozenset({"action", "message", "rationale"}),
}
MAX_ACTION_CHARS = 8000
MAX_ACTION_DEPTH = MAX_ARGS_DEPTH + 1  # the action object around its args
_MAX_INT_CHARS = len(str(MAX_ABS_NUMBER)) + 1  # a sign, then at most as many digits as the bound
MAX_REASON_CHARS = 300  # a reason quotes model text; keep the observation short


class ActionParseError(DriftCallError, ValueError):
    """The text is not exactly one valid action object; `reason` says why in one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def max_nesting(text: str) -> int:
    """Deepest bracket nesting in `text`, brackets inside JSON strings ignored (one linear scan)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "}]":
            depth = max(0, depth - 1)
    return deepest


def _parse_int(literal: str) -> int:
    if len(literal) > _MAX_INT_CHARS:  # before int(): Python refuses > 4,300 digits with a ValueError
        raise ActionParseError(f"integer with {len(literal)} digits is out of range (|x| <= {MAX_ABS_NUMBER})")
    value = int(literal)
    if (problem := number_problem(value)) is not None:
        raise ActionParseError(problem)
    return value


def _parse_float(literal: str) -> float:
    value = float(literal)
    if (problem := number_problem(value)) is not None:
        raise ActionParseError(problem)
    return value


def _parse_constant(name: str) -> Any:
    raise ActionParseError(f"{name} is not valid JSON; send a finite number")


_DECODER = json.JSONDecoder(parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant)


def extract_json_objects(text: str) -> list[Any]:
    """Every top-level JSON object in `text`, in order (fences and prose around them ignored).

    Raises `ActionParseError` for nesting deeper than MAX_ACTION_DEPTH or an out-of-range number."""
    brackets = text.count("{") + text.count("[")  # C-speed count; the scan only runs when it could fail
    if brackets > MAX_ACTION_DEPTH and max_nesting(text) > MAX_ACTION_DEPTH:
        raise ActionParseError(f"JSON nested deeper than {MAX_ACTION_DEPTH} levels; send one flat action object")
    found: list[Any] = []
    i = text.find("{")
    while i != -1:
        try:
            obj, end = _DECODER.raw_decode(text, i)
        except json.JSONDecodeError:
            i = text.find("{", i + 1)
            continue
        except RecursionError:  # unreachable after max_nesting; kept so no input can crash the env
            raise ActionParseError(f"JSON nested deeper than {MAX_ACTION_DEPTH} levels") from None
        found.append(obj)
        i = text.find("{", end)
    return found


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _action_from_object(obj: dict[str, Any]) -> DriftCallAction:
    raw_type = obj.get("action")
    try:
        kind = ActionType(raw_type)
    except (ValueError, TypeError):  # TypeError: an unhashable value such as a list
        allowed = ", ".join(a.value for a in ActionType)
        raise ActionParseError(f'"action" must be one of {allowed}; got {_short(raw_type)}') from None
    extra = set(obj) - _ALLOWED_KEYS[kind]
    if extra:
        allowed = ", ".join(sorted(_ALLOWED_KEYS[kind]))
        raise ActionParseError(f"unexpected key(s) {sorted(extra)} for {kind.value}; allowed: {allowed}")
    args = obj.get("args", {})
    if kind is ActionType.TOOL_CALL and not isinstance(args, dict):
        raise ActionParseError(f'"args" must be a JSON object, got {type(args).__name__}')
    tool = obj.get("domain") if kind is ActionType.PROBE_SCHEMA else obj.get("tool")
    try:
        return DriftCallAction(
            action_type=kind,
            tool_name=tool,
            tool_args=dict(args) if kind is ActionType.TOOL_CALL else {},
            message=obj.get("message"),
            confidence=obj.get("confidence"),
            rationale=obj.get("rationale"),
        )
    except ModelValidationError as exc:
        raise ActionParseError(str(exc)[:MAX_REASON_CHARS]) from None


def parse_action(text: str) -> DriftCallAction:
    """Parse one model turn into an action, or raise `ActionParseError` with a precise reason."""
    if not isinstance(text, str):
        raise ActionParseError(f"expected text, got {type(text).__name__}")
    if len(text) > MAX_ACTION_CHARS:
        raise ActionParseError(f"output too long ({len(text)} chars > {MAX_ACTION_CHARS}); send one short JSON object")
    objects = extract_json_objects(text)
    if not objects:
        hint = "unbalanced braces or invalid JSON" if "{" in text else "no JSON object found"
        raise ActionParseError(f"{hint}. {ACTION_FORMAT_HELP}")
    if len(objects) > 1:
        raise ActionParseError(f"found {len(objects)} JSON objects; send exactly one action per turn")
    obj = objects[0]
    if not isinstance(obj, dict) or "action" not in obj:
        raise ActionParseError(f'the JSON object needs an "action" key. {ACTION_FORMAT_HELP}')
    return _action_from_object(obj)


def format_action(action: DriftCallAction) -> str:
    """The canonical compact JSON text of an action (what scripted policies emit)."""
    obj: dict[str, Any] = {"action": action.action_type.value}
    if action.action_type is ActionType.TOOL_CALL:
        obj["tool"] = action.tool_name
        obj["args"] = action.tool_args
    elif action.action_type is ActionType.PROBE_SCHEMA:
        obj["domain"] = action.tool_name
    if action.message is not None:
        obj["message"] = action.message
    if action.confidence is not None:
        obj["confidence"] = round(action.confidence, 3)
    if action.rationale is not None:
        obj["rationale"] = action.rationale
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
