"""Hotel vendor: search hotels (nightly rates per room type), book, cancel.

For the goal's city the first hotel meets the goal's rating and lets both standard and deluxe
rooms (and the goal's room type) fit the budget with slack >= ₹700 + ₹500/night (a resort fee
drift stays survivable); another hotel is over budget in every room type.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from cells.step_04_datatypes import Booking, GoalSpec, rng_for, stable_id

from .error_codes import ErrorCode, VendorError
from .generic import booking_extras
from .payment import authorize_and_charge
from .registry import REFERENCE_PREFIXES, Arg, Effect, Tool, payment_args
from .world import World, commit_booking, goal_constraint, goal_slot_matches, memo_listings, norm
from .write_path import UNREGISTERED_GSTIN, booking_view, cancel, check_duplicate, valid_gstin

ROOM_TYPES = ("standard", "deluxe", "suite")
NAMES = ("Taj Residency", "Lemon Tree", "Treebo Trend", "FabHotel Prime", "Ginger", "ITC Grand", "The Park")
RATE_FLOOR_INR = 1200  # per night; above the ₹1,000 GST drift threshold
SLACK_INR = 700  # the planted fit stays at least this far under the budget...
RESORT_FEE_ALLOWANCE_INR = 500  # ...plus this per night, so a resort-fee drift stays survivable
RATE_JITTER_INR = (50, 400)  # seeded amount taken off the fit's total (per unit, rounded down)


def nights_between(check_in: str, check_out: str) -> int:
    return (dt.date.fromisoformat(check_out) - dt.date.fromisoformat(check_in)).days


def cheapest_fit_bound_inr(goal: GoalSpec) -> int | None:
    """Roughly the least the planted budget-fitting booking costs, or None when the goal has no budget:
    the budget less the slack, the resort-fee allowance and the largest jitter (the per-unit rounding
    in `_plant_goal_options` can take up to rooms x nights - 1 more)."""
    budget = goal_constraint(goal, "total_inr", "le")
    if budget is None:
        return None
    slots = goal.slots
    nights = nights_between(slots["check_in"], slots["check_out"]) if "check_out" in slots else 1
    return budget - SLACK_INR - RATE_JITTER_INR[1] - RESORT_FEE_ALLOWANCE_INR * nights


def _plant_goal_options(world: World, hotels: list[dict[str, Any]], rng: Any) -> None:
    goal = world.goal
    slots = goal.slots
    nights = max(1, nights_between(slots["check_in"], slots["check_out"])) if "check_out" in slots else 1
    unit = nights * int(slots.get("rooms", 1))
    budget = goal_constraint(goal, "total_inr", "le") or 4500 * unit + 1500
    fit_max = (budget - SLACK_INR - RESORT_FEE_ALLOWANCE_INR * nights) // unit
    standard = max(RATE_FLOOR_INR, fit_max - rng.randint(*RATE_JITTER_INR) // unit)
    deluxe = standard + max(0, fit_max - standard) // 2
    wanted = goal_constraint(goal, "room_type", "eq") or slots.get("room_type")
    suite = deluxe + max(0, fit_max - deluxe) // 2 if wanted == "suite" else budget // unit + rng.randint(500, 3000)
    rating = min(4.9, max(4.0, float(goal_constraint(goal, "rating", "ge") or 0)))
    hotels[0].update(rating=rating, rates={"standard": standard, "deluxe": deluxe, "suite": suite})
    over = budget // unit + rng.randint(200, 2000)
    hotels[1]["rates"] = {"standard": over, "deluxe": over + 1500, "suite": over + 4000}
    for h in hotels[2:]:
        h["rates"] = {k: max(v, deluxe + 300) for k, v in h["rates"].items()}


@memo_listings
def listings(world: World, city: str) -> list[dict[str, Any]]:
    """Internal hotel records with nightly rates per room type; pure in (seed, city, goal)."""
    rng = rng_for(world.seed, "hotel.search", norm(city))
    hotels = []
    for i, name in enumerate(rng.sample(NAMES, rng.randint(4, 7))):
        base = rng.randrange(1800, 7000, 50)
        hotels.append({"hotel_id": f"HTL-{norm(city)}-{i + 1}", "name": name, "city": city,
                       "rating": rng.randint(30, 49) / 10,
                       "rates": {"standard": base, "deluxe": base * 14 // 10, "suite": base * 22 // 10}})
    if goal_slot_matches(world.goal, "hotel", city=city):
        _plant_goal_options(world, hotels, rng)
    return hotels


def _render(h: dict[str, Any]) -> dict[str, Any]:
    rooms = [{"room_type": k, "nightly_rate_inr": v} for k, v in h["rates"].items()]
    return {"hotel_id": h["hotel_id"], "name": h["name"], "city": h["city"], "rating": h["rating"], "rooms": rooms}


def search(world: World, args: dict[str, Any], turn: int) -> tuple[dict[str, Any], World]:
    """Find hotels in a city for check_in/check_out dates (YYYY-MM-DD). Each hotel has a rating and
    room types (standard, deluxe, suite) with a nightly rate per room in whole rupees."""
    if nights_between(args["check_in"], args["check_out"]) < 1:
        raise VendorError(ErrorCode.INVALID_FIELD_VALUE, field_name="check_out", expected="a date after check_in")
    return {"hotels": [_render(h) for h in listings(world, args["city"])]}, world


def _find_hotel(world: World, hotel_id: str) -> dict[str, Any]:
    parts = hotel_id.split("-")
    for h in listings(world, parts[1]) if len(parts) == 3 else []:
        if h["hotel_id"] == hotel_id:
            return h
    raise VendorError(ErrorCode.NOT_FOUND, field_name="hotel_id", got=hotel_id)


def _check_policy(world: World, hotel: dict[str, Any], args: dict[str, Any], total: int) -> None:
    flags = world.flags["hotel"]
    if args["room_type"] in flags["unavailable_room_types"]:
        available = [r for r in ROOM_TYPES if r not in flags["unavailable_room_types"]]
        raise VendorError(ErrorCode.ROOM_TYPE_UNAVAILABLE, room_type=args["room_type"], available=available)
    threshold = flags["gst_required_above_inr"]
    if threshold is not None and total > threshold and not args.get("gst_number"):
        raise VendorError(ErrorCode.GST_NUMBER_REQUIRED, field_name="gst_number", threshold_inr=threshold,
                          got_total_inr=total)


def book(world: World, args: dict[str, Any], turn: int) -> tuple[dict[str, Any], World]:
    """Book `rooms` rooms of one room type for check_in..check_out and pay with `payment_token`.
    Returns the `booking_id` and the `total_inr` charged (all nights, all rooms, fees included)."""
    # 1. schema: fields and types checked by dispatch; cross-field rules here.
    nights = nights_between(args["check_in"], args["check_out"])
    if nights < 1:
        raise VendorError(ErrorCode.INVALID_FIELD_VALUE, field_name="check_out", expected="a date after check_in")
    if args["room_type"] not in ROOM_TYPES:
        raise VendorError(ErrorCode.INVALID_FIELD_VALUE, field_name="room_type", expected=list(ROOM_TYPES))
    gst = args.get("gst_number")
    if gst is not None and gst != UNREGISTERED_GSTIN and not valid_gstin(gst):
        raise VendorError(ErrorCode.INVALID_FIELD_VALUE, field_name="gst_number",
                          expected=f'a valid 15-character GSTIN (with its check character) or "{UNREGISTERED_GSTIN}"')
    hotel = _find_hotel(world, args["hotel_id"])
    flags = world.flags["hotel"]
    fees, shown = booking_extras(flags)
    total = hotel["rates"][args["room_type"]] * nights * args["rooms"] + flags["resort_fee_per_night_inr"] * nights + fees
    # 2. policy
    _check_policy(world, hotel, args, total)
    # 3. duplicate
    key = f"hotel|{hotel['hotel_id']}|{args['check_in']}|{args['check_out']}|{args['room_type']}"
    check_duplicate(world, key, ErrorCode.DUPLICATE_BOOKING)
    # 4. payment
    paid, payment_id = authorize_and_charge(world, total, args["payment_token"], args.get("mfa_code"),
                                            turn, "hotel.book")
    # 5. id generation + commit
    details = {"hotel_id": hotel["hotel_id"], "city": hotel["city"], "check_in": args["check_in"],
               "check_out": args["check_out"], "nights": nights, "room_type": args["room_type"],
               "rooms": args["rooms"], "rating": hotel["rating"], "gst_number": gst}
    booking = Booking(stable_id(REFERENCE_PREFIXES["hotel"], world.seed, key, len(world.bookings)), "hotel", "hotel.book",
                      "confirmed", details, total, turn, payment_id)
    response = {**booking_view(booking), "nightly_rate_inr": hotel["rates"][args["room_type"]],
                "free_cancel_hours": flags["free_cancel_hours"]}
    if flags["resort_fee_per_night_inr"]:
        response["resort_fee_inr"] = flags["resort_fee_per_night_inr"] * nights
        response["resort_fee_per_night_inr"] = flags["resort_fee_per_night_inr"]
    if flags["early_checkin_fee_pct"]:
        response["early_checkin_fee_pct"] = flags["early_checkin_fee_pct"]
    if gst is not None:
        response["gst_number"] = gst
    return {**response, **shown}, commit_booking(paid, booking, key)


def cancel_tool(world: World, args: dict[str, Any], turn: int) -> tuple[dict[str, Any], World]:
    """Cancel a hotel booking by `booking_id`; the amount is refunded."""
    return cancel(world, "hotel", args["booking_id"])


def _book_args(flags: dict[str, Any]) -> tuple[Arg, ...]:
    gst_doc = "GSTIN of the guest's business, or \"UNREGISTERED\""
    if flags["gst_required_above_inr"] is not None:
        gst_doc += f"; required when the total exceeds ₹{flags['gst_required_above_inr']}"
    return (Arg("hotel_id", "str", True, "hotel_id from hotel.search"),
            Arg("room_type", "str", True, "standard, deluxe or suite"),
            Arg("check_in", "date", True, "YYYY-MM-DD"), Arg("check_out", "date", True, "YYYY-MM-DD"),
            Arg("rooms", "int", True, "number of rooms"), Arg("gst_number", "str", False, gst_doc), *payment_args())


TOOLS: tuple[Tool, ...] = (
    Tool("hotel.search", search,
         lambda f: (Arg("city", "str", True, "city name or code"), Arg("check_in", "date", True, "YYYY-MM-DD"),
                    Arg("check_out", "date", True, "YYYY-MM-DD")),
         lambda f: ("hotel_id", "name", "rating", "rooms", "room_type", "nightly_rate_inr")),
    Tool("hotel.book", book, _book_args,
         lambda f: ("booking_id", "status", "total_inr", "payment_id", "nightly_rate_inr", "free_cancel_hours",
                    *(("resort_fee_inr",) if f["resort_fee_per_night_inr"] else ())), Effect.COMMIT),
    Tool("hotel.cancel", cancel_tool, lambda f: (Arg("booking_id", "str", True, "booking_id from hotel.book"),),
         lambda f: ("booking_id", "status", "refund_inr"), Effect.CANCEL),
)
