"""The seeded goal generator: `generate(seed, stage, language_weights) -> GoalSpec`.

Every decision draws from its own `rng_for(seed, "task.<decision>", ...)`, so decisions are
independent: the language weights change only the language and what depends on it (wording,
the family's surname, the language a stage-3 user switches to), never the domain, template,
slots, constraints, MFA code, GSTIN or budget flexibility of a seed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from functools import cache
from typing import Any

from cells.errors import DriftCallError
from cells.step_04_datatypes import GOAL_DOMAINS, LANGUAGES, Constraint, GoalSpec, rng_for, stable_id
from cells.tasks import catalog
from cells.tasks.catalog import Template
from cells.tasks.facts import build_user, round_to
from cells.tasks.i18n import (
    city_codes,
    city_form,
    counted,
    finish,
    iso_now,
    money,
    phrases,
    place_name,
    places,
    rating_text,
    spoken_date,
    spoken_time,
    vocab,
)

STAGE_CONSTRAINTS: dict[int, tuple[int, int]] = {1: (1, 1), 2: (1, 2), 3: (2, 3)}  # (min, max) per stage
BUDGET_STEP: dict[str, int] = {"airline": 500, "cab": 50, "restaurant": 50, "hotel": 500}
CAB_HOURS = (5, 22)
DAYS_AHEAD = (1, 30)  # a flight's day or a stay's check-in, in days after the caller's
CAB_DAYS_AHEAD = (1, 3)  # a cab's pickup day
ISO_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")  # a date slot's value starts with one: "2027-01-02", "...T22:30"



class TaskGenerationError(DriftCallError, ValueError):
    """Bad arguments to `generate` (stage, language weights); the message names the fix."""


def pick_language(seed: int, language_weights: Mapping[str, float]) -> str:
    """Weighted, deterministic language choice (iterates `LANGUAGES` order, not dict order)."""
    unknown = set(language_weights) - set(LANGUAGES)
    if unknown:
        raise TaskGenerationError(f"unknown language(s) {sorted(unknown)}; use {LANGUAGES}")
    weights = [(lang, float(language_weights.get(lang, 0.0))) for lang in LANGUAGES]
    if any(w < 0 for _, w in weights) or sum(w for _, w in weights) <= 0:
        raise TaskGenerationError(f"language weights {dict(language_weights)} need >= 0 values and a positive total")
    x = rng_for(seed, "task.language").random() * sum(w for _, w in weights)
    for lang, w in weights:
        if x < w:
            return lang
        x -= w
    return next(lang for lang, w in reversed(weights) if w > 0)


def sample_now(seed: int) -> datetime:
    """Episode clock start: a deterministic moment in 2026 (IST), 07:00-21:45."""
    rng = rng_for(seed, "task.now")
    return datetime(2026, 1, 1) + timedelta(days=rng.randint(0, 364), hours=rng.randint(7, 21),
                                            minutes=rng.choice((0, 15, 30, 45)))


def in_later_year(value: Any, now: str) -> bool:
    """Whether slot `value` starts with an ISO date in a later calendar year than the ISO moment `now`."""
    match = ISO_DATE.match(str(value))
    return match is not None and match.group(1) > now[:4]


def crosses_year(goal: GoalSpec) -> bool:
    """Whether a date slot of `goal` lies in the next calendar year (a January date asked for in December, the
    year left unsaid): ~2.5% of goals, whose dates a cpu-learn warm start got wrong (`sft_data`)."""
    return any(in_later_year(v, goal.now) for v in goal.slots.values())


def may_cross_year(seed: int) -> bool:
    """A necessary condition for `crosses_year` of `seed`'s goal that costs one `sample_now`, not a goal (~12 µs
    against ~250): its clock starts within the furthest date any goal names (a stay's check-out, 34 days) of a new
    year. ~9% of seeds pass; ~2.5% cross."""
    now = sample_now(seed)
    return (now + timedelta(days=_furthest_days_ahead())).year > now.year


@cache
def _furthest_days_ahead() -> int:
    nights = max(int(n) for tpl in catalog.templates() for n in tpl.slot_choices("nights") or ())
    return max(DAYS_AHEAD[1] + nights, CAB_DAYS_AHEAD[1])


# ---------------------------------------------------------------------------------------------
# Slots per domain
# ---------------------------------------------------------------------------------------------


def _slots_airline(tpl: Template, seed: int, now: datetime) -> dict[str, Any]:
    rng = rng_for(seed, "task.slots.airline")
    src, dst = rng.sample(city_codes(), 2)
    day = (now + timedelta(days=rng.randint(*DAYS_AHEAD))).date().isoformat()
    return {"from": src, "to": dst, "date": day, "passengers": int(rng.choice(tpl.slot_choices("passengers")))}


def _place(rng: Any, kind: str, city: str, exclude: str | None) -> str:
    if kind == "airport":
        return f"{city}:AIRPORT"
    options = [p for p in places(city) if not p.endswith(":AIRPORT") and p != exclude]
    return rng.choice(options)


def _slots_cab(tpl: Template, seed: int, now: datetime) -> dict[str, Any]:
    rng = rng_for(seed, "task.slots.cab")
    city = rng.choice(city_codes())
    pickup = _place(rng, rng.choice(tpl.slot_choices("pickup")), city, None)
    drop = _place(rng, rng.choice(tpl.slot_choices("drop")), city, pickup)
    day = (now + timedelta(days=rng.randint(*CAB_DAYS_AHEAD))).date().isoformat()
    hhmm = f"{rng.randint(*CAB_HOURS):02d}:{rng.choice((0, 30)):02d}"
    slots: dict[str, Any] = {"city": city, "pickup": pickup, "drop": drop, "pickup_time": f"{day}T{hhmm}"}
    if tpl.slot_choices("vehicle_class"):
        slots["vehicle_class"] = rng.choice(tpl.slot_choices("vehicle_class"))
    return slots


def _slots_restaurant(tpl: Template, seed: int, now: datetime) -> dict[str, Any]:
    rng = rng_for(seed, "task.slots.restaurant")
    return {"city": rng.choice(city_codes()), "diet": rng.choice(tpl.slot_choices("diet")),
            "party_size": int(rng.choice(tpl.slot_choices("party_size")))}


def _slots_hotel(tpl: Template, seed: int, now: datetime) -> dict[str, Any]:
    rng = rng_for(seed, "task.slots.hotel")
    check_in = (now + timedelta(days=rng.randint(*DAYS_AHEAD))).date()
    nights = int(rng.choice(tpl.slot_choices("nights")))
    slots: dict[str, Any] = {
        "city": rng.choice(city_codes()), "check_in": check_in.isoformat(),
        "check_out": (check_in + timedelta(days=nights)).isoformat(),
        "rooms": int(rng.choice(tpl.slot_choices("rooms"))),
    }
    if tpl.slot_choices("room_type"):
        slots["room_type"] = rng.choice(tpl.slot_choices("room_type"))
    return slots


_SLOT_SAMPLERS = {"airline": _slots_airline, "cab": _slots_cab, "restaurant": _slots_restaurant,
                  "hotel": _slots_hotel}


def _nights(slots: dict[str, Any]) -> int:
    return (datetime.fromisoformat(slots["check_out"]) - datetime.fromisoformat(slots["check_in"])).days


# ---------------------------------------------------------------------------------------------
# Constraints
# ---------------------------------------------------------------------------------------------


def _budget(tpl: Template, slots: dict[str, Any], seed: int) -> int:
    rng = rng_for(seed, "task.constraint.budget")
    lo, hi = tpl.budget
    unit = rng.randint(lo, hi)
    if tpl.domain == "hotel":
        units = slots["rooms"] * _nights(slots)  # per room-night
    else:
        units = {"airline": slots.get("passengers", 1), "restaurant": slots.get("party_size", 1)}.get(tpl.domain, 1)
    return round_to(unit * units, BUDGET_STEP[tpl.domain])


def _diet_tags(tpl: Template, slots: dict[str, Any]) -> tuple[str, ...] | None:
    if tpl.no_egg:
        return catalog.NO_EGG_TAGS
    return catalog.DIET_ALLOWED_TAGS.get(slots.get("diet", ""))


def _applicable(tpl: Template, kind: str, slots: dict[str, Any]) -> bool:
    return kind != "diet" or _diet_tags(tpl, slots) is not None


def choose_kinds(tpl: Template, stage: int, slots: dict[str, Any], seed: int) -> tuple[str, ...]:
    """Constraint kinds for this goal: the template's core ones plus a stage-sized random share."""
    pool = [k for k in tpl.constraints if _applicable(tpl, k, slots)]
    lo, hi = STAGE_CONSTRAINTS[stage]
    rng = rng_for(seed, "task.constraint.count")
    n = min(max(rng.randint(lo, hi), tpl.core), len(pool))
    core = pool[: tpl.core]
    extra = set(rng.sample(pool[tpl.core:], max(0, n - len(core))))
    return tuple(k for k in pool if k in core or k in extra)


def _hhmm(rng: Any, hours: tuple[int, int]) -> str:
    return f"{rng.randint(*hours):02d}:{rng.choice((0, 30)):02d}"


def build_constraint(tpl: Template, kind: str, slots: dict[str, Any], seed: int) -> Constraint:
    """One constraint of `kind`; eq-constraints on slot-like values also pin the slot (mutates `slots`)."""
    rng = rng_for(seed, "task.constraint", kind)
    if kind == "budget":
        return Constraint("total_inr", "le", _budget(tpl, slots, seed))
    if kind == "depart_after":
        return Constraint("depart_time", "ge", _hhmm(rng, (6, 11)))
    if kind == "depart_before":
        return Constraint("depart_time", "le", _hhmm(rng, (15, 21)))
    if kind == "passenger_count":
        return Constraint("passenger_count", "eq", slots["passengers"])
    if kind == "vehicle_class":
        slots.setdefault("vehicle_class", rng.choice(tpl.option_choices("vehicle_class") or catalog.VEHICLE_CLASSES))
        return Constraint("vehicle_class", "eq", slots["vehicle_class"])
    if kind == "diet":
        return Constraint("diet_tags", "in", list(_diet_tags(tpl, slots) or ()))
    if kind == "min_items":
        return Constraint("item_count", "ge", rng.randint(2, max(2, min(5, slots["party_size"] + 1))))
    if kind == "room_type":
        slots.setdefault("room_type", rng.choice(tpl.option_choices("room_type") or catalog.ROOM_TYPES[:2]))
        return Constraint("room_type", "eq", slots["room_type"])
    if kind == "rating":
        return Constraint("rating", "ge", float(rng.choice(tpl.option_choices("rating") or (3.5, 4.0))))
    raise TaskGenerationError(f"unknown constraint kind {kind!r}")


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------


def render_values(domain: str, slots: Mapping[str, Any], lang: str) -> dict[str, str]:
    """Spoken forms of the slots for phrasings and summaries in `lang`."""
    if domain == "airline":
        n = int(slots.get("passengers", 1))
        return {"from_city": city_form(slots["from"], lang, "from"), "to_city": city_form(slots["to"], lang, "to"),
                "date": spoken_date(slots["date"], lang), "tickets": counted("tickets", n, lang), "n": str(n)}
    city = slots["city"]
    values = {"city": city_form(city, lang), "city_in": city_form(city, lang, "in"),
              "city_to": city_form(city, lang, "to")}
    if domain == "cab":
        vc = slots.get("vehicle_class")
        values.update(pickup=place_name(slots["pickup"], lang), drop=place_name(slots["drop"], lang),
                      date=spoken_date(slots["pickup_time"][:10], lang),
                      time=spoken_time(slots["pickup_time"][11:16], lang),
                      vehicle=vocab("vehicles", vc, lang) if vc else "")
    elif domain == "restaurant":
        values.update(party=str(slots["party_size"]), diet=vocab("diets", slots["diet"], lang))
    else:
        rt = slots.get("room_type")
        values.update(checkin=spoken_date(slots["check_in"], lang), checkout=spoken_date(slots["check_out"], lang),
                      rooms=counted("rooms", int(slots["rooms"]), lang), nights=str(_nights(dict(slots))),
                      room=vocab("room_types", rt, lang) if rt else "")
    return values


def _clause(kind: str, c: Constraint, lang: str, seed: int) -> str:
    key = kind
    values: dict[str, str] = {}
    if kind == "budget":
        values["budget"] = money(c.value)
    elif kind in ("depart_after", "depart_before"):
        values["time"] = spoken_time(c.value, lang)
    elif kind == "passenger_count":
        values["n"] = str(c.value)
    elif kind == "vehicle_class":
        values["vehicle"] = vocab("vehicles", c.value, lang)
    elif kind == "diet":
        key = {("veg",): "diet_veg", ("veg", "egg"): "diet_egg"}.get(tuple(c.value), "diet_noegg")
    elif kind == "min_items":
        values["items"] = str(c.value)
    elif kind == "room_type":
        values["room"] = vocab("room_types", c.value, lang)
    elif kind == "rating":
        values["rating"] = rating_text(c.value)
    options = phrases()["clauses"][key][lang]
    return options[rng_for(seed, "task.clause", kind).randrange(len(options))].format(**values)


def render_utterance(tpl: Template, slots: Mapping[str, Any], kinds: tuple[str, ...],
                     constraints: tuple[Constraint, ...], lang: str, seed: int) -> str:
    """The user's opening request: a native phrasing plus one clause per constraint, NFC."""
    options = tpl.phrasings_for(lang)
    base = options[rng_for(seed, "task.phrasing").randrange(len(options))]
    text = base.format(**render_values(tpl.domain, slots, lang))
    clauses = [_clause(k, c, lang, seed) for k, c in zip(kinds, constraints, strict=True)]
    return finish(" ".join([text, *clauses]), lang)


# ---------------------------------------------------------------------------------------------
# The generator
# ---------------------------------------------------------------------------------------------


def generate(seed: int, stage: int, language_weights: Mapping[str, float]) -> GoalSpec:
    """A deterministic goal for (seed, stage, language weights); see the module docstring."""
    if stage not in STAGE_CONSTRAINTS:
        raise TaskGenerationError(f"stage must be 1, 2 or 3, got {stage!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TaskGenerationError(f"seed must be an int, got {seed!r}")
    lang = pick_language(seed, language_weights)
    domain = rng_for(seed, "task.domain").choice(GOAL_DOMAINS)
    eligible = catalog.templates_for(domain, stage)
    tpl = eligible[rng_for(seed, "task.template", stage).randrange(len(eligible))]
    now = sample_now(seed)
    slots = _SLOT_SAMPLERS[domain](tpl, seed, now)
    kinds = choose_kinds(tpl, stage, slots, seed)
    constraints = tuple(build_constraint(tpl, k, slots, seed) for k in kinds)
    fields: dict[str, Any] = {
        "seed": seed, "stage": stage, "template_id": tpl.id, "domain": domain, "intent": tpl.intent,
        "slots": slots, "constraints": constraints, "language": lang,
        "seed_utterance": render_utterance(tpl, slots, kinds, constraints, lang, seed),
        "user": build_user(tpl, slots, constraints, seed, stage, lang), "now": iso_now(now),
    }
    return GoalSpec(goal_id=stable_id("goal", fields, length=12), **fields)
