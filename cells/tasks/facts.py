"""Hidden facts of the simulated user: names, MFA code, GSTIN, budget flexibility, preferences and
the stage-3 language switch. Each fact has its own `rng_for(seed, "task.user.<fact>")` stream."""

from __future__ import annotations

from typing import Any

from cells.step_04_datatypes import Constraint, UserFacts, rng_for
from cells.tasks import catalog
from cells.tasks.catalog import Template
from cells.tasks.i18n import tables
from cells.vendors.write_path import gstin_checksum

SWITCH_TO: dict[str, str] = {"hi": "hinglish", "hinglish": "hi", "en": "hinglish", "ta": "en", "kn": "en"}
SWITCH_PROBABILITY = 0.4  # stage 3 only
_FIRST = ("Aarav", "Priya", "Rohan", "Ananya", "Vikram", "Kavya", "Arjun", "Meera", "Karthik",
          "Lakshmi", "Divya", "Suresh", "Deepa", "Rahul", "Sneha", "Aditya", "Nikhil", "Pooja")
_SURNAMES: dict[str, tuple[str, ...]] = {
    "hi": ("Sharma", "Verma", "Gupta", "Mishra", "Singh"),
    "hinglish": ("Kapoor", "Malhotra", "Agarwal", "Joshi", "Saxena"),
    "ta": ("Iyer", "Krishnan", "Subramanian", "Rajan", "Natarajan"),
    "kn": ("Gowda", "Rao", "Hegde", "Shetty", "Kulkarni"),
    "en": ("Menon", "D'Souza", "Bose", "Reddy", "Nair"),
}


def round_to(x: float, step: int) -> int:
    """`x` rounded to a multiple of `step` (at least one step): budgets and flex amounts."""
    return max(step, round(x / step) * step)


def make_gstin(seed: int, state: str, business: bool) -> str:
    rng = rng_for(seed, "task.user.gstin")
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    pan = ("".join(rng.choice(letters) for _ in range(3)) + ("C" if business else "P")
           + rng.choice(letters) + f"{rng.randint(0, 9999):04d}" + rng.choice(letters))
    prefix = f"{state}{pan}1Z"
    return prefix + gstin_checksum(prefix)


def _names(seed: int, lang: str, count: int) -> tuple[str, ...]:
    rng = rng_for(seed, "task.user.names")
    surname = rng.choice(_SURNAMES[lang])
    return tuple(f"{first} {surname}" for first in rng.sample(_FIRST, count))


def _preferences(tpl: Template, slots: dict[str, Any], seed: int) -> dict[str, Any]:
    rng = rng_for(seed, "task.user.preferences")
    if tpl.domain == "cab":
        return {"vehicle_class": slots.get("vehicle_class") or rng.choice(catalog.VEHICLE_CLASSES[:3])}
    if tpl.domain == "restaurant":
        return {"diet": "no-egg" if tpl.no_egg else slots["diet"]}
    if tpl.domain == "hotel":
        return {"room_type": slots.get("room_type") or rng.choice(catalog.ROOM_TYPES[:2])}
    return {"seat": rng.choice(("window", "aisle"))}


def build_user(tpl: Template, slots: dict[str, Any], constraints: tuple[Constraint, ...],
               seed: int, stage: int, lang: str) -> UserFacts:
    """Facts the simulated user knows but only tells when asked."""
    rng = rng_for(seed, "task.user")
    city = slots.get("city") or slots["from"]
    state = str(tables()["cities"][city]["gst_state"])
    if tpl.gstin == "always":
        gstin: str | None = make_gstin(seed, state, business=True)
    else:
        has = rng.random() < (0.5 if tpl.domain == "hotel" else 0.15)
        gstin = make_gstin(seed, state, business=False) if has else None
    budget = next((c.value for c in constraints if c.name == "total_inr"), None)
    flex = round_to(budget * rng.choice((0.1, 0.15, 0.2)), 50) if budget and rng.random() < 0.5 else 0
    switch_to, switch_after = None, None
    if stage == 3 and rng_for(seed, "task.user.switch").random() < SWITCH_PROBABILITY:
        switch_to, switch_after = SWITCH_TO[lang], rng_for(seed, "task.user.switch_turn").randint(2, 5)
    return UserFacts(
        passenger_names=_names(seed, lang, slots.get("passengers", 1)),
        mfa_code=f"{rng_for(seed, 'task.user.mfa').randint(0, 999_999):06d}",
        gstin=gstin, budget_flex_inr=int(flex), time_flexible=rng.random() < 0.5,
        preferences=_preferences(tpl, slots, seed),
        switch_language_to=switch_to, switch_after_turn=switch_after,
    )


