"""Closed set of vendor error codes, each with the ToolResult status it maps to and a recovery hint.

Handlers raise `VendorError(code, **extras)`; `dispatch` turns exactly this family into an
error `ToolResult` with `response = {"error_code", "hint", **extras}`. Any other exception is
a bug and propagates.
"""

from __future__ import annotations

import enum
from typing import Any

from cells.errors import DriftCallError
from cells.step_04_datatypes import ToolStatus


class ErrorCode(str, enum.Enum):
    """Every error code a vendor can return (closed: tests check each is reachable)."""

    UNKNOWN_TOOL = "UNKNOWN_TOOL"
    INVALID_ARGS = "INVALID_ARGS"  # args was not a JSON object
    MISSING_REQUIRED_FIELD = "MISSING_REQUIRED_FIELD"
    INVALID_FIELD_TYPE = "INVALID_FIELD_TYPE"
    INVALID_FIELD_VALUE = "INVALID_FIELD_VALUE"
    UNKNOWN_FIELD = "UNKNOWN_FIELD"
    NOT_FOUND = "NOT_FOUND"
    MIN_ORDER_NOT_MET = "MIN_ORDER_NOT_MET"
    BOOKING_WINDOW_CLOSED = "BOOKING_WINDOW_CLOSED"
    SEATS_UNAVAILABLE = "SEATS_UNAVAILABLE"
    VEHICLE_CLASS_UNAVAILABLE = "VEHICLE_CLASS_UNAVAILABLE"
    ROOM_TYPE_UNAVAILABLE = "ROOM_TYPE_UNAVAILABLE"
    DISH_UNAVAILABLE = "DISH_UNAVAILABLE"
    GST_NUMBER_REQUIRED = "GST_NUMBER_REQUIRED"
    DUPLICATE_BOOKING = "DUPLICATE_BOOKING"
    DUPLICATE_ORDER = "DUPLICATE_ORDER"
    ALREADY_CANCELLED = "ALREADY_CANCELLED"
    ALREADY_REFUNDED = "ALREADY_REFUNDED"
    AUTH_TOKEN_INVALID = "AUTH_TOKEN_INVALID"
    AUTH_SCOPE_INSUFFICIENT = "AUTH_SCOPE_INSUFFICIENT"
    UNSUPPORTED_SCOPE = "UNSUPPORTED_SCOPE"
    MFA_REQUIRED = "MFA_REQUIRED"
    MFA_INVALID = "MFA_INVALID"
    TIMEOUT = "TIMEOUT"


_S, _P, _A = ToolStatus.SCHEMA_ERROR, ToolStatus.POLICY_ERROR, ToolStatus.AUTH_ERROR

# code -> (status, one-line recovery hint shown to the agent)
ERROR_TABLE: dict[ErrorCode, tuple[ToolStatus, str]] = {
    ErrorCode.UNKNOWN_TOOL: (_S, "Use one of the tool names listed in `available`."),
    ErrorCode.INVALID_ARGS: (_S, "Pass args as a JSON object of argument name -> value."),
    ErrorCode.MISSING_REQUIRED_FIELD: (_S, "Add the argument named in `field_name` and call again."),
    ErrorCode.INVALID_FIELD_TYPE: (_S, "Send `field_name` with the type given in `expected`."),
    ErrorCode.INVALID_FIELD_VALUE: (_S, "Fix `field_name` to match `expected` and call again."),
    ErrorCode.UNKNOWN_FIELD: (_S, "Remove the argument named in `field_name`; `allowed` lists valid ones."),
    ErrorCode.NOT_FOUND: (ToolStatus.NOT_FOUND, "Check the id against a fresh search or your booking ids."),
    ErrorCode.MIN_ORDER_NOT_MET: (_P, "Add items until the subtotal reaches `min_order_inr`."),
    ErrorCode.BOOKING_WINDOW_CLOSED: (_P, "Pick an option allowed by the window (see `earliest_departure`/`available`)."),
    ErrorCode.SEATS_UNAVAILABLE: (_P, "Choose a flight with enough `seats_left` for all passengers."),
    ErrorCode.VEHICLE_CLASS_UNAVAILABLE: (_P, "Book one of the vehicle classes listed in `available`."),
    ErrorCode.ROOM_TYPE_UNAVAILABLE: (_P, "Book one of the room types listed in `available`."),
    ErrorCode.DISH_UNAVAILABLE: (_P, "Order only dishes whose dish_id is listed in `available`."),
    ErrorCode.GST_NUMBER_REQUIRED: (_P, "Ask the user for their GSTIN and pass it as `gst_number` (or \"UNREGISTERED\")."),
    ErrorCode.DUPLICATE_BOOKING: (_P, "A live booking already exists (`existing_id`); do not book again."),
    ErrorCode.DUPLICATE_ORDER: (_P, "A live order already exists (`existing_id`); do not order again."),
    ErrorCode.ALREADY_CANCELLED: (_P, "This booking is already cancelled; nothing to do."),
    ErrorCode.ALREADY_REFUNDED: (_P, "This payment was already refunded; nothing to do."),
    ErrorCode.AUTH_TOKEN_INVALID: (_A, "Get a token with payment.get_token and pass it as `payment_token`."),
    ErrorCode.AUTH_SCOPE_INSUFFICIENT: (_A, "Get a new token with payment.get_token(scope=`required_scope`)."),
    ErrorCode.UNSUPPORTED_SCOPE: (_A, "Call payment.get_token again with scope=`supported_scope`."),
    ErrorCode.MFA_REQUIRED: (_A, "Ask the user for the one-time code and resend with `mfa_code`."),
    ErrorCode.MFA_INVALID: (_A, "The code was wrong; ask the user to repeat the one-time code."),
    ErrorCode.TIMEOUT: (ToolStatus.TIMEOUT, "The vendor timed out; retry the identical call."),
}


class VendorError(DriftCallError):
    """An agent-facing vendor error: becomes an error ToolResult, never a crash."""

    def __init__(self, code: ErrorCode, **extras: Any) -> None:
        super().__init__(f"{code.value}: {extras}")
        self.code = code
        self.extras = extras

    @property
    def status(self) -> ToolStatus:
        return ERROR_TABLE[self.code][0]

    def response(self) -> dict[str, Any]:
        return {"error_code": self.code.value, "hint": ERROR_TABLE[self.code][1], **self.extras}
