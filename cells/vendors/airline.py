"""Airline vendor: search flights, book, cancel, get a booking.

Listings are a pure function of (seed, route, date, goal). For the goal's own query they always
hold a cheapest option departing before 10:00 and a second one after 10:30 that both satisfy
every goal constraint with >= ₹700 slack (room for a later fee), plus one over budget.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from cells.step_04_datatypes import Booking, GoalSpec, rng_for, stable_id

from .error_codes import ErrorCode, VendorError
from .generic import booking_extras
from .payment import authorize_and_charge
from .registry import REFERENCE_PREFIXES, Arg, Effect, Tool, payment_args
from .world import (
    World,
    commit_booking,
    goal_constraint,
    goal_slot_matches,
    hhmm,
    memo_listings,
    minutes,
    norm,
)
from .write_path import booking_view, cancel, check_duplicate, find_booking

CARRIERS = ("6E", "AI", "UK", "SG", "QP", "IX")
FARE_FLOOR_INR = 2100  # per passenger; keeps every booking above the ₹2,000 MFA drift threshold
SLACK_INR = 700
DEFAULT_DEPARTURE_WINDOW = ("05:00", "22:30")  # "HH:MM" bounds for a goal that states no departure time
# The two planted budget fits depart in these windows (intersected with the goal's): the cheaper one
# before a 10:00 booking-window drift, the other after it, so that drift bites and can be survived.
EARLY_FIT_DEPARTURES = ("05:00", "09:55")
LATER_FIT_DEPARTURES = ("10:30", "22:30")


def departure_window(goal: GoalSpec) -> tuple[str, str]:
    """The goal's departure window as "HH:MM" bounds (DEFAULT_DEPARTURE_WINDOW where it states none)."""
    return (goal_constraint(goal, "depart_time", "ge") or DEFAULT_DEPARTURE_WINDOW[0],
            goal_constraint(goal, "depart_time", "le") or DEFAULT_DEPARTURE_WINDOW[1])


def _window(goal_lo: int, goal_hi: int, lo: int, hi: int, rng: Any) -> int:
    """A 5-minute departure slot inside [lo, hi] ∩ goal window, else inside the goal window."""
    a, b = max(goal_lo, lo), min(goal_hi, hi)
    if a > b:
        a, b = goal_lo, goal_hi
    return rng.randrange(a, b + 1, 5) if b - a >= 5 else a


def _plant_goal_options(world: World, flights: list[dict[str, Any]], rng: Any) -> None:
    """Overwrite the first three flights with two budget fits (morning, later) and one over budget."""
    goal = world.goal
    pax = int(goal.slots.get("passengers", 1))
    budget = goal_constraint(goal, "total_inr", "le") or pax * 6000 + 1500
    lo, hi = (minutes(t) for t in departure_window(goal))
    fit_max = budget - SLACK_INR
    anchor = max(FARE_FLOOR_INR, (fit_max - rng.randint(100, 600)) // pax)
    second = anchor + max(0, fit_max - anchor * pax) // pax // 2
    seats = max(9, pax + 2)
    early, later = ((minutes(a), minutes(b)) for a, b in (EARLY_FIT_DEPARTURES, LATER_FIT_DEPARTURES))
    flights[0].update(fare=anchor, depart=_window(lo, hi, *early, rng), seats=seats + rng.randint(0, 20))
    flights[1].update(fare=second, depart=_window(lo, hi, *later, rng), seats=seats + 5)
    flights[2].update(fare=budget // pax + rng.randint(300, 2000))
    for f in flights[3:]:
        f["fare"] = max(f["fare"], second + rng.randint(100, 1500))


@memo_listings
def listings(world: World, origin: str, dest: str, date: str) -> list[dict[str, Any]]:
    """Internal flight records (fare in INR per passenger, depart in minutes), sorted by departure."""
    rng = rng_for(world.seed, "airline.search", norm(origin), norm(dest), date)
    numbers: set[str] = set()
    flights: list[dict[str, Any]] = []
    for _ in range(rng.randint(3, 8)):
        number = f"{rng.choice(CARRIERS)}-{rng.randint(101, 9899)}"
        while number in numbers:
            number = f"{number[:3]}{rng.randint(101, 9899)}"
        numbers.add(number)
        flights.append({"flight_id": number, "from": origin.upper(), "to": dest.upper(), "date": date,
                        "depart": rng.randrange(5 * 60, 22 * 60 + 35, 5), "duration": rng.randrange(65, 190, 5),
                        "fare": rng.randrange(2500, 9500, 10), "seats": rng.randint(0, 40)})
    if goal_slot_matches(world.goal, "airline", **{"from": origin, "to": dest, "date": date}):
        _plant_goal_options(world, flights, rng)
    return sorted(flights, key=lambda f: (f["depart"], f["flight_id"]))


def _iso(date: str, minute_of_day: int) -> str:
    stamp = dt.datetime.fromisoformat(date) + dt.timedelta(minutes=minute_of_day)
    return stamp.strftime("%Y-%m-%dT%H:%M:00+05:30")


def _render(world: World, f: dict[str, Any]) -> dict[str, Any]:
    flags = world.flags["airline"]
    out = {"flight_id": f["flight_id"], "from": f["from"], "to": f["to"],
           "departure": _iso(f["date"], f["depart"]), "arrival": _iso(f["date"], f["depart"] + f["duration"]),
           flags["price_field"]: f["fare"], "seats_left": f["seats"], "cabin_baggage_kg": flags["cabin_baggage_kg"]}
    if flags["show_currency"]:
        out["currency"] = "INR"
    return out


def search(world: World, args: dict[str, Any], turn: int) -> tuple[dict[str, Any], World]:
    """Search one-way flights between two airports (IATA codes, e.g. "HYD", "BLR") on a date
    (YYYY-MM-DD). Each flight has a `flight_id`, departure/arrival times (IST) and a per-passenger
    fare in whole rupees, plus `seats_left`."""
    found = listings(world, args["from"], args["to"], args["date"])
    return {"flights": [_render(world, f) for f in found]}, world


def _find_flight(world: World, flight_id: str, date: str) -> dict[str, Any]:
    slots = world.goal.slots
    if world.goal.domain == "airline":
        for f in listings(world, str(slots.get("from")), str(slots.get("to")), date):
            if f["flight_id"] == flight_id:
                return f
    raise VendorError(ErrorCode.NOT_FOUND, field_name="flight_id", got=flight_id)


def _check_policy(world: World, flight: dict[str, Any], pax: int, date: str) -> None:
    cutoff = world.flag("airline", "earliest_bookable_departure")
    if cutoff is not None and flight["depart"] < minutes(cutoff):
        open_ids = [f["flight_id"] for f in listings(world, flight["from"], flight["to"], date)
                    if f["depart"] >= minutes(cutoff) and f["seats"] >= pax]
        raise VendorError(ErrorCode.BOOKING_WINDOW_CLOSED, earliest_departure=cutoff, available=open_ids)
    if flight["seats"] < pax:
        raise VendorError(ErrorCode.SEATS_UNAVAILABLE, seats_left=flight["seats"], passenger_count=pax)


PASSENGER_FIELDS = ("name",)  # what each element of `passengers` holds (a drift may require one more)


def passenger_names(passengers: list[dict[str, Any]]) -> list[str]:
    """The full names in `passengers` ([{"name": ...}], each element checked as the restaurant checks order items:
    an unknown key or a missing name is refused, naming the nested field)."""
    names = []
    for person in passengers:
        extra = sorted(set(person) - set(PASSENGER_FIELDS))
        if extra:
            raise VendorError(ErrorCode.UNKNOWN_FIELD, field_name=f"passengers[].{extra[0]}",
                              allowed=list(PASSENGER_FIELDS))
        name = person.get("name")
        if not isinstance(name, str) or not name.strip():
            raise VendorError(ErrorCode.INVALID_FIELD_TYPE, field_name="passengers[].name",
                              expected="{name: str}: the passenger's full name")
        names.append(name)
    return names


def book(world: World, args: dict[str, Any], turn: int) -> tuple[dict[str, Any], World]:
    """Book seats on a flight for all passengers ([{"name": full name}, ...]) and pay with `payment_token`.
    Returns the `booking_id` and the `total_inr` actually charged, fees included."""
    # 1. schema: top-level fields and types were checked by dispatch; each passenger and a cross-field rule here.
    names = passenger_names(args["passengers"])
    pax = len(names)
    if args.get("passenger_count") is not None and args["passenger_count"] != pax:
        raise VendorError(ErrorCode.INVALID_FIELD_VALUE, field_name="passenger_count", expected=pax)
    flight = _find_flight(world, args["flight_id"], args["date"])
    # 2. policy
    _check_policy(world, flight, pax, args["date"])
    # 3. duplicate
    key = f"airline|{flight['flight_id']}|{args['date']}"
    check_duplicate(world, key, ErrorCode.DUPLICATE_BOOKING)
    # 4. payment (nothing is recorded unless it succeeds)
    flags = world.flags["airline"]
    fees, shown = booking_extras(flags)
    total = flight["fare"] * pax + flags["convenience_fee_inr"] + fees
    paid, payment_id = authorize_and_charge(world, total, args["payment_token"], args.get("mfa_code"),
                                            turn, "airline.book")
    # 5. id generation + commit
    details = {"flight_id": flight["flight_id"], "from": flight["from"], "to": flight["to"],
               "date": args["date"], "depart_time": hhmm(flight["depart"]), "passenger_count": pax,
               "passengers": names}
    booking = Booking(stable_id(REFERENCE_PREFIXES["airline"], world.seed, key, len(world.bookings)), "airline", "airline.book",
                      "confirmed", details, total, turn, payment_id)
    response = {**booking_view(booking), flags["price_field"]: flight["fare"],
                "cabin_baggage_kg": flags["cabin_baggage_kg"]}
    if flags["convenience_fee_inr"]:
        response["convenience_fee_inr"] = flags["convenience_fee_inr"]
    if flags["reschedule_fee_pct"]:
        response["reschedule_fee_pct"] = flags["reschedule_fee_pct"]
    return {**response, **shown}, commit_booking(paid, booking, key)


def cancel_tool(world: World, args: dict[str, Any], turn: int) -> tuple[dict[str, Any], World]:
    """Cancel a flight booking by `booking_id`; the fare is refunded."""
    return cancel(world, "airline", args["booking_id"])


def get_booking(world: World, args: dict[str, Any], turn: int) -> tuple[dict[str, Any], World]:
    """Look up a flight booking by `booking_id` (status, flight, passengers, total charged)."""
    return booking_view(find_booking(world, "airline", args["booking_id"])), world


def _book_args(flags: dict[str, Any]) -> tuple[Arg, ...]:
    return (Arg("flight_id", "str", True, "flight_id from airline.search"),
            Arg("date", "date", True, "travel date YYYY-MM-DD"),
            Arg("passengers", "list[object]", True, "[{name}]: every passenger's full name"),
            Arg("passenger_count", "int", flags["requires_passenger_count"], "number of passengers"),
            *payment_args())


_ID = (Arg("booking_id", "str", True, "booking_id returned by airline.book"),)
TOOLS: tuple[Tool, ...] = (
    Tool("airline.search", search,
         lambda f: (Arg("from", "str", True, "origin IATA code"), Arg("to", "str", True, "destination IATA code"),
                    Arg("date", "date", True, "YYYY-MM-DD")),
         lambda f: ("flight_id", "from", "to", "departure", "arrival", f["price_field"], "seats_left",
                    "cabin_baggage_kg", *(("currency",) if f["show_currency"] else ()))),
    Tool("airline.book", book, _book_args,
         lambda f: ("booking_id", "status", "total_inr", "payment_id", f["price_field"], "cabin_baggage_kg",
                    *(("convenience_fee_inr",) if f["convenience_fee_inr"] else ())), Effect.COMMIT),
    Tool("airline.cancel", cancel_tool, lambda f: _ID, lambda f: ("booking_id", "status", "refund_inr"), Effect.CANCEL),
    Tool("airline.get_booking", get_booking, lambda f: _ID, lambda f: ("booking_id", "status", "total_inr")),
)
