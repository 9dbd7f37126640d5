"""Step 6 - drift: the catalogue of API changes, the per-episode schedule, and applying a drift (docs/design.md#4-drift).

`cells/data/drifts.yaml` holds >= 20 patterns over five kinds (schema, policy, tnc, pricing,
auth); it is validated on load and a bad entry raises `DriftCatalogueError` naming the file,
entry, key and allowed values. A pattern mutates one vendor's feature flags through
`step_05_vendors.with_flags` (which bumps that domain's schema version).

Scheduling (fixed principle: drift must bite): a scheduled drift fires immediately before the
first call of one of its trigger tools at or after a seeded `min_turn` in [2, 4], and at the latest
before the first booking/order call (a fast agent booking at turn 3 must still meet a min_turn-4
drift; without this ~1/3 of scheduled stage-2 drifts never fired). Stage 1: none;
stage 2: one pattern in the goal's domain or payment; stage 3: two of different kinds (the
second sometimes payment). Patterns whose `requires` predicates fail for the goal are skipped.

Reads nothing from the context; `run(ctx)` validates the catalogue and prints a kind x domain
table (stored in `ctx.reports["drift_catalogue"]`).
Run alone: `python -m cells run --profile cpu-smoke --steps 6` (< 1 s).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from cells.errors import DriftCallError
from cells.step_04_datatypes import (
    DOMAINS,
    DRIFT_KINDS,
    GOAL_DOMAINS,
    GOAL_WRITE_TOOLS,
    DriftEvent,
    GoalSpec,
    ScheduledDrift,
    ToolResult,
    rng_for,
)
from cells.step_05_vendors import DEFAULT_FLAGS, TOOL_NAMES, ErrorCode, World, with_flags
from cells.vendors import airline, hotel, restaurant

if TYPE_CHECKING:  # pragma: no cover
    from cells.pipeline import Context

CATALOGUE_FILE = "drifts.yaml"
PAYMENT_SHARE_STAGE3 = 0.35  # chance the second stage-3 drift hits the payment gateway


class DriftCatalogueError(DriftCallError, ValueError):
    """drifts.yaml is malformed; the message names the file, entry, key and the allowed values."""


@dataclass(frozen=True)
class Evidence:
    """What an agent can observe after the drift fires (rewards read this)."""

    error_codes: tuple[str, ...]
    fields: tuple[str, ...]
    tokens: tuple[str, ...]


@dataclass(frozen=True)
class Adaptation:
    """A status-ok call of `tool` after the drift whose args carry every key in `args_include`."""

    tool: str
    args_include: tuple[str, ...]


@dataclass(frozen=True)
class Notice:
    """Terms notice delivered once as `_notice` on the next result in the pattern's domain."""

    text: str
    token: str


@dataclass(frozen=True)
class DriftPattern:
    """One catalogue entry (see cells/data/drifts.yaml for the field meanings)."""

    id: str
    kind: str
    domain: str
    applies_to: tuple[str, ...]
    trigger: tuple[str, ...]
    mutation: dict[str, Any]
    evidence: Evidence
    adaptation: Adaptation | None
    notice: Notice | None
    description: str
    why: str
    requires: tuple[str, ...] = ()


# --- goal predicates named by `requires` ------------------------------------------------------
# Each answers "does this pattern bite for this goal, and can it be survived?" from the goal, the
# pattern's own mutation and the prices and times the vendors plant for the goal (read from the
# vendor modules, never copied here).

MIN_ORDER_BUDGET_INR = 800  # topping an order up to a raised minimum must still fit, a delivery fee included


def _budget(goal: GoalSpec) -> int | None:
    return next((c.value for c in goal.constraints if c.name == "total_inr" and c.op == "le"), None)


def _constraint(goal: GoalSpec, name: str, op: str) -> Any:
    return next((c.value for c in goal.constraints if c.name == name and c.op == op), None)


def _window_spans_both_fits(goal: GoalSpec, pattern: DriftPattern) -> bool:
    """The goal's window reaches the early planted fit (refused by a 10:00 cut-off) and the later one."""
    lo, hi = airline.departure_window(goal)
    return lo <= airline.EARLY_FIT_DEPARTURES[1] and hi >= airline.LATER_FIT_DEPARTURES[0]


def _charge_above_mfa_threshold(goal: GoalSpec, pattern: DriftPattern) -> bool:
    """Every budget-fitting booking costs more than the pattern's MFA threshold."""
    threshold = pattern.mutation["mfa_threshold_inr"]
    if goal.domain == "airline":
        return threshold < airline.FARE_FLOOR_INR  # the floor fare is per passenger: every booking pays it
    if goal.domain != "hotel":
        return False
    bound = hotel.cheapest_fit_bound_inr(goal)
    return bound is None or bound > threshold


def _min_order_bites(goal: GoalSpec, pattern: DriftPattern) -> bool:
    """The planted order falls short of the raised minimum, and the budget allows topping it up."""
    short = restaurant.planted_dish_count(goal) * restaurant.DISH_PRICE_CAP_INR < pattern.mutation["min_order_inr"]
    budget = _budget(goal)
    return short and (budget is None or budget >= MIN_ORDER_BUDGET_INR)


PREDICATES: dict[str, Callable[[GoalSpec, DriftPattern], bool]] = {
    "goal_window_spans_10am": _window_spans_both_fits,
    "goal_not_mini": lambda g, p: (_constraint(g, "vehicle_class", "eq") or g.slots.get("vehicle_class")) != "mini",
    "goal_not_room_standard": lambda g, p: (_constraint(g, "room_type", "eq") or g.slots.get("room_type")) != "standard",
    "goal_diet_veg": lambda g, p: g.slots.get("diet") == "veg",
    "goal_budget_allows_min_order": _min_order_bites,
    "goal_charge_above_mfa_threshold": _charge_above_mfa_threshold,
}


def requirements_met(pattern: DriftPattern, goal: GoalSpec) -> bool:
    """Whether every `requires` predicate of `pattern` holds for `goal` (else the pattern is skipped)."""
    return all(PREDICATES[name](goal, pattern) for name in pattern.requires)


# --- catalogue loading and validation ---------------------------------------------------------

REQUIRED_KEYS = ("id", "kind", "domain", "applies_to", "trigger", "mutation", "evidence", "adaptation",
                 "notice", "description", "why")
OPTIONAL_KEYS = ("requires",)


def _fail(source: str, entry: str, key: str, message: str) -> DriftCatalogueError:
    return DriftCatalogueError(f"{source}: pattern {entry}: key {key!r}: {message}")


def _str_list(raw: dict[str, Any], key: str, allowed: Any, where: tuple[str, str], nonempty: bool = False) -> tuple:
    value = raw.get(key)
    if not isinstance(value, list) or (nonempty and not value):
        raise _fail(*where, key, f"must be a {'non-empty ' if nonempty else ''}list, got {value!r}")
    bad = [v for v in value if not isinstance(v, str) or (allowed is not None and v not in allowed)]
    if bad:
        raise _fail(*where, key, f"{bad} not allowed; allowed: {sorted(allowed) if allowed else 'strings'}")
    return tuple(value)


def _parse_pattern(raw: Any, index: int, source: str) -> DriftPattern:
    entry = f"#{index} ({raw.get('id', '?') if isinstance(raw, dict) else '?'})"
    if not isinstance(raw, dict):
        raise _fail(source, entry, "*", f"each pattern must be a mapping; allowed keys: {list(REQUIRED_KEYS)}")
    missing = [k for k in REQUIRED_KEYS if k not in raw]
    unknown = sorted(set(raw) - set(REQUIRED_KEYS) - set(OPTIONAL_KEYS))
    if missing or unknown:
        key = (missing or unknown)[0]
        raise _fail(source, entry, key, f"{'missing' if missing else 'unknown'}; allowed keys: "
                    f"{list(REQUIRED_KEYS + OPTIONAL_KEYS)}")
    w = (source, entry)
    for key, allowed in (("kind", DRIFT_KINDS), ("domain", DOMAINS)):
        if raw[key] not in allowed:
            raise _fail(*w, key, f"{raw[key]!r} not allowed; allowed: {list(allowed)}")
    for key in ("id", "description", "why"):
        if not isinstance(raw[key], str) or not raw[key].strip():
            raise _fail(*w, key, "must be a non-empty string (allowed: any text)")
    mutation = raw["mutation"]
    flags = DEFAULT_FLAGS[raw["domain"]]
    if not isinstance(mutation, dict) or not mutation or set(mutation) - set(flags):
        raise _fail(*w, "mutation", f"must be a non-empty mapping, got {mutation!r}; allowed flags: {sorted(flags)}")
    ev = raw["evidence"]
    if not isinstance(ev, dict) or set(ev) != {"error_codes", "fields", "tokens"}:
        raise _fail(*w, "evidence", "must be a mapping of lists; allowed (and required) keys: error_codes, fields, tokens")
    evidence = Evidence(_str_list(ev, "error_codes", {c.value for c in ErrorCode}, w),
                        _str_list(ev, "fields", None, w), _str_list(ev, "tokens", None, w))
    if not (evidence.error_codes or evidence.fields or evidence.tokens):
        raise _fail(*w, "evidence", "nothing observable; allowed: a non-empty error_codes, fields or tokens list")
    return DriftPattern(
        id=raw["id"], kind=raw["kind"], domain=raw["domain"],
        applies_to=_str_list(raw, "applies_to", GOAL_DOMAINS, w, nonempty=True),
        trigger=_str_list(raw, "trigger", TOOL_NAMES, w, nonempty=True), mutation=dict(mutation),
        evidence=evidence, adaptation=_parse_adaptation(raw["adaptation"], w),
        notice=_parse_notice(raw["notice"], raw["kind"], w), description=raw["description"], why=raw["why"],
        requires=_str_list(raw, "requires", PREDICATES, w) if "requires" in raw else (),
    )


def _parse_adaptation(raw: Any, where: tuple[str, str]) -> Adaptation | None:
    if raw is None:
        return None
    allowed = TOOL_NAMES
    if not isinstance(raw, dict) or raw.get("tool") not in allowed or set(raw) != {"tool", "args_include"}:
        raise _fail(*where, "adaptation", f"must be null or {{tool, args_include}}; allowed tools: {list(allowed)}")
    return Adaptation(raw["tool"], _str_list(raw, "args_include", None, where))


def _parse_notice(raw: Any, kind: str, where: tuple[str, str]) -> Notice | None:
    if raw is None:
        if kind == "tnc":
            raise _fail(*where, "notice", "tnc patterns must carry a notice; allowed: {text, token}")
        return None
    if not isinstance(raw, dict) or set(raw) != {"text", "token"} or str(raw["token"]) not in str(raw["text"]):
        raise _fail(*where, "notice", "allowed: null or {text, token} with the token inside the text")
    return Notice(str(raw["text"]), str(raw["token"]))


def parse_catalogue(payload: Any, source: str = CATALOGUE_FILE) -> tuple[DriftPattern, ...]:
    """Validate a parsed drifts.yaml document and build the patterns."""
    if not isinstance(payload, dict) or not isinstance(payload.get("patterns"), list) or "version" not in payload:
        raise DriftCatalogueError(f"{source}: top level needs `version` and a list `patterns`")
    patterns = tuple(_parse_pattern(raw, i, source) for i, raw in enumerate(payload["patterns"]))
    seen: set[str] = set()
    for i, p in enumerate(patterns):
        if p.id in seen:
            raise _fail(source, f"#{i} ({p.id})", "id", "duplicate id; allowed: ids unique across the file")
        seen.add(p.id)
    return patterns


@cache
def load_catalogue() -> tuple[DriftPattern, ...]:
    """The validated catalogue from cells/data/drifts.yaml (cached)."""
    from cells.step_03_data import load_fixture

    return parse_catalogue(load_fixture(CATALOGUE_FILE))


def pattern_by_id(pattern_id: str) -> DriftPattern:
    for p in load_catalogue():
        if p.id == pattern_id:
            return p
    raise KeyError(f"no drift pattern {pattern_id!r}; known: {[p.id for p in load_catalogue()]}")


# --- schedules and application ---------------------------------------------------------------

def _candidates(goal: GoalSpec, domain: str) -> list[DriftPattern]:
    return [p for p in load_catalogue() if p.domain == domain and goal.domain in p.applies_to
            and requirements_met(p, goal)]


def _scheduled(p: DriftPattern, rng: Any) -> ScheduledDrift:
    return ScheduledDrift(p.id, p.kind, p.domain, rng.randint(2, 4))


def build_schedule(stage: int, seed: int, goal: GoalSpec) -> tuple[ScheduledDrift, ...]:
    """The drifts of one episode: pure in (stage, seed, goal), with its own RNG."""
    if stage not in (1, 2, 3):
        raise ValueError(f"stage must be 1, 2 or 3, got {stage!r}")
    if stage == 1:
        return ()
    rng = rng_for(seed, "drift.schedule", stage)
    own, pay = _candidates(goal, goal.domain), _candidates(goal, "payment")
    if stage == 2:
        return (_scheduled(rng.choice(own + pay), rng),)
    first = rng.choice(own)
    others = [p for p in own if p.kind != first.kind]
    pool = pay if (rng.random() < PAYMENT_SHARE_STAGE3 or not others) else others
    return (_scheduled(first, rng), _scheduled(rng.choice(pool), rng))


def due_drifts(schedule: tuple[ScheduledDrift, ...], fired_ids: frozenset[str], tool_name: str,
               turn: int) -> tuple[ScheduledDrift, ...]:
    """Drifts that must fire immediately before this call: unfired, tool in trigger, and turn >= min_turn
    or the call is a booking/order (an agent that books before min_turn must still meet the drift)."""
    writes = GOAL_WRITE_TOOLS.values()
    return tuple(s for s in schedule if s.pattern_id not in fired_ids
                 and (turn >= s.min_turn or tool_name in writes)
                 and tool_name in pattern_by_id(s.pattern_id).trigger)


def apply_drift(world: World, pattern_id: str, turn: int) -> tuple[World, DriftEvent, dict[str, Any] | None]:
    """Apply a pattern's mutation: (new world, the DriftEvent, the notice to deliver or None)."""
    p = pattern_by_id(pattern_id)
    event = DriftEvent(p.id, p.kind, p.domain, turn, p.description)
    notice = None if p.notice is None else {"domain": p.domain, "text": p.notice.text}
    return with_flags(world, p.domain, p.mutation), event, notice


def attach_notice(result: ToolResult, notice: dict[str, Any]) -> ToolResult:
    """The result with the notice text added as `_notice` (deliver once, on the next result in its domain)."""
    return dataclasses.replace(result, response={**result.response, "_notice": notice["text"]})


def forced_schedule(pattern_id: str, min_turn: int = 2) -> tuple[ScheduledDrift, ...]:
    """Demo/judge control: a schedule firing `pattern_id` at its next trigger call from `min_turn`."""
    p = pattern_by_id(pattern_id)
    return (ScheduledDrift(p.id, p.kind, p.domain, max(2, min_turn)),)


def run(ctx: Context) -> Context:
    """Validate the catalogue and print pattern counts per kind and domain."""
    patterns = load_catalogue()
    table = {k: {d: sum(p.kind == k and p.domain == d for p in patterns) for d in DOMAINS} for k in DRIFT_KINDS}
    print(f"[drift] {len(patterns)} patterns in {CATALOGUE_FILE}")
    print("[drift] " + f"{'kind':<8}" + "".join(f"{d:>11}" for d in DOMAINS))
    for kind, row in table.items():
        print("[drift] " + f"{kind:<8}" + "".join(f"{row[d]:>11}" for d in DOMAINS))
    ctx.reports["drift_catalogue"] = table
    return ctx

