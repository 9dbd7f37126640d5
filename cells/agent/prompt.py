"""Prompt rendering: the system prompt and how each observation becomes the next user-side message.

System prompt = the seed's pinned concierge prompt + the action format + the available tools with
their argument docs as they were at reset (docs/design.md#8-agent-io) + the caller's local time at the start of the call.
The time is there because users name dates without a year ("22 January") and the APIs take ISO dates:
without it a January date asked in December is unanswerable. It is the last line, right before the
utterance, so a short training example (`cells.training.sft_data`'s search drills) can keep exactly that
tail. Turn 0 is exactly two messages: that system prompt and the user's utterance. Every later environment
response is one user-role message (Gemma templates have no tool role) made of prefixed lines, compact JSON,
`ensure_ascii=False`:

    [tool_result] {"tool":"airline.search","status":"ok","flights":[...]}
    [user] हाँ, बजट 500 रुपये बढ़ा सकते हैं
    [format_error] no JSON object found ...
"""

from __future__ import annotations

import json
from typing import Any

from cells.actions import ACTION_FORMAT_HELP
from cells.step_04_datatypes import DriftCallObservation, GoalSpec, ToolDoc, ToolResult

# Pinned by the seed module (step 14 re-exports it); changing it changes every trained prompt.
PINNED_SYSTEM_PROMPT: str = (
    "You are a concierge assistant. Use the provided tools. "
    "Respond in the caller's language. Submit with calibrated confidence."
)

PROTOCOL_NOTES = (
    "Get a payment_token with payment.get_token before booking. Read every tool result: APIs can change "
    "mid-call (renamed fields, new required arguments, fees, token scopes, OTP); adapt, and tell the user what "
    "changed. Ask the user (clarify) for facts only they know. Finish with submit and your confidence (0-1) "
    "that the booking meets the request."
)


def format_tool_doc(doc: ToolDoc) -> str:
    """One compact line: `name(arg*, arg): description | arg: doc; ...` (* = required)."""
    names = ", ".join(f"{a}*" if a in doc.required else a for a in doc.args)
    arg_docs = "; ".join(f"{a}: {d}" for a, d in doc.args.items())
    return f"- {doc.name}({names}): {doc.description}" + (f" | {arg_docs}" if arg_docs else "")


def format_now(now: str) -> str:
    """`"2026-12-10T18:30:00+05:30"` -> `"Now: Thursday 2026-12-10 18:30 IST"`."""
    from datetime import datetime

    moment = datetime.fromisoformat(now)
    return f"Now: {moment:%A %Y-%m-%d %H:%M} IST"


def build_system_prompt(tools: tuple[ToolDoc, ...], now: str | None = None) -> str:
    """Pinned prompt + action format + protocol notes + tool docs + the caller's time (when known)."""
    lines = [PINNED_SYSTEM_PROMPT, ACTION_FORMAT_HELP, PROTOCOL_NOTES, "Tools:"]
    lines.extend(format_tool_doc(t) for t in tools)
    if now is not None:
        lines.append(format_now(now))
    return "\n".join(lines)


def tools_for_goal(goal: GoalSpec) -> tuple[ToolDoc, ...]:
    """The tool docs the env shows at reset for `goal` (drift never fires before turn 2)."""
    from cells.step_10_env import reset_tool_docs

    return reset_tool_docs(goal.domain)


def system_prompt_for(goal: Any = None, tools: tuple[ToolDoc, ...] | None = None, now: str | None = None) -> str:
    """The system prompt for an episode: tool docs from `tools`, else from a real `GoalSpec`, else none
    (toy environments in tests have no vendors); the time from `now`, else from a real `GoalSpec`."""
    if isinstance(goal, GoalSpec):
        tools = tools_for_goal(goal) if tools is None else tools
        now = goal.now if now is None else now
    return build_system_prompt(tools or (), now)


def initial_messages(goal: Any, tools: tuple[ToolDoc, ...] | None = None) -> list[dict[str, str]]:
    """The two turn-0 messages: system prompt and the user's utterance (the seed's contract)."""
    return [
        {"role": "system", "content": system_prompt_for(goal, tools)},
        {"role": "user", "content": str(goal.seed_utterance)},
    ]


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def render_tool_result(res: ToolResult) -> str:
    """The `[tool_result]` line of one result: tool, status and the whole response."""
    return "[tool_result] " + _compact({"tool": res.tool_name, "status": res.status.value, **res.response})


def render_observation(obs: DriftCallObservation) -> str:
    """The user-side message for an observation after turn 0."""
    lines = []
    if obs.parse_error is not None:
        lines.append(f"[format_error] {obs.parse_error}")
    if obs.last_result is not None:
        lines.append(render_tool_result(obs.last_result))
    if obs.user_message is not None and obs.parse_error is None:
        lines.append(f"[user] {obs.user_message.text}")
    if obs.budget_remaining <= 2 and not obs.done:
        lines.append(f"[budget] {obs.budget_remaining} turn(s) left")
    return "\n".join(lines) if lines else "[env] ok"
