"""A scripted search-then-book per domain on a hand-built goal (`sample_goal`), used by step 5's `run` and by
tests as a smoke path; step 7 generates the real goals."""

from __future__ import annotations

from typing import Any

from cells.step_04_datatypes import Constraint, GoalSpec, ToolResult, UserFacts, passengers_arg

from .dispatch import dispatch
from .world import World, new_world

_SAMPLE_SLOTS: dict[str, dict[str, Any]] = {
    "airline": {"from": "HYD", "to": "BLR", "date": "2026-05-02", "passengers": 2},
    "cab": {"city": "BLR", "pickup": "BLR:KORAMANGALA", "drop": "BLR:AIRPORT", "pickup_time": "2026-05-02T08:30"},
    "restaurant": {"city": "BLR", "diet": "veg", "party_size": 2},
    "hotel": {"city": "GOI", "check_in": "2026-05-02", "check_out": "2026-05-04", "rooms": 1},
}
_SAMPLE_BUDGET = {"airline": 14000, "cab": 1500, "restaurant": 1500, "hotel": 12000}


def sample_goal(domain: str, seed: int = 7, budget: int | None = None, slots: dict[str, Any] | None = None,
                constraints: tuple[Constraint, ...] = (), **user: Any) -> GoalSpec:
    """A hand-built GoalSpec for the self-check and tests (step 7 generates the real ones)."""
    names = ("Asha Rao", "Vikram Rao", "Meera Iyer", "Ravi Kumar")
    base = _SAMPLE_SLOTS[domain]
    merged = {**base, **(slots or {})}
    pax = int(merged.get("passengers", 1))
    facts = UserFacts(**{"passenger_names": names[:pax], "mfa_code": "482913", **user})
    cons = (Constraint("total_inr", "le", budget or _SAMPLE_BUDGET[domain]), *constraints)
    return GoalSpec(goal_id=f"sample-{domain}-{seed}", seed=seed, stage=1, template_id=f"sample_{domain}",
                    domain=domain, intent="book", slots=merged, constraints=cons, language="en",
                    seed_utterance=f"Please book this {domain} for me.", user=facts, now="2026-05-01T10:00:00+05:30")


def call(world: World, tool: str, args: dict[str, Any], turn: int = 1) -> tuple[ToolResult, World]:
    """dispatch, retrying an identical call after a timeout (as an agent should)."""
    for _ in range(5):
        result, world = dispatch(world, tool, args, turn)
        if result.status.value != "timeout":
            return result, world
    raise AssertionError(f"{tool} timed out 5 times in a row")  # 1e-10 chance: a bug


def book_cheapest(world: World, mfa_code: str | None = None, **extra: Any) -> tuple[ToolResult, World]:
    """Search the goal's own query and book/order its cheapest option with a fresh token."""
    goal, slots = world.goal, world.goal.slots
    tok, world = call(world, "payment.get_token", {"scope": world.flag("payment", "accepted_scope")})
    pay = {"payment_token": tok.response["payment_token"], **({"mfa_code": mfa_code} if mfa_code else {}), **extra}
    if goal.domain == "airline":
        res, world = call(world, "airline.search", {k: slots[k] for k in ("from", "to", "date")})
        field = world.flag("airline", "price_field")
        best = min(res.response["flights"], key=lambda f: f[field])
        names = list(goal.user.passenger_names) or ["Asha Rao"]
        return call(world, "airline.book", {"flight_id": best["flight_id"], "date": slots["date"],
                                            "passengers": passengers_arg(names[: int(slots.get("passengers", 1))]), **pay})
    if goal.domain == "cab":
        res, world = call(world, "cab.estimate", {"pickup": slots["pickup"], "drop": slots["drop"]})
        best = res.response["options"][0]
        return call(world, "cab.book", {"pickup": slots["pickup"], "drop": slots["drop"],
                                        "vehicle_class": best["vehicle_class"], "pickup_time": slots["pickup_time"],
                                        **pay})
    if goal.domain == "restaurant":
        res, world = call(world, "restaurant.search", {"city": slots["city"], "diet": slots.get("diet", "veg")})
        place = res.response["restaurants"][0]
        dish = min(place["menu"], key=lambda d: d["price_inr"])
        qty = max(2, -(-place["min_order_inr"] // dish["price_inr"]))
        return call(world, "restaurant.order", {"restaurant_id": place["restaurant_id"],
                                                "items": [{"dish_id": dish["dish_id"], "qty": qty}], **pay})
    res, world = call(world, "hotel.search", {k: slots[k] for k in ("city", "check_in", "check_out")})
    hotel = res.response["hotels"][0]
    room = min(hotel["rooms"], key=lambda r: r["nightly_rate_inr"])
    return call(world, "hotel.book", {"hotel_id": hotel["hotel_id"], "room_type": room["room_type"],
                                      "check_in": slots["check_in"], "check_out": slots["check_out"],
                                      "rooms": int(slots.get("rooms", 1)), **pay})


def smoke() -> list[tuple[str, str]]:
    """(domain, summary) after booking the cheapest option of a sample goal in each domain."""
    out = []
    for domain in ("airline", "cab", "restaurant", "hotel"):
        result, _ = book_cheapest(new_world(sample_goal(domain), seed=7))
        if not result.ok:
            raise AssertionError(f"{domain} smoke booking failed: {result.response}")
        out.append((domain, f"{result.response['booking_id']} total ₹{result.response['total_inr']}"))
    return out
