"""Generic vendor mechanisms the drift families drive through flags (`GENERIC_FLAGS` in world.py), the same in
every goal domain, so a family needs no code in any vendor:

- `renamed_fields` {old: new}: every response of the domain shows `new` where it showed `old`, at any depth;
- `required_args` [spec]: a tool also requires an argument (top level, or inside each element of a list argument:
  `item_of`), whose value is the goal's (`same_as` a search argument or goal fact), the user's (`ask_user`: one
  of `USER_FACTS`) or a listing's (`found_in` a search tool: each listing item shows it, keyed by `listing_key`),
  or an empty list; a call without it is refused with `MISSING_REQUIRED_FIELD` naming it and where its value
  comes from, a wrong value with `INVALID_FIELD_VALUE`; the handler never sees it;
- `arg_formats` {"tool|type": format}: the tool takes its `date`/`datetime` arguments in that format
  (`cells.formats`); any other form is refused naming the argument and the format;
- `booking_fees` {field: amount}: added to a booking's charged total, each shown in the write's response;
- `terms` {field: value}: shown in the write's response (a terms notice the user must hear).

The training drills' required arguments (`World.extra_required`, `dispatch.require_argument`) go through the same
checks (`extra_args`; a nested one, `list[].field`, as an empty-list `item_of` spec: `drill_item_specs`): a
required argument without a value source, whose value the handler ignores.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cells import formats
from cells.step_04_datatypes import stable_id

from .error_codes import ErrorCode, VendorError
from .registry import Arg
from .world import norm
from .write_path import UNREGISTERED_GSTIN

if TYPE_CHECKING:  # pragma: no cover
    from .registry import Tool
    from .world import World

# What a vendor may ask the user for (`ask_user`) -> the simulated user's topic that answers it (step 7).
USER_FACTS: dict[str, str] = {"name": "names", "gstin": "gstin"}
ARG_FORMATS = formats.CANONICAL  # the argument types whose format a drift may change
LIST_EXPECTED = "list[str] (may be empty)"
ITEM_SEP = "[]."  # `list[].field`: a field of each element of list argument `list` (errors, drills)


def _hints(spec: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """What the missing-field error says about where the value comes from."""
    return tuple((k, spec[k]) for k in ("same_as", "ask_user", "found_in") if k in spec)


def extra_args(world: World, tool: Tool) -> tuple[Arg, ...]:
    """Top-level arguments `tool` requires in this world beyond its declared ones: a drill's, then the flags'."""
    drills = tuple(Arg(arg, kind, True, "required for this episode") for on, arg, kind in world.extra_required
                   if on == tool.name and ITEM_SEP not in arg) if world.extra_required else ()
    specs = world.flags[tool.domain].get("required_args")
    if not specs:
        return drills
    return drills + tuple(Arg(s["name"], s["type"], True, _doc(s), _hints(s)) for s in specs
                          if s["tool"] == tool.name and "item_of" not in s)


def _doc(spec: dict[str, Any]) -> str:
    hints = dict(_hints(spec))
    return "; ".join(f"{k.replace('_', ' ')} {v}" for k, v in hints.items()) or "required"


def listing_token(seed: int, name: str, key: Any) -> str:
    """The value listing item `key` shows under `name` (and a booking of it must send back)."""
    return stable_id("KEY", seed, name, str(key), length=6)


def _user_fact(world: World, fact: str) -> str:
    user = world.goal.user
    if fact == "name":
        return user.passenger_names[0] if user.passenger_names else ""
    return user.gstin or UNREGISTERED_GSTIN


def _expected(world: World, spec: dict[str, Any], holder: dict[str, Any]) -> tuple[str, str]:
    """(the value `spec`'s argument must have in a call / item `holder`, what the error says it should be)."""
    if "same_as" in spec:
        return norm(world.goal.slots.get(spec["same_as"], "")), f"same value as `{spec['same_as']}`"
    if "ask_user" in spec:
        return norm(_user_fact(world, spec["ask_user"])), f"the user's {spec['ask_user']}"
    token = listing_token(world.seed, spec["name"], holder.get(spec["listing_key"]))
    return norm(token), f"the `{spec['name']}` {spec['found_in']} showed for this `{spec['listing_key']}`"


def _check_value(world: World, spec: dict[str, Any], holder: dict[str, Any], where: str) -> None:
    value = holder[spec["name"]]
    if spec["type"] == "list[str]":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise VendorError(ErrorCode.INVALID_FIELD_TYPE, field_name=where, expected=LIST_EXPECTED)
        return
    want, said = _expected(world, spec, holder)
    if not isinstance(value, str) or norm(value) != want:
        raise VendorError(ErrorCode.INVALID_FIELD_VALUE, field_name=where, expected=said)


def drill_item_specs(world: World, tool: Tool) -> list[dict[str, Any]]:
    """A drill's nested required fields of `tool` (`list[].field` in `World.extra_required`) as `required_args`
    specs: checked exactly as a drift's empty-list item field, but never in the flags, so no doc names them."""
    out = []
    for on, arg, kind in world.extra_required:
        listed, nested, field = arg.partition(ITEM_SEP)
        if on == tool.name and nested:
            out.append({"tool": on, "name": field, "type": kind, "item_of": listed})
    return out


def _checked_items(world: World, spec: dict[str, Any], items: Any) -> Any:
    """Each element of the list argument with the required item field checked, then taken out."""
    where = f"{spec['item_of']}{ITEM_SEP}{spec['name']}"
    if not isinstance(items, list):
        return items
    out = []
    for item in items:
        if not isinstance(item, dict):
            out.append(item)
            continue
        if item.get(spec["name"]) is None:
            expected = LIST_EXPECTED if spec["type"] == "list[str]" else spec["type"]
            raise VendorError(ErrorCode.MISSING_REQUIRED_FIELD, field_name=where, expected=expected,
                              **dict(_hints(spec)))
        _check_value(world, spec, item, where)
        out.append({k: v for k, v in item.items() if k != spec["name"]})
    return out


def checked_args(world: World, tool: Tool, args: dict[str, Any]) -> dict[str, Any]:
    """`args` after the value checks of the flags' required arguments (presence and types were checked with the
    declared ones), without those arguments: what the handler gets."""
    specs = [s for s in world.flags[tool.domain].get("required_args") or () if s["tool"] == tool.name]
    if world.extra_required:
        specs += drill_item_specs(world, tool)
    if not specs:
        return args
    out = dict(args)
    for spec in specs:
        if "item_of" in spec:
            out[spec["item_of"]] = _checked_items(world, spec, out.get(spec["item_of"]))
        else:
            _check_value(world, spec, out, spec["name"])
            del out[spec["name"]]
    return out


def formatted_args(world: World, tool: Tool, args: dict[str, Any]) -> dict[str, Any]:
    """`args` with every argument whose type's format a drift changed read in the new format and rewritten in the
    canonical one (what the handler takes); a value in any other form is refused naming the format."""
    flags = world.flags[tool.domain]
    changed = flags.get("arg_formats")
    if not changed:
        return args
    out = args
    for arg in tool.args(flags):
        fmt = changed.get(f"{tool.name}|{arg.type}")
        if fmt is None or args.get(arg.name) is None:
            continue
        value = formats.convert(args[arg.name], fmt, ARG_FORMATS[arg.type])
        if value is None:
            raise VendorError(ErrorCode.INVALID_FIELD_VALUE, field_name=arg.name, expected=fmt)
        out = {**out, arg.name: value}
    return out


def _renamed(value: Any, mapping: dict[str, str]) -> Any:
    if isinstance(value, dict):
        return {mapping.get(k, k): _renamed(v, mapping) for k, v in value.items()}
    if isinstance(value, list):
        return [_renamed(v, mapping) for v in value]
    return value


def _with_tokens(world: World, value: Any, specs: list[dict[str, Any]]) -> Any:
    """Every listing item (a dict holding a spec's `listing_key`) with that spec's token added."""
    if isinstance(value, list):
        return [_with_tokens(world, v, specs) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: _with_tokens(world, v, specs) for k, v in value.items()}
    for spec in specs:
        if spec["listing_key"] in value:
            out[spec["name"]] = listing_token(world.seed, spec["name"], value[spec["listing_key"]])
    return out


def shaped_response(world: World, tool: Tool, response: dict[str, Any]) -> dict[str, Any]:
    """A successful response as this world's flags show it: listing tokens added, renamed fields renamed."""
    flags = world.flags[tool.domain]
    specs = [s for s in flags.get("required_args") or () if s.get("found_in") == tool.name]
    if specs:
        response = _with_tokens(world, response, specs)
    renamed = flags.get("renamed_fields")
    return _renamed(response, renamed) if renamed else response


def booking_extras(flags: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """(fees a booking adds to its charged total, the fee and terms fields its response shows)."""
    fees, terms = flags.get("booking_fees") or {}, flags.get("terms") or {}
    return sum(fees.values()), {**fees, **terms}


def schema_notes(tool: Tool, flags: dict[str, Any], args: dict[str, str], fields: list[str],
                 required: list[str]) -> None:
    """`describe_schema`'s view of the generic flags, written into `args` (argument docs), `fields` and
    `required` (a drill's arguments stay undocumented: it is not a drift)."""
    for key, fmt in (flags.get("arg_formats") or {}).items():
        name, _, kind = key.partition("|")
        if name == tool.name:
            for arg in tool.args(flags):
                if arg.type == kind and arg.name in args:
                    args[arg.name] += f" (format {fmt})"
    for spec in flags.get("required_args") or ():
        if spec["tool"] == tool.name:
            key = f"{spec['item_of']}{ITEM_SEP}{spec['name']}" if "item_of" in spec else spec["name"]
            args[key] = Arg(key, spec["type"], True, _doc(spec)).render()
            required.append(key)
        elif spec.get("found_in") == tool.name:
            fields.append(spec["name"])
    if tool.write:
        fields.extend(booking_extras(flags)[1])
    renamed = flags.get("renamed_fields") or {}
    fields[:] = [renamed.get(f, f) for f in fields]
