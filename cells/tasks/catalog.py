"""Template catalogue (validated on load) and the booking contract shared with vendors, rewards and docs.

Contract (vendors write these keys into `Booking.details`; rewards read them):
- `BINDING_FACTS[domain]`: every fact the user states (or only the user knows) that the task booking
  must carry for r_task = 1, with how it is compared; `REPORT_FACTS`: what the agent must tell the user
  about that booking (its reference, its charged total, a fee a drift added) for r_task = 1. Every stated constraint binds too, except the
  ones in `SOFT_CONSTRAINTS` (graded by r_constraints instead). `binding_checks(goal, booking)` applies
  both; `binding_table()` renders the declaration for the docs.
- `REQUIRED_SLOTS` / `SLOT_TO_DETAIL`: the goal-slot part of `BINDING_FACTS`, derived from it.
- `CONSTRAINT_DETAIL_KEYS[domain]`: details keys constraints read (besides `total_inr`).
- `check_constraint(c, booking) -> (ok, actual)`.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from cells.errors import DriftCallError
from cells.step_03_data import load_fixture
from cells.step_04_datatypes import GOAL_DOMAINS, LANGUAGES, Booking, Constraint, GoalSpec
from cells.tasks.i18n import LANGUAGE_SCRIPT, has_script, nfc, phrases
from cells.vendors.write_path import UNREGISTERED_GSTIN

TEMPLATES_FIXTURE = "templates.yaml"

INTENTS: dict[str, str] = {
    "airline": "book_flight", "cab": "book_cab", "restaurant": "order_food", "hotel": "book_hotel",
}
CONSTRAINT_DETAIL_KEYS: dict[str, tuple[str, ...]] = {
    "airline": ("depart_time", "passenger_count"),
    "cab": ("vehicle_class",),
    "restaurant": ("diet_tags", "item_count"),
    "hotel": ("room_type", "rating"),
}
VEHICLE_CLASSES: tuple[str, ...] = ("mini", "sedan", "prime", "suv")
ROOM_TYPES: tuple[str, ...] = ("standard", "deluxe", "suite")
DIETS: tuple[str, ...] = ("veg", "egg", "non-veg")
DIET_ALLOWED_TAGS: dict[str, tuple[str, ...]] = {"veg": ("veg",), "egg": ("veg", "egg")}
NO_EGG_TAGS: tuple[str, ...] = ("veg", "non-veg")

# constraint kind (templates.yaml) -> the domains it applies to
CONSTRAINT_KINDS: dict[str, tuple[str, ...]] = {
    "budget": GOAL_DOMAINS,
    "depart_after": ("airline",),
    "depart_before": ("airline",),
    "passenger_count": ("airline",),
    "vehicle_class": ("cab",),
    "diet": ("restaurant",),
    "min_items": ("restaurant",),
    "room_type": ("hotel",),
    "rating": ("hotel",),
}

# Placeholders each domain's phrasings may use (filled by the generator).
PLACEHOLDERS: dict[str, frozenset[str]] = {
    "airline": frozenset({"from_city", "to_city", "date", "tickets", "n"}),
    "cab": frozenset({"city", "city_in", "city_to", "pickup", "drop", "date", "time", "vehicle"}),
    "restaurant": frozenset({"city", "city_in", "city_to", "party", "diet"}),
    "hotel": frozenset({"city", "city_in", "city_to", "checkin", "checkout", "rooms", "room", "nights"}),
}
_HHMM = re.compile(r"^\d{2}:\d{2}$")
_ISO_TIME = re.compile(r"T(\d{2}:\d{2})")


class TaskDataError(DriftCallError, ValueError):
    """templates.yaml / i18n.yaml broke a rule; the message names the file, template, key and fix."""


@dataclass(frozen=True)
class Template:
    """One validated goal template (see the header of cells/data/templates.yaml)."""

    id: str
    domain: str
    intent: str
    stage_min: int
    compound: bool
    core: int
    constraints: tuple[str, ...]
    slots: tuple[tuple[str, tuple[Any, ...]], ...]
    options: tuple[tuple[str, tuple[Any, ...]], ...]
    budget: tuple[int, int]
    phrasings: tuple[tuple[str, tuple[str, ...]], ...]
    no_egg: bool = False
    gstin: str = "sometimes"  # always | sometimes

    def slot_choices(self, name: str) -> tuple[Any, ...]:
        return dict(self.slots).get(name, ())

    def option_choices(self, name: str) -> tuple[Any, ...] | None:
        return dict(self.options).get(name)

    def phrasings_for(self, lang: str) -> tuple[str, ...]:
        return dict(self.phrasings)[lang]


def _fail(tid: str, key: str, message: str) -> None:
    raise TaskDataError(f"{TEMPLATES_FIXTURE}: template {tid!r}, key {key!r}: {message}")


def _check_text(tid: str, key: str, lang: str, text: str, allowed: frozenset[str]) -> None:
    fields = {f for _, f, _, _ in string.Formatter().parse(text) if f}
    unknown = fields - allowed
    if unknown:
        _fail(tid, key, f"{lang} phrasing uses unknown placeholder(s) {sorted(unknown)}; allowed {sorted(allowed)}")
    script = LANGUAGE_SCRIPT[lang]
    if script != "latin" and not has_script(text, script):
        _fail(tid, key, f"{lang} phrasing must be written in {script} script: {text!r}")
    if lang == "hinglish" and has_script(text, "devanagari"):
        _fail(tid, key, f"hinglish phrasing must be romanised (no Devanagari): {text!r}")


def _parse_template(raw: dict[str, Any]) -> Template:
    tid = str(raw.get("id", "?"))
    for key in ("id", "domain", "intent", "constraints", "phrasings", "budget"):
        if key not in raw:
            _fail(tid, key, "required key missing")
    domain = raw["domain"]
    if domain not in GOAL_DOMAINS:
        _fail(tid, "domain", f"{domain!r} not in {GOAL_DOMAINS} (payment is never a goal)")
    if raw["intent"] != INTENTS[domain]:
        _fail(tid, "intent", f"{domain} goals use intent {INTENTS[domain]!r}, got {raw['intent']!r}")
    kinds = tuple(raw["constraints"])
    for kind in kinds:
        if domain not in CONSTRAINT_KINDS.get(kind, ()):
            valid = sorted(k for k, ds in CONSTRAINT_KINDS.items() if domain in ds)
            _fail(tid, "constraints", f"{kind!r} is not a {domain} constraint; use one of {valid}")
    core = int(raw.get("core", 1))
    if not 1 <= core <= len(kinds) or len(kinds) < 2:
        _fail(tid, "core", f"need 1 <= core ({core}) <= len(constraints) ({len(kinds)}) and >= 2 constraints")
    stage_min = int(raw.get("stage_min", 1))
    if stage_min not in (1, 2, 3):
        _fail(tid, "stage_min", f"must be 1, 2 or 3, got {stage_min}")
    lo, hi = (int(x) for x in raw["budget"])
    if not 0 < lo <= hi:
        _fail(tid, "budget", f"need 0 < lo <= hi, got {raw['budget']}")
    phr = raw["phrasings"]
    for lang in LANGUAGES:
        texts = phr.get(lang) or []
        if len(texts) < 2:
            _fail(tid, "phrasings", f"language {lang!r} needs at least 2 phrasings, has {len(texts)}")
        for text in texts:
            _check_text(tid, "phrasings", lang, text, PLACEHOLDERS[domain])
    return Template(
        id=tid, domain=domain, intent=raw["intent"], stage_min=stage_min,
        compound=bool(raw.get("compound", False)), core=core, constraints=kinds,
        slots=tuple((k, tuple(v)) for k, v in sorted((raw.get("slots") or {}).items())),
        options=tuple((k, tuple(v)) for k, v in sorted((raw.get("options") or {}).items())),
        budget=(lo, hi),
        phrasings=tuple((lang, tuple(nfc(t) for t in phr[lang])) for lang in LANGUAGES),
        no_egg=bool(raw.get("no_egg", False)), gstin=str(raw.get("gstin", "sometimes")),
    )


@cache
def templates() -> tuple[Template, ...]:
    """All templates, validated; raises `TaskDataError` naming the first problem."""
    raw = load_fixture(TEMPLATES_FIXTURE)["templates"]
    parsed = tuple(_parse_template(t) for t in raw)
    ids = [t.id for t in parsed]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise TaskDataError(f"{TEMPLATES_FIXTURE}: duplicate template id(s) {dupes}")
    for domain in GOAL_DOMAINS:
        if sum(t.domain == domain and not t.compound for t in parsed) < 3:
            raise TaskDataError(f"{TEMPLATES_FIXTURE}: domain {domain!r} needs >= 3 non-compound templates")
    _check_clauses()
    return parsed


def _check_clauses() -> None:
    clauses = phrases()["clauses"]
    for key, entry in clauses.items():
        for lang in LANGUAGES:
            if not entry.get(lang):
                raise TaskDataError(f"i18n.yaml: phrases.clauses.{key} has no {lang!r} text")


def templates_for(domain: str, stage: int) -> tuple[Template, ...]:
    """Templates a goal in `domain` may use at curriculum `stage` (compound ones from stage 3)."""
    return tuple(t for t in templates() if t.domain == domain and t.stage_min <= stage)


def template_by_id(template_id: str) -> Template:
    for t in templates():
        if t.id == template_id:
            return t
    raise TaskDataError(f"{TEMPLATES_FIXTURE}: no template {template_id!r}")


# ---------------------------------------------------------------------------------------------
# Constraint checking over a committed booking
# ---------------------------------------------------------------------------------------------


def _actual(c: Constraint, booking: Booking) -> Any:
    if c.name == "total_inr":
        return booking.total_inr
    value = booking.details.get(c.name)
    # depart_time may be stored as a full ISO datetime; constraints compare "HH:MM".
    if isinstance(value, str) and isinstance(c.value, str) and _HHMM.match(c.value):
        m = _ISO_TIME.search(value)
        if m:
            return m.group(1)
    return value


def check_constraint(c: Constraint, booking: Booking) -> tuple[bool, Any]:
    """(ok, actual value) for `c` over `booking.total_inr` or `booking.details[c.name]`.

    le/ge compare numbers (or zero-padded "HH:MM" strings); eq compares exactly; `in` means the
    actual value is in the allowed list, or, for a list-valued detail, that it is non-empty and
    every element is allowed. A missing detail or incomparable types fail with the actual value.
    """
    actual = _actual(c, booking)
    if actual is None or isinstance(actual, bool):
        return False, actual
    try:
        if c.op == "le":
            return bool(actual <= c.value), actual
        if c.op == "ge":
            return bool(actual >= c.value), actual
        if c.op == "eq":
            return bool(actual == c.value), actual
        allowed = set(c.value)
        if isinstance(actual, (list, tuple)):
            return bool(actual) and all(a in allowed for a in actual), actual
        return actual in allowed, actual
    except TypeError:
        return False, actual


# ---------------------------------------------------------------------------------------------
# Binding facts: what the task booking must carry for the user to have got what they asked for
# ---------------------------------------------------------------------------------------------


def _norm_text(value: Any) -> str:
    return " ".join(str(value).split()).casefold()


def _same_normalised(expected: Any, actual: Any) -> bool:
    """Equal after case and whitespace are normalised (place ids, IATA codes, enum values)."""
    return actual is not None and _norm_text(expected) == _norm_text(actual)


def _same_exact(expected: Any, actual: Any) -> bool:
    """Equal as values: 2 == 2.0, "2026-01-02" == "2026-01-02"; a bool is never a count."""
    return actual is not None and not isinstance(actual, bool) and expected == actual


def _same_minute(expected: Any, actual: Any) -> bool:
    """The same moment to the minute ("2026-01-02T09:30" == "2026-01-02T09:30:00")."""
    try:
        want, got = (datetime.fromisoformat(str(v)).replace(second=0, microsecond=0, tzinfo=None)
                     for v in (expected, actual))
    except (TypeError, ValueError):
        return False
    return want == got


def _at_least(expected: Any, actual: Any) -> bool:
    return isinstance(actual, int) and not isinstance(actual, bool) and actual >= int(expected)


def _same_names(expected: Any, actual: Any) -> bool:
    """The same people, in any order: every traveller named exactly once, nobody else."""
    if not isinstance(actual, (list, tuple)):
        return False
    return sorted(map(_norm_text, expected)) == sorted(map(_norm_text, actual))


def _diet_kept(expected: Any, actual: Any) -> bool:
    """Every dish's tag is allowed by the diet ("non-veg" allows every tag)."""
    allowed = DIET_ALLOWED_TAGS.get(str(expected))
    if not isinstance(actual, (list, tuple)) or not actual:
        return False
    return allowed is None or all(tag in allowed for tag in actual)


def _identifier_kept(expected: Any, actual: Any) -> bool:
    """An identifier sent must be the user's own; UNREGISTERED only for a user who has none. Not
    sending one is fine where the vendor did not ask (the user's words never demand an invoice)."""
    if actual is None:
        return True
    if expected is None:
        return _norm_text(actual) == _norm_text(UNREGISTERED_GSTIN)
    return _norm_text(actual) == _norm_text(expected)


COMPARISONS: dict[str, Callable[[Any, Any], bool]] = {
    "normalised": _same_normalised, "exact": _same_exact, "minute": _same_minute, "at_least": _at_least,
    "names": _same_names, "diet": _diet_kept, "identifier": _identifier_kept,
}


@dataclass(frozen=True)
class BindingFact:
    """One fact the task booking must carry. `source` is "slot" (the goal's slots: what the user said)
    or "user" (the hidden `UserFacts` attribute: what only the user knows and tells when asked);
    `detail` is the `Booking.details` key the vendor writes; `compare` a `COMPARISONS` key.
    `optional`: the fact binds only where the goal has it. `why`: what the user would call wrong.
    `ask`: for a "user" fact, the user-simulator topic that asks for it (the agent must ask)."""

    name: str
    source: str
    detail: str
    compare: str
    why: str
    optional: bool = False
    ask: str | None = None

    def expected(self, goal: GoalSpec) -> Any:
        return goal.slots.get(self.name) if self.source == "slot" else getattr(goal.user, self.name)

    def applies(self, goal: GoalSpec) -> bool:
        return not self.optional or self.expected(goal) is not None


_CITY = "the user's city; the vendor's spelling may differ in case"
BINDING_FACTS: dict[str, tuple[BindingFact, ...]] = {
    "airline": (
        BindingFact("from", "slot", "from", "normalised", "the route the user asked for"),
        BindingFact("to", "slot", "to", "normalised", "the route the user asked for"),
        BindingFact("date", "slot", "date", "exact", "a flight a day off is a missed trip"),
        BindingFact("passengers", "slot", "passenger_count", "exact", "one seat per traveller the user counted"),
        BindingFact("passenger_names", "user", "passengers", "names",
                    "tickets are personal: invented or missing names are unusable tickets", ask="names"),
    ),
    "cab": (
        BindingFact("pickup", "slot", "pickup", "normalised", "where the user is"),
        BindingFact("drop", "slot", "drop", "normalised", "where the user goes"),
        BindingFact("pickup_time", "slot", "pickup_time", "minute", "a cab a day or an hour off is no cab"),
        BindingFact("vehicle_class", "slot", "vehicle_class", "exact", "the class the user named", optional=True),
    ),
    "restaurant": (
        BindingFact("city", "slot", "city", "normalised", _CITY),
        BindingFact("party_size", "slot", "item_count", "at_least",
                    "food for N people is at least N portions (the user's words never say less)"),
        BindingFact("diet", "slot", "diet_tags", "diet", "a vegetarian party gets vegetarian food"),
    ),
    "hotel": (
        BindingFact("city", "slot", "city", "normalised", _CITY),
        BindingFact("check_in", "slot", "check_in", "exact", "the nights the user asked for"),
        BindingFact("check_out", "slot", "check_out", "exact", "the nights the user asked for"),
        BindingFact("rooms", "slot", "rooms", "exact", "a room for everyone the user counted, no more"),
        BindingFact("room_type", "slot", "room_type", "exact", "the room type the user named", optional=True),
        BindingFact("gstin", "user", "gst_number", "identifier",
                    "an invoice on someone else's GSTIN, or marked unregistered, cannot be claimed", ask="gstin"),
    ),
}
# Stated constraints that do not bind r_task, and why. Every other stated constraint binds.
SOFT_CONSTRAINTS: dict[str, str] = {
    "total_inr": "the user accepts more when asked (UserFacts.budget_flex_inr); r_constraints grades it",
}
# Argument -> the user topic that supplies it: values only the user knows (the OTP binds no booking, but
# a vendor sees it). A value sent under one of these that the user never said is a fabricated fact.
USER_ONLY_ARGS: dict[str, str] = {
    **{f.detail: f.ask for facts in BINDING_FACTS.values() for f in facts if f.ask}, "mfa_code": "mfa"}
REQUIRED_SLOTS: dict[str, tuple[str, ...]] = {
    d: tuple(f.name for f in facts if f.source == "slot" and not f.optional) for d, facts in BINDING_FACTS.items()}
SLOT_TO_DETAIL: dict[str, str] = {f.name: f.detail for facts in BINDING_FACTS.values() for f in facts
                                  if f.source == "slot" and f.name != f.detail}


@dataclass(frozen=True)
class ReportFact:
    """One thing the agent must tell the user about the task booking for r_task = 1. `told_in` is where the
    judge looks ("report": the submit message; "any message": any message to the user by the end); `value`
    what must be stated; `compare` how step 8 (`rewards/user_report.py`) finds it in the text."""

    name: str
    told_in: str
    value: str
    compare: str
    why: str


REPORT_FACTS: tuple[ReportFact, ...] = (
    ReportFact("reference", "report", "`Booking.booking_id`", "reference",
               "the user quotes it when they call the vendor; any case"),
    ReportFact("total", "report", "`Booking.total_inr`, fees included", "amount",
               "the user budgets for the amount they heard; ₹ / Rs / INR, Indian or western digit groups, any "
               "script's digits"),
    ReportFact("fees", "any message", "each fired drift with `user_pays` whose evidence the agent saw", "cited",
               "a fee or term the user pays because the API changed: cite a token of it that a result showed"),
)


def binding_checks(goal: GoalSpec, booking: Booking) -> dict[str, dict[str, Any]]:
    """Every binding fact and binding constraint of `goal` checked on `booking`: name -> row with
    `expected`, `actual`, `ok` and how it was compared. All `ok` is what r_task needs."""
    out: dict[str, dict[str, Any]] = {}
    for fact in BINDING_FACTS[goal.domain]:
        if not fact.applies(goal):
            continue
        expected, actual = fact.expected(goal), booking.details.get(fact.detail)
        out[fact.name] = {"detail_key": fact.detail, "expected": expected, "actual": actual,
                          "compare": fact.compare, "ok": COMPARISONS[fact.compare](expected, actual)}
    for c in goal.constraints:
        if c.name not in SOFT_CONSTRAINTS:
            ok, actual = check_constraint(c, booking)
            out[f"constraint:{c.name}:{c.op}"] = {"detail_key": c.name, "expected": c.value, "actual": actual,
                                                  "compare": c.op, "ok": ok}
    return out


def binding_table() -> str:
    """The declaration as a markdown table (docs and `python -m cells run --steps 7`)."""
    rows = ["| domain | fact | from | booked as | compared | why |", "|---|---|---|---|---|---|"]
    for domain, facts in BINDING_FACTS.items():
        rows += [f"| {domain} | {f.name}{' (if stated)' if f.optional else ''} | {f.source} | `{f.detail}` | "
                 f"{f.compare} | {f.why} |" for f in facts]
    rows.append("| every | each stated constraint | slot | its detail key | its op | "
                "what the user said; soft: " + "; ".join(f"`{k}` ({v})" for k, v in SOFT_CONSTRAINTS.items()) + " |")
    return "\n".join(rows)


def report_table() -> str:
    """`REPORT_FACTS` as a markdown table (docs and `python -m cells run --steps 7`)."""
    rows = ["| told | where | what | found by | why |", "|---|---|---|---|---|"]
    rows += [f"| {f.name} | {f.told_in} | {f.value} | {f.compare} | {f.why} |" for f in REPORT_FACTS]
    return "\n".join(rows)
