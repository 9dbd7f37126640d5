"""Tool specs: argument declarations (flag-aware), the generic schema check, agent-facing docs.

Each vendor module declares its tools once as `Tool(name, fn, args, fields)`; the argument
list is a function of the domain's current flags, so a schema drift changes validation,
`describe_schema` and the docs from one declaration.
"""

from __future__ import annotations

import datetime as dt
import enum
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cells.step_04_datatypes import ToolDoc

from .error_codes import ErrorCode, VendorError
from .world import DATE

if TYPE_CHECKING:  # pragma: no cover
    from .world import World

Handler = Callable[["World", dict[str, Any], int], tuple[dict[str, Any], "World"]]
TYPES = ("str", "int", "date", "datetime", "list[str]", "list[object]")


@dataclass(frozen=True)
class Arg:
    """One tool argument: `type` in TYPES; `doc` is written for the agent; `hints`: what the error for a missing
    value adds (where a value a drift made required comes from: `generic.py`)."""

    name: str
    type: str
    required: bool
    doc: str
    hints: tuple[tuple[str, Any], ...] = ()

    def render(self) -> str:
        return f"{self.type}, {'required' if self.required else 'optional'}: {self.doc}"


class Effect(str, enum.Enum):
    """What a tool does to the world, declared with the tool (the judge reads it, never the tool's name)."""

    READ = "read"  # search, estimate, look-ups, tokens: nothing changes
    COMMIT = "commit"  # books, orders: a new record, paid for on the user's card
    CANCEL = "cancel"  # cancels a record (and refunds it)
    PAYMENT = "payment"  # moves money directly (charge, refund)


# The prefix of every reference a vendor issues: `stable_id(REFERENCE_PREFIXES[domain], ...)`, e.g. "PNR-3f9a1c0e".
REFERENCE_PREFIXES: dict[str, str] = {"airline": "PNR", "cab": "RIDE", "restaurant": "ORD", "hotel": "HBK",
                                      "payment": "PAY"}
# Anything shaped like an issued reference, in any case ("pnr-3f9a1c0e" is the same reference).
REFERENCE_SHAPE = re.compile(
    r"(?<![0-9A-Za-z])(?:" + "|".join(REFERENCE_PREFIXES.values()) + r")-[0-9A-Za-z]+", re.IGNORECASE)


def references_in(text: str) -> tuple[str, ...]:
    """Every reference-shaped token in `text` ("PNR-3f9a1c0e", "ord-12ab34cd"), as written."""
    return tuple(m.group(0) for m in REFERENCE_SHAPE.finditer(text))


@dataclass(frozen=True)
class Tool:
    """A vendor tool: handler, argument spec and response field names, both from the domain flags; `effect`
    says what it does to the world."""

    name: str
    fn: Handler
    args: Callable[[dict[str, Any]], tuple[Arg, ...]]
    fields: Callable[[dict[str, Any]], tuple[str, ...]]
    effect: Effect = Effect.READ

    @property
    def domain(self) -> str:
        return self.name.split(".")[0]

    @property
    def write(self) -> bool:
        """Whether the tool changes the world (commits, cancels or moves money)."""
        return self.effect is not Effect.READ

    def doc(self, flags: dict[str, Any]) -> ToolDoc:
        """Agent-facing doc: the handler's docstring plus the current argument spec."""
        text = inspect.cleandoc(self.fn.__doc__ or self.name)
        spec = self.args(flags)
        return ToolDoc(name=self.name, description=" ".join(text.split()),
                       args={a.name: a.render() for a in spec},
                       required=tuple(a.name for a in spec if a.required))


def _valid_datetime(value: str) -> bool:
    try:
        dt.datetime.strptime(value, "%Y-%m-%dT%H:%M")
    except ValueError:
        return False
    return True


def _valid_date(value: str) -> bool:
    if not DATE.match(value):
        return False
    try:
        dt.date.fromisoformat(value)
    except ValueError:
        return False
    return True


def _bad_type(arg: Arg) -> VendorError:
    # built only when raised: the check runs on every argument of every call
    return VendorError(ErrorCode.INVALID_FIELD_TYPE, field_name=arg.name, expected=arg.type)


def _check_type(arg: Arg, value: Any) -> None:
    if arg.type == "int":
        if not isinstance(value, int) or isinstance(value, bool):
            raise _bad_type(arg)
        if value < 1:
            raise VendorError(ErrorCode.INVALID_FIELD_VALUE, field_name=arg.name, expected="integer >= 1")
        return
    if arg.type.startswith("list"):
        if not isinstance(value, list):
            raise _bad_type(arg)
        inner = str if arg.type == "list[str]" else dict
        if not value or not all(isinstance(v, inner) and v != "" for v in value):
            raise VendorError(ErrorCode.INVALID_FIELD_VALUE, field_name=arg.name,
                              expected=f"non-empty {arg.type}")
        return
    if not isinstance(value, str):
        raise _bad_type(arg)
    if not value.strip():
        raise VendorError(ErrorCode.INVALID_FIELD_VALUE, field_name=arg.name, expected="non-empty string")
    if arg.type == "date" and not _valid_date(value):
        raise VendorError(ErrorCode.INVALID_FIELD_VALUE, field_name=arg.name, expected="YYYY-MM-DD")
    if arg.type == "datetime" and not _valid_datetime(value):
        raise VendorError(ErrorCode.INVALID_FIELD_VALUE, field_name=arg.name, expected="YYYY-MM-DDTHH:MM")


def check_schema(tool: Tool, flags: dict[str, Any], args: dict[str, Any], extra: tuple[Arg, ...] = ()) -> None:
    """Schema stage: required fields present, no unknown fields, every value of its declared type. `extra`: further
    arguments of this call's world, checked after the declared ones."""
    spec = (*tool.args(flags), *extra)
    for arg in spec:
        if arg.required and args.get(arg.name) is None:
            raise VendorError(ErrorCode.MISSING_REQUIRED_FIELD, field_name=arg.name, expected=arg.type,
                              **dict(arg.hints))
    allowed = {a.name for a in spec}
    for name in sorted(args):
        if name not in allowed:
            raise VendorError(ErrorCode.UNKNOWN_FIELD, field_name=name, allowed=sorted(allowed))
    for arg in spec:
        if args.get(arg.name) is not None:
            _check_type(arg, args[arg.name])


def payment_args() -> tuple[Arg, ...]:
    """The payment arguments every booking/order tool takes."""
    return (
        Arg("payment_token", "str", True, "token from payment.get_token"),
        Arg("mfa_code", "str", False, "one-time code from the user, when a charge needs it"),
    )
