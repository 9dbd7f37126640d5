"""Action format and parser: one JSON object per assistant turn (DESIGN §8).

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
"""

from __future__ import annotations

import json
from typing import Any

from cells.step_04_models import ActionType, DriftCallAction, ModelValidationError

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


class ActionParseError(ValueError):
    """The text is not exactly one valid action object; `reason` says why in one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def extract_json_objects(text: str) -> list[Any]:
    """Every top-level JSON object in `text`, in order (fences and prose around them ignored)."""
    decoder = json.JSONDecoder()
    found: list[Any] = []
    i = text.find("{")
    while i != -1:
        try:
            obj, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            i = text.find("{", i + 1)
            continue
        found.append(obj)
        i = text.find("{", end)
    return found


def _action_from_object(obj: dict[str, Any]) -> DriftCallAction:
    raw_type = obj.get("action")
    try:
        kind = ActionType(raw_type)
    except ValueError:
        allowed = ", ".join(a.value for a in ActionType)
        raise ActionParseError(f'"action" must be one of {allowed}; got {raw_type!r}') from None
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
        raise ActionParseError(str(exc)) from None


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
