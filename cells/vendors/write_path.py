"""Shared write-path pieces: record lookup, cancel-as-flag, the duplicate stage, and the GSTIN check."""

from __future__ import annotations

import re
from typing import Any

from cells.step_04_datatypes import Booking

from .error_codes import ErrorCode, VendorError
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


UNREGISTERED_GSTIN = "UNREGISTERED"  # the gst_number of a guest without a GSTIN
_GST_CHARS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
GSTIN_FORM = re.compile(r"^\d{2}[A-Z]{5}\d{4}[A-Z][0-9A-Z]Z[0-9A-Z]$")  # state, PAN, entity, "Z", check


def gstin_checksum(first14: str) -> str:
    """The GSTIN check character (mod-36 weighted sum) for a 14-character prefix."""
    total = 0
    for i, ch in enumerate(first14):
        product = _GST_CHARS.index(ch) * (2 if i % 2 else 1)
        total += product // 36 + product % 36
    return _GST_CHARS[(36 - total % 36) % 36]


def valid_gstin(value: str) -> bool:
    """A GSTIN a real vendor would accept: the documented form and a correct check character."""
    return bool(GSTIN_FORM.match(value)) and gstin_checksum(value[:14]) == value[14]
