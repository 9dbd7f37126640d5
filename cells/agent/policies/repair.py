"""Repairing a refused call from what the API says, with no knowledge of which drift fired: the player's side of
the generic vendor mechanisms (cells/vendors/generic.py), read only through the error and the results.

- A missing argument the error names, valued `same_as` another (a search argument, a goal fact, a field of the
  chosen listing item), `found_in` a search's results (the chosen item shows it under the argument's own name),
  or a field of each element of a list argument expected as a list (`items[].addons`, `passengers[].x`: an empty
  list).
- A format the error names (`expected: "DD-MM-YYYY"`): every date or date-time argument rewritten in it.
- A renamed response field: `read(item, key, kind)` finds the one new field of the same type where `key` is gone.
"""

from __future__ import annotations

from typing import Any

from cells import formats

from .observe import KNOWN_KEYS

LIST_FIELD = "list"  # an item field the error expects as a list (it may be empty)


def read(item: Any, key: str, kind: type, strict: bool = False) -> Any:
    """`item[key]`; where the key is gone, the one field the old responses never had holding a `kind` value (the
    key renamed), unless `strict` (the naive player reads only documented names)."""
    if not isinstance(item, dict):
        return None
    value = item.get(key)
    if value is not None or strict:
        return value
    new = [k for k, v in item.items() if k not in KNOWN_KEYS and isinstance(v, kind) and not isinstance(v, bool)]
    return item[new[0]] if len(new) == 1 else None


def lookup(name: str, *sources: Any) -> Any:
    """The first value of `name` in `sources` (dicts: the chosen listing item, the search arguments, the goal's
    slots), or None."""
    for source in sources:
        if isinstance(source, dict) and source.get(name) is not None:
            return source[name]
    return None


def item_field(error: dict[str, Any]) -> tuple[str, str, str] | None:
    """(list argument, element field, how to fill it) for an error naming a missing field inside each element of a
    list argument (`items[].x`): an empty list, or the value the chosen listing shows for the element
    (`found_in`); None for a top-level field."""
    field = str(error.get("field_name", ""))
    listed, sep, sub = field.partition("[].")
    if not sep or not sub or not listed:
        return None
    how = LIST_FIELD if str(error.get("expected", "")).startswith("list") else "found_in"
    return listed, sub, how


def fill_items(items: list[Any], fields: dict[str, str], menu: list[dict[str, Any]]) -> list[Any]:
    """Each element (an object) with every required field: an empty list, or the field the menu shows for its
    dish."""
    by_id = {d.get("dish_id"): d for d in menu if isinstance(d, dict)}
    out = []
    for item in items:
        if not isinstance(item, dict):
            out.append(item)
            continue
        extra = {sub: [] if how == LIST_FIELD else lookup(sub, by_id.get(item.get("dish_id")))
                 for sub, how in fields.items()}
        out.append({**item, **extra})
    return out


def reformatted(args: dict[str, Any], fmt: str) -> dict[str, Any]:
    """`args` with every date (or, when `fmt` has hours, date-time) argument in canonical form rewritten in `fmt`."""
    kind = "datetime" if "HH" in fmt else "date"
    canonical = formats.CANONICAL[kind]
    out = {}
    for key, value in args.items():
        converted = formats.convert(value, canonical, fmt) if isinstance(value, str) else None
        out[key] = converted if converted is not None else value
    return out


def is_format(expected: Any) -> bool:
    return isinstance(expected, str) and formats.looks_like(expected)
