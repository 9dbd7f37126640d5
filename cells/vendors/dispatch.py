"""Routing: the tool registry, seeded timeouts, and the error envelope.

`dispatch` is the only entry point that runs a tool. Agent mistakes (unknown tool, bad args,
policy refusals, auth failures) come back as error `ToolResult`s; any other exception is a bug
and propagates.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any

from cells.errors import DriftCallError
from cells.step_04_datatypes import (
    DOMAINS,
    ToolDoc,
    ToolResult,
    ToolStatus,
    canonical_json,
    stable_digest,
    stable_int,
)

from . import airline, cab, hotel, payment, restaurant
from .error_codes import ErrorCode, VendorError
from .generic import ITEM_SEP, checked_args, extra_args, formatted_args, schema_notes, shaped_response
from .registry import TYPES, Tool, check_schema
from .world import DEFAULT_FLAGS, World

TOOLS: dict[str, Tool] = {t.name: t for m in (airline, cab, restaurant, hotel, payment) for t in m.TOOLS}
TOOL_NAMES: tuple[str, ...] = tuple(TOOLS)
TIMEOUT_BASIS_POINTS = 100  # 1% of calls time out (decided per identical call and retry number)
TIMEOUT_LATENCY_MS = 8000


class UnknownDomainError(DriftCallError, ValueError):
    """describe_schema/tool_docs was asked for a domain that has no vendor."""


def _result(world: World, tool_name: str, status: ToolStatus, response: dict[str, Any],
            turn: int, latency_ms: int) -> ToolResult:
    domain = tool_name.split(".")[0]
    version = world.schema_versions.get(domain, 0)
    return ToolResult.from_vendor(tool_name, status, response, version, latency_ms, turn)


def _error(world: World, tool_name: str, err: VendorError, turn: int, latency_ms: int = 20) -> ToolResult:
    return _result(world, tool_name, err.status, err.response(), turn, latency_ms)


def _timed_out(world: World, tool_name: str, args_json: str) -> tuple[bool, str, int]:
    """(times out?, call key, retry number): the retry number counts earlier timeouts of this call."""
    key = stable_digest(tool_name, args_json).hex()
    attempt = world.timeouts.get(key, 0)
    roll = stable_int(world.seed, "timeout", tool_name, args_json, attempt) % 10_000
    return roll < TIMEOUT_BASIS_POINTS, key, attempt


def dispatch(world: World, tool_name: str, args: Any, turn: int) -> tuple[ToolResult, World]:
    """Run one tool call. Returns the result and the World after it (the same object for reads)."""
    name = tool_name if isinstance(tool_name, str) else repr(tool_name)
    if name not in TOOLS:
        return _error(world, name, VendorError(ErrorCode.UNKNOWN_TOOL, got=name, available=list(TOOL_NAMES)),
                      turn), world
    try:
        if not isinstance(args, dict):
            raise TypeError(type(args).__name__)
        args_json = canonical_json(args)
    except (TypeError, ValueError) as exc:
        return _error(world, name, VendorError(ErrorCode.INVALID_ARGS, got=str(exc)[:80]), turn), world
    timed_out, key, attempt = _timed_out(world, name, args_json)
    latency = 40 + stable_int(world.seed, "latency", name, args_json, attempt) % 360
    if timed_out:  # a timed-out call changes nothing but its own retry counter
        retried = dataclasses.replace(world, timeouts={**world.timeouts, key: attempt + 1})
        return _error(world, name, VendorError(ErrorCode.TIMEOUT, retry=True), turn, TIMEOUT_LATENCY_MS), retried
    tool = TOOLS[name]
    try:
        # schema: formats a drift changed, then required fields and types (the declared arguments, then a drill's
        # or a drift's further ones: generic.py), then those further arguments' values
        args = formatted_args(world, tool, args)
        check_schema(tool, world.flags[tool.domain], args, extra_args(world, tool))
        response, new_world = tool.fn(world, checked_args(world, tool, args), turn)
    except VendorError as err:
        return _error(world, name, err, turn, latency), world
    response = shaped_response(world, tool, response)
    return _result(new_world, name, ToolStatus.OK, response, turn, latency), new_world


class DrillArgumentError(DriftCallError, ValueError):
    """`require_argument` was asked for a tool or type the vendors do not have, or an argument the tool already
    declares."""


def require_argument(world: World, tool_name: str, name: str, kind: str) -> World:
    """New World in which `tool_name` also requires `name` (of registry type `kind`): a call without it gets
    `MISSING_REQUIRED_FIELD` naming it. For training drills of that repair where the tool's usual call lacks the
    argument; the handler ignores the value (the drill ends at the repaired call). `name` may be `list[].field`:
    each element of the tool's `list[object]` argument `list` then needs `field`, a `list[str]` (an empty list
    passes: a drill has no value source, and an empty list is a value every caller can send)."""
    if tool_name not in TOOLS:
        raise DrillArgumentError(f"no tool {tool_name!r}; available: {list(TOOL_NAMES)}")
    if kind not in TYPES:
        raise DrillArgumentError(f"argument type must be one of {list(TYPES)}, got {kind!r}")
    tool = TOOLS[tool_name]
    args = {a.name: a.type for a in tool.args(world.flags[tool.domain])}
    listed, nested, field = name.partition(ITEM_SEP)
    if nested:
        lists = sorted(a for a, t in args.items() if t == "list[object]")
        if listed not in lists or not field:
            raise DrillArgumentError(f"{name!r}: a nested field is `list[].field` with `list` one of {tool_name}'s "
                                     f"list-of-object arguments {lists}")
        if kind != "list[str]":
            raise DrillArgumentError(f"a nested field {name!r} must be of type 'list[str]', got {kind!r}")
    elif name in args:
        raise DrillArgumentError(f"{tool_name} already declares {name!r} (its arguments: {sorted(args)})")
    return dataclasses.replace(world, extra_required=(*world.extra_required, (tool_name, name, kind)))


def api_signature() -> dict[str, dict[str, Any]]:
    """Every tool's arguments (`{name: type}`, "?" after an optional one's type) and response fields at the default
    flags: the API a model trained on this checkout learnt to call (a run records it: step 5's `VENDOR_API_FILE`)."""
    return {name: {"args": {a.name: a.type + ("" if a.required else "?") for a in tool.args(DEFAULT_FLAGS[tool.domain])},
                   "fields": list(tool.fields(DEFAULT_FLAGS[tool.domain]))}
            for name, tool in sorted(TOOLS.items())}


def api_changes(recorded: dict[str, dict[str, Any]]) -> list[str]:
    """What differs between a recorded `api_signature()` and this checkout's, one line per tool, argument or field
    (`airline.book passengers: list[str] -> list[object]`); empty when they are the same."""
    now = api_signature()
    out = [f"{t}: {'gone' if t not in now else 'new'}" for t in sorted(set(recorded) ^ set(now))]
    for tool in sorted(set(recorded) & set(now)):
        was, is_ = recorded[tool].get("args", {}), now[tool]["args"]
        out += [f"{tool} {a}: {was.get(a, 'absent')} -> {is_.get(a, 'absent')}" for a in sorted(set(was) | set(is_))
                if was.get(a) != is_.get(a)]
        if list(recorded[tool].get("fields", [])) != now[tool]["fields"]:
            out.append(f"{tool} response fields: {recorded[tool].get('fields')} -> {now[tool]['fields']}")
    return out


def _check_domain(domain: str) -> None:
    if domain not in DOMAINS:
        raise UnknownDomainError(f"no vendor for domain {domain!r}; allowed: {list(DOMAINS)}")


def describe_schema(world: World, domain: str) -> dict[str, Any]:
    """Current argument docs and response fields of a domain's tools (reflects drift)."""
    _check_domain(domain)
    flags = world.flags[domain]
    tools = {}
    for tool in (t for t in TOOLS.values() if t.domain == domain):
        doc = tool.doc(flags)
        args, fields, required = dict(doc.args), list(tool.fields(flags)), list(doc.required)
        schema_notes(tool, flags, args, fields, required)
        tools[tool.name] = {"description": doc.description, "args": args, "required": required,
                            "response_fields": fields}
    return {"domain": domain, "tools": tools}  # no schema version: it would announce every drift


def tool_docs(world: World, domains: tuple[str, ...]) -> tuple[ToolDoc, ...]:
    """Agent-facing docs for every tool of `domains`, in TOOL_NAMES order."""
    return _docs_under(world.flags, domains)


def default_tool_docs(domains: tuple[str, ...]) -> tuple[ToolDoc, ...]:
    """`tool_docs` of a fresh world (every flag at its default, as at an episode's reset), without building one."""
    return _docs_under(DEFAULT_FLAGS, domains)


def _docs_under(flags: dict[str, dict[str, Any]], domains: tuple[str, ...]) -> tuple[ToolDoc, ...]:
    for d in domains:
        _check_domain(d)
    return _docs_for(tuple(domains), canonical_json([flags[d] for d in domains]))


@functools.lru_cache(maxsize=256)
def _docs_for(domains: tuple[str, ...], flags_json: str) -> tuple[ToolDoc, ...]:
    """Docs are a pure function of the domains' flags (every reset asks for the same few sets)."""
    flags = dict(zip(domains, json.loads(flags_json), strict=True))
    return tuple(t.doc(flags[t.domain]) for t in TOOLS.values() if t.domain in domains)
