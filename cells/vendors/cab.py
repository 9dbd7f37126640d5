"""Cab vendor: fare estimates per vehicle class, book a ride, cancel.

For the goal's own trip the cheapest classes (mini, sedan, and the goal's class) fit the budget
with slack (`slack_inr`: ₹700, less for small ride budgets but always above the ₹180 toll drift)
and the classes above them do not, so a budget binds at the class choice.
"""

from __future__ import annotations

from typing import Any

from cells.step_04_datatypes import Booking, rng_for, stable_id

from .error_codes import ErrorCode, VendorError
from .generic import booking_extras
from .payment import authorize_and_charge
from .registry import REFERENCE_PREFIXES, Arg, Effect, Tool, payment_args
from .world import World, commit_booking, goal_constraint, goal_slot_matches, norm
from .write_path import booking_view, cancel, check_duplicate

TIER = {"mini": 1.0, "sedan": 1.35, "prime": 1.6, "suv": 1.9, "premium": 2.8}  # cheapest first
FARE_FLOOR_INR = 60


def slack_inr(budget: int) -> int:
    """Headroom under the budget for the fitting classes: ₹700, or half a small budget (>= ₹230)."""
    return min(700, max(230, budget // 2))


def _goal_fares(world: World, classes: list[str], rng: Any) -> dict[str, int]:
    """Fares for the goal's trip: fits (through sedan or the goal's class) under budget - slack."""
    budget = goal_constraint(world.goal, "total_inr", "le") or 1500
    wanted = goal_constraint(world.goal, "vehicle_class", "eq") or world.goal.slots.get("vehicle_class") or "sedan"
    top = max(classes.index(c) for c in ("sedan", wanted) if c in classes) if classes else 0
    fits, over = classes[: top + 1], classes[top + 1:]
    fit_max = budget - slack_inr(budget)
    low = max(FARE_FLOOR_INR, fit_max - rng.randint(150, 400))
    step = max(0, fit_max - low) // max(1, len(fits))
    fares = {c: low + i * step for i, c in enumerate(fits)}
    fares.update({c: budget + rng.randint(100, 600) + 150 * i for i, c in enumerate(over)})
    return fares


def fares(world: World, pickup: str, drop: str) -> tuple[int, dict[str, int]]:
    """(distance_km, fare per vehicle class in INR) for a trip; a pure function of seed and places."""
    rng = rng_for(world.seed, "cab.estimate", norm(pickup), norm(drop))
    km = rng.randint(4, 32)
    classes = [c for c in TIER if c in world.flag("cab", "vehicle_classes")]
    if goal_slot_matches(world.goal, "cab", pickup=pickup, drop=drop):
        return km, _goal_fares(world, classes, rng)
    return km, {c: int((60 + 16 * km) * TIER[c]) for c in classes}


def _quote(world: World, vehicle_class: str, fare: int, km: int) -> dict[str, Any]:
    out: dict[str, Any] = {"vehicle_class": vehicle_class, "eta_min": 3 + (km + len(vehicle_class)) % 11}
    if world.flag("cab", "fare_breakdown"):
        gst = fare * 5 // 105
        surge = fare // 20
        out["fare_breakdown"] = {"base": fare - gst - surge, "surge": surge, "tolls": 0, "gst": gst}
        out["total_inr"] = fare
    else:
        out["fare_inr"] = fare
    return out


def estimate(world: World, args: dict[str, Any], turn: int) -> tuple[dict[str, Any], World]:
    """Estimate a ride between two places (e.g. "BLR:KORAMANGALA" -> "BLR:AIRPORT"): one quote per
    vehicle class with the fare in whole rupees and the pickup ETA in minutes."""
    km, table = fares(world, args["pickup"], args["drop"])
    quotes = [_quote(world, c, f, km) for c, f in table.items()]
    return {"pickup": args["pickup"], "drop": args["drop"], "distance_km": km, "options": quotes}, world


def _city(world: World, args: dict[str, Any]) -> str:
    if args.get("city"):
        return str(args["city"])
    if ":" in str(args["pickup"]):
        return str(args["pickup"]).split(":", 1)[0]
    return str(world.goal.slots.get("city", ""))


def book(world: World, args: dict[str, Any], turn: int) -> tuple[dict[str, Any], World]:
    """Book a ride for `pickup_time` (YYYY-MM-DDTHH:MM, IST) in one vehicle class and pay with
    `payment_token`. Returns the `booking_id` and the `total_inr` charged, fees included."""
    # 1. schema: fields and types checked by dispatch; the class must be one this vendor knows.
    flags = world.flags["cab"]
    _, table = fares(world, args["pickup"], args["drop"])
    vclass = args["vehicle_class"]
    if vclass not in table:
        raise VendorError(ErrorCode.INVALID_FIELD_VALUE, field_name="vehicle_class", expected=sorted(table))
    # 2. policy
    if vclass in flags["unavailable_classes"]:
        available = [c for c in table if c not in flags["unavailable_classes"]]
        raise VendorError(ErrorCode.VEHICLE_CLASS_UNAVAILABLE, vehicle_class=vclass, available=available)
    # 3. duplicate
    key = f"cab|{norm(args['pickup'])}|{norm(args['drop'])}|{args['pickup_time']}"
    check_duplicate(world, key, ErrorCode.DUPLICATE_BOOKING)
    # 4. payment
    fees, shown = booking_extras(flags)
    total = table[vclass] + flags["toll_fee_inr"] + fees
    paid, payment_id = authorize_and_charge(world, total, args["payment_token"], args.get("mfa_code"),
                                            turn, "cab.book")
    # 5. id generation + commit
    details = {"pickup": args["pickup"], "drop": args["drop"], "city": _city(world, args),
               "pickup_time": args["pickup_time"], "vehicle_class": vclass}
    booking = Booking(stable_id(REFERENCE_PREFIXES["cab"], world.seed, key, len(world.bookings)), "cab", "cab.book",
                      "confirmed", details, total, turn, payment_id)
    response = {**booking_view(booking), "fare_inr": table[vclass]}
    if flags["toll_fee_inr"]:
        response["toll_charges_inr"] = flags["toll_fee_inr"]
    if flags["retro_surge_cap"] is not None:
        response["retro_surge_cap"] = flags["retro_surge_cap"]
    return {**response, **shown}, commit_booking(paid, booking, key)


def cancel_tool(world: World, args: dict[str, Any], turn: int) -> tuple[dict[str, Any], World]:
    """Cancel a ride by `booking_id`; the fare is refunded."""
    return cancel(world, "cab", args["booking_id"])


def _book_args(flags: dict[str, Any]) -> tuple[Arg, ...]:
    return (Arg("pickup", "str", True, "pickup place"), Arg("drop", "str", True, "drop place"),
            Arg("vehicle_class", "str", True, f"one of {flags['vehicle_classes']}"),
            Arg("pickup_time", "datetime", True, "YYYY-MM-DDTHH:MM (IST)"),
            Arg("city", "str", flags["requires_city"], "city of the ride"), *payment_args())


TOOLS: tuple[Tool, ...] = (
    Tool("cab.estimate", estimate,
         lambda f: (Arg("pickup", "str", True, "pickup place"), Arg("drop", "str", True, "drop place"),
                    Arg("city", "str", False, "city of the ride"),
                    Arg("pickup_time", "datetime", False, "YYYY-MM-DDTHH:MM (IST)")),
         lambda f: ("distance_km", "options", "vehicle_class", "eta_min",
                    *(("fare_breakdown", "total_inr") if f["fare_breakdown"] else ("fare_inr",)))),
    Tool("cab.book", book, _book_args,
         lambda f: ("booking_id", "status", "total_inr", "payment_id", "fare_inr",
                    *(("toll_charges_inr",) if f["toll_fee_inr"] else ())), Effect.COMMIT),
    Tool("cab.cancel", cancel_tool, lambda f: (Arg("booking_id", "str", True, "booking_id from cab.book"),),
         lambda f: ("booking_id", "status", "refund_inr"), Effect.CANCEL),
)
