"""Payment gateway: scoped tokens, charges (with MFA above a threshold) and refunds.

Booking/order tools charge through `authorize_and_charge`, which checks everything before it
records anything, so an auth failure commits nothing anywhere.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from cells.step_04_datatypes import stable_digest, stable_id

from .error_codes import ErrorCode, VendorError
from .registry import REFERENCE_PREFIXES, Arg, Effect, Tool
from .world import World

TOKEN_HEX_CHARS = 4


def token_for(world: World, scope: str) -> str:
    """The deterministic token this episode's gateway issues for `scope`.

    Its random part is short (4 hex characters) on purpose: a token is accepted only if this episode's
    gateway issued it (`_token_scope`), so length adds no security here, while every booking must copy
    the token out of a tool result. A tiny cpu-learn model after 24,000 expert episodes
    wrote the 12-character form as runs of one digit (`..._9b262555557c`) in every held-out booking
    attempt, and no booking ever went through."""
    digest = stable_digest(world.seed, "payment.token", scope, size=TOKEN_HEX_CHARS // 2).hex()
    return f"tok_{scope}_{digest}"


def _token_scope(world: World, token: Any) -> str:
    """The scope of an issued token; AUTH_TOKEN_INVALID when it was never issued here."""
    if not isinstance(token, str) or token not in world.tokens:
        raise VendorError(ErrorCode.AUTH_TOKEN_INVALID, field_name="payment_token")
    return token[len("tok_"):].rsplit("_", 1)[0]


def authorize(world: World, amount_inr: int, token: Any, mfa_code: Any) -> None:
    """Raise the auth error a charge of `amount_inr` would hit; return None when it would succeed."""
    required = world.flag("payment", "accepted_scope")
    if _token_scope(world, token) != required:
        raise VendorError(ErrorCode.AUTH_SCOPE_INSUFFICIENT, required_scope=required)
    threshold = world.flag("payment", "mfa_threshold_inr")
    if threshold is not None and amount_inr > threshold:
        if mfa_code is None:
            raise VendorError(ErrorCode.MFA_REQUIRED, field_name="mfa_code", threshold_inr=threshold,
                              amount_inr=amount_inr)
        if str(mfa_code) != world.goal.user.mfa_code:
            raise VendorError(ErrorCode.MFA_INVALID, field_name="mfa_code")


def authorize_and_charge(world: World, amount_inr: int, token: Any, mfa_code: Any,
                         turn: int, purpose: str) -> tuple[World, str]:
    """Authorize, then record a captured charge; returns the new World and the payment id."""
    authorize(world, amount_inr, token, mfa_code)
    payment_id = stable_id(REFERENCE_PREFIXES["payment"], world.seed, purpose, amount_inr, len(world.charges))
    record = {"payment_id": payment_id, "amount_inr": amount_inr, "status": "captured",
              "purpose": purpose, "turn": turn}
    return dataclasses.replace(world, charges=(*world.charges, record)), payment_id


def get_token(world: World, args: dict[str, Any], turn: int) -> tuple[dict[str, Any], World]:
    """Get a payment token for a scope. Pass it as `payment_token` to any booking or order tool.
    Only the scope the gateway currently accepts is issued (default "payments.basic"); asking for
    another scope returns UNSUPPORTED_SCOPE naming `supported_scope`."""
    scope = args.get("scope", "payments.basic")
    supported = world.flag("payment", "accepted_scope")
    if scope != supported:
        raise VendorError(ErrorCode.UNSUPPORTED_SCOPE, supported_scope=supported, got_scope=scope)
    token = token_for(world, scope)
    if token not in world.tokens:
        world = dataclasses.replace(world, tokens=(*world.tokens, token))
    return {"payment_token": token, "scope": scope}, world


def charge(world: World, args: dict[str, Any], turn: int) -> tuple[dict[str, Any], World]:
    """Charge `amount_inr` (integer rupees) to a payment token. Booking tools already charge for
    you; use this only for a standalone payment. Large amounts may need the user's `mfa_code`."""
    world, payment_id = authorize_and_charge(world, args["amount_inr"], args["payment_token"],
                                             args.get("mfa_code"), turn, "payment.charge")
    return {"payment_id": payment_id, "amount_inr": args["amount_inr"], "status": "captured"}, world


def refund(world: World, args: dict[str, Any], turn: int) -> tuple[dict[str, Any], World]:
    """Refund a captured payment in full by its `payment_id`."""
    record = world.charge(args["payment_id"])
    if record is None:
        raise VendorError(ErrorCode.NOT_FOUND, field_name="payment_id", got=args["payment_id"])
    if record["status"] == "refunded":
        raise VendorError(ErrorCode.ALREADY_REFUNDED, payment_id=record["payment_id"])
    charges = tuple({**c, "status": "refunded"} if c is record else c for c in world.charges)
    response = {"payment_id": record["payment_id"], "refund_inr": record["amount_inr"], "status": "refunded"}
    return response, dataclasses.replace(world, charges=charges)


TOOLS: tuple[Tool, ...] = (
    Tool("payment.get_token", get_token,
         lambda f: (Arg("scope", "str", False, f'token scope; currently "{f["accepted_scope"]}"'),),
         lambda f: ("payment_token", "scope")),
    Tool("payment.charge", charge,
         lambda f: (Arg("amount_inr", "int", True, "amount in whole rupees"),
                    Arg("payment_token", "str", True, "token from payment.get_token"),
                    Arg("mfa_code", "str", False, "one-time code from the user")),
         lambda f: ("payment_id", "amount_inr", "status"), Effect.PAYMENT),
    Tool("payment.refund", refund,
         lambda f: (Arg("payment_id", "str", True, "id returned by a charge or booking"),),
         lambda f: ("payment_id", "refund_inr", "status"), Effect.PAYMENT),
)
