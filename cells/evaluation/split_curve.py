"""The generalisation curve of a generated drift split: held-out success against the number of distinct generated
drift instances training met, at equal compute (Procgen's curve against training levels).

Each point is one or more finished runs of one recipe that differ only in `drift_train_instances` (the first N of
the split's fixed training order, every smaller set inside every larger one) and the seed, each evaluated with
`python -m cells splits` on the same held-out cases. Per point and evaluation set: the warm start's and GRPO's
success pooled over the point's seeds (95% interval), and GRPO's paired difference against the point with the
fewest instances, on the same episodes, pairs resampled within each seed present at both points
(`stats.stratified_paired_difference`). The oracle (every pattern and instance demonstrated), when given, is
drawn as the ceiling. `python -m cells splits --curve RUN... [--oracle RUN] [--docs]` writes the JSON, and with
`--docs` the plot and the block `splits:curve:<split>` of docs/results.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cells.evaluation.split_pool import (
    BOOTSTRAP_SEED,
    NOT_RECIPE,
    ORACLE_MODEL,
    SplitMismatchError,
    SplitPoolError,
    SplitRun,
    check_poolable,
)

CURVE_KNOB = "drift_train_instances"  # what the curve's points, and only it, change (besides the seed)
CURVE_MODELS = ("warm_start", "trained")  # the demonstrations' share of transfer, then what GRPO adds
REQUIRED_POINTS = 4  # the experiment asks for at least four points


def train_instances(run: SplitRun) -> int:
    """How many distinct generated instances the run's training could meet (`drift_train_instances`; -1: all of
    the split's training instances)."""
    from cells.step_06_drift import GeneratedSplit, drift_split

    if run.recipe is None or CURVE_KNOB not in run.recipe:
        raise SplitPoolError(f"{run.path}: eval_splits.json records no {CURVE_KNOB} (an archive older than the "
                             "recorded recipe): replay it with `python -m cells splits`")
    split = drift_split(run.split)
    if not isinstance(split, GeneratedSplit):
        raise SplitMismatchError(f"{run.path} was evaluated on {run.split!r}, a hand-written split: the curve is "
                                 "drawn over a generated one (e.g. latin-gen, the cpu-gen preset)")
    return len(split.training_ids(int(run.recipe[CURVE_KNOB])))


def check_curve(runs: Sequence[SplitRun], oracle: SplitRun | None = None) -> None:
    """Refuse fewer than two runs, and what `split_pool.check_poolable` refuses but a different
    `drift_train_instances`: runs of different splits, case lists or recipes, an oracle trained with a split."""
    if len(runs) < 2:
        raise SplitPoolError("--curve needs at least two runs (two numbers of training instances)")
    check_poolable(runs, oracle, free=NOT_RECIPE | {CURVE_KNOB}, command="--curve",
                   hint=f"a curve's points must cost the same compute, so change only --set {CURVE_KNOB}=N")


def curve_sets(run: SplitRun) -> list[str]:
    """The sets the curve reads: what no training met (the hand-written unseen patterns and each held-out
    generated kind), then the reinforced and demonstrated ones, to show what transfer costs them."""
    order = ("unseen", "gen-unseen-a", "gen-unseen-b", "gen-unseen-c", "reinforced", "demonstrated")
    return [w for w in order if w in run.records]


def _point(which: str, runs: Sequence[SplitRun], fewest: Sequence[SplitRun], resamples: int) -> dict[str, Any]:
    from cells.evaluation import stats

    out: dict[str, Any] = {m: stats.success_ci([x.success for r in runs for x in r.records[which].get(m, ())])
                           .to_dict() for m in CURVE_MODELS}
    strata = {r.seed: r for r in fewest}
    pairs = {str(r.seed): (strata[r.seed].records[which]["trained"], r.records[which]["trained"])
             for r in runs if r.seed in strata and "trained" in r.records[which]}
    out["vs_fewest"] = (stats.stratified_paired_difference(pairs, metric="success", resamples=resamples,
                                                           seed=BOOTSTRAP_SEED)["diff"] if pairs else None)
    return out


def curve(runs: Sequence[SplitRun], oracle: SplitRun | None = None, resamples: int = 10_000) -> dict[str, Any]:
    """The curve's points, fewest training instances first; see the module docstring."""
    from cells.evaluation import stats

    check_curve(runs, oracle)
    by_n: dict[int, list[SplitRun]] = {}
    for run in runs:
        by_n.setdefault(train_instances(run), []).append(run)
    ns = sorted(by_n)
    if len(ns) < 2:
        raise SplitPoolError(f"every run given was trained on {ns[0]} generated instances: a curve needs runs at two "
                             f"numbers at least (`python -m cells run ... --set {CURVE_KNOB}=N`)")
    sets = curve_sets(runs[0])
    points = [{"instances": n, "runs": [{"run": r.name, "dir": str(r.path), "seed": r.seed} for r in by_n[n]],
               "sets": {w: _point(w, by_n[n], by_n[ns[0]], resamples) for w in sets}} for n in ns]
    return {"split": runs[0].split, "per_set": runs[0].per_set, "knob": CURVE_KNOB, "sets": sets,
            "points": points, "required_points": REQUIRED_POINTS,
            "oracle": None if oracle is None else {
                "run": oracle.name, "dir": str(oracle.path),
                "sets": {w: stats.success_ci([x.success for x in oracle.records[w][ORACLE_MODEL]]).to_dict()
                         for w in sets if ORACLE_MODEL in oracle.records.get(w, {})}},
            "bootstrap": {"resamples": resamples, "seed": BOOTSTRAP_SEED,
                          "method": "percentile; pairs resampled within each training seed"}}


def _pct(e: Mapping[str, Any] | None, signed: bool = False) -> str:
    if e is None:
        return "-"
    s = "+" if signed else ""
    return f"{100 * e['value']:{s}.1f} [{100 * e['low']:{s}.1f}, {100 * e['high']:{s}.1f}]"


def curve_markdown(result: Mapping[str, Any], image: str | None = None) -> str:
    """The curve as tables: success after GRPO (and the warm start) per point and set, GRPO's paired gain over the
    fewest-instance point, the oracle's row, and how many points of the `required_points` exist."""
    points, sets = result["points"], result["sets"]
    head = ["training instances", "seeds", *sets]
    sep = "|" + "---|" * len(head)
    lines = [f"Drift split `{result['split']}`: success (%, 95% interval) on {result['per_set']} held-out episodes "
             "per set and seed, against the distinct generated drift instances training could meet "
             f"(`--set {result['knob']}=N`; 0: the hand-written patterns only), same recipe and compute. "
             f"{len(points)} of the {result['required_points']} points the experiment asks for.", ""]
    if image:
        lines += [f"![generalisation curve]({image})", ""]
    for model, title in (("trained", "After GRPO"), ("warm_start", "Warm start")):
        lines += [f"{title}:", "", "| " + " | ".join(head) + " |", sep]
        lines += [f"| {p['instances']} | {', '.join(str(r['seed']) for r in p['runs'])} | "
                  + " | ".join(_pct(p["sets"][w][model]) for w in sets) + " |" for p in points]
        if model == "trained" and result.get("oracle"):
            oracle = result["oracle"]
            lines.append(f"| oracle (every instance demonstrated, {oracle['run']}) | | "
                         + " | ".join(_pct(oracle["sets"].get(w)) for w in sets) + " |")
        lines.append("")
    lines += [f"After GRPO, paired difference against {points[0]['instances']} instances (points, same episodes, "
              "seeds present at both):", "", "| " + " | ".join(head) + " |", sep]
    fewest = {r["seed"] for r in points[0]["runs"]}
    lines += [f"| {p['instances']} | {', '.join(str(r['seed']) for r in p['runs'] if r['seed'] in fewest)} | "
              + " | ".join(_pct(p["sets"][w]["vs_fewest"], signed=True) for w in sets) + " |" for p in points[1:]]
    return "\n".join(lines)


def plot_curve(result: Mapping[str, Any], path: Path) -> Path:
    """Success after GRPO per unseen set against training instances (symlog x: 0 is a point), 95% intervals as
    error bars, the oracle as a dashed line of the same colour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    unseen = [w for w in result["sets"] if "unseen" in w]
    xs = [p["instances"] for p in result["points"]]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for i, which in enumerate(unseen):
        colour = f"C{i}"
        est = [p["sets"][which]["trained"] for p in result["points"]]
        ys = [100 * e["value"] for e in est]
        err = [[100 * (e["value"] - e["low"]) for e in est], [100 * (e["high"] - e["value"]) for e in est]]
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, color=colour, label=which)
        oracle = (result.get("oracle") or {}).get("sets", {}).get(which)
        if oracle:
            ax.axhline(100 * oracle["value"], linestyle="--", color=colour, alpha=0.6)
    ax.set_xscale("symlog", linthresh=10)
    ax.set_xlim(-1, max(xs) * 1.5)  # no negative counts: symlog would draw a decade of them
    ax.set_xlabel(f"distinct generated drift instances in training ({result['knob']})")
    ax.set_ylabel("held-out success after GRPO (%)")
    ax.set_ylim(0, 100)
    ax.set_title(f"Generalisation curve, split {result['split']} (dashed: oracle)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def curve_block(split: str) -> str:
    """The docs block name of `split`'s curve."""
    return f"splits:curve:{split}"
