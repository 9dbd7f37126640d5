"""Option reading and choice per domain: turn a search result into priced candidates, pick the
first listed one that meets every constraint the user stated, and build the write call's arguments.

Why the first listed, not the cheapest: the judge scores the booking against what the user asked
(slots, constraints, budget), never against price optimality, and the expert's choice is what a small
model must imitate in the warm start. "Scan the list, take the first that fits" is a rule a sub-1M-
parameter model learns from examples; an argmin over 5-8 prices is not (a cheapest-choice
expert left the warm-started cpu-learn model inventing flight ids that blend several listed ones).
Dishes follow the same rule: the whole order is the first allowed dish on the menu, one portion per diner
(the party size, or the stated item count when larger), more portions only to reach a minimum order. Why one
dish: the portion count is then a number the user said, copied; an order spread round-robin over three dishes
(2 + 2 + 1 for five) made the warm-started tiny model add up, and it fell a portion short in a third of its
failed development episodes once the judge bound the party size (`python -m cells diagnose --dev`). When
nothing fits the budget, the cheapest fitting option is the fallback the expert asks the user about.

Prices are read from whichever price field the result carries (`price`, `total_fare_inr`,
`fare_inr`, `total_inr`, or the sum of a `fare_breakdown`), and every field through `repair.read`, which finds
a renamed field where the documented one is gone, so a renamed field does not blind the expert;
`strict_fields=True` (the naive player) reads only the documented pre-drift names. Each option keeps the listing
item it was built from (`attrs["item"]`): a refused booking may need a value the item shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .base import GoalReader
from .repair import read

DIET_TAGS: dict[str, tuple[str, ...]] = {"veg": ("veg",), "egg": ("veg", "egg"), "non-veg": ("veg", "egg", "non-veg")}
PRICE_FIELDS = ("price", "total_fare_inr", "fare_inr", "total_inr")
STRICT_PRICE = {"airline": "price", "cab": "fare_inr"}


@dataclass(frozen=True)
class Option:
    """One bookable candidate: `key` identifies it, `cost` is the expected charged total."""

    key: str
    cost: int
    fits: bool  # every non-budget constraint met
    args: dict[str, Any]
    attrs: dict[str, Any] = field(default_factory=dict)


def price_of(item: dict[str, Any], domain: str, strict: bool) -> int | None:
    """The price an item shows, or None when the player cannot find one."""
    if strict:
        value = item.get(STRICT_PRICE[domain])
        return value if isinstance(value, int) else None
    for name in PRICE_FIELDS:
        if isinstance(item.get(name), int):
            return int(item[name])
    breakdown = item.get("fare_breakdown")
    if isinstance(breakdown, dict):
        return sum(v for v in breakdown.values() if isinstance(v, int))
    renamed = read(item, STRICT_PRICE[domain], int)
    return renamed if isinstance(renamed, int) else None


def _nights(goal: GoalReader) -> int:
    import datetime as dt

    s = goal.slots
    return max(1, (dt.date.fromisoformat(s["check_out"]) - dt.date.fromisoformat(s["check_in"])).days)


def airline_options(goal: GoalReader, response: dict[str, Any], strict: bool, fee: int) -> list[Option]:
    pax = int(goal.slots.get("passengers", 1))
    lo, hi = goal.constraint("depart_time", "ge") or "00:00", goal.constraint("depart_time", "le") or "23:59"
    out = []
    for f in response.get("flights", []):
        fare, flight = price_of(f, "airline", strict), read(f, "flight_id", str, strict)
        if fare is None or not isinstance(flight, str):
            continue
        depart = str(f.get("departure", ""))[11:16]
        fits = lo <= depart <= hi and int(f.get("seats_left", 0)) >= pax
        out.append(Option(flight, fare * pax + fee, fits, {"flight_id": flight, "date": goal.slots["date"]},
                          {"depart": depart, "item": f}))
    return out


def cab_options(goal: GoalReader, response: dict[str, Any], strict: bool, fee: int) -> list[Option]:
    wanted = goal.constraint("vehicle_class", "eq") or goal.slots.get("vehicle_class")
    s = goal.slots
    out = []
    for q in response.get("options", []):
        fare = price_of(q, "cab", strict)
        vclass = read(q, "vehicle_class", str, strict)
        if fare is None or not isinstance(vclass, str):
            continue
        args = {"pickup": s["pickup"], "drop": s["drop"], "vehicle_class": vclass, "pickup_time": s["pickup_time"]}
        out.append(Option(vclass, fare + fee, wanted is None or vclass == wanted, args, {"item": q}))
    return out


def _diet_allowed(goal: GoalReader) -> tuple[str, ...]:
    tags = goal.constraint("diet_tags", "in")
    if tags:
        return tuple(tags)
    return DIET_TAGS.get(str(goal.slots.get("diet")), DIET_TAGS["non-veg"])


def restaurant_options(goal: GoalReader, response: dict[str, Any], min_order: int | None, fee: int,
                       trust_filter: bool = False, strict: bool = False, banned: frozenset[str] = frozenset()
                       ) -> list[Option]:
    """Per restaurant: an order of its first allowed dish (not `banned`: refused by the vendor), a portion per
    diner, raised to the minimum order."""
    allowed = _diet_allowed(goal)
    # a naive player trusts the search filter for what a filter can say (a diet); a stated rule no filter
    # expresses ("no egg") it still checks dish by dish, as it reads every other stated constraint
    trust_filter = trust_filter and tuple(sorted(allowed)) in {tuple(sorted(t)) for t in DIET_TAGS.values()}
    want = max(int(goal.constraint("item_count", "ge") or 1), int(goal.slots.get("party_size", 1) or 1), 2)
    out = []
    for place in response.get("restaurants", []):
        menu = [(read(d, "dish_id", str, strict), price) for d in place.get("menu", [])
                if isinstance(price := read(d, "price_inr", int, strict), int) and (trust_filter or d.get("tag") in allowed)]
        menu = [(dish, price) for dish, price in menu if isinstance(dish, str) and dish not in banned]
        place_id = read(place, "restaurant_id", str, strict)
        if not menu or not isinstance(place_id, str):
            continue
        dish, price = menu[0]
        floor = max(int(place.get("min_order_inr", 0) or 0), min_order or 0)
        n = max(want, -(-floor // price))  # ceil: the fewest portions that reach the minimum
        items = [{"dish_id": dish, "qty": n}]
        out.append(Option(place_id, n * price + fee, True, {"restaurant_id": place_id, "items": items},
                          {"item_count": n, "item": place}))
    return out


def hotel_options(goal: GoalReader, response: dict[str, Any], fee_per_night: int, strict: bool = False
                  ) -> list[Option]:
    s = goal.slots
    nights, rooms = _nights(goal), int(s.get("rooms", 1))
    wanted = goal.constraint("room_type", "eq") or s.get("room_type")
    rating = float(goal.constraint("rating", "ge") or 0)
    out = []
    for h in response.get("hotels", []):
        hotel = read(h, "hotel_id", str, strict)
        for room in h.get("rooms", []):
            rate = read(room, "nightly_rate_inr", int, strict)
            if not isinstance(rate, int) or not isinstance(hotel, str):
                continue
            rt = read(room, "room_type", str, strict)
            fits = (wanted is None or rt == wanted) and float(h.get("rating", 0)) >= rating
            args = {"hotel_id": hotel, "room_type": rt, "check_in": s["check_in"],
                    "check_out": s["check_out"], "rooms": rooms}
            out.append(Option(f"{hotel}/{rt}", rate * nights * rooms + fee_per_night * nights, fits, args,
                              {"room_type": rt, "item": h}))
    return out


def choose(options: list[Option], budget: int | None, excluded: set[str]) -> tuple[Option | None, bool]:
    """(first listed option meeting every constraint, True), else (cheapest fitting one over budget, False)."""
    live = [o for o in options if o.key not in excluded]
    good = [o for o in live if o.fits and (budget is None or o.cost <= budget)]
    if good:
        return good[0], True
    live.sort(key=lambda o: (o.cost, o.key))
    near = [o for o in live if o.fits] or live
    return (near[0] if near else None), False
