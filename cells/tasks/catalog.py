"""Template catalogue (validated on load) and the constraint contract shared with vendors/rewards.

Contract (vendors write these keys into `Booking.details`; rewards read them):
- `REQUIRED_SLOTS[domain]`: goal slots a booking must match for r_task.
- `SLOT_TO_DETAIL[slot]`: the `Booking.details` key where it differs from the goal slot key
  (flat: no slot name means different things in different domains).
- `CONSTRAINT_DETAIL_KEYS[domain]`: details keys constraints read (besides `total_inr`).
- `check_constraint(c, booking) -> (ok, actual)`.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from functools import cache
from typing import Any

from cells.errors import DriftCallError
from cells.step_03_data import load_fixture
from cells.step_04_models import GOAL_DOMAINS, LANGUAGES, Booking, Constraint
from cells.tasks.i18n import LANGUAGE_SCRIPT, has_script, nfc, phrases

TEMPLATES_FIXTURE = "templates.yaml"

INTENTS: dict[str, str] = {
    "airline": "book_flight", "cab": "book_cab", "restaurant": "order_food", "hotel": "book_hotel",
}
REQUIRED_SLOTS: dict[str, tuple[str, ...]] = {
    "airline": ("from", "to", "date"),
    "cab": ("pickup", "drop"),
    "restaurant": ("city",),
    "hotel": ("city", "check_in", "check_out"),
}
SLOT_TO_DETAIL: dict[str, str] = {"passengers": "passenger_count"}  # airline
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

    def slot_choices(self, name: str) -> tuple[Any, ...] | None:
        return dict(self.slots).get(name)

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
