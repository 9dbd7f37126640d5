"""Step 4 - data model: the frozen types every other step exchanges (docs/design.md#2-data-model).

Rules: frozen dataclasses; collections inside are tuples; dict fields are never mutated in
place (build new ones); money is integer INR; every type round-trips through JSON with
`to_dict()` / `Type.from_dict()` (Devanagari, Tamil and Kannada text included).
Invalid values raise `ModelValidationError` (a `ValueError`) naming the field and the fix.
The JSON codec and the model-output rules are in `cells.codec`, the seeded RNG helpers in
`cells.seeding`; this module re-exports them.

Reads nothing from the context; `run(ctx)` round-trips one sample of each type as a self-check.
Run alone: `python -m cells run --profile cpu-smoke --steps 4` (instant).
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from cells.codec import (  # re-exported: callers import the data model from this step
    MAX_ABS_NUMBER,
    MAX_ARGS_DEPTH,
    JsonModel,
    ModelValidationError,
    canonical_json,
    json_value_problem,
    number_problem,
    require,
    require_json_mapping,
    text_problem,
)
from cells.seeding import rng_for, stable_digest, stable_id, stable_int  # re-exported, as above
from cells.step_02_profiles import LANGUAGES  # declared in the earliest step that needs it

if TYPE_CHECKING:  # pragma: no cover
    from cells.context import Context

DOMAINS: tuple[str, ...] = ("airline", "cab", "restaurant", "hotel", "payment")
GOAL_DOMAINS: tuple[str, ...] = ("airline", "cab", "restaurant", "hotel")
# The tool that books each goal domain: drift scheduling, the reward and the scripted players read it
# here (players may not import the vendors); tests check each is a write tool of the vendor registry.
GOAL_WRITE_TOOLS: dict[str, str] = {"airline": "airline.book", "cab": "cab.book", "restaurant": "restaurant.order",
                                    "hotel": "hotel.book"}
# The read tool that finds each goal domain's options (same home and test, for the same reason).
GOAL_SEARCH_TOOLS: dict[str, str] = {"airline": "airline.search", "cab": "cab.estimate",
                                     "restaurant": "restaurant.search", "hotel": "hotel.search"}
DRIFT_KINDS: tuple[str, ...] = ("schema", "policy", "tnc", "pricing", "auth")


def passengers_arg(names: list[str] | tuple[str, ...]) -> list[dict[str, str]]:
    """`airline.book`'s `passengers` for these full names: one object per passenger (its home is here, beside
    `GOAL_WRITE_TOOLS`, for the same reason: the vendor and the players both need it)."""
    return [{"name": name} for name in names]


RATIONALE_MAX_CHARS = 200


class ActionType(str, enum.Enum):
    TOOL_CALL = "tool_call"
    SPEAK = "speak"
    CLARIFY = "clarify"
    PROBE_SCHEMA = "probe_schema"
    SUBMIT = "submit"
    ABORT = "abort"


class ToolStatus(str, enum.Enum):
    OK = "ok"
    SCHEMA_ERROR = "schema_error"
    POLICY_ERROR = "policy_error"
    AUTH_ERROR = "auth_error"
    TIMEOUT = "timeout"
    NOT_FOUND = "not_found"


class TerminatedBy(str, enum.Enum):
    SUBMIT = "submit"
    ABORT = "abort"
    TIMEOUT = "timeout"  # the turn budget ran out
    INVALID_ACTIONS = "invalid_actions"  # three consecutive unparsable outputs



# ---------------------------------------------------------------------------------------------
# Agent actions and tool results
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DriftCallAction(JsonModel):
    """One agent turn. `tool_name` is "domain.verb" for tool_call and a bare domain for probe_schema."""

    action_type: ActionType
    tool_name: str | None = None
    tool_args: dict[str, Any] = field(default_factory=dict)
    message: str | None = None
    confidence: float | None = None
    rationale: str | None = None

    def __post_init__(self) -> None:
        name = "DriftCallAction"
        if not isinstance(self.action_type, ActionType):
            try:
                object.__setattr__(self, "action_type", ActionType(self.action_type))
            except ValueError:
                allowed = [a.value for a in ActionType]
                raise ModelValidationError(name, "action_type", f"{self.action_type!r} not in {allowed}") from None
        # Each rule is tested before its message is formatted: every parsed turn builds an action, and formatting
        # the messages of rules that hold was a third of this check's cost
        kind = self.action_type
        if not isinstance(self.tool_args, Mapping):
            raise ModelValidationError(name, "tool_args", f"must be a JSON object, got {type(self.tool_args).__name__}")
        if (args_problem := json_value_problem(self.tool_args)) is not None:
            raise ModelValidationError(name, "tool_args", args_problem)
        for text_field in ("tool_name", "message", "rationale"):
            text = getattr(self, text_field)
            if isinstance(text, str) and (problem := text_problem(text)) is not None:
                raise ModelValidationError(name, text_field, problem)
        if kind is ActionType.TOOL_CALL:
            if not (isinstance(self.tool_name, str) and self.tool_name.count(".") == 1
                    and self.tool_name.split(".")[0] in DOMAINS):
                raise ModelValidationError(name, "tool_name", f"tool_call needs 'domain.verb' with a domain in "
                                                              f"{DOMAINS}, got {self.tool_name!r}")
        elif kind is ActionType.PROBE_SCHEMA:
            if self.tool_name not in DOMAINS:
                raise ModelValidationError(name, "tool_name",
                                           f"probe_schema needs a bare domain in {DOMAINS}, got {self.tool_name!r}")
        elif not (self.tool_name is None and not self.tool_args):
            raise ModelValidationError(name, "tool_name", f"{kind.value} takes no tool_name/tool_args")
        if kind in (ActionType.SPEAK, ActionType.CLARIFY) and not (
                isinstance(self.message, str) and self.message.strip() != ""):
            raise ModelValidationError(name, "message", f"{kind.value} needs a non-empty message")
        if kind is ActionType.SUBMIT:
            c = self.confidence
            if not (isinstance(c, (int, float)) and not isinstance(c, bool) and 0.0 <= c <= 1.0):
                raise ModelValidationError(name, "confidence", f"submit needs a confidence in [0, 1], got {c!r}")
            object.__setattr__(self, "confidence", float(c))
        elif self.confidence is not None:
            raise ModelValidationError(name, "confidence", "only submit carries a confidence")
        if not (self.message is None or isinstance(self.message, str)):
            raise ModelValidationError(name, "message", "must be a string")
        if not (self.rationale is None or (isinstance(self.rationale, str)
                                           and len(self.rationale) <= RATIONALE_MAX_CHARS)):
            raise ModelValidationError(name, "rationale",
                                       f"must be a string of at most {RATIONALE_MAX_CHARS} characters")

    @property
    def domain(self) -> str | None:
        if self.tool_name is None:
            return None
        return self.tool_name.split(".")[0]


def _require_error_code(status: ToolStatus, response: dict[str, Any]) -> None:
    if not (status is ToolStatus.OK or "error_code" in response):  # the message only when it fails
        raise ModelValidationError("ToolResult", "response", f"a {status.value} result must carry an error_code")


@dataclass(frozen=True)
class ToolResult(JsonModel):
    """What a vendor returned for one call. Errors carry `error_code` plus structured extras."""

    tool_name: str
    status: ToolStatus
    response: dict[str, Any]
    schema_version: int | None  # the judge's record; None in what the agent sees (no free drift tell)
    latency_ms: int
    turn: int

    def __post_init__(self) -> None:
        if not isinstance(self.status, ToolStatus):
            object.__setattr__(self, "status", ToolStatus(self.status))
        require_json_mapping(self.response, "ToolResult", "response")
        _require_error_code(self.status, self.response)

    @classmethod
    def from_vendor(cls, tool_name: str, status: ToolStatus, response: dict[str, Any], schema_version: int | None,
                    latency_ms: int, turn: int) -> ToolResult:
        """A result the vendors' dispatch built: its response is plain JSON by construction (the vendor modules and
        the drift mechanisms build it from JSON values; `tests/test_step_05_vendors.py` checks every result of many
        played episodes), so the constructor's JSON walk of the whole response, a listing on every search, is
        skipped. The status rules still hold."""
        _require_error_code(status, response)
        result = object.__new__(cls)
        values = (tool_name, status, response, schema_version, latency_ms, turn)  # the constructor's order
        for spec, value in zip(fields(cls), values, strict=True):
            object.__setattr__(result, spec.name, value)
        return result

    @property
    def ok(self) -> bool:
        return self.status is ToolStatus.OK

    def for_agent(self) -> ToolResult:
        """What the agent sees: the vendor's answer without the schema version, which moves exactly when a
        drift fires in the domain (a drift must be noticed from the API's behaviour, not announced).
        A copy, not `dataclasses.replace`: the response was validated when this result was built, and validating
        it again (a JSON walk of a whole listing) was ~2% of an in-process env step."""
        if self.schema_version is None:
            return self
        seen = copy.copy(self)
        object.__setattr__(seen, "schema_version", None)
        return seen

    @property
    def error_code(self) -> str | None:
        return None if self.ok else str(self.response.get("error_code"))


@dataclass(frozen=True)
class ToolDoc(JsonModel):
    """Agent-facing documentation of one tool, as rendered into the system prompt."""

    name: str
    description: str
    args: dict[str, str]  # argument name -> doc ("str, required: IATA code")
    required: tuple[str, ...] = ()


# ---------------------------------------------------------------------------------------------
# Drift
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScheduledDrift(JsonModel):
    """A drift planned for an episode: fires before the first `domain` call at or after `min_turn`."""

    pattern_id: str
    drift_type: str
    domain: str
    min_turn: int

    def __post_init__(self) -> None:
        require(self.drift_type in DRIFT_KINDS, "ScheduledDrift", "drift_type", f"must be one of {DRIFT_KINDS}")
        require(self.domain in DOMAINS, "ScheduledDrift", "domain", f"must be one of {DOMAINS}")
        require(self.min_turn >= 2, "ScheduledDrift", "min_turn", "drifts never fire before turn 2")


@dataclass(frozen=True)
class DriftEvent(JsonModel):
    """A drift that actually fired. `description` is judge-facing only, never shown to the agent."""

    pattern_id: str
    drift_type: str
    domain: str
    turn: int
    description: str

    def __post_init__(self) -> None:
        require(self.drift_type in DRIFT_KINDS, "DriftEvent", "drift_type", f"must be one of {DRIFT_KINDS}")
        require(self.domain in DOMAINS, "DriftEvent", "domain", f"must be one of {DOMAINS}")


# ---------------------------------------------------------------------------------------------
# Goals and the simulated user
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Constraint(JsonModel):
    """A checkable requirement on the final booking: `op` in le/ge/eq/in over booking field `name`."""

    name: str
    op: str
    value: Any

    def __post_init__(self) -> None:
        require(self.op in ("le", "ge", "eq", "in"), "Constraint", "op", "must be one of le, ge, eq, in")


@dataclass(frozen=True)
class UserFacts(JsonModel):
    """What the simulated user knows but the agent must ask for."""

    passenger_names: tuple[str, ...] = ()
    mfa_code: str = "000000"
    gstin: str | None = None  # None: the user has no GSTIN
    budget_flex_inr: int = 0  # how far over budget the user accepts when asked
    time_flexible: bool = False
    preferences: dict[str, Any] = field(default_factory=dict)  # vehicle, diet, room type ...
    switch_language_to: str | None = None  # stage 3: the user may switch language once
    switch_after_turn: int | None = None

    def __post_init__(self) -> None:
        require(isinstance(self.budget_flex_inr, int), "UserFacts", "budget_flex_inr", "money is integer INR")
        require(self.switch_language_to is None or self.switch_language_to in LANGUAGES, "UserFacts",
                 "switch_language_to", f"must be one of {LANGUAGES}")


@dataclass(frozen=True)
class GoalSpec(JsonModel):
    """One task: canonical slots for the APIs, the user's utterance, constraints and hidden facts."""

    goal_id: str
    seed: int
    stage: int
    template_id: str
    domain: str
    intent: str
    slots: dict[str, Any]
    constraints: tuple[Constraint, ...]
    language: str
    seed_utterance: str
    user: UserFacts
    now: str  # episode clock start, ISO 8601 with +05:30

    def __post_init__(self) -> None:
        name = "GoalSpec"
        require(self.domain in GOAL_DOMAINS, name, "domain", f"must be one of {GOAL_DOMAINS}")
        require(self.language in LANGUAGES, name, "language", f"must be one of {LANGUAGES}")
        require(self.stage in (1, 2, 3), name, "stage", "must be 1, 2 or 3")
        require(bool(self.seed_utterance.strip()), name, "seed_utterance", "must not be empty")
        require_json_mapping(self.slots, name, "slots")


@dataclass(frozen=True)
class UserMessage(JsonModel):
    """A message from the simulated user (or a format hint from the environment)."""

    turn: int
    text: str
    language: str
    kind: str = "reply"  # goal | reply | ack | format_hint


# ---------------------------------------------------------------------------------------------
# Observations, state, episodes, rewards
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Booking(JsonModel):
    """A committed write: booking, order or ride. Cancel flips `status`; records are never deleted."""

    booking_id: str
    domain: str
    tool_name: str
    status: str  # confirmed | cancelled
    details: dict[str, Any]  # canonical fields (route, date, items, ...)
    total_inr: int  # what was actually charged, fees included
    turn: int
    payment_id: str | None = None

    def __post_init__(self) -> None:
        require(self.status in ("confirmed", "cancelled"), "Booking", "status", "confirmed or cancelled")
        require(isinstance(self.total_inr, int), "Booking", "total_inr", "money is integer INR")

    @property
    def live(self) -> bool:
        return self.status == "confirmed"


@dataclass(frozen=True)
class DriftCallObservation(JsonModel):
    """What the agent sees after a turn. The drift schedule and drift log are never in here."""

    turn: int
    budget_remaining: int
    goal_utterance: str | None = None
    user_message: UserMessage | None = None
    last_result: ToolResult | None = None
    available_tools: tuple[ToolDoc, ...] = ()
    parse_error: str | None = None
    done: bool = False
    reward: float | None = None
    now: str | None = None  # turn 0 only: the caller's local time (ISO 8601, IST); "25 May" needs the year


@dataclass(frozen=True)
class ActionRecord(JsonModel):
    """One turn as taken: the parsed action, or the raw text and why it did not parse."""

    turn: int
    action: DriftCallAction | None
    raw_text: str | None = None
    parse_error: str | None = None


@dataclass(frozen=True)
class Episode(JsonModel):
    """Everything the reward needs, built once at termination.

    `rewards` is the judge's score, attached by the env right after scoring (None on an episode
    built by hand): it travels with the episode so nothing downstream scores it again. The reward
    never reads it (step 8 is a pure function of the other fields)."""

    episode_id: str
    seed: int
    stage: int
    goal: GoalSpec
    max_turns: int
    turns_used: int
    actions: tuple[ActionRecord, ...]
    results: tuple[ToolResult, ...]
    drifts: tuple[DriftEvent, ...]
    user_messages: tuple[UserMessage, ...]
    bookings: tuple[Booking, ...]
    parse_failures: int
    terminated_by: TerminatedBy
    schedule: tuple[ScheduledDrift, ...] = ()
    rewards: Rewards | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.terminated_by, TerminatedBy):
            object.__setattr__(self, "terminated_by", TerminatedBy(self.terminated_by))

    @property
    def submitted(self) -> DriftCallAction | None:
        last = self.actions[-1].action if self.actions else None
        return last if last is not None and last.action_type is ActionType.SUBMIT else None


@dataclass(frozen=True)
class DriftCallState(JsonModel):
    """Judge/server view: everything, including the schedule the agent never sees."""

    episode_id: str
    seed: int
    stage: int
    goal: GoalSpec
    turn: int
    max_turns: int
    schema_versions: dict[str, int]
    vendor_flags: dict[str, Any]
    schedule: tuple[ScheduledDrift, ...]
    fired: tuple[DriftEvent, ...]
    actions: tuple[ActionRecord, ...]
    results: tuple[ToolResult, ...]
    bookings: tuple[Booking, ...]
    parse_failures: int
    done: bool
    terminated_by: TerminatedBy | None = None


# The lowest reward an episode can earn (step 8's `combine`): a harmful episode (a wrong booking, an
# unrequested charge, a fabricated fact) costs 0.4, and a failed episode's offences up to 0.1 more, so
# GRPO ranks harm < failure with offences < honest failure (0) < success (up to 1).
MIN_REWARD = -0.5


@dataclass(frozen=True)
class Rewards(JsonModel):
    """The reward and its parts; `breakdown` explains every term."""

    r_task: float
    r_drift: float | None
    r_constraints: float
    r_format: float
    r_penalty: float
    confidence: float
    brier: float
    reward: float
    breakdown: dict[str, Any]

    def __post_init__(self) -> None:
        require(MIN_REWARD <= self.reward <= 1.0, "Rewards", "reward", f"must be in [{MIN_REWARD}, 1], got {self.reward}")
        require(-1.0 <= self.r_penalty <= 0.0, "Rewards", "r_penalty", f"must be in [-1, 0], got {self.r_penalty}")


MODEL_TYPES: tuple[type[JsonModel], ...] = (
    DriftCallAction, ToolResult, ToolDoc, ScheduledDrift, DriftEvent, Constraint, UserFacts, GoalSpec,
    UserMessage, Booking, DriftCallObservation, ActionRecord, Episode, DriftCallState, Rewards,
)


def run(ctx: Context) -> Context:
    """Self-check: a multilingual action survives a JSON round trip."""
    sample = DriftCallAction(ActionType.SPEAK, message="नमस्ते / வணக்கம் / ನಮಸ್ಕಾರ")
    if DriftCallAction.from_json(sample.to_json()) != sample:
        raise ModelValidationError("DriftCallAction", "*", "JSON round trip changed the value")
    print(f"[models] {len(MODEL_TYPES)} frozen types; JSON round trip ok")
    return ctx


__all__ = [
    "DOMAINS", "DRIFT_KINDS", "GOAL_DOMAINS", "GOAL_SEARCH_TOOLS", "GOAL_WRITE_TOOLS", "LANGUAGES", "MAX_ABS_NUMBER", "MAX_ARGS_DEPTH",
    "MODEL_TYPES", "RATIONALE_MAX_CHARS", "ActionRecord", "ActionType", "Booking", "Constraint", "DriftCallAction",
    "DriftCallObservation", "DriftCallState", "DriftEvent", "Episode", "GoalSpec", "JsonModel", "ModelValidationError",
    "Rewards", "ScheduledDrift", "TerminatedBy", "ToolDoc", "ToolResult", "ToolStatus", "UserFacts", "UserMessage",
    "canonical_json", "json_value_problem", "number_problem", "passengers_arg", "require", "require_json_mapping", "rng_for", "run",
    "stable_digest", "stable_id", "stable_int", "text_problem",
]
