"""The scripted-policy interface and what every policy shares.

A policy sees only observations (the turn-0 goal utterance, tool results, user messages, tool
docs) and answers with TEXT: the JSON action printed by `format_action` (or garbage, for the
random policy). That text goes through `DriftCallEnv.step_text` exactly as a model's output does.

Perfect-NLU assumption: mapping the spoken utterance ("कल सुबह बेंगलुरु से दिल्ली") to canonical
arguments is language understanding the model must learn; the scripted players skip it and get a
`GoalReader` at reset: the goal's canonical slots, constraints and language, i.e. exactly what the
utterance says. It never carries what the user only tells when asked (names, OTP, GSTIN, budget
flexibility), nor the drift schedule or vendor flags.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from cells.actions import format_action
from cells.errors import DriftCallError
from cells.step_04_datatypes import (
    ActionType,
    Constraint,
    DriftCallAction,
    DriftCallObservation,
    GoalSpec,
)


@dataclass(frozen=True)
class GoalReader:
    """What the user's opening utterance says, in canonical form (the scripted players' NLU)."""

    domain: str
    slots: dict[str, Any]
    constraints: tuple[Constraint, ...]
    language: str
    utterance: str

    @classmethod
    def from_goal(cls, goal: GoalSpec) -> GoalReader:
        """Only the spoken part of the goal; `goal.user` (hidden facts) is deliberately dropped."""
        return cls(goal.domain, dict(goal.slots), tuple(goal.constraints), goal.language, goal.seed_utterance)

    def constraint(self, name: str, op: str | None = None) -> Any:
        """Value of the constraint on `name` (and `op`), or None."""
        return next((c.value for c in self.constraints if c.name == name and (op is None or c.op == op)), None)

    @property
    def budget(self) -> int | None:
        return self.constraint("total_inr", "le")


@runtime_checkable
class Policy(Protocol):
    """A player: `reset` at turn 0, then one `act` per turn returning the assistant's text."""

    name: str

    def reset(self, observation: DriftCallObservation, goal: GoalReader | None = None) -> None: ...

    def act(self, observation: DriftCallObservation, history: Any = None) -> str: ...


class PolicyNotResetError(DriftCallError, RuntimeError):
    """`act` was called before `reset` (scripted players need the turn-0 observation and reader)."""


def text_of(action: DriftCallAction) -> str:
    """The canonical JSON text of an action (what a well-behaved model would print)."""
    return format_action(action)


def tool(name: str, **args: Any) -> str:
    return text_of(DriftCallAction(ActionType.TOOL_CALL, tool_name=name, tool_args=args))


def tool_args(name: str, args: dict[str, Any]) -> str:
    return text_of(DriftCallAction(ActionType.TOOL_CALL, tool_name=name, tool_args=dict(args)))


def speak(message: str) -> str:
    return text_of(DriftCallAction(ActionType.SPEAK, message=message))


def clarify(message: str) -> str:
    return text_of(DriftCallAction(ActionType.CLARIFY, message=message))


def probe(domain: str) -> str:
    return text_of(DriftCallAction(ActionType.PROBE_SCHEMA, tool_name=domain))


def submit(message: str, confidence: float) -> str:
    return text_of(DriftCallAction(ActionType.SUBMIT, message=message, confidence=confidence))


def abort(message: str | None = None) -> str:
    return text_of(DriftCallAction(ActionType.ABORT, message=message))


def search_args(goal: GoalReader) -> dict[str, Any]:
    """The goal's own search query (canonical slots)."""
    s = goal.slots
    if goal.domain == "airline":
        return {"from": s["from"], "to": s["to"], "date": s["date"]}
    if goal.domain == "cab":
        return {"pickup": s["pickup"], "drop": s["drop"]}
    if goal.domain == "restaurant":
        diet = s.get("diet")
        return {"city": s["city"], **({"diet": diet} if diet in ("veg", "egg", "non-veg") else {})}
    return {"city": s["city"], "check_in": s["check_in"], "check_out": s["check_out"]}


@dataclass
class Memory:
    """What a policy has gathered from observations so far (mutable, one per episode)."""

    language: str = "en"
    turn: int = 0
    results: list[Any] = field(default_factory=list)  # ToolResult objects in order
    replies: list[Any] = field(default_factory=list)  # UserMessage objects of kind reply
    default_scope: str = "payments.basic"

    def ingest(self, obs: DriftCallObservation) -> None:
        """Record the observation; follow the user's current language (stage-3 switch)."""
        self.turn = obs.turn
        if obs.last_result is not None:
            self.results.append(obs.last_result)
        msg = obs.user_message
        if msg is not None and msg.kind in ("reply", "ack", "goal"):
            self.language = msg.language
            if msg.kind == "reply":
                self.replies.append(msg)


def default_scope(observation: DriftCallObservation) -> str:
    """The token scope the reset-time docs of payment.get_token name (`currently "..."`)."""
    import re

    for doc in observation.available_tools:
        if doc.name == "payment.get_token":
            m = re.search(r'currently "([^"]+)"', doc.args.get("scope", ""))
            if m:
                return m.group(1)
    return "payments.basic"
