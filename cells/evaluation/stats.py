"""Evaluation statistics over `EvalRecord`s (docs/design.md#10-evaluation). Pure functions; deterministic per seed.

Conventions:
- every interval is a 95 % interval (`CI_LEVEL`);
- means use the percentile bootstrap (`scipy.stats.bootstrap`, `method="percentile"`: BCa is
  undefined on the constant/binary samples evaluation produces) with
  `numpy.random.default_rng(stable_int(seed, tag))`, so a fixed seed gives identical intervals;
- proportions use the Wilson score interval (`scipy.stats.binomtest(...).proportion_ci`);
- paired final − baseline uses the bootstrap for the CI of the mean difference and a two-sided
  paired **sign-flip permutation test** (`scipy.stats.permutation_test`,
  `permutation_type="samples"`; exact when 2**n <= resamples) for the p-value: unlike the
  Wilcoxon test it is defined when every difference is zero and tests the mean itself;
- empty inputs give `None` values (never NaN) so reports stay valid JSON.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from cells.errors import DriftCallError
from cells.evaluation.records import EvalRecord
from cells.step_04_datatypes import stable_int

CI_LEVEL = 0.95
PAIRED_TEST = "two-sided paired sign-flip permutation test on the mean difference"
PERMUTATIONS = 9999


class SeedMismatchError(DriftCallError, ValueError):
    """Baseline and final record sets do not cover exactly the same (seed, stage, language, trial) keys."""


@dataclass(frozen=True)
class Estimate:
    """A point estimate with a confidence interval; all None when there was no data."""

    value: float | None
    low: float | None
    high: float | None
    n: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _rng(seed: int, *tags: Any) -> np.random.Generator:
    return np.random.default_rng(stable_int(seed, *tags) % 2**32)


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def mean_ci(values: Sequence[float], *, resamples: int = 1000, seed: int = 0, tag: str = "mean") -> Estimate:
    """Mean with a percentile-bootstrap CI; a constant sample gets a zero-width interval."""
    from scipy import stats

    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return Estimate(None, None, None, 0)
    m = float(x.mean())
    if x.size == 1 or np.all(x == x[0]):
        return Estimate(m, m, m, int(x.size))
    res = stats.bootstrap((x,), np.mean, n_resamples=resamples, confidence_level=CI_LEVEL,
                          method="percentile", vectorized=True, rng=_rng(seed, tag))
    ci = res.confidence_interval
    return Estimate(m, _finite(ci.low), _finite(ci.high), int(x.size))


def success_ci(successes: Sequence[bool]) -> Estimate:
    """Success rate with a Wilson score interval."""
    from scipy import stats

    n = len(successes)
    if n == 0:
        return Estimate(None, None, None, 0)
    k = int(sum(bool(s) for s in successes))
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=CI_LEVEL, method="wilson")
    return Estimate(k / n, float(ci.low), float(ci.high), n)


def _pairs(baseline: Iterable[EvalRecord], final: Iterable[EvalRecord]) -> list[tuple[EvalRecord, EvalRecord]]:
    """Match records by pair key; raise `SeedMismatchError` on duplicates or uncovered keys."""
    sides: list[dict[tuple, EvalRecord]] = []
    for label, recs in (("baseline", baseline), ("final", final)):
        table: dict[tuple, EvalRecord] = {}
        for r in recs:
            if r.pair_key in table:
                raise SeedMismatchError(
                    f"{label} has two records for (seed, stage, language, trial)={r.pair_key}; "
                    "pass the records of one policy per side, each key once"
                )
            table[r.pair_key] = r
        sides.append(table)
    base, fin = sides
    only_b, only_f = sorted(set(base) - set(fin)), sorted(set(fin) - set(base))
    if only_b or only_f:
        raise SeedMismatchError(
            f"paired evaluation needs identical keys: {len(only_b)} only in baseline (e.g. {only_b[:3]}), "
            f"{len(only_f)} only in final (e.g. {only_f[:3]}); evaluate both on the same frozen eval seeds"
        )
    if not base:
        raise SeedMismatchError("no records to pair: both sides are empty")
    return [(base[k], fin[k]) for k in sorted(base)]


def sign_flip_p_value(final: np.ndarray, baseline: np.ndarray, permutations: int, rng: np.random.Generator) -> float:
    """Two-sided p of the mean paired difference under random sign flips of each pair (`scipy.stats.
    permutation_test`, `permutation_type="samples"`; exact when 2**n <= permutations); 1.0 when every
    difference is zero, and for a single pair (its two sign flips give the same |mean|: the exact p is 1, and
    scipy refuses samples of one)."""
    from scipy import stats

    if np.all(final == baseline) or len(final) < 2:
        return 1.0
    res = stats.permutation_test(
        (final, baseline), lambda x, y, axis=-1: np.mean(x - y, axis=axis), permutation_type="samples",
        vectorized=True, n_resamples=permutations, alternative="two-sided", rng=rng,
    )
    return float(res.pvalue)


def paired_difference(
    baseline: Iterable[EvalRecord], final: Iterable[EvalRecord], *, metric: str = "reward",
    resamples: int = 1000, seed: int = 0, permutations: int = PERMUTATIONS,
) -> dict[str, Any]:
    """Mean of final − baseline over matched keys, its bootstrap CI and a permutation p-value
    (`permutations` random sign flips, or all 2**n when that is fewer; smallest p is 1/(permutations+1))."""
    pairs = _pairs(baseline, final)
    b = np.array([float(getattr(p[0], metric)) for p in pairs])
    f = np.array([float(getattr(p[1], metric)) for p in pairs])
    d = f - b
    diff = mean_ci(d, resamples=resamples, seed=seed, tag=f"paired/{metric}")
    p_value = sign_flip_p_value(f, b, permutations, _rng(seed, "perm", metric))
    return {
        "metric": metric, "n_pairs": len(pairs), "baseline_mean": float(b.mean()), "final_mean": float(f.mean()),
        "diff": diff.to_dict(), "p_value": p_value, "test": PAIRED_TEST, "permutations": permutations,
    }


def _family(pattern_id: str) -> str:
    """The drift family of a pattern id; "unknown" for an id no catalogue or family names (older records)."""
    from cells.step_06_drift import pattern_by_id

    try:
        return pattern_by_id(pattern_id).family or "unknown"
    except KeyError:
        return "unknown"


def _record_groups(record: EvalRecord, by: str) -> tuple[str, ...]:
    if by == "language":
        return (record.language,)
    if by == "stage":
        return (str(record.stage),)
    if by == "drift_kind":
        return tuple(dict.fromkeys(record.drift_kinds)) or ("none",)
    if by == "pattern":
        return tuple(dict.fromkeys(record.drift_patterns)) or ("none",)
    if by == "family":  # the drift family of each fired pattern (step 6: hand-written ones name theirs)
        return tuple(dict.fromkeys(_family(p) for p in record.drift_patterns)) or ("none",)
    raise ValueError(f"unknown grouping {by!r}; use language, stage, drift_kind, pattern or family")


def group_table(records: Sequence[EvalRecord], by: str, *, resamples: int = 1000,
                seed: int = 0) -> dict[str, dict[str, Any]]:
    """Per-group success and reward. An episode with several drift kinds counts once in each;
    episodes where no drift fired form the group "none"."""
    groups: dict[str, list[EvalRecord]] = defaultdict(list)
    for r in records:
        for g in _record_groups(r, by):
            groups[g].append(r)
    return {
        g: {
            "n": len(rs),
            "success": success_ci([r.success for r in rs]).to_dict(),
            "reward": mean_ci([r.reward for r in rs], resamples=resamples, seed=seed, tag=f"{by}/{g}").to_dict(),
        }
        for g, rs in sorted(groups.items())
    }


def drift_gap(records: Sequence[EvalRecord], *, resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Success rate without drift − success rate with drift, with a two-sample bootstrap CI."""
    from scipy import stats

    no = np.array([r.success for r in records if not r.drift_fired], dtype=float)
    yes = np.array([r.success for r in records if r.drift_fired], dtype=float)
    out: dict[str, Any] = {"n_no_drift": int(no.size), "n_drift": int(yes.size),
                           "success_no_drift": _finite(no.mean()) if no.size else None,
                           "success_drift": _finite(yes.mean()) if yes.size else None}
    if not no.size or not yes.size:
        return {**out, "gap": Estimate(None, None, None, len(records)).to_dict()}
    gap = float(no.mean() - yes.mean())
    if np.all(no == no[0]) and np.all(yes == yes[0]):
        low = high = gap
    else:
        res = stats.bootstrap((no, yes), lambda a, b, axis=-1: a.mean(axis=axis) - b.mean(axis=axis),
                              n_resamples=resamples, confidence_level=CI_LEVEL, method="percentile",
                              vectorized=True, rng=_rng(seed, "drift_gap"))
        low, high = res.confidence_interval.low, res.confidence_interval.high
    return {**out, "gap": Estimate(gap, _finite(low), _finite(high), len(records)).to_dict()}


def drift_latency(records: Sequence[EvalRecord]) -> dict[str, Any]:
    """Turns from a drift firing to the agent handling it, over every fired drift."""
    lat = [x for r in records for x in r.drift_latencies]
    handled = [x for x in lat if x is not None]
    return {
        "n_fired": len(lat), "n_handled": len(handled),
        "handled_rate": len(handled) / len(lat) if lat else None,
        "mean_turns": float(np.mean(handled)) if handled else None,
        "median_turns": float(np.median(handled)) if handled else None,
    }


def pass_hat_k(records: Sequence[EvalRecord], k_max: int | None = None) -> dict[str, float]:
    """pass^k for k = 1..K (τ-bench, Yao et al. 2024): the chance that k i.i.d. trials of a task
    all succeed, estimated per task without bias as C(c, k) / C(n, k) from c successes in n trials,
    then averaged over tasks. K is capped by the fewest trials any task has."""
    tasks: dict[tuple, list[bool]] = defaultdict(list)
    for r in records:
        tasks[r.task_key].append(r.success)
    if not tasks:
        return {}
    n_min = min(len(v) for v in tasks.values())
    k_top = n_min if k_max is None else min(k_max, n_min)
    return {
        str(k): float(np.mean([math.comb(sum(v), k) / math.comb(len(v), k) for v in tasks.values()]))
        for k in range(1, k_top + 1)
    }


def calibration(records: Sequence[EvalRecord], *, bins: int = 10) -> dict[str, Any]:
    """Brier score, expected calibration error over `bins` equal-width bins, and the bins."""
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    conf = np.array([r.confidence for r in records], dtype=float)
    acc = np.array([r.success for r in records], dtype=float)
    idx = np.minimum((conf * bins).astype(int), bins - 1)  # confidence 1.0 falls in the last bin
    table, ece = [], 0.0
    for b in range(bins):
        mask = idx == b
        count = int(mask.sum())
        mc = float(conf[mask].mean()) if count else None
        ac = float(acc[mask].mean()) if count else None
        if count:
            ece += count / conf.size * abs(ac - mc)  # type: ignore[operator]
        table.append({"low": b / bins, "high": (b + 1) / bins, "count": count,
                      "mean_confidence": mc, "accuracy": ac})
    return {
        "n": int(conf.size),
        "brier": float(np.mean((conf - acc) ** 2)) if conf.size else None,
        "ece": float(ece) if conf.size else None,
        "bins": table,
    }


def parse_failure_stats(records: Sequence[EvalRecord]) -> dict[str, Any]:
    """`rate` = unparsable outputs per turn used; `episode_rate` = share of episodes with any."""
    turns = sum(r.turns_used for r in records)
    fails = sum(r.parse_failures for r in records)
    return {
        "failures": fails, "turns": turns, "rate": fails / turns if turns else None,
        "episode_rate": sum(r.parse_failures > 0 for r in records) / len(records) if records else None,
    }


def counts(values: Iterable[str]) -> dict[str, int]:
    """Occurrence count per value, sorted by key."""
    out: dict[str, int] = defaultdict(int)
    for v in values:
        out[v] += 1
    return dict(sorted(out.items()))


def by_policy(records: Iterable[EvalRecord]) -> dict[str, list[EvalRecord]]:
    """Split records by policy name (sorted)."""
    out: dict[str, list[EvalRecord]] = defaultdict(list)
    for r in records:
        out[r.policy].append(r)
    return dict(sorted(out.items()))


STRATIFIED_TEST = "two-sided paired sign-flip permutation test on the pooled mean difference"


def stratified_paired_difference(
    strata: Mapping[str, tuple[Sequence[EvalRecord], Sequence[EvalRecord]]], *, metric: str = "success",
    resamples: int = 10_000, seed: int = 0, permutations: int = PERMUTATIONS,
) -> dict[str, Any]:
    """Mean of final − baseline over the pairs of every stratum (e.g. one per training seed: {run: (baseline,
    final)}), with a percentile bootstrap that resamples pairs within each stratum, so each seed keeps its
    weight and its own case list in every resample, and a sign-flip permutation p-value."""
    if not strata:
        raise SeedMismatchError("no strata to pool: pass at least one (baseline, final) pair of record lists")
    diffs: dict[str, np.ndarray] = {}
    finals, baselines = [], []
    for label in sorted(strata):  # sorted: the same draws whatever order the caller built the mapping in
        pairs = _pairs(*strata[label])
        baselines.append(np.array([float(getattr(b, metric)) for b, _ in pairs]))
        finals.append(np.array([float(getattr(f, metric)) for _, f in pairs]))
        diffs[label] = finals[-1] - baselines[-1]
    d = np.concatenate(list(diffs.values()))
    value = float(d.mean())
    rng = _rng(seed, "stratified", metric)
    if np.all(d == d[0]):
        low = high = value
    else:
        totals = np.zeros(resamples)  # (R,) sum of resampled differences over every stratum
        for x in diffs.values():
            totals += x[rng.integers(0, x.size, size=(resamples, x.size))].sum(axis=1)  # (R, n_s) -> (R,)
        low, high = (float(q) for q in np.percentile(totals / d.size, [100 * (1 - CI_LEVEL) / 2,
                                                                       100 * (1 + CI_LEVEL) / 2]))
    b_mean = float(np.mean([float(getattr(b, metric)) for s in strata.values() for b in s[0]]))
    return {
        "metric": metric, "n_pairs": int(d.size), "strata": {k: int(v.size) for k, v in diffs.items()},
        "baseline_mean": b_mean, "final_mean": b_mean + value, "diff": Estimate(value, low, high, int(d.size)).to_dict(),
        # flipping the sign of each pair alone already keeps every stratum's pairs in it
        "p_value": sign_flip_p_value(np.concatenate(finals), np.concatenate(baselines), permutations, rng),
        "test": STRATIFIED_TEST, "permutations": permutations,
        "resamples": resamples, "bootstrap": "percentile; pairs resampled within each stratum",
    }


def success_by_group(records: Sequence[EvalRecord], by: str) -> dict[str, dict[str, Any]]:
    """Per group (language, stage, drift_kind, pattern or family; see `group_table`): episodes, successes and rate.
    Counts, not intervals: these tables are small cells whose sums pool over seeds."""
    groups: dict[str, list[bool]] = defaultdict(list)
    for r in records:
        for g in _record_groups(r, by):
            groups[g].append(bool(r.success))
    return {g: {"n": len(v), "successes": sum(v), "rate": sum(v) / len(v)} for g, v in sorted(groups.items())}


def turns_per_success(records: Sequence[EvalRecord]) -> dict[str, Any]:
    """Turns spent per success (every episode's turns over the successes: failures cost turns too) and the
    mean turns of a successful episode; None without a success."""
    wins = [r.turns_used for r in records if r.success]
    return {"n": len(records), "successes": len(wins),
            "turns_per_success": sum(r.turns_used for r in records) / len(wins) if wins else None,
            "mean_turns_success": float(np.mean(wins)) if wins else None}
