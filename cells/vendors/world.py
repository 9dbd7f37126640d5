"""The frozen vendor `World` of one episode, its feature flags, and helpers shared by vendors.

Vendor behaviour is driven by per-domain feature flags that drifts set (`with_flags`), never by
a version string. `DEFAULT_FLAGS` documents every flag. Nothing here mutates a dict in place:
every change builds a new `World` with `dataclasses.replace`.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cells.errors import DriftCallError
from cells.step_04_datatypes import DOMAINS, GOAL_DOMAINS, Booking, GoalSpec

# The flags of the generic mechanisms generated drift families drive (cells/vendors/generic.py), the same in every
# goal domain, with the value their absence means: a world carries one only once a drift set it (a served judge view
# sends every flag on every call, so flags no drift set stay out of it).
GENERIC_FLAGS: dict[str, Any] = {
    "renamed_fields": {},  # response field -> its new name, in every response of the domain
    "required_args": [],  # further arguments a tool requires, each with where its value comes from
    "arg_formats": {},  # "tool|type" -> the format that tool now takes its date/datetime arguments in
    "booking_fees": {},  # fee field -> amount added to a booking's charged total
    "terms": {},  # term field -> value shown on the booking (a terms notice)
}

# Every flag a drift may set, with its pre-drift value. Drift patterns may only set these keys.
DEFAULT_FLAGS: dict[str, dict[str, Any]] = {
    "airline": {
        "price_field": "price",  # name of the per-passenger fare field in search/book results
        "show_currency": True,  # search results carry currency: "INR"
        "requires_passenger_count": False,  # book needs passenger_count == len(passengers)
        "earliest_bookable_departure": None,  # "HH:MM": earlier departures refuse bookings
        "convenience_fee_inr": 0,  # flat fee added at booking (search prices unchanged)
        "cabin_baggage_kg": 7,  # shown on flights; terms
        "reschedule_fee_pct": 0,  # shown on bookings; terms
    },
    "cab": {
        "vehicle_classes": ["mini", "sedan", "prime", "suv", "premium"],  # step_07 goals use the first four
        "unavailable_classes": [],  # classes refused at booking (still estimated)
        "fare_breakdown": False,  # estimate returns fare_breakdown{...} + total_inr instead of fare_inr
        "requires_city": False,  # book needs `city`
        "toll_fee_inr": 0,  # tolls added at booking
        "retro_surge_cap": None,  # e.g. 1.5: final fare may be raised after the ride (terms)
    },
    "restaurant": {
        "min_order_inr": 199,  # subtotal floor per order
        "items_require_modifiers": False,  # every order item needs a `modifiers` list
        "veg_filter_includes_egg": False,  # search(diet="veg") also returns egg dishes
        "delivery_fee_inr": 0,  # added at checkout
        "unavailable_dishes": [],  # dish names refused at ordering (still listed)
    },
    "hotel": {
        "gst_required_above_inr": None,  # bookings above this total need gst_number
        "unavailable_room_types": [],  # refused at booking
        "resort_fee_per_night_inr": 0,  # added at booking
        "early_checkin_fee_pct": 0,  # terms
        "free_cancel_hours": 24,  # terms
    },
    "payment": {
        "accepted_scope": "payments.basic",  # the only scope get_token issues and charges accept
        "mfa_threshold_inr": None,  # charges above this need the user's one-time code
    },
}


def settable_flags(domain: str) -> frozenset[str]:
    """The flags a drift may set in `domain`: its own (`DEFAULT_FLAGS`) and, in a goal domain, `GENERIC_FLAGS`."""
    return frozenset(DEFAULT_FLAGS[domain]) | (frozenset(GENERIC_FLAGS) if domain in GOAL_DOMAINS else frozenset())


@dataclass(frozen=True)
class World:
    """All vendor state for one episode. Read tools return the same object; writes return a new one."""

    seed: int
    goal: GoalSpec
    flags: dict[str, dict[str, Any]]
    schema_versions: dict[str, int]
    bookings: tuple[Booking, ...] = ()
    idempotency: dict[str, str] = field(default_factory=dict)  # canonical target key -> booking id
    tokens: tuple[str, ...] = ()  # payment tokens issued so far
    charges: tuple[dict[str, Any], ...] = ()  # {payment_id, amount_inr, status, turn}
    timeouts: dict[str, int] = field(default_factory=dict)  # call digest -> timed-out attempts so far
    # listings built this episode, by (vendor function, *query) (`memo_listings`): one dict shared by every
    # World of the episode (`dataclasses.replace` hands it on) and freed with them
    listings_memo: dict[tuple[Any, ...], list[dict[str, Any]]] = field(default_factory=dict, compare=False,
                                                                       repr=False)
    # (tool, argument, type): an argument (or `list[].field`) a training drill made `tool` require beyond its own
    # (`DriftCallEnv.require_argument`); never set by a drift, so no episode the judge scores has one
    extra_required: tuple[tuple[str, str, str], ...] = ()

    def flag(self, domain: str, name: str) -> Any:
        return self.flags[domain][name]

    def booking(self, booking_id: str) -> Booking | None:
        return next((b for b in self.bookings if b.booking_id == booking_id), None)

    def charge(self, payment_id: str) -> dict[str, Any] | None:
        return next((c for c in self.charges if c["payment_id"] == payment_id), None)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready judge view of the vendor state."""
        return {
            "seed": self.seed, "flags": self.flags, "schema_versions": self.schema_versions,
            "bookings": [b.to_dict() for b in self.bookings], "idempotency": self.idempotency,
            "tokens": list(self.tokens), "charges": list(self.charges), "timeouts": self.timeouts,
        }


class FlagError(DriftCallError, KeyError):
    """A drift tried to set a flag the vendor does not have."""


def new_world(goal: GoalSpec, seed: int) -> World:
    """A fresh World: default flags, schema version 1 everywhere, nothing booked."""
    flags = {d: dict(v) for d, v in DEFAULT_FLAGS.items()}
    return World(seed=seed, goal=goal, flags=flags, schema_versions=dict.fromkeys(DOMAINS, 1))


def with_flags(world: World, domain: str, updates: dict[str, Any]) -> World:
    """New World with `domain` flags updated and that domain's schema version + 1."""
    if domain not in DEFAULT_FLAGS:
        raise FlagError(f"unknown domain {domain!r}; allowed: {list(DEFAULT_FLAGS)}")
    unknown = sorted(set(updates) - settable_flags(domain))
    if unknown:
        raise FlagError(f"{domain} has no flag(s) {unknown}; allowed: {sorted(settable_flags(domain))}")
    flags = {**world.flags, domain: {**world.flags[domain], **updates}}
    versions = {**world.schema_versions, domain: world.schema_versions[domain] + 1}
    return dataclasses.replace(world, flags=flags, schema_versions=versions)


def commit_booking(world: World, booking: Booking, key: str) -> World:
    """New World with `booking` appended and its idempotency key indexed."""
    return dataclasses.replace(
        world, bookings=(*world.bookings, booking), idempotency={**world.idempotency, key: booking.booking_id},
    )


def live_duplicate(world: World, key: str) -> str | None:
    """The id of a live booking with this idempotency key, if any."""
    existing = world.booking(world.idempotency.get(key, ""))
    return existing.booking_id if existing is not None and existing.live else None


def cancel_booking(world: World, booking_id: str) -> World:
    """New World with the booking flagged cancelled (never deleted) and its charge refunded."""
    bookings = tuple(dataclasses.replace(b, status="cancelled") if b.booking_id == booking_id else b
                     for b in world.bookings)
    target = world.booking(booking_id)
    charges = tuple({**c, "status": "refunded"} if target and c["payment_id"] == target.payment_id else c
                    for c in world.charges)
    return dataclasses.replace(world, bookings=bookings, charges=charges)


# --- goal helpers: listings are built from the goal so its budget binds ---------------------

def goal_constraint(goal: GoalSpec, name: str, op: str | None = None) -> Any:
    """Value of the goal's constraint on `name` (and `op`), or None."""
    for c in goal.constraints:
        if c.name == name and (op is None or c.op == op):
            return c.value
    return None


def memo_listings(fn: Callable[..., list[dict[str, Any]]]) -> Callable[..., list[dict[str, Any]]]:
    """Cache a vendor's `listings(world, *query)`, a pure function of (goal, seed, query), for the episode.

    Search and then book (and the policy checks) each rebuilt the same seeded listing, which was
    the largest part of an env step. Entries live in the episode's `World.listings_memo`, so they die
    with the episode: a cache per process would hold most of the objects every full garbage collection scans,
    pauses that grow as it fills and land on a served step's latency. Cached listings are shared: treat them as
    read-only, as every handler already does (responses are built from them, never into them)."""

    @functools.wraps(fn)
    def cached(world: World, *query: Any) -> list[dict[str, Any]]:
        memo, key = world.listings_memo, (fn, *query)
        try:
            hit = memo.get(key)
        except TypeError:  # an unhashable query value: nothing to share
            return fn(world, *query)
        if hit is None:
            hit = memo[key] = fn(world, *query)
        return hit

    return cached


def norm(text: Any) -> str:
    """Canonical key for places and cities: upper-case alphanumerics (ids embed it; never empty)."""
    return "".join(ch for ch in str(text).upper() if ch.isalnum())[:16] or "X"


def goal_slot_matches(goal: GoalSpec, domain: str, **query: Any) -> bool:
    """True when this query asks for the goal's own listing (same domain, same canonical slots)."""
    if goal.domain != domain:
        return False
    return all(norm(goal.slots.get(k)) == norm(v) for k, v in query.items())


HHMM = re.compile(r"^([01]\d|2[0-3]):[0-5]\d$")
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def minutes(hhmm: str) -> int:
    h, m = hhmm.split(":")
    return int(h) * 60 + int(m)


def hhmm(total_minutes: int) -> str:
    return f"{total_minutes // 60:02d}:{total_minutes % 60:02d}"
