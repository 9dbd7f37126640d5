"""A scripted search-then-book per domain, used by step 5's `run` and by tests as a smoke path."""

from __future__ import annotations

from typing import Any

from cells.step_04_models import ToolResult

from .dispatch import dispatch
from .world import World, new_world


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
                                            "passengers": names[: int(slots.get("passengers", 1))], **pay})
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
    from cells.step_05_vendors import sample_goal

    out = []
    for domain in ("airline", "cab", "restaurant", "hotel"):
        result, _ = book_cheapest(new_world(sample_goal(domain), seed=7))
        if not result.ok:
            raise AssertionError(f"{domain} smoke booking failed: {result.response}")
        out.append((domain, f"{result.response['booking_id']} total ₹{result.response['total_inr']}"))
    return out
