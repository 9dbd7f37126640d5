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

Splits (`splits:` in the same file, `DriftSplit`): which patterns the warm start's demonstrations show
(`demonstrated`), which only GRPO's episodes meet (`reinforced`) and which only evaluation meets (`unseen`). A
`DriftPool` limits the patterns a schedule draws from (`demonstration_pool`, `reinforcement_pool`); without one,
schedules draw from the whole catalogue, exactly as before splits existed.

Generated drift (`cells/drift/`, cells/data/drift_families.yaml): every pattern is an instance of a drift family
(its `family`, and the (family, domain, tool, field) `combination` a split holds out); the families' 1,000+
generated instances are patterns too (`pattern_by_id` rebuilds one from its id, "gen/..."), scheduled with
`build_schedule(..., source="generated" | "both")` (a family or hand-written pattern first, then a site, then an
instance). A generated split (`GeneratedSplit`, e.g. `latin-gen`) holds out (a) a split of the catalogue,
(b) family x vendor cells and (c) parameter values; its pools take the first `limit` of its training instances.

Reads nothing from the context; `run(ctx)` validates the catalogue and the families and prints a kind x domain
table (stored in `ctx.reports["drift_catalogue"]`) and the instances per family.
Run alone: `python -m cells run --profile cpu-smoke --steps 6` (< 1 s).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any

from cells.drift.families import (
    FamilyError,
    family_of,
    instance,
    is_generated,
    load_families,
    named_combination,
    site_instances,
)
from cells.drift.holdout import HOLDOUT_KINDS, GeneratedSplit, parse_generated_splits
from cells.errors import DriftCallError
from cells.step_02_profiles import DRIFT_SOURCES
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
from cells.vendors import airline, cab, hotel, restaurant
from cells.vendors.world import GENERIC_FLAGS

if TYPE_CHECKING:  # pragma: no cover
    from cells.context import Context

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
    """One catalogue entry (see cells/data/drifts.yaml for the field meanings) or generated instance
    (cells/data/drift_families.yaml: `family` names it, its id starts "gen/")."""

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
    user_pays: str | None = None  # what the user pays or may pay because of it: the judge makes the agent tell them
    family: str = ""  # the drift family it is an instance of
    combination: tuple[str, str, str, str] = ("", "", "", "")  # (family, domain, tool, field): what a split holds out
    notices: dict[str, str] | None = None  # a generated notice's text per language (`notice.text` is English)
    user_args: tuple[tuple[str, str], ...] = ()  # (argument, user topic): values only the user may supply


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


def _charge_above_mfa_threshold_any(goal: GoalSpec, pattern: DriftPattern) -> bool:
    """As `_charge_above_mfa_threshold`, and at the cab and the restaurant: every fare is at least the cab's floor,
    every order above the minimum order before any drift."""
    threshold = pattern.mutation["mfa_threshold_inr"]
    if goal.domain == "cab":
        return threshold < cab.FARE_FLOOR_INR
    if goal.domain == "restaurant":
        return threshold < DEFAULT_FLAGS["restaurant"]["min_order_inr"]
    return _charge_above_mfa_threshold(goal, pattern)


def _first_dish_is(goal: GoalSpec, pattern: DriftPattern) -> bool:
    """The dish the pattern withdraws is the first one the goal's diet allows at the planted restaurant (the natural
    pick: refusing it bites; the planted dishes after it still fit)."""
    return restaurant.planted_first_dish(goal) in pattern.mutation["unavailable_dishes"]


PREDICATES: dict[str, Callable[[GoalSpec, DriftPattern], bool]] = {
    "goal_window_spans_10am": _window_spans_both_fits,
    "goal_not_mini": lambda g, p: (_constraint(g, "vehicle_class", "eq") or g.slots.get("vehicle_class")) != "mini",
    "goal_not_room_standard": lambda g, p: (_constraint(g, "room_type", "eq") or g.slots.get("room_type")) != "standard",
    "goal_diet_veg": lambda g, p: g.slots.get("diet") == "veg",
    "goal_budget_allows_min_order": _min_order_bites,
    "goal_charge_above_mfa_threshold": _charge_above_mfa_threshold_any,
    "goal_first_dish_is": _first_dish_is,
}


def requirements_met(pattern: DriftPattern, goal: GoalSpec) -> bool:
    """Whether every `requires` predicate of `pattern` holds for `goal` (else the pattern is skipped)."""
    return all(PREDICATES[name](goal, pattern) for name in pattern.requires)


# --- catalogue loading and validation ---------------------------------------------------------

PATTERN_SETS = ("demonstrated", "reinforced", "unseen")  # where a pattern sits in a split


@dataclass(frozen=True)
class DriftSplit:
    """A split of the catalogue: `reinforced` and `unseen` map each withheld pattern id to why it sits there;
    every other pattern is demonstrated."""

    name: str
    why: str
    reinforced: dict[str, str]
    unseen: dict[str, str]

    def set_of(self, pattern_id: str) -> str:
        """The `PATTERN_SETS` member `pattern_id` belongs to."""
        pattern_by_id(pattern_id)  # raises on unknown ids
        if pattern_id in self.reinforced:
            return "reinforced"
        return "unseen" if pattern_id in self.unseen else "demonstrated"

    def episode_set(self, pattern_ids: Any) -> str | None:
        """The set an episode with these drifts counts in: "unseen" when any is unseen, else "reinforced" when any
        is reinforced, else "demonstrated"; None without a drift. An episode with one withheld pattern measures the
        withheld recovery, since the demonstrated one beside it is what the warm start already does."""
        sets = {self.set_of(p) for p in pattern_ids}
        return next((which for which in reversed(PATTERN_SETS) if which in sets), None)

    def ids(self, which: str) -> frozenset[str]:
        """The pattern ids of one `PATTERN_SETS` member."""
        if which not in PATTERN_SETS:
            raise ValueError(f"pattern set must be one of {PATTERN_SETS}, got {which!r}")
        return frozenset(p.id for p in load_catalogue() if self.set_of(p.id) == which)


@dataclass(frozen=True)
class DriftPool:
    """The patterns an episode's schedule may draw from: `allowed`; where a goal has `favoured` candidates, each
    pick takes one of them with probability `favoured_share` (GRPO's episodes lean towards what they reinforce)."""

    allowed: frozenset[str]
    favoured: frozenset[str] = frozenset()
    favoured_share: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.favoured_share <= 1.0:
            raise ValueError(f"favoured_share must be in [0, 1], got {self.favoured_share}")
        if not self.favoured <= self.allowed:
            raise ValueError(f"favoured patterns {sorted(self.favoured - self.allowed)} are not allowed in the pool")


def trained_ids(split: DriftSplit | GeneratedSplit, which: str, limit: int | None = None) -> frozenset[str]:
    """The patterns of set `which` training meets: a split's own; of a generated split, its hand-written ones and
    those of its first `limit` training instances (`GeneratedSplit.training_ids`; None: all)."""
    if not isinstance(split, GeneratedSplit):
        return split.ids(which)
    generated = frozenset(p for p in split.training_ids(limit) if split.set_of(p) == which)
    return split.base.ids(which) | generated


def demonstration_pool(split: DriftSplit | GeneratedSplit, limit: int | None = None) -> DriftPool:
    """What the warm start's expert episodes may meet: the demonstrated patterns only (`trained_ids`)."""
    return DriftPool(trained_ids(split, "demonstrated", limit))


def reinforcement_pool(split: DriftSplit | GeneratedSplit, reinforced_share: float, limit: int | None = None
                       ) -> DriftPool:
    """What GRPO's episodes may meet: demonstrated and reinforced patterns (`trained_ids`), reinforced ones picked
    with probability `reinforced_share` wherever the goal admits one."""
    reinforced = trained_ids(split, "reinforced", limit)
    return DriftPool(trained_ids(split, "demonstrated", limit) | reinforced, reinforced, reinforced_share)


REQUIRED_KEYS = ("id", "family", "kind", "domain", "applies_to", "trigger", "mutation", "evidence", "adaptation",
                 "notice", "description", "why")
OPTIONAL_KEYS = ("requires", "user_pays", "field")
USER_PAYS_KINDS = ("pricing",)  # kinds that always change what the user pays, so must say what


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
    applies_to = _str_list(raw, "applies_to", GOAL_DOMAINS, w, nonempty=True)
    return DriftPattern(
        id=raw["id"], kind=raw["kind"], domain=raw["domain"], applies_to=applies_to,
        trigger=_str_list(raw, "trigger", TOOL_NAMES, w, nonempty=True), mutation=dict(mutation),
        evidence=evidence, adaptation=_parse_adaptation(raw["adaptation"], w),
        notice=_parse_notice(raw["notice"], raw["kind"], w), description=raw["description"], why=raw["why"],
        requires=_str_list(raw, "requires", PREDICATES, w) if "requires" in raw else (),
        user_pays=_parse_user_pays(raw, w), family=raw["family"],
        combination=_named_combination(raw, applies_to, w),
    )


def _named_combination(raw: dict[str, Any], applies_to: tuple[str, ...], where: tuple[str, str]
                       ) -> tuple[str, str, str, str]:
    """The (family, domain, tool, field) of a hand-written pattern: a named instance of a family of its kind."""
    try:
        family = family_of(str(raw["family"]))
        combination = named_combination(family.name, raw["domain"], applies_to, raw.get("field"))
    except FamilyError as exc:
        raise _fail(*where, "family", f"{exc}; allowed: {sorted(load_families())}") from None
    if family.kind != raw["kind"]:
        raise _fail(*where, "family", f"{family.name} is a {family.kind} family; this pattern is {raw['kind']}")
    return combination


def _parse_user_pays(raw: dict[str, Any], where: tuple[str, str]) -> str | None:
    value = raw.get("user_pays")
    if value is None and raw["kind"] in USER_PAYS_KINDS:
        raise _fail(*where, "user_pays", f"{raw['kind']} patterns change what the user pays: say what (any text)")
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise _fail(*where, "user_pays", "must be a non-empty string saying what the user pays, or absent")
    return value


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


def _split_fail(source: str, name: str, key: str, message: str) -> DriftCatalogueError:
    return DriftCatalogueError(f"{source}: split {name}: key {key!r}: {message}")


def _withheld(raw: dict[str, Any], key: str, known: dict[str, DriftPattern], where: tuple[str, str]) -> dict[str, str]:
    """One withheld set of a split (a non-empty mapping): pattern id -> why, ids known, no two sharing a vendor or
    a kind."""
    value = raw[key]
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise _split_fail(*where, key, f"{unknown} are not pattern ids; allowed: {sorted(known)}")
    for pattern_id, why in value.items():
        if not isinstance(why, str) or not why.strip():
            raise _split_fail(*where, key, f"{pattern_id}: say why it sits here (a non-empty string)")
    for attr in ("domain", "kind"):
        taken: dict[str, str] = {}
        for pattern_id in value:
            other = taken.setdefault(getattr(known[pattern_id], attr), pattern_id)
            if other != pattern_id:
                raise _split_fail(*where, key, f"{other} and {pattern_id} share the {attr} "
                                  f"{getattr(known[pattern_id], attr)!r}; a withheld set is a Latin square over "
                                  "vendor x kind")
    return {str(k): str(v) for k, v in value.items()}


def parse_splits(payload: Any, patterns: tuple[DriftPattern, ...], source: str = CATALOGUE_FILE
                 ) -> dict[str, DriftSplit]:
    """Validate the `splits:` section of a parsed drifts.yaml document (absent: no splits)."""
    raw_splits = payload.get("splits") if isinstance(payload, dict) else None
    if raw_splits is None:
        return {}
    if not isinstance(raw_splits, dict):
        raise DriftCatalogueError(f"{source}: `splits` must be a mapping of split name -> split")
    known = {p.id: p for p in patterns}
    out: dict[str, DriftSplit] = {}
    for name, raw in raw_splits.items():
        where = (source, str(name))
        if not isinstance(raw, dict) or set(raw) != {"why", "reinforced", "unseen"}:
            raise _split_fail(*where, "*", "allowed (and required) keys: why, reinforced, unseen")
        if not isinstance(raw["why"], str) or not raw["why"].strip():
            raise _split_fail(*where, "why", "must be a non-empty string")
        for key in ("reinforced", "unseen"):
            if not isinstance(raw[key], dict) or not raw[key]:
                raise _split_fail(*where, key, f"must be a non-empty mapping of pattern id -> why, got {raw[key]!r}")
        both = sorted(set(raw["reinforced"]) & set(raw["unseen"]))
        if both:
            raise _split_fail(*where, "unseen", f"{both} are also reinforced; a pattern sits in one set")
        reinforced, unseen = (_withheld(raw, key, known, where) for key in ("reinforced", "unseen"))
        demonstrated = [p for p in patterns if p.id not in reinforced and p.id not in unseen]
        for attr, values in (("domain", DOMAINS), ("kind", DRIFT_KINDS)):
            bare = [v for v in values if any(getattr(p, attr) == v for p in patterns)
                    and not any(getattr(p, attr) == v for p in demonstrated)]
            if bare:
                raise _split_fail(*where, "reinforced", f"no demonstrated pattern is left for the {attr} {bare}; "
                                  f"every {attr} keeps one, so a withheld recovery combines demonstrated parts")
        out[str(name)] = DriftSplit(str(name), raw["why"], reinforced, unseen)
    return out


@cache
def load_splits() -> dict[str, DriftSplit]:
    """The validated splits from cells/data/drifts.yaml (cached)."""
    from cells.step_03_data import load_fixture

    return parse_splits(load_fixture(CATALOGUE_FILE), load_catalogue())


@cache
def load_generated_splits() -> dict[str, GeneratedSplit]:
    """The validated generated splits from cells/data/drift_families.yaml (cached): hold-outs over the hand-written
    patterns (a base split of drifts.yaml) and the families' instances (`cells.drift.holdout`)."""
    from cells.drift.families import FAMILIES_FILE
    from cells.step_03_data import load_fixture

    return parse_generated_splits(load_fixture(FAMILIES_FILE), load_splits(), load_catalogue())


def drift_split(name: str) -> DriftSplit | GeneratedSplit:
    """The split called `name` (of drifts.yaml or, generated, of drift_families.yaml); `DriftCatalogueError`
    naming the known ones otherwise."""
    splits: dict[str, Any] = {**load_splits(), **load_generated_splits()}
    if name not in splits:
        raise DriftCatalogueError(f"no drift split {name!r} in {CATALOGUE_FILE} or the generated splits; known: "
                                  f"{sorted(splits)}")
    return splits[name]


@cache
def load_catalogue() -> tuple[DriftPattern, ...]:
    """The validated catalogue from cells/data/drifts.yaml (cached)."""
    from cells.step_03_data import load_fixture

    return parse_catalogue(load_fixture(CATALOGUE_FILE))


def pattern_by_id(pattern_id: str) -> DriftPattern:
    """The catalogue pattern or generated instance (an id starting "gen/") `pattern_id` names; KeyError otherwise."""
    if isinstance(pattern_id, str) and is_generated(pattern_id):
        try:
            return generated_pattern(pattern_id)
        except FamilyError as exc:
            raise KeyError(str(exc)) from None
    for p in load_catalogue():
        if p.id == pattern_id:
            return p
    raise KeyError(f"no drift pattern {pattern_id!r}; known: {[p.id for p in load_catalogue()]}")


@lru_cache(maxsize=4096)
def generated_pattern(pattern_id: str) -> DriftPattern:
    """A generated instance (`cells.drift.families.instance`) as a catalogue pattern: its evidence, adaptation,
    notice and what the user pays all come from its family's declaration."""
    inst = instance(pattern_id)
    unknown = sorted(set(inst.requires) - set(PREDICATES))
    if unknown:
        raise DriftCatalogueError(f"family {inst.family}: requires {unknown}; allowed: {sorted(PREDICATES)}")
    ev = inst.evidence
    adaptation = None if inst.adaptation is None else Adaptation(inst.adaptation[0], inst.adaptation[1])
    notice = None if inst.notices is None else Notice(inst.notices["en"], str(inst.notice_token))
    return DriftPattern(
        id=inst.id, kind=inst.kind, domain=inst.domain, applies_to=inst.applies_to, trigger=inst.trigger,
        mutation=inst.mutation, evidence=Evidence(ev["error_codes"], ev["fields"], ev["tokens"]),
        adaptation=adaptation, notice=notice, description=inst.description, why=inst.why, requires=inst.requires,
        user_pays=inst.user_pays, family=inst.family, combination=(inst.family, inst.domain, inst.tool, inst.field),
        notices=inst.notices, user_args=inst.user_args)


@cache
def generated_patterns(domain: str) -> tuple[tuple[str, str, tuple[tuple[DriftPattern, ...], ...]], ...]:
    """The generated instances of `domain`, by family: (family, kind, one tuple of patterns per site)."""
    out = []
    for family in load_families().values():
        sites = tuple(tuple(generated_pattern(i.id) for i in site_instances(family, site))
                      for site in family.sites if site.domain == domain)
        if sites:
            out.append((family.name, family.kind, sites))
    return tuple(out)


# --- schedules and application ---------------------------------------------------------------

def _candidates(goal: GoalSpec, domain: str, pool: DriftPool | None) -> list[DriftPattern]:
    return [p for p in load_catalogue() if p.domain == domain and goal.domain in p.applies_to
            and requirements_met(p, goal) and (pool is None or p.id in pool.allowed)]


def _scheduled(p: DriftPattern, rng: Any) -> ScheduledDrift:
    return ScheduledDrift(p.id, p.kind, p.domain, rng.randint(2, 4))


def _pick(rng: Any, options: list[DriftPattern], pool: DriftPool | None) -> DriftPattern:
    """One of `options`: a favoured one with the pool's probability where there is one (no extra draw without a
    pool that favours, so schedules without one are those of before pools existed)."""
    if pool is not None and pool.favoured_share > 0:
        favoured = [p for p in options if p.id in pool.favoured]
        if favoured and rng.random() < pool.favoured_share:
            return rng.choice(favoured)
    return rng.choice(options)


def build_schedule(stage: int, seed: int, goal: GoalSpec, pool: DriftPool | None = None,
                   source: str = "handwritten") -> tuple[ScheduledDrift, ...]:
    """The drifts of one episode: pure in (stage, seed, goal, pool, source), with its own RNG. `source` (one of
    `DRIFT_SOURCES`): the hand-written catalogue (exactly the schedules of before families existed), the generated
    families' instances, or both. A pool that leaves a goal no candidate in its own domain schedules what it can (a
    payment drift, or none)."""
    if stage not in (1, 2, 3):
        raise ValueError(f"stage must be 1, 2 or 3, got {stage!r}")
    if source not in DRIFT_SOURCES:
        raise ValueError(f"drift source must be one of {DRIFT_SOURCES}, got {source!r}")
    if stage == 1:
        return ()
    if source != "handwritten":
        return _family_schedule(stage, seed, goal, pool, source)
    own, pay = _candidates(goal, goal.domain, pool), _candidates(goal, "payment", pool)
    return _stage_rules(rng_for(seed, "drift.schedule", stage), stage, own, pay, lambda r, o: _pick(r, o, pool))


def _stage_rules(rng: Any, stage: int, own: list[Any], pay: list[Any], pick: Callable[[Any, list[Any]], DriftPattern]
                 ) -> tuple[ScheduledDrift, ...]:
    """Stage 2: one drift of the goal's domain or payment; stage 3: two of different kinds (the second sometimes
    payment). `own` and `pay` are what `pick` draws a pattern from (patterns, or `_Choice`s), each with a `kind`."""
    if stage == 2 or not own:
        return (_scheduled(pick(rng, own + pay), rng),) if own + pay else ()
    first = pick(rng, own)
    others = [o for o in own if o.kind != first.kind]
    second = pay if (rng.random() < PAYMENT_SHARE_STAGE3 or not others) else others
    return (_scheduled(first, rng), _scheduled(pick(rng, second), rng)) if second else (_scheduled(first, rng),)


@dataclass(frozen=True)
class _Choice:
    """What a schedule picks from: one hand-written pattern, or one family in one domain (a tuple of patterns per
    site), drawn family first, then site, then instance, so no family outweighs another by its instance count."""

    kind: str
    sites: tuple[tuple[DriftPattern, ...], ...]

    def only(self, ids: frozenset[str]) -> _Choice | None:
        sites = tuple(kept for site in self.sites if (kept := tuple(p for p in site if p.id in ids)))
        return _Choice(self.kind, sites) if sites else None


@lru_cache(maxsize=256)
def _pooled(domain: str, goal_domain: str, pool: DriftPool | None) -> tuple[tuple[str, tuple[tuple[DriftPattern, ...],
                                                                                          ...]], ...]:
    """`generated_patterns(domain)` kept to those a `goal_domain` goal may meet under `pool` (what every reset
    would filter again: a thousand instances; only the goal predicates are left per goal)."""
    out = []
    for _, kind, sites in generated_patterns(domain):
        kept = tuple(k for site in sites if (k := tuple(p for p in site if goal_domain in p.applies_to
                                                         and (pool is None or p.id in pool.allowed))))
        if kept:
            out.append((kind, kept))
    return tuple(out)


def _choices(goal: GoalSpec, domain: str, pool: DriftPool | None, source: str) -> list[_Choice]:
    out = [_Choice(p.kind, ((p,),)) for p in _candidates(goal, domain, pool)] if source == "both" else []
    for kind, sites in _pooled(domain, goal.domain, pool):
        eligible = tuple(kept for site in sites
                         if (kept := site if not site[0].requires else tuple(p for p in site if requirements_met(p, goal))))
        if eligible:
            out.append(_Choice(kind, eligible))
    return out


def _choose(rng: Any, options: list[_Choice], pool: DriftPool | None) -> DriftPattern:
    """A choice, then a site, then an instance; a favoured one with the pool's probability where there is one."""
    if pool is not None and pool.favoured_share > 0:
        favoured = [f for c in options if (f := c.only(pool.favoured))]
        if favoured and rng.random() < pool.favoured_share:
            options = favoured
    return rng.choice(rng.choice(rng.choice(options).sites))


def _family_schedule(stage: int, seed: int, goal: GoalSpec, pool: DriftPool | None, source: str
                     ) -> tuple[ScheduledDrift, ...]:
    """`build_schedule` over generated instances (and, with source "both", the catalogue): the same stage rules."""
    own, pay = _choices(goal, goal.domain, pool, source), _choices(goal, "payment", pool, source)
    return _stage_rules(rng_for(seed, "drift.schedule", stage, source), stage, own, pay,
                        lambda r, o: _choose(r, o, pool))


def due_drifts(schedule: tuple[ScheduledDrift, ...], fired_ids: frozenset[str], tool_name: str,
               turn: int) -> tuple[ScheduledDrift, ...]:
    """Drifts that must fire immediately before this call: unfired, tool in trigger, and turn >= min_turn
    or the call is a booking/order (an agent that books before min_turn must still meet the drift)."""
    writes = GOAL_WRITE_TOOLS.values()
    return tuple(s for s in schedule if s.pattern_id not in fired_ids
                 and (turn >= s.min_turn or tool_name in writes)
                 and tool_name in pattern_by_id(s.pattern_id).trigger)


def apply_drift(world: World, pattern_id: str, turn: int) -> tuple[World, DriftEvent, dict[str, Any] | None]:
    """Apply a pattern's mutation: (new world, the DriftEvent, the notice to deliver or None). A generated notice
    comes in the user's language; a generic flag (`GENERIC_FLAGS`) a drift sets adds to what earlier drifts set."""
    p = pattern_by_id(pattern_id)
    event = DriftEvent(p.id, p.kind, p.domain, turn, p.description)
    notice = None
    if p.notice is not None:
        text = p.notices.get(world.goal.language, p.notice.text) if p.notices else p.notice.text
        notice = {"domain": p.domain, "text": text}
    return with_flags(world, p.domain, _merged(world.flags[p.domain], p.mutation)), event, notice


def _merged(flags: dict[str, Any], mutation: dict[str, Any]) -> dict[str, Any]:
    """`mutation` with each generic flag's new entries added to its current ones (two drifts may both set one)."""
    out = dict(mutation)
    for key, value in mutation.items():
        if key in GENERIC_FLAGS and isinstance(value, dict):
            out[key] = {**flags.get(key, {}), **value}
        elif key in GENERIC_FLAGS and isinstance(value, list):
            out[key] = [*flags.get(key, []), *value]
    return out


def attach_notice(result: ToolResult, notice: dict[str, Any]) -> ToolResult:
    """The result with the notice text added as `_notice` (deliver once, on the next result in its domain)."""
    return dataclasses.replace(result, response={**result.response, "_notice": notice["text"]})


def forced_schedule(pattern_id: str, min_turn: int = 2) -> tuple[ScheduledDrift, ...]:
    """Demo/judge control: a schedule firing `pattern_id` at its next trigger call from `min_turn`."""
    p = pattern_by_id(pattern_id)
    return (ScheduledDrift(p.id, p.kind, p.domain, max(2, min_turn)),)


def families_doc_markdown() -> str:
    """The drift families (`families_markdown`) and how each generated split places their instances: the block
    `drift:families` of docs/design.md (`python -m cells families --docs`)."""
    from cells.drift.families import families_markdown
    from cells.drift.holdout import split_markdown

    return "\n\n".join([families_markdown(), *(split_markdown(s) for s in load_generated_splits().values())])


def run(ctx: Context) -> Context:
    """Validate the catalogue and print pattern counts per kind and domain."""
    patterns = load_catalogue()
    table = {k: {d: sum(p.kind == k and p.domain == d for p in patterns) for d in DOMAINS} for k in DRIFT_KINDS}
    print(f"[drift] {len(patterns)} patterns in {CATALOGUE_FILE}")
    print("[drift] " + f"{'kind':<8}" + "".join(f"{d:>11}" for d in DOMAINS))
    for kind, row in table.items():
        print("[drift] " + f"{kind:<8}" + "".join(f"{row[d]:>11}" for d in DOMAINS))
    ctx.reports["drift_catalogue"] = table
    counts = {name: sum(s.count() for s in fam.sites) for name, fam in load_families().items()}
    print(f"[drift] {sum(counts.values())} generated instances: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    if ctx.profile.drift_split:
        split = drift_split(ctx.profile.drift_split)  # an unknown name fails here, seconds into a run, not at step 15
        if ctx.profile.drift_source != "handwritten" and not isinstance(split, GeneratedSplit):
            raise DriftCatalogueError(f"drift_source {ctx.profile.drift_source!r} with split {split.name!r}: a split "
                                      f"of {CATALOGUE_FILE} allows no generated instance; name a generated split "
                                      f"({sorted(load_generated_splits())})")
    for split in load_splits().values():
        sets = {which: sorted(split.ids(which)) for which in PATTERN_SETS}
        print(f"[drift] split {split.name!r}: " + "; ".join(f"{len(v)} {k}" for k, v in sets.items()))
    for gen in load_generated_splits().values():
        held = "; ".join(f"({kind}) {len(gen.held_out(kind))}" for kind in HOLDOUT_KINDS)
        print(f"[drift] generated split {gen.name!r} (base {gen.base.name!r}): {len(gen.training_ids())} generated "
              f"instances train; held out for evaluation: {held}")
    return ctx

