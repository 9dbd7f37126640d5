"""Reading observations: what in a tool result is drift evidence worth telling the user, and the
facts a user reply carries (OTP, GSTIN, names, a budget ceiling).

Evidence is found without the catalogue: an error's most specific extra (the scope it names, the
new earliest departure, the minimum order, the missing field, else the error code); in ok results,
any field the pre-drift responses never had, any documented default that moved, and the figures of
a `_notice` (percentages, rupee amounts, kg, hours, caps), in any language. The player cites that exact text, so its claims are always backed by what it saw.
"""

from __future__ import annotations

import re
from typing import Any

from cells.step_04_datatypes import ToolResult
from cells.tasks.i18n import money

# Every response key the vendors return before any drift (search, write and lookup tools).
KNOWN_KEYS: frozenset[str] = frozenset({
    "flights", "flight_id", "from", "to", "departure", "arrival", "price", "seats_left", "cabin_baggage_kg",
    "currency", "booking_id", "status", "total_inr", "payment_id", "date", "depart_time", "passenger_count",
    "passengers", "pickup", "drop", "distance_km", "options", "vehicle_class", "eta_min", "fare_inr", "city",
    "pickup_time", "restaurants", "restaurant_id", "name", "rating", "delivery_eta_min", "menu",
    "min_order_inr", "dish_id", "price_inr", "tag", "items", "item_count", "diet_tags", "order_id",
    "subtotal_inr", "qty", "delivery_status", "hotels", "hotel_id", "rooms", "room_type", "nightly_rate_inr",
    "check_in", "check_out", "nights", "free_cancel_hours", "gst_number", "payment_token", "scope",
    "refund_inr", "amount_inr", "hint", "error_code",
})
# Documented defaults whose value moving is itself news for the user.
DEFAULT_VALUES: dict[str, Any] = {"cabin_baggage_kg": 7, "free_cancel_hours": 24, "min_order_inr": 199}
SILENT_ERRORS = frozenset({"TIMEOUT", "NOT_FOUND", "DUPLICATE_BOOKING", "DUPLICATE_ORDER", "UNKNOWN_TOOL",
                           "INVALID_ARGS", "INVALID_FIELD_TYPE", "INVALID_FIELD_VALUE", "UNKNOWN_FIELD"})
_FIGURE = re.compile(r"\d+(?:\.\d+)?\s?(?:kg|hours?|x)(?![a-z])|\d+(?:\.\d+)?%|₹\s?[\d,]+|\begg\b", re.IGNORECASE)
_OTP = re.compile(r"(?<!\d)\d{6}(?!\d)")
_GSTIN = re.compile(r"\b[0-9]{2}[0-9A-Z]{13}\b")
_NAME = re.compile(r"(?=\b([A-Z][a-z]+ [A-Z][A-Za-z']+))")  # overlapping: "Booking Aarav Kapoor" holds two
_MONEY = re.compile(r"₹\s?([\d,]+)")


def render_value(key: str, value: Any) -> str:
    """A field value as the user should hear it: ₹ for money, % for percentages, x for caps."""
    if isinstance(value, (dict, list)):
        return ""
    if key.endswith("_inr") and isinstance(value, int):
        return money(value)
    if key.endswith("_pct"):
        return f"{value}%"
    if key.endswith("_cap"):
        return f"{value}x"
    if key.endswith("_kg"):
        return f"{value} kg"
    if key.endswith("_hours"):
        return f"{value} hours"
    return str(value)


def _walk(value: Any, out: dict[str, Any]) -> None:
    """First occurrence of every key at any depth."""
    if isinstance(value, dict):
        for k, v in value.items():
            out.setdefault(str(k), v)
            _walk(v, out)
    elif isinstance(value, list):
        for v in value:
            _walk(v, out)


def error_cite(response: dict[str, Any]) -> str:
    """The most specific thing an error names (what the user should hear)."""
    for key in ("required_scope", "supported_scope", "earliest_departure"):
        if response.get(key):
            return str(response[key])
    if isinstance(response.get("min_order_inr"), int):
        return money(response["min_order_inr"])
    if response.get("field_name"):
        return str(response["field_name"]).rpartition("[].")[2]  # a nested field: its own name
    return str(response.get("error_code", ""))


def evidence_notes(result: ToolResult) -> list[tuple[str, bool]]:
    """Drift evidence in one result as (citation, urgent) pairs. Urgent: a fee, notice or moved
    field that only telling the user handles; an error is handled by fixing the call."""
    response = result.response
    notes: list[tuple[str, bool]] = []
    notice = response.get("_notice")
    if isinstance(notice, str):
        figures = list(dict.fromkeys(m.group(0) for m in _FIGURE.finditer(notice)))
        notes.append((", ".join(figures) if figures else notice[:60], True))
    if not result.ok:
        code = str(response.get("error_code"))
        return notes if code in SILENT_ERRORS else [*notes, (error_cite(response), False)]
    found: dict[str, Any] = {}
    _walk({k: v for k, v in response.items() if k != "_notice"}, found)
    for key, value in found.items():
        if key not in KNOWN_KEYS or (key in DEFAULT_VALUES and value != DEFAULT_VALUES[key]):
            notes.append((f"{key} {render_value(key, value)}".strip(), True))
    return notes


def otp_in(text: str) -> str | None:
    m = _OTP.search(text)
    return m.group(0) if m else None


def gstin_in(text: str) -> str | None:
    m = _GSTIN.search(text)
    return m.group(0) if m else None


def names_in(text: str) -> list[str]:
    """The full names ("First Last") a reply holds, in order. Where two candidates overlap, the later one wins: a
    capitalised word before a name ("Booking Aarav Kapoor ke naam pe") is not part of it."""
    found = [(m.start(1), m.group(1)) for m in _NAME.finditer(text)]
    kept: list[tuple[int, str]] = []
    for start, name in reversed(found):
        if not kept or start + len(name) <= kept[-1][0]:
            kept.append((start, name))
    return [name for _, name in reversed(kept)]


def max_money_in(text: str) -> int | None:
    values = [int(v.replace(",", "")) for v in _MONEY.findall(text) if v.replace(",", "").isdigit()]
    return max(values) if values else None


def fee_of(response: dict[str, Any]) -> int:
    """The fee a checkout added on top of the listed price (per night when the vendor says so)."""
    per_night = response.get("resort_fee_per_night_inr")
    if isinstance(per_night, int):
        return per_night
    return sum(v for k, v in response.items() if isinstance(v, int) and not isinstance(v, bool)
               and (k.endswith("_fee_inr") or k.endswith("_charges_inr")))
