"""Step 4 - data model: the frozen types every other step exchanges (DESIGN §2).

Rules: frozen dataclasses; collections inside are tuples; dict fields are never mutated in
place (build new ones); money is integer INR; every type round-trips through JSON with
`to_dict()` / `Type.from_dict()` (Devanagari, Tamil and Kannada text included).
Invalid values raise `ModelValidationError` (a `ValueError`) naming the field and the fix.

Reads nothing from the context; `run(ctx)` round-trips one sample of each type as a self-check.
Run alone: `python -m cells run --profile cpu-smoke --steps 4` (instant).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import random
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from json.encoder import encode_basestring as _json_string  # what json.dumps(ensure_ascii=False) uses
from typing import TYPE_CHECKING, Any, TypeVar, Union

from cells.errors import DriftCallError
from cells.step_02_profiles import LANGUAGES  # declared in the earliest step that needs it

if TYPE_CHECKING:  # pragma: no cover
    from cells.pipeline import Context

DOMAINS: tuple[str, ...] = ("airline", "cab", "restaurant", "hotel", "payment")
GOAL_DOMAINS: tuple[str, ...] = ("airline", "cab", "restaurant", "hotel")
# The tool that books each goal domain: drift scheduling, the reward and the scripted players read it
# here (players may not import the vendors); tests check each is a write tool of the vendor registry.
GOAL_WRITE_TOOLS: dict[str, str] = {"airline": "airline.book", "cab": "cab.book", "restaurant": "restaurant.order",
                                    "hotel": "hotel.book"}
DRIFT_KINDS: tuple[str, ...] = ("schema", "policy", "tnc", "pricing", "auth")
RATIONALE_MAX_CHARS = 200


class ModelValidationError(DriftCallError, ValueError):
    """A data-model value broke a rule; `field_name` says which field."""

    def __init__(self, type_name: str, field_name: str, message: str) -> None:
        super().__init__(f"{type_name}.{field_name}: {message}")
        self.type_name = type_name
        self.field_name = field_name


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
# JSON codec shared by every type: to_dict() / from_dict() driven by the field annotations.
# ---------------------------------------------------------------------------------------------

T = TypeVar("T", bound="JsonModel")


_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})


def _encode(value: Any) -> Any:
    # Exact-type fast paths first (the hot case: plain JSON from vendors and digests); subclasses
    # such as str/int enums fall through to the general checks, so the output is unchanged.
    kind = type(value)
    if kind in _JSON_SCALARS:
        return value
    if kind is dict:
        return {str(k): _encode(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [_encode(v) for v in value]
    if isinstance(value, JsonModel):
        return value.to_dict()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (tuple, list)):
        return [_encode(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _encode(v) for k, v in value.items()}
    return value


def _decode(hint: Any, value: Any) -> Any:
    origin = typing.get_origin(hint)
    if value is None:
        return None
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return _decode(args[0], value) if len(args) == 1 else value
    if origin is tuple:
        args = typing.get_args(hint)
        inner = args[0] if args else Any
        return tuple(_decode(inner, v) for v in value)
    if isinstance(hint, type) and issubclass(hint, JsonModel):
        return hint.from_dict(value)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    if origin in (dict, Mapping) or hint in (dict, Mapping):
        return dict(value)
    return value


class JsonModel:
    """Mixin giving a frozen dataclass a lossless JSON round trip."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _encode(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls: type[T], data: Mapping[str, Any]) -> T:
        if not isinstance(data, Mapping):
            raise ModelValidationError(cls.__name__, "*", f"expected a JSON object, got {type(data).__name__}")
        hints = typing.get_type_hints(cls)
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = set(data) - names
        if unknown:
            raise ModelValidationError(cls.__name__, sorted(unknown)[0], f"unknown field; allowed: {sorted(names)}")
        kwargs = {k: _decode(hints[k], v) for k, v in data.items()}
        return cls(**kwargs)

    def to_json(self) -> str:
        return canonical_json(self.to_dict())

    @classmethod
    def from_json(cls: type[T], text: str) -> T:
        return cls.from_dict(json.loads(text))


def canonical_json(value: Any) -> str:
    """Sorted-key, compact, UTF-8 JSON: the one serialisation used for hashing and ids."""
    if type(value) is list and all(type(p) is str or type(p) is int for p in value):
        # The digest parts of most seeded decisions, e.g. [seed, "airline.listings", 3]: built
        # directly, byte-identical to json.dumps (same C string encoder), at a fraction of the cost.
        return "[" + ",".join(_json_string(p) if type(p) is str else int.__repr__(p) for p in value) + "]"
    return json.dumps(_encode(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _require(cond: bool, type_name: str, field_name: str, message: str) -> None:
    if not cond:
        raise ModelValidationError(type_name, field_name, message)


# ---------------------------------------------------------------------------------------------
# Model-output rules: what a model may put into an action. Model text is data, never a crash:
# each rule below once let a fuzzed completion raise inside the env (RecursionError on deep
# nesting, ValueError on ints past Python's 4,300-digit str limit, non-finite floats that are
# not JSON, lone surrogates that cannot be encoded as UTF-8).
# ---------------------------------------------------------------------------------------------

MAX_ARGS_DEPTH = 6  # containers in tool_args, args itself included (restaurant items use 4)
MAX_ABS_NUMBER = 10**15  # far above any INR amount, count or code the vendors take
_BAD_CHARS = re.compile("[\ud800-\udfff\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def text_problem(text: str) -> str | None:
    """Why `text` may not appear in an action (a lone surrogate or a control character), or None."""
    bad = _BAD_CHARS.search(text)
    if bad is None:
        return None
    kind = "lone surrogate" if "\ud800" <= bad.group() <= "\udfff" else "control character"
    return f"contains a {kind} U+{ord(bad.group()):04X} at position {bad.start()}"


def number_problem(value: int | float) -> str | None:
    """Why a number may not appear in an action (non-finite, or beyond ±MAX_ABS_NUMBER), or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"non-finite number {value!r} (JSON has no NaN/Infinity)"
    if abs(value) > MAX_ABS_NUMBER:
        return f"number out of range (|x| > 10^{len(str(MAX_ABS_NUMBER)) - 1})"
    return None


def json_value_problem(value: Any, max_depth: int = MAX_ARGS_DEPTH) -> str | None:
    """Why `value` is not plain, bounded JSON (depth, number range, string content, types), or None."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (Mapping, list, tuple)):
            if depth > max_depth:
                return f"nested deeper than {max_depth} levels"
            if isinstance(item, Mapping):
                for key in item:
                    if not isinstance(key, str):
                        return f"object keys must be strings, got {type(key).__name__}"
                    if (problem := text_problem(key)) is not None:
                        return f"key {problem}"
                stack.extend((v, depth + 1) for v in item.values())
            else:
                stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, str):
            if (problem := text_problem(item)) is not None:
                return f"string {problem}"
        elif isinstance(item, (int, float)) and not isinstance(item, bool):
            if (problem := number_problem(item)) is not None:
                return problem
        elif item is not None and not isinstance(item, bool):
            return f"{type(item).__name__} is not a JSON value"
    return None


def _encode_default(value: Any) -> Any:
    """json.dumps' hook for what plain JSON lacks (models, enums, other mappings): `_encode` rules."""
    if isinstance(value, (JsonModel, enum.Enum, Mapping)):
        return _encode(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _require_json_mapping(value: Any, type_name: str, field_name: str) -> None:
    _require(isinstance(value, Mapping), type_name, field_name, f"must be a JSON object, got {type(value).__name__}")
    try:  # validation only: the C encoder walks plain JSON; the hook handles the rest as _encode does
        json.dumps(value, ensure_ascii=False, default=_encode_default)
    except (TypeError, ValueError) as exc:
        raise ModelValidationError(type_name, field_name, f"must be JSON-serialisable ({exc})") from None


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
        kind = self.action_type
        _require(isinstance(self.tool_args, Mapping), name, "tool_args",
                 f"must be a JSON object, got {type(self.tool_args).__name__}")
        args_problem = json_value_problem(self.tool_args)
        _require(args_problem is None, name, "tool_args", f"{args_problem}")
        for text_field in ("tool_name", "message", "rationale"):
            text = getattr(self, text_field)
            problem = text_problem(text) if isinstance(text, str) else None
            _require(problem is None, name, text_field, f"{problem}")
        if kind is ActionType.TOOL_CALL:
            _require(
                isinstance(self.tool_name, str) and self.tool_name.count(".") == 1
                and self.tool_name.split(".")[0] in DOMAINS,
                name, "tool_name", f"tool_call needs 'domain.verb' with a domain in {DOMAINS}, got {self.tool_name!r}",
            )
        elif kind is ActionType.PROBE_SCHEMA:
            _require(self.tool_name in DOMAINS, name, "tool_name",
                     f"probe_schema needs a bare domain in {DOMAINS}, got {self.tool_name!r}")
        else:
            _require(self.tool_name is None and not self.tool_args, name, "tool_name",
                     f"{kind.value} takes no tool_name/tool_args")
        if kind in (ActionType.SPEAK, ActionType.CLARIFY):
            _require(isinstance(self.message, str) and self.message.strip() != "", name, "message",
                     f"{kind.value} needs a non-empty message")
        if kind is ActionType.SUBMIT:
            ok = isinstance(self.confidence, (int, float)) and not isinstance(self.confidence, bool)
            _require(ok and 0.0 <= float(self.confidence) <= 1.0, name, "confidence",
                     f"submit needs a confidence in [0, 1], got {self.confidence!r}")
            object.__setattr__(self, "confidence", float(self.confidence))
        else:
            _require(self.confidence is None, name, "confidence", "only submit carries a confidence")
        _require(self.message is None or isinstance(self.message, str), name, "message", "must be a string")
        _require(self.rationale is None or (isinstance(self.rationale, str)
                 and len(self.rationale) <= RATIONALE_MAX_CHARS), name, "rationale",
                 f"must be a string of at most {RATIONALE_MAX_CHARS} characters")

    @property
    def domain(self) -> str | None:
        if self.tool_name is None:
            return None
        return self.tool_name.split(".")[0]


@dataclass(frozen=True)
class ToolResult(JsonModel):
    """What a vendor returned for one call. Errors carry `error_code` plus structured extras."""

    tool_name: str
    status: ToolStatus
    response: dict[str, Any]
    schema_version: int
    latency_ms: int
    turn: int

    def __post_init__(self) -> None:
        if not isinstance(self.status, ToolStatus):
            object.__setattr__(self, "status", ToolStatus(self.status))
        _require_json_mapping(self.response, "ToolResult", "response")
        _require(self.status is ToolStatus.OK or "error_code" in self.response, "ToolResult", "response",
                 f"a {self.status.value} result must carry an error_code")

    @property
    def ok(self) -> bool:
        return self.status is ToolStatus.OK

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
        _require(self.drift_type in DRIFT_KINDS, "ScheduledDrift", "drift_type", f"must be one of {DRIFT_KINDS}")
        _require(self.domain in DOMAINS, "ScheduledDrift", "domain", f"must be one of {DOMAINS}")
        _require(self.min_turn >= 2, "ScheduledDrift", "min_turn", "drifts never fire before turn 2")


@dataclass(frozen=True)
class DriftEvent(JsonModel):
    """A drift that actually fired. `description` is judge-facing only, never shown to the agent."""

    pattern_id: str
    drift_type: str
    domain: str
    turn: int
    description: str

    def __post_init__(self) -> None:
        _require(self.drift_type in DRIFT_KINDS, "DriftEvent", "drift_type", f"must be one of {DRIFT_KINDS}")
        _require(self.domain in DOMAINS, "DriftEvent", "domain", f"must be one of {DOMAINS}")


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
        _require(self.op in ("le", "ge", "eq", "in"), "Constraint", "op", "must be one of le, ge, eq, in")


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
        _require(isinstance(self.budget_flex_inr, int), "UserFacts", "budget_flex_inr", "money is integer INR")
        _require(self.switch_language_to is None or self.switch_language_to in LANGUAGES, "UserFacts",
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
        _require(self.domain in GOAL_DOMAINS, name, "domain", f"must be one of {GOAL_DOMAINS}")
        _require(self.language in LANGUAGES, name, "language", f"must be one of {LANGUAGES}")
        _require(self.stage in (1, 2, 3), name, "stage", "must be 1, 2 or 3")
        _require(bool(self.seed_utterance.strip()), name, "seed_utterance", "must not be empty")
        _require_json_mapping(self.slots, name, "slots")


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
        _require(self.status in ("confirmed", "cancelled"), "Booking", "status", "confirmed or cancelled")
        _require(isinstance(self.total_inr, int), "Booking", "total_inr", "money is integer INR")

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
        _require(0.0 <= self.reward <= 1.0, "Rewards", "reward", f"must be in [0, 1], got {self.reward}")
        _require(-1.0 <= self.r_penalty <= 0.0, "Rewards", "r_penalty", f"must be in [-1, 0], got {self.r_penalty}")


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


# ---------------------------------------------------------------------------------------------
# Deterministic randomness shared by vendors, drift and tasks. Python's hash() is salted per
# process, and global RNGs leak state between episodes, so every decision derives its own
# generator from blake2b over canonical JSON of (seed, tag, ...).
# ---------------------------------------------------------------------------------------------


def stable_digest(*parts: Any, size: int = 8) -> bytes:
    """blake2b digest of the canonical JSON of `parts`; identical in every process."""
    import hashlib

    return hashlib.blake2b(canonical_json(list(parts)).encode("utf-8"), digest_size=size).digest()


def stable_int(*parts: Any) -> int:
    """A 64-bit unsigned integer derived from `parts` (see `stable_digest`)."""
    return int.from_bytes(stable_digest(*parts), "big")


def rng_for(*parts: Any) -> random.Random:
    """A private `random.Random` seeded from `parts`, e.g. `rng_for(seed, "airline.listings", query)`."""
    return random.Random(stable_int(*parts))


def stable_id(prefix: str, *parts: Any, length: int = 8) -> str:
    """A readable deterministic id like `BK-3f9a1c0e`."""
    return f"{prefix}-{stable_digest(*parts, size=16).hex()[:length]}"
