"""The only place the reward reads steps 05-07, imported directly; every lookup is injectable for tests.

- drift evidence: `evidence_for(events, patterns)` turns a catalogue pattern (step_06's
  `pattern_by_id` by default, or any mapping / callable of pattern_id -> pattern-shaped object)
  into a `DriftEvidence`;
- task rules: `TaskRules` defaults to step_07's binding_checks (the BINDING_FACTS declaration, cells/tasks/catalog.py),
  check_constraint, script_of, LANGUAGE_SCRIPT and the user's topic detector (`default_rules()`);
  tests pass their own;
- tool docs: `default_tool_args()` is the argument names each step_05 tool documents at reset.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cells.errors import DriftCallError
from cells.step_04_datatypes import Booking, Constraint, DriftEvent, GoalSpec
from cells.step_05_vendors import DEFAULT_FLAGS, TOOLS
from cells.step_06_drift import pattern_by_id
from cells.step_07_tasks import (
    LANGUAGE_SCRIPT,
    UNREGISTERED_GSTIN,
    USER_ONLY_ARGS,
    binding_checks,
    check_constraint,
    detect_topics,
    script_of,
)

from .text_match import is_specific, norm_text

PatternLookup = Mapping[str, Any] | Callable[[str], Any]


class RewardInputError(DriftCallError, LookupError):
    """The reward cannot be computed from its inputs (e.g. a fired drift unknown to the catalogue)."""


def _get(obj: Any, name: str, default: Any = None) -> Any:
    """Attribute or mapping item `name` of `obj` (patterns may be dataclasses or plain dicts)."""
    if obj is None:
        return default
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _strs(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (str, int, float)):
        return [str(value)]
    return [str(v) for v in value]


# --- drift evidence --------------------------------------------------------------------------


@dataclass(frozen=True)
class DriftEvidence:
    """What one catalogue pattern lets the agent prove: normalised drift-specific tokens and the
    structural adaptation (tool + argument keys) that shows the post-drift schema/policy was used; and whether
    the user pays for it, so the agent must tell them."""

    pattern_id: str
    tokens: tuple[str, ...]
    adaptation_tool: str | None
    adaptation_args: tuple[str, ...]
    must_tell: bool = False  # the user pays for it (the catalogue's `user_pays`): the report must tell them
    user_args: tuple[tuple[str, str], ...] = ()  # (argument, user topic): a value it requires that only the user knows


def evidence_of(pattern_id: str, pattern: Any) -> DriftEvidence:
    """Build `DriftEvidence` from an object shaped like step_06's DriftPattern (or a dict)."""
    ev = _get(pattern, "evidence")
    raw = _strs(_get(ev, "error_codes")) + _strs(_get(ev, "fields")) + _strs(_get(ev, "tokens"))
    notice = _get(pattern, "notice")
    if notice is not None:
        raw += _strs(_get(notice, "token"))
    tokens = tuple(sorted({t for t in (norm_text(r) for r in raw) if is_specific(t)}))
    adaptation = _get(pattern, "adaptation")
    args = _get(adaptation, "args_include") or ()
    tool = _get(adaptation, "tool")
    user_args = tuple((str(arg), str(topic)) for arg, topic in (_get(pattern, "user_args") or ()))
    return DriftEvidence(pattern_id, tokens, str(tool) if tool else None, tuple(sorted(str(a) for a in args)),
                         must_tell=bool(_get(pattern, "user_pays")), user_args=user_args)


@functools.lru_cache(maxsize=1024)
def _catalogue_evidence(pattern_id: str) -> DriftEvidence:
    return evidence_of(pattern_id, pattern_by_id(pattern_id))


def evidence_for(events: Iterable[DriftEvent], patterns: PatternLookup | None) -> dict[str, DriftEvidence]:
    """Evidence for every fired drift's pattern, keyed by pattern_id."""
    ids = sorted({e.pattern_id for e in events})
    if not ids:
        return {}
    if patterns is None:  # the catalogue is fixed for the process: derive each pattern's evidence once
        return {pid: _catalogue_evidence(pid) for pid in ids}
    lookup = patterns
    out: dict[str, DriftEvidence] = {}
    for pid in ids:
        if isinstance(lookup, Mapping):
            if pid not in lookup:
                raise RewardInputError(f"fired drift {pid!r} is not in the patterns given; known: {sorted(lookup)}")
            pattern = lookup[pid]
        else:
            pattern = lookup(pid)
        out[pid] = evidence_of(pid, pattern)
    return out


# --- task rules (step_07) --------------------------------------------------------------------

OPS: dict[str, Callable[[Any, Any], bool]] = {
    "le": lambda a, v: a <= v, "ge": lambda a, v: a >= v, "eq": lambda a, v: a == v, "in": lambda a, v: a in v,
}


@dataclass(frozen=True)
class TaskRules:
    """Task-side rules the reward applies (step_07's unless a test passes its own); `source` names them.

    binding_checks(goal, booking) -> {fact: {"ok", "expected", "actual", ...}}: what r_task needs;
    topics_of(question) -> the user-fact topics a clarify question asks about (names, gstin, mfa...);
    user_only_args: argument -> the topic that supplies it (values only the user knows);
    no_gstin: the gst_number of a user without a GSTIN."""

    binding_checks: Callable[[GoalSpec, Booking], Mapping[str, Mapping[str, Any]]] = binding_checks
    check_constraint: Callable[[Constraint, Booking], tuple[bool, Any]] = check_constraint
    script_of: Callable[[str], str] = script_of
    language_script: Mapping[str, str] = field(default_factory=lambda: LANGUAGE_SCRIPT)
    topics_of: Callable[[str], tuple[str, ...]] = detect_topics
    user_only_args: Mapping[str, str] = field(default_factory=lambda: USER_ONLY_ARGS)
    no_gstin: str = UNREGISTERED_GSTIN
    source: str = "step_07_tasks"


@functools.cache
def default_rules() -> TaskRules:
    """step_07's rules."""
    return TaskRules()


# --- documented tool arguments (step_05) -----------------------------------------------------


@functools.cache  # static for the process; every scoring asked for it (a tenth of reward time)
def default_tool_args() -> Mapping[str, frozenset[str]]:
    """Argument names each step_05 tool documents at reset (its arg spec under `DEFAULT_FLAGS`)."""
    return types.MappingProxyType({name: frozenset(a.name for a in tool.args(DEFAULT_FLAGS[tool.domain]))
                                   for name, tool in TOOLS.items()})
