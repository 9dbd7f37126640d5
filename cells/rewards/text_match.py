"""Shared reward helpers: text normalisation, drift-token matching, episode indexing.

Everything here is a pure function of its arguments (no clock, no RNG, no `hash()`).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import re
from collections.abc import Iterator
from typing import Any

from cells.step_04_datatypes import ActionType, DriftCallAction, Episode, ToolResult, canonical_json

# Words that describe *any* change and prove nothing about *which* drift was observed. A token
# whose words are all generic never counts as drift evidence (docs/design.md#6-rewards: "price", "fare" never count).
GENERIC_WORDS: frozenset[str] = frozenset({
    "price", "prices", "fare", "fares", "fee", "fees", "charge", "charges", "charged", "cost", "costs",
    "total", "amount", "inr", "rs", "rupees", "new", "old", "changed", "change", "changes", "updated",
    "update", "policy", "rule", "rules", "error", "errors", "status", "ok", "the", "and", "now", "required",
    "field", "fields", "value", "booking", "book", "order", "payment", "token", "notice", "terms", "note",
})
MIN_TOKEN_CHARS = 3  # shorter tokens ("5", "kg") match too much text to prove anything
USER_FACING = (ActionType.SPEAK, ActionType.CLARIFY, ActionType.SUBMIT)


# A comma between digits. The literal comes first so the engine scans for commas, not digits (a lookbehind
# first is tried at every position); the reward normalises every result's JSON, listings included.
_DIGIT_COMMA = re.compile(r",(?<=\d,)(?=\d)")
_SPACERS = re.compile(r"[_\-\s]+")  # `_`/`-` become spaces and spaces squeeze: one run, one space


def norm_text(text: str) -> str:
    """Casefold, drop digit-group commas (₹5,000 -> ₹5000), `_`/`-` -> space, squeeze spaces."""
    return _SPACERS.sub(" ", _DIGIT_COMMA.sub("", text.casefold())).strip()


def is_specific(token: str) -> bool:
    """True when a normalised token is long enough and not made only of generic words."""
    words = re.findall(r"[0-9a-z]+|[^\s0-9a-z]+", token)
    return len(token) >= MIN_TOKEN_CHARS and bool(words) and not all(w in GENERIC_WORDS for w in words)


def contains_token(haystack: str, token: str) -> bool:
    """Whole-token match of normalised `token` in normalised `haystack` (ASCII alnum boundaries)."""
    return token in haystack and _token_pattern(token).search(haystack) is not None


@functools.lru_cache(maxsize=1024)
def _token_pattern(token: str) -> re.Pattern[str]:
    # Drift tokens come from the catalogue (a few dozen): compile each once, not per call. The token comes
    # first, so the engine scans for it, and the boundary before it is a lookbehind over the token itself
    # ("not [0-9a-z] then the token", the same test as a leading `(?<![0-9a-z])`). A leading lookbehind is
    # tried at every position of the haystack: 30-43 us per search on a 2.7 kB listing text, ~1 us this way.
    literal = re.escape(token)
    return re.compile(rf"{literal}(?<![0-9a-z]{literal})(?![0-9a-z])")


# One scoring's texts by result id (`result_texts_memo`). Scoped, not process-wide: a process-wide memo
# (4,096 entries, before) pinned thousands of finished episodes' results, listings included, that every
# full garbage collection then scanned (pauses of 30-110 ms in a server's env worker).
_TEXT_MEMO: contextvars.ContextVar[dict[int, tuple[ToolResult, str]] | None] = contextvars.ContextVar(
    "driftcall_result_texts", default=None)


@contextlib.contextmanager
def result_texts_memo() -> Iterator[None]:
    """Within this block `result_text` computes each result's text once (drift, citation and claim checks
    each ask for the same results); the texts are dropped when it ends. Per thread and task."""
    token = _TEXT_MEMO.set({})
    try:
        yield
    finally:
        _TEXT_MEMO.reset(token)


_PLAIN = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _response_json(response: dict[str, Any]) -> str:
    """A response as JSON text for token matching, by the C encoder alone (a tenth of `canonical_json`'s
    cost on listings). Not a digest: tokens match inside one key or value, bounded by JSON punctuation, so
    only the text matters, not key order; anything the plain encoder refuses goes the canonical way."""
    try:
        return _PLAIN.encode(response)
    except (TypeError, ValueError):
        return canonical_json(response)


def result_text(result: ToolResult) -> str:
    """Normalised text of everything a result showed the agent (keys, values, `_notice`).

    Memoised per result object inside `result_texts_memo()`; an entry holds the object itself, so a
    reused id() can never return another result's text."""
    memo = _TEXT_MEMO.get()
    hit = None if memo is None else memo.get(id(result))
    if hit is not None and hit[0] is result:
        return hit[1]
    text = norm_text(_response_json(result.response))
    if memo is not None:
        memo[id(result)] = (result, text)
    return text


def actions_by_turn(episode: Episode) -> dict[int, DriftCallAction]:
    """Parsed actions keyed by turn (unparsable turns are absent)."""
    return {r.turn: r.action for r in episode.actions if r.action is not None}


def user_messages_of(episode: Episode) -> Iterator[tuple[int, DriftCallAction]]:
    """(turn, action) for every speak/clarify/submit that carries a non-empty message."""
    for record in episode.actions:
        action = record.action
        if action is not None and action.action_type in USER_FACING and (action.message or "").strip():
            yield record.turn, action


def tool_calls_of(episode: Episode) -> Iterator[tuple[int, DriftCallAction]]:
    """(turn, action) for every parsed tool_call."""
    for record in episode.actions:
        if record.action is not None and record.action.action_type is ActionType.TOOL_CALL:
            yield record.turn, record.action


def next_call_to(episode: Episode, tool_name: str | None, after_turn: int) -> tuple[int, DriftCallAction] | None:
    """(turn, action) of the first call to `tool_name` after `after_turn`, or None."""
    return next(((turn, action) for turn, action in tool_calls_of(episode)
                 if turn > after_turn and action.tool_name == tool_name), None)


def scalars(value: Any) -> Iterator[str]:
    """Every scalar inside a JSON value, as a string (bools and None skipped)."""
    if isinstance(value, dict):
        for v in value.values():
            yield from scalars(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from scalars(v)
    elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
        yield str(value)


def keys_in(value: Any) -> Iterator[str]:
    """Every dict key at any depth of a JSON value."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from keys_in(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from keys_in(v)


def key_paths(value: Any, prefix: str = "") -> Iterator[tuple[str, str, Any]]:
    """(path, key, value) for every dict entry at any depth, e.g. ("items[0].dish_id", "dish_id", "D1")."""
    if isinstance(value, dict):
        for k, v in value.items():
            path = f"{prefix}.{k}" if prefix else str(k)
            yield path, str(k), v
            yield from key_paths(v, path)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from key_paths(v, f"{prefix}[{i}]")
