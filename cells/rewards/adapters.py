"""The only place the reward reads steps 05-07; every lookup is injectable for tests.

- drift evidence: `evidence_for(event, patterns)` turns a catalogue pattern (step_06's
  `pattern_by_id` by default, or any mapping / callable of pattern_id -> pattern-shaped object)
  into a `DriftEvidence`;
- task rules: `default_rules()` reads step_07's REQUIRED_SLOTS, SLOT_TO_DETAIL, check_constraint,
  script_of and LANGUAGE_SCRIPT, each with a built-in fallback while step_07 is absent;
- tool docs: `default_tool_args()` reads documented argument names from step_05, or None.
"""

from __future__ import annotations

import functools
import importlib
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cells.errors import DriftCallError
from cells.step_04_models import GOAL_WRITE_TOOLS, Booking, Constraint, DriftEvent

from .common import is_specific, norm_text

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


def _optional_module(name: str) -> Any:
    """Import `cells.<name>` or return None when that module does not exist yet."""
    try:
        return importlib.import_module(f"cells.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"cells.{name}":
            raise  # the module exists but one of *its* imports is broken: stay loud
        return None


# --- drift evidence --------------------------------------------------------------------------


@dataclass(frozen=True)
class DriftEvidence:
    """What one catalogue pattern lets the agent prove: normalised drift-specific tokens and the
    structural adaptation (tool + argument keys) that shows the post-drift schema/policy was used."""

    pattern_id: str
    tokens: tuple[str, ...]
    adaptation_tool: str | None
    adaptation_args: tuple[str, ...]


GOAL_WRITE = "goal.write"  # catalogue alias for the goal domain's booking/order tool


def _adaptation_tool(adaptation: Any, goal_domain: str | None) -> str | None:
    tool = _get(adaptation, "tool")
    if tool == GOAL_WRITE:
        tool_for = _get(adaptation, "tool_for")
        return tool_for(goal_domain) if callable(tool_for) else GOAL_WRITE_TOOLS.get(goal_domain or "")
    return str(tool) if tool else None


def evidence_of(pattern_id: str, pattern: Any, goal_domain: str | None = None) -> DriftEvidence:
    """Build `DriftEvidence` from an object shaped like step_06's DriftPattern (or a dict);
    `goal_domain` resolves the adaptation tool alias "goal.write"."""
    ev = _get(pattern, "evidence")
    raw = _strs(_get(ev, "error_codes")) + _strs(_get(ev, "fields")) + _strs(_get(ev, "tokens"))
    notice = _get(pattern, "notice")
    if notice is not None:
        raw += _strs(_get(notice, "token"))
    tokens = tuple(sorted({t for t in (norm_text(r) for r in raw) if is_specific(t)}))
    adaptation = _get(pattern, "adaptation")
    args = _get(adaptation, "args_include") or ()
    return DriftEvidence(pattern_id, tokens, _adaptation_tool(adaptation, goal_domain),
                         tuple(sorted(str(a) for a in args)))


@functools.lru_cache(maxsize=1024)
def _catalogue_evidence(pattern_id: str, goal_domain: str | None) -> DriftEvidence:
    return evidence_of(pattern_id, default_patterns()(pattern_id), goal_domain)


def default_patterns() -> Callable[[str], Any]:
    """step_06's `pattern_by_id`; raises RewardInputError while step_06 is absent."""
    module = _optional_module("step_06_drift")
    if module is None or not hasattr(module, "pattern_by_id"):
        raise RewardInputError("drifts fired but cells.step_06_drift.pattern_by_id is unavailable; "
                               "pass compute_rewards(episode, patterns={pattern_id: pattern})")
    return module.pattern_by_id


def evidence_for(events: Iterable[DriftEvent], patterns: PatternLookup | None,
                 goal_domain: str | None = None) -> dict[str, DriftEvidence]:
    """Evidence for every fired drift's pattern, keyed by pattern_id."""
    ids = sorted({e.pattern_id for e in events})
    if not ids:
        return {}
    if patterns is None:  # the catalogue is fixed for the process: derive each pattern's evidence once
        return {pid: _catalogue_evidence(pid, goal_domain) for pid in ids}
    lookup = patterns
    out: dict[str, DriftEvidence] = {}
    for pid in ids:
        if isinstance(lookup, Mapping):
            if pid not in lookup:
                raise RewardInputError(f"fired drift {pid!r} is not in the patterns given; known: {sorted(lookup)}")
            pattern = lookup[pid]
        else:
            pattern = lookup(pid)
        out[pid] = evidence_of(pid, pattern, goal_domain)
    return out


# --- task rules (step_07) --------------------------------------------------------------------

OPS: dict[str, Callable[[Any, Any], bool]] = {
    "le": lambda a, v: a <= v, "ge": lambda a, v: a >= v, "eq": lambda a, v: a == v, "in": lambda a, v: a in v,
}
SCRIPT_RANGES: dict[str, tuple[int, int]] = {
    "devanagari": (0x0900, 0x097F), "tamil": (0x0B80, 0x0BFF), "kannada": (0x0C80, 0x0CFF),
}
BUILTIN_SLOT_TO_DETAIL: dict[str, str] = {"passengers": "passenger_count"}  # until step_07 says otherwise
BUILTIN_LANGUAGE_SCRIPT: dict[str, str] = {
    "hi": "devanagari", "ta": "tamil", "kn": "kannada", "en": "latin", "hinglish": "latin",
}


def letter_shares(text: str) -> dict[str, float]:
    """Share of letters per script (latin, devanagari, tamil, kannada); combining marks count."""
    counts = dict.fromkeys(("latin", *SCRIPT_RANGES), 0)
    for ch in text:
        if ch.isascii() and ch.isalpha():
            counts["latin"] += 1
            continue
        for script, (lo, hi) in SCRIPT_RANGES.items():
            if lo <= ord(ch) <= hi:
                counts[script] += 1
    total = sum(counts.values())
    return {k: (v / total if total else 0.0) for k, v in counts.items()}


def builtin_script_of(text: str) -> str:
    """Fallback for step_07's script_of: the only script with letters, else "mixed" (no letters: latin)."""
    present = [s for s, share in letter_shares(text).items() if share > 0]
    return present[0] if len(present) == 1 else ("latin" if not present else "mixed")


def builtin_check_constraint(constraint: Constraint, booking: Booking) -> tuple[bool, Any]:
    """Fallback for step_07's check_constraint: compare `details[name]` (or a Booking attribute)."""
    actual = booking.details.get(constraint.name, getattr(booking, constraint.name, None))
    try:
        return bool(OPS[constraint.op](actual, constraint.value)), actual
    except TypeError:  # missing or differently typed value: not satisfied
        return False, actual


@dataclass(frozen=True)
class TaskRules:
    """Task-side rules the reward applies; `source` says where each came from."""

    required_slots: Mapping[str, tuple[str, ...]] | None  # None: every goal slot is required
    slot_to_detail: Mapping[str, str] = field(default_factory=lambda: dict(BUILTIN_SLOT_TO_DETAIL))
    check_constraint: Callable[[Constraint, Booking], tuple[bool, Any]] = builtin_check_constraint
    script_of: Callable[[str], str] = builtin_script_of
    language_script: Mapping[str, str] = field(default_factory=lambda: dict(BUILTIN_LANGUAGE_SCRIPT))
    source: str = "builtin"

    def slots_for(self, domain: str, goal_slots: Mapping[str, Any]) -> tuple[str, ...]:
        if self.required_slots is None or domain not in self.required_slots:
            return tuple(sorted(goal_slots))
        return tuple(self.required_slots[domain])


def default_rules() -> TaskRules:
    """step_07's rules when it exists (attribute by attribute), else the built-in fallbacks."""
    tasks = _optional_module("step_07_tasks")
    if tasks is None:
        return TaskRules(required_slots=None)
    return TaskRules(
        required_slots=getattr(tasks, "REQUIRED_SLOTS", None),
        slot_to_detail=getattr(tasks, "SLOT_TO_DETAIL", BUILTIN_SLOT_TO_DETAIL),
        check_constraint=getattr(tasks, "check_constraint", builtin_check_constraint),
        script_of=getattr(tasks, "script_of", builtin_script_of),
        language_script=getattr(tasks, "LANGUAGE_SCRIPT", BUILTIN_LANGUAGE_SCRIPT),
        source="step_07_tasks",
    )


# --- documented tool arguments (step_05) -----------------------------------------------------


@functools.cache  # static for the process; every scoring asked for it (a tenth of reward time)
def default_tool_args() -> Mapping[str, frozenset[str]] | None:
    """Argument names each tool documents at reset, from step_05 (`TOOL_ARGS`, or `TOOLS` whose
    `.args(flags)` is read with `DEFAULT_FLAGS`), or None when step_05 exposes no arg spec."""
    spec = _tool_args_from_step_05()
    return None if spec is None else types.MappingProxyType(spec)


def _tool_args_from_step_05() -> dict[str, frozenset[str]] | None:
    vendors = _optional_module("step_05_vendors")
    if vendors is None:
        return None
    spec = getattr(vendors, "TOOL_ARGS", None)
    if isinstance(spec, Mapping):
        return {str(k): frozenset(map(str, v)) for k, v in spec.items()}
    tools, flags = getattr(vendors, "TOOLS", None), getattr(vendors, "DEFAULT_FLAGS", None)
    if isinstance(tools, Mapping) and isinstance(flags, Mapping):
        return {name: frozenset(a.name for a in tool.args(flags[tool.domain])) for name, tool in tools.items()}
    return None
