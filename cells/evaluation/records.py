"""The plain record every evaluation statistic is computed from: one row per evaluated episode.

`EvalRecord` deliberately flattens an `Episode` + `Rewards` pair into scalars and tuples so that
the statistics (stats.py) never depend on the environment's internals, and so that records can
be written to / read from JSONL and compared across runs.

`record_from_episode` is the only place that reads step_04 types. The reward breakdown's exact
keys belong to the rewards developer; it is read defensively with this expected shape:

    breakdown["drift"]   = {"handled": [{"pattern_id": str, "fired_turn": int,
                                         "handled_turn": int | None, ...}, ...]}
    breakdown["penalty"] = {"offences": [{"code": str, "count": int (optional), ...}, ...]}

Missing keys mean "unknown": latencies become None, offences an empty tuple.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cells.step_04_datatypes import (
    DRIFT_KINDS,
    LANGUAGES,
    MIN_REWARD,
    Episode,
    JsonModel,
    ModelValidationError,
    Rewards,
    TerminatedBy,
)


@dataclass(frozen=True)
class EvalRecord(JsonModel):
    """One evaluated episode. Task identity is (seed, stage, language); `trial` indexes repeats."""

    policy: str
    seed: int
    stage: int
    language: str
    trial: int
    success: bool  # r_task == 1
    reward: float
    r_task: float
    r_drift: float | None  # None when no drift fired
    r_constraints: float
    r_format: float
    r_penalty: float
    confidence: float  # submitted confidence; 0 when the agent aborted or timed out
    parse_failures: int
    turns_used: int
    drift_patterns: tuple[str, ...] = ()  # pattern ids of the drifts that fired, in firing order
    drift_kinds: tuple[str, ...] = ()  # drift_type of each fired drift (same order)
    drift_latencies: tuple[int | None, ...] = ()  # turns from firing to handling; None = not handled
    offences: tuple[str, ...] = ()  # penalty offence codes, one entry per occurrence
    terminated_by: TerminatedBy = TerminatedBy.SUBMIT

    def __post_init__(self) -> None:
        name = "EvalRecord"
        if not isinstance(self.terminated_by, TerminatedBy):
            try:
                object.__setattr__(self, "terminated_by", TerminatedBy(self.terminated_by))
            except ValueError:
                allowed = [t.value for t in TerminatedBy]
                raise ModelValidationError(name, "terminated_by", f"{self.terminated_by!r} not in {allowed}") from None
        for attr in ("drift_patterns", "drift_kinds", "drift_latencies", "offences"):
            object.__setattr__(self, attr, tuple(getattr(self, attr)))
        _check(isinstance(self.policy, str) and self.policy != "", "policy", "must be a non-empty string")
        _check(self.stage in (1, 2, 3), "stage", f"must be 1, 2 or 3, got {self.stage!r}")
        _check(self.language in LANGUAGES, "language", f"must be one of {LANGUAGES}, got {self.language!r}")
        _check(isinstance(self.trial, int) and self.trial >= 0, "trial", "must be an int >= 0")
        _check(bool(self.success) == (self.r_task == 1.0), "success",
               f"must equal (r_task == 1); got success={self.success!r}, r_task={self.r_task!r}")
        _check(0.0 <= self.confidence <= 1.0, "confidence", f"must be in [0, 1], got {self.confidence!r}")
        _check(MIN_REWARD <= self.reward <= 1.0, "reward", f"must be in [{MIN_REWARD}, 1], got {self.reward!r}")
        _check(self.parse_failures >= 0 and self.turns_used >= 0, "parse_failures",
               "parse_failures and turns_used must be >= 0")
        n = len(self.drift_patterns)
        _check(len(self.drift_kinds) == n and len(self.drift_latencies) == n, "drift_kinds",
               "drift_patterns, drift_kinds and drift_latencies need one entry per fired drift")
        _check(all(k in DRIFT_KINDS for k in self.drift_kinds), "drift_kinds", f"each must be one of {DRIFT_KINDS}")
        _check(all(x is None or x >= 0 for x in self.drift_latencies), "drift_latencies",
               "latencies are >= 0 turns (or None when the drift was not handled)")
        _check((self.r_drift is None) == (n == 0), "r_drift",
               f"must be None exactly when no drift fired ({n} fired, r_drift={self.r_drift!r})")

    @property
    def task_key(self) -> tuple[int, int, str]:
        """The task this episode attempted: (seed, stage, language)."""
        return (self.seed, self.stage, self.language)

    @property
    def pair_key(self) -> tuple[int, int, str, int]:
        """The key used to pair baseline and final episodes: (seed, stage, language, trial)."""
        return (self.seed, self.stage, self.language, self.trial)

    @property
    def drift_fired(self) -> bool:
        return bool(self.drift_patterns)


def _check(cond: bool, field_name: str, message: str) -> None:
    if not cond:
        raise ModelValidationError("EvalRecord", field_name, message)


def _drift_latencies(episode: Episode, drift_info: Any) -> tuple[int | None, ...]:
    """Match each fired drift to a breakdown entry (same pattern_id, same fired turn if given)."""
    entries = drift_info.get("handled", []) if isinstance(drift_info, Mapping) else []
    entries = [e for e in entries if isinstance(e, Mapping)] if isinstance(entries, Sequence) else []
    used: set[int] = set()
    out: list[int | None] = []
    for event in episode.drifts:
        latency: int | None = None
        for i, entry in enumerate(entries):
            fired = entry.get("fired_turn", event.turn)
            if i in used or entry.get("pattern_id") != event.pattern_id or fired != event.turn:
                continue
            used.add(i)
            handled = entry.get("handled_turn")
            if isinstance(handled, int) and not isinstance(handled, bool):
                latency = max(0, handled - int(fired))
            break
        out.append(latency)
    return tuple(out)


def _offence_codes(penalty_info: Any) -> tuple[str, ...]:
    """Offence codes, repeated `count` times when an entry carries a count."""
    entries = penalty_info.get("offences", []) if isinstance(penalty_info, Mapping) else []
    codes: list[str] = []
    for entry in entries if isinstance(entries, Sequence) else []:
        if isinstance(entry, str):
            codes.append(entry)
        elif isinstance(entry, Mapping) and entry.get("code") is not None:
            count = entry.get("count", 1)
            count = count if isinstance(count, int) and count > 0 else 1
            codes.extend([str(entry["code"])] * count)
    return tuple(codes)


def record_from_episode(policy: str, trial: int, episode: Episode, rewards: Rewards) -> EvalRecord:
    """Flatten one finished episode and its rewards into an `EvalRecord`."""
    breakdown = rewards.breakdown if isinstance(rewards.breakdown, Mapping) else {}
    return EvalRecord(
        policy=policy,
        seed=episode.seed,
        stage=episode.stage,
        language=episode.goal.language,
        trial=trial,
        success=rewards.r_task == 1.0,
        reward=float(rewards.reward),
        r_task=float(rewards.r_task),
        r_drift=None if not episode.drifts else (0.0 if rewards.r_drift is None else float(rewards.r_drift)),
        r_constraints=float(rewards.r_constraints),
        r_format=float(rewards.r_format),
        r_penalty=float(rewards.r_penalty),
        confidence=float(rewards.confidence),
        parse_failures=episode.parse_failures,
        turns_used=episode.turns_used,
        drift_patterns=tuple(d.pattern_id for d in episode.drifts),
        drift_kinds=tuple(d.drift_type for d in episode.drifts),
        drift_latencies=_drift_latencies(episode, breakdown.get("drift", {})),
        offences=_offence_codes(breakdown.get("penalty", {})),
        terminated_by=episode.terminated_by,
    )


def save_records_jsonl(records: Iterable[EvalRecord], path: str | Path) -> Path:
    """Write one canonical-JSON record per line; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(r.to_json() + "\n" for r in records), encoding="utf-8")
    return path


def load_records_jsonl(path: str | Path) -> tuple[EvalRecord, ...]:
    """Read records written by `save_records_jsonl`, or the same file gzipped (a path ending in `.gz`)."""
    path = Path(path)
    if path.suffix == ".gz":
        import gzip

        lines = gzip.decompress(path.read_bytes()).decode("utf-8").splitlines()
    else:
        lines = path.read_text(encoding="utf-8").splitlines()
    return tuple(EvalRecord.from_json(line) for line in lines if line.strip())
