"""Generated splits (`splits:` in cells/data/drift_families.yaml): which drift instances train and which are held
out for evaluation, and why.

Three kinds of hold-out (`HOLDOUT_KINDS`), all met only in evaluation:

- "a": the base split of the hand-written catalogue exactly as it is (step 6's `DriftSplit`: its reinforced
  patterns only in GRPO's episodes, its unseen ones nowhere in training), and every generated instance with the
  (family, domain, tool, field) combination of one of its withheld patterns, which sits in that pattern's set;
- "b": whole (family, domain) cells;
- "c": parameter values (lexicon entries, amounts, formats, scopes) no training instance uses.

Every other generated instance trains: in GRPO's episodes only (`reinforced`) when a digest of its id falls under
`reinforced_share`, else in the warm start's demonstrations too (`demonstrated`). `training_ids(limit)` is the
first `limit` of them in a fixed order (digest order within each family, families in turn), so a smaller training
set is a subset of every larger one: the generalisation curve's points.

Pure functions of the fixtures; the base split and the hand-written combinations come from step 6, which builds
`GeneratedSplit`s (`parse_generated_splits`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from cells.errors import DriftCallError
from cells.step_04_datatypes import stable_int

from .families import FAMILIES_FILE, all_instances, combination, instance, is_generated, load_families

HOLDOUT_KINDS = ("a", "b", "c")
SETS = ("demonstrated", "reinforced", "unseen")  # step 6's PATTERN_SETS, in the same order
Combination = tuple[str, str, str, str]


class GeneratedSplitError(DriftCallError, ValueError):
    """A generated split is malformed; the message names the file, split, key and what is allowed."""


@dataclass(frozen=True)
class GeneratedSplit:
    """A split over hand-written patterns and generated instances, shaped like step 6's `DriftSplit`."""

    name: str
    why: str
    base: Any  # step 6's DriftSplit of the hand-written catalogue
    withheld: dict[Combination, str]  # combination of a withheld hand-written pattern -> its id
    cells: frozenset[tuple[str, str]]
    values: dict[str, dict[str, frozenset[str]]]  # family -> parameter -> held-out values (as text)
    reinforced_share: float
    handwritten: tuple[str, ...] = field(default=())  # every hand-written pattern id

    @property
    def reinforced(self) -> dict[str, str]:
        return self.base.reinforced

    @property
    def unseen(self) -> dict[str, str]:
        return self.base.unseen

    def placement(self, pattern_id: str) -> tuple[str, str | None]:
        """(its set, its hold-out kind or None) for any hand-written or generated pattern id."""
        if not is_generated(pattern_id):
            which = self.base.set_of(pattern_id)
            return which, None if which == "demonstrated" else "a"
        return self._placements[pattern_id]

    def set_of(self, pattern_id: str) -> str:
        return self.placement(pattern_id)[0]

    def holdout_kind(self, pattern_id: str) -> str | None:
        return self.placement(pattern_id)[1]

    def episode_set(self, pattern_ids: Iterable[str]) -> str | None:
        """As `DriftSplit.episode_set`: the least demonstrated set among the episode's drifts; None without one."""
        sets = {self.set_of(p) for p in pattern_ids}
        return next((which for which in reversed(SETS) if which in sets), None)

    def ids(self, which: str) -> frozenset[str]:
        """Every hand-written and generated pattern id of one set."""
        if which not in SETS:
            raise ValueError(f"pattern set must be one of {SETS}, got {which!r}")
        return self.base.ids(which) | frozenset(p for p, (s, _) in self._placements.items() if s == which)

    def held_out(self, kind: str) -> frozenset[str]:
        """The generated instances of one hold-out kind that only evaluation meets."""
        return frozenset(p for p, (s, k) in self._placements.items() if s == "unseen" and k == kind)

    def training_ids(self, limit: int | None = None) -> tuple[str, ...]:
        """The generated instances training may meet (demonstrated or reinforced), the first `limit` of them in the
        fixed order of the module docstring (None or negative: all)."""
        ordered = self._training_order
        return ordered if limit is None or limit < 0 else ordered[:limit]

    @cached_property
    def _placements(self) -> dict[str, tuple[str, str | None]]:
        return {inst.id: self._place(inst) for inst in all_instances()}

    def _place(self, inst: Any) -> tuple[str, str | None]:
        combo = combination(inst)
        base_set = self.base.set_of(self.withheld[combo]) if combo in self.withheld else None
        if base_set == "unseen":
            return "unseen", "a"
        if (inst.family, inst.domain) in self.cells:
            return "unseen", "b"
        held = self.values.get(inst.family, {})
        if any(str(v) in held.get(p, ()) for p, v in inst.values.items()):
            return "unseen", "c"
        if base_set == "reinforced":
            return "reinforced", "a"
        under = stable_int(self.name, "reinforced", inst.id) % 10_000 < self.reinforced_share * 10_000
        return ("reinforced" if under else "demonstrated"), None

    @cached_property
    def _training_order(self) -> tuple[str, ...]:
        per_family: dict[str, list[str]] = {}
        for pid, (which, _) in self._placements.items():
            if which != "unseen":
                per_family.setdefault(instance(pid).family, []).append(pid)
        queues = [sorted(ids, key=lambda p: stable_int(self.name, "order", p)) for _, ids in sorted(per_family.items())]
        return tuple(q[i] for i in range(max(map(len, queues), default=0)) for q in queues if i < len(q))


def _fail(name: str, key: str, message: str) -> GeneratedSplitError:
    return GeneratedSplitError(f"{FAMILIES_FILE}: split {name}: key {key!r}: {message}")


SPLIT_KEYS = ("base", "why", "reinforced_share", "cells", "values")


def parse_generated_split(name: str, raw: Any, base_splits: dict[str, Any], catalogue: Iterable[Any]) -> GeneratedSplit:
    """One entry of `splits:` validated against the families, the hand-written catalogue (patterns carrying
    `family`, `combination` and `evidence`) and its splits."""
    if not isinstance(raw, dict) or set(raw) != set(SPLIT_KEYS):
        raise _fail(name, "*", f"allowed (and required) keys: {list(SPLIT_KEYS)}")
    if raw["base"] not in base_splits:
        raise _fail(name, "base", f"{raw['base']!r} is not a split of drifts.yaml; known: {sorted(base_splits)}")
    base = base_splits[raw["base"]]
    patterns = list(catalogue)
    share = raw["reinforced_share"]
    if not isinstance(share, (int, float)) or not 0 <= share <= 1:
        raise _fail(name, "reinforced_share", f"a share in [0, 1], got {share!r}")
    families = load_families()
    cells = _cells(name, raw["cells"], families, patterns)
    values = _values(name, raw["values"], families, patterns, base)
    withheld = {p.combination: p.id for p in patterns if base.set_of(p.id) != "demonstrated"}
    return GeneratedSplit(name, str(raw["why"]), base, withheld, cells, values, float(share),
                          tuple(p.id for p in patterns))


def _cells(name: str, raw: Any, families: dict[str, Any], patterns: list[Any]) -> frozenset[tuple[str, str]]:
    if not isinstance(raw, list):
        raise _fail(name, "cells", "a list of [family, domain] pairs")
    out = set()
    for cell in raw:
        fam = families.get(cell[0]) if isinstance(cell, list) and len(cell) == 2 else None
        if fam is None or not any(s.domain == cell[1] for s in fam.sites):
            raise _fail(name, "cells", f"{cell!r}: a [family, domain] where the family has sites; families: "
                                       f"{sorted(families)}")
        written = [p.id for p in patterns if (p.family, p.domain) == tuple(cell)]
        if written:
            raise _fail(name, "cells", f"{cell!r} holds hand-written {written}: a held-out cell must be one no "
                                       "hand-written pattern sits in (their sets come from the base split)")
        out.add((str(cell[0]), str(cell[1])))
    return frozenset(out)


def _values(name: str, raw: Any, families: dict[str, Any], patterns: list[Any], base: Any
            ) -> dict[str, dict[str, frozenset[str]]]:
    if not isinstance(raw, dict):
        raise _fail(name, "values", "a mapping family -> parameter -> list of values")
    trained_tokens = {t for p in patterns if base.set_of(p.id) != "unseen" for t in p.evidence.tokens}
    out: dict[str, dict[str, frozenset[str]]] = {}
    for fam_name, params in raw.items():
        fam = families.get(fam_name)
        if fam is None or not isinstance(params, dict) or set(params) - set(fam.params):
            raise _fail(name, "values", f"{fam_name!r}: a family ({sorted(families)}) mapping its parameters "
                                        f"({list(fam.params) if fam else '?'}) to values")
        out[fam_name] = {}
        for param, held in params.items():
            known = {str(v) for s in fam.sites for p, options in s.values if p == param for v in options}
            held = {str(v) for v in held}
            if held - known or held & trained_tokens:
                raise _fail(name, "values", f"{fam_name}.{param}: {sorted(held - known)} are no values of the family"
                            if held - known else f"{fam_name}.{param}: {sorted(held & trained_tokens)} are tokens "
                            "of a hand-written pattern training meets")
            out[fam_name][param] = frozenset(held)
    return out


def parse_generated_splits(payload: Any, base_splits: dict[str, Any], catalogue: Iterable[Any]
                           ) -> dict[str, GeneratedSplit]:
    """Every generated split of a parsed drift_families.yaml (absent: none)."""
    raw = payload.get("splits") if isinstance(payload, dict) else None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise GeneratedSplitError(f"{FAMILIES_FILE}: `splits` must be a mapping of split name -> split")
    patterns = tuple(catalogue)
    clash = sorted(set(raw) & set(base_splits))
    if clash:
        raise GeneratedSplitError(f"{FAMILIES_FILE}: splits {clash} are already splits of drifts.yaml")
    return {str(n): parse_generated_split(str(n), body, base_splits, patterns) for n, body in raw.items()}


def split_markdown(split: GeneratedSplit) -> str:
    """How a generated split places the instances: per family, how many train (demonstrated, reinforced) and how
    many each hold-out kind keeps for evaluation."""
    counts: dict[str, dict[str, int]] = {}
    for pid, (which, kind) in split._placements.items():
        column = which if which != "unseen" else f"unseen ({kind})"
        row = counts.setdefault(instance(pid).family, {})
        row[column] = row.get(column, 0) + 1
    columns = ["demonstrated", "reinforced", "unseen (a)", "unseen (b)", "unseen (c)"]
    lines = [f"Split `{split.name}` (base `{split.base.name}`): {split.why}", "",
             "| family | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for family, row in sorted(counts.items()):
        lines.append(f"| `{family}` | " + " | ".join(str(row.get(c, 0)) for c in columns) + " |")
    held = ", ".join(f"{f} x {d}" for f, d in sorted(split.cells))
    return "\n".join(lines) + f"\n\nHeld-out cells (b): {held}."
