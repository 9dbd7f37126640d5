"""The data model's JSON codec (every `JsonModel` round-trips through `to_dict()` / `from_dict()`), the one
canonical serialisation used for hashing and ids, and the rules a model's output must meet to enter an action.

The types themselves live in `cells.step_04_datatypes`, which re-exports what callers need from here.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import re
import types
import typing
from collections.abc import Iterable, Mapping
from json.encoder import encode_basestring as _json_string  # what json.dumps(ensure_ascii=False) uses
from typing import Any, TypeVar, Union

from cells.errors import DriftCallError


class ModelValidationError(DriftCallError, ValueError):
    """A data-model value broke a rule; `field_name` says which field."""

    def __init__(self, type_name: str, field_name: str, message: str) -> None:
        super().__init__(f"{type_name}.{field_name}: {message}")
        self.type_name = type_name
        self.field_name = field_name



# ---------------------------------------------------------------------------------------------
# JSON codec shared by every type: to_dict() / from_dict() driven by the field annotations.
# ---------------------------------------------------------------------------------------------

T = TypeVar("T", bound="JsonModel")


_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})


def _encode(value: Any) -> Any:
    # Exact-type fast paths first (the hot case: plain JSON from vendors and digests); subclasses
    # such as str/int enums fall through to the general checks, so the output is unchanged.
    kind = type(value)
    if kind in _JSON_SCALARS:
        return value
    if kind is dict:
        return {str(k): _encode(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [_encode(v) for v in value]
    if isinstance(value, JsonModel):
        return value.to_dict()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (tuple, list)):
        return [_encode(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _encode(v) for k, v in value.items()}
    return value


def _decode(hint: Any, value: Any) -> Any:
    origin = typing.get_origin(hint)
    if value is None:
        return None
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return _decode(args[0], value) if len(args) == 1 else value
    if origin is tuple:
        items = typing.get_args(hint)
        inner = items[0] if items else Any
        return tuple(_decode(inner, v) for v in value)
    if isinstance(hint, type) and issubclass(hint, JsonModel):
        return hint.from_dict(value)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    if origin in (dict, Mapping) or hint in (dict, Mapping):
        return dict(value)
    return value


# A dataclass's field names per class: they are fixed once the class exists, and `dataclasses.fields` builds its
# tuple anew on every call (a fifth of encoding a small model, and the server encodes several per step)
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


class JsonModel:
    """Mixin giving a frozen dataclass a lossless JSON round trip."""

    def _field_names(self) -> tuple[str, ...]:
        names = _FIELD_NAMES.get(type(self))
        if names is None:
            names = _FIELD_NAMES[type(self)] = tuple(f.name for f in dataclasses.fields(self))  # type: ignore[arg-type]
        return names

    def to_dict(self) -> dict[str, Any]:
        return {name: _encode(getattr(self, name)) for name in self._field_names()}

    def to_dict_sharing(self) -> dict[str, Any]:
        """`to_dict()` with the fields' dicts and lists shared, not copied: for a model whose containers hold plain
        JSON already (a vendor result's response), read by a caller that serialises it at once and never mutates it."""
        out = {}
        for name in self._field_names():
            value = getattr(self, name)
            kind = type(value)
            out[name] = value if kind in _JSON_SCALARS or kind is dict or kind is list else _encode(value)
        return out

    def to_dict_of(self, names: Iterable[str]) -> dict[str, Any]:
        """`to_dict()`'s entries for `names` only, encoding nothing else."""
        return {name: _encode(getattr(self, name)) for name in names}

    @classmethod
    def from_dict(cls: type[T], data: Mapping[str, Any]) -> T:
        if not isinstance(data, Mapping):
            raise ModelValidationError(cls.__name__, "*", f"expected a JSON object, got {type(data).__name__}")
        hints = typing.get_type_hints(cls)
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = set(data) - names
        if unknown:
            raise ModelValidationError(cls.__name__, sorted(unknown)[0], f"unknown field; allowed: {sorted(names)}")
        kwargs = {k: _decode(hints[k], v) for k, v in data.items()}
        return cls(**kwargs)

    def to_json(self) -> str:
        return canonical_json(self.to_dict())

    @classmethod
    def from_json(cls: type[T], text: str) -> T:
        return cls.from_dict(json.loads(text))


# One encoder, built once: json.dumps with any option builds a new JSONEncoder per call (~10% of a small
# digest's cost, and every seeded decision takes one).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
_PART_TEXT: dict[type, Any] = {str: _json_string, int: int.__repr__}


def canonical_json(value: Any) -> str:
    """Sorted-key, compact, UTF-8 JSON: the one serialisation used for hashing and ids."""
    if type(value) is list:
        # The digest parts of most seeded decisions, e.g. [seed, "airline.listings", 3]: built
        # directly, byte-identical to json.dumps (same C string encoder), at a fraction of the cost.
        try:
            return "[" + ",".join([_PART_TEXT[type(p)](p) for p in value]) + "]"
        except KeyError:  # a part that is not exactly str or int (bool, float, dict, ...): the general path
            pass
    return _CANONICAL.encode(_encode(value))


def require(cond: bool, type_name: str, field_name: str, message: str) -> None:
    if not cond:
        raise ModelValidationError(type_name, field_name, message)


# ---------------------------------------------------------------------------------------------
# Model-output rules: what a model may put into an action. Model text is data, never a crash:
# each rule below once let a fuzzed completion raise inside the env (RecursionError on deep
# nesting, ValueError on ints past Python's 4,300-digit str limit, non-finite floats that are
# not JSON, lone surrogates that cannot be encoded as UTF-8).
# ---------------------------------------------------------------------------------------------

MAX_ARGS_DEPTH = 6  # containers in tool_args, args itself included (restaurant items use 4)
MAX_ABS_NUMBER = 10**15  # far above any INR amount, count or code the vendors take
_BAD_CHARS = re.compile("[\ud800-\udfff\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def text_problem(text: str) -> str | None:
    """Why `text` may not appear in an action (a lone surrogate or a control character), or None."""
    bad = _BAD_CHARS.search(text)
    if bad is None:
        return None
    kind = "lone surrogate" if "\ud800" <= bad.group() <= "\udfff" else "control character"
    return f"contains a {kind} U+{ord(bad.group()):04X} at position {bad.start()}"


def number_problem(value: int | float) -> str | None:
    """Why a number may not appear in an action (non-finite, or beyond ±MAX_ABS_NUMBER), or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"non-finite number {value!r} (JSON has no NaN/Infinity)"
    if abs(value) > MAX_ABS_NUMBER:
        return f"number out of range (|x| > 10^{len(str(MAX_ABS_NUMBER)) - 1})"
    return None


def json_value_problem(value: Any, max_depth: int = MAX_ARGS_DEPTH) -> str | None:
    """Why `value` is not plain, bounded JSON (depth, number range, string content, types), or None."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if type(item) is str:  # the common leaf first: the checks below go through the Mapping ABC
            if _BAD_CHARS.search(item) is not None:
                return f"string {text_problem(item)}"
            continue
        if isinstance(item, (Mapping, list, tuple)):
            if depth > max_depth:
                return f"nested deeper than {max_depth} levels"
            if isinstance(item, Mapping):
                for key in item:
                    if not isinstance(key, str):
                        return f"object keys must be strings, got {type(key).__name__}"
                    if (problem := text_problem(key)) is not None:
                        return f"key {problem}"
                stack.extend((v, depth + 1) for v in item.values())
            else:
                stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, str):
            if (problem := text_problem(item)) is not None:
                return f"string {problem}"
        elif isinstance(item, (int, float)) and not isinstance(item, bool):
            if (problem := number_problem(item)) is not None:
                return problem
        elif item is not None and not isinstance(item, bool):
            return f"{type(item).__name__} is not a JSON value"
    return None


def _encode_default(value: Any) -> Any:
    """json.dumps' hook for what plain JSON lacks (models, enums, other mappings): `_encode` rules."""
    if isinstance(value, (JsonModel, enum.Enum, Mapping)):
        return _encode(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_VALIDATING = json.JSONEncoder(ensure_ascii=False, default=_encode_default, check_circular=False)


def require_json_mapping(value: Any, type_name: str, field_name: str) -> None:
    require(isinstance(value, Mapping), type_name, field_name, f"must be a JSON object, got {type(value).__name__}")
    try:  # validation only: the C encoder walks plain JSON; the hook handles the rest as _encode does.
        # No circular-reference bookkeeping (a quarter of the cost on listings): a cycle recurses until
        # RecursionError, which is reported the same way.
        _VALIDATING.encode(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ModelValidationError(type_name, field_name, f"must be JSON-serialisable ({exc})") from None

