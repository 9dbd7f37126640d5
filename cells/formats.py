"""Date and time formats written the way an API documents them ("DD-MM-YYYY", "YYYY-MM-DD HH:MM"), read and
written the same way by the vendors (a format drift: `cells/vendors/generic.py`) and by the players that meet one.

A format is a pattern of fields `YYYY`, `YY`, `MM`, `DD`, `HH` and literal characters; `MM` after `HH` is minutes.
The canonical forms are ISO: `date` "YYYY-MM-DD" and `datetime` "YYYY-MM-DDTHH:MM" (the registry's types).
"""

from __future__ import annotations

import datetime as dt
import re
from functools import cache

CANONICAL = {"date": "YYYY-MM-DD", "datetime": "YYYY-MM-DDTHH:MM"}  # the registry's own types, as formats
_FIELDS = ("YYYY", "YY", "MM", "DD", "HH")


@cache
def strptime_pattern(fmt: str) -> str | None:
    """`fmt` as a `strptime` pattern ("DD-MM-YYYY" -> "%d-%m-%Y"); None when it names no date field."""
    out, i, hour_seen, fields = [], 0, False, 0
    while i < len(fmt):
        token = next((f for f in _FIELDS if fmt.startswith(f, i)), None)
        if token is None:
            out.append(fmt[i].replace("%", "%%"))
            i += 1
            continue
        code = {"YYYY": "%Y", "YY": "%y", "DD": "%d", "HH": "%H"}.get(token) or ("%M" if hour_seen else "%m")
        hour_seen = hour_seen or token == "HH"
        out.append(code)
        fields += 1
        i += len(token)
    return "".join(out) if fields else None


def parse(value: object, fmt: str) -> dt.datetime | None:
    """`value` read in `fmt` (exactly: writing it back in `fmt` gives `value`), else None."""
    pattern = strptime_pattern(fmt)
    if pattern is None or not isinstance(value, str):
        return None
    try:
        stamp = dt.datetime.strptime(value, pattern)
    except ValueError:
        return None
    return stamp if stamp.strftime(pattern) == value else None


def render(stamp: dt.datetime, fmt: str) -> str:
    pattern = strptime_pattern(fmt)
    if pattern is None:
        raise ValueError(f"{fmt!r} names no date or time field (YYYY, YY, MM, DD, HH)")
    return stamp.strftime(pattern)


def convert(value: object, source: str, target: str) -> str | None:
    """`value` written in format `source`, rewritten in `target`; None when it is not in `source`."""
    stamp = parse(value, source)
    return None if stamp is None else render(stamp, target)


def looks_like(fmt: str) -> bool:
    """Whether `fmt` reads as a date/time format ("DD-MM-YYYY"), as an error's `expected` may say."""
    return bool(re.fullmatch(r"[YMDH0-9 :.\-/T]+", fmt)) and strptime_pattern(fmt) is not None
