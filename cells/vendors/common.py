"""Shared write-path pieces: record lookup, cancel-as-flag, and the duplicate stage."""

from __future__ import annotations

from typing import Any

from cells.step_04_models import Booking

from .errors import ErrorCode, VendorError
from .world import World, cancel_booking, live_duplicate


def find_booking(world: World, domain: str, booking_id: Any) -> Booking:
    """The booking with this id in `domain`, or NOT_FOUND."""
    booking = world.booking(str(booking_id))
    if booking is None or booking.domain != domain:
        raise VendorError(ErrorCode.NOT_FOUND, field_name="booking_id", got=booking_id)
    return booking


def cancel(world: World, domain: str, booking_id: Any) -> tuple[dict[str, Any], World]:
    """Flag a live booking cancelled and refund its charge; records are never deleted."""
    booking = find_booking(world, domain, booking_id)
    if not booking.live:
        raise VendorError(ErrorCode.ALREADY_CANCELLED, booking_id=booking.booking_id)
    response = {"booking_id": booking.booking_id, "status": "cancelled", "refund_inr": booking.total_inr}
    return response, cancel_booking(world, booking.booking_id)


def check_duplicate(world: World, key: str, code: ErrorCode) -> None:
    """Duplicate stage: refuse a second live booking of the same canonical target."""
    existing = live_duplicate(world, key)
    if existing is not None:
        raise VendorError(code, existing_id=existing)


def booking_view(booking: Booking) -> dict[str, Any]:
    """What get_booking / track show the agent."""
    return {"booking_id": booking.booking_id, "status": booking.status, "total_inr": booking.total_inr,
            "payment_id": booking.payment_id, **booking.details}
