"""Curves of held-out success over runs of one recipe that differ in one lever (and the seed), at the same data:

- the generalisation curve of a generated drift split (`INSTANCES`): success against the number of distinct
  generated drift instances training met (Procgen's curve against training levels). Its points differ only in
  `drift_train_instances` (the first N of the split's fixed training order, every smaller set inside every larger
  one), at equal compute. `python -m cells splits --curve RUN... [--oracle RUN] [--docs]`; block
  `splits:curve:<split>`.
- model size (`SIZES`): success against the tiny model's parameters, runs differing only in its shape
  (`--set 'tiny={...}'`), trained on the same data and steps (a larger model costs more compute: each run's
  `compute` says how much). `python -m cells splits --sizes RUN... [--oracle RUN] [--docs]`; block
  `splits:sizes:<split>`.

Each run is evaluated with `python -m cells splits` on the same held-out cases. Per point and evaluation set: the
warm start's and GRPO's success pooled over the point's seeds (95% interval), and GRPO's paired difference against
the first point (fewest instances, smallest model), on the same episodes, pairs resampled within each seed present
at both points (`stats.stratified_paired_difference`). The oracle (every pattern and instance demonstrated), when
given, is drawn as the ceiling.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
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

CURVE_KNOB = "drift_train_instances"  # what the generalisation curve's points, and only it, change (besides the seed)
TINY_PREFIX = "tiny."  # the model's shape as a run's recipe records it (`tiny.hidden_size`, ...)
CURVE_MODELS = ("warm_start", "trained")  # the demonstrations' share of transfer, then what GRPO adds
REQUIRED_POINTS = 4  # the experiment asks for at least four points


def train_instances(run: SplitRun) -> int:
    """How many distinct generated instances the run's training could meet (`drift_train_instances`; -1: all of
    the split's training instances): as its evaluation recorded, else counted in today's catalogue."""
    from cells.step_06_drift import GeneratedSplit, drift_split

    if run.train_instances is not None:
        return run.train_instances
    if run.recipe is None or CURVE_KNOB not in run.recipe:
        raise SplitPoolError(f"{run.path}: eval_splits.json records no {CURVE_KNOB} (an archive older than the "
                             "recorded recipe): replay it with `python -m cells splits`")
    split = drift_split(run.split)
    if not isinstance(split, GeneratedSplit):
        raise SplitMismatchError(f"{run.path} was evaluated on {run.split!r}, a hand-written split: the curve is "
                                 "drawn over a generated one (e.g. latin-gen, the cpu-gen preset)")
    return len(split.training_ids(int(run.recipe[CURVE_KNOB])))


def model_parameters(run: SplitRun) -> int:
    """The parameters of the run's tiny model, from the shape its recipe records (`tiny_parameters`)."""
    from cells.modeling.tiny import tiny_parameters
    from cells.step_02_profiles import TinyModelRecipe

    shape = {k[len(TINY_PREFIX):]: v for k, v in (run.recipe or {}).items() if k.startswith(TINY_PREFIX)}
    if not shape:
        raise SplitPoolError(f"{run.path}: its recipe records no tiny-model shape (a Hub model, or an archive older "
                             "than the recorded recipe): model size compares runs of the tiny local model")
    return tiny_parameters(TinyModelRecipe(**shape))


def _tiny_knobs(runs: Sequence[SplitRun]) -> frozenset[str]:
    return frozenset(k for r in runs for k in (r.recipe or {}) if k.startswith(TINY_PREFIX))


@dataclass(frozen=True)
class CurveAxis:
    """What a curve's points differ in: `knobs` (the recipe knobs they may differ in, given the runs), `value` (a
    run's x), and the words of its command, tables and plot."""

    name: str  # the `splits` flag, the published file's kind and the docs block `splits:<name>:<split>`
    title: str  # the plot's title and image text
    key: str  # each point's x in the JSON
    knob: str  # the knob the points differ in, as the JSON names it
    knobs: Callable[[Sequence[SplitRun]], frozenset[str]]
    value: Callable[[SplitRun], int]
    column: str  # the tables' first column
    unit: str  # printed after a point's x
    sentence: str  # what the x is, in the tables' first sentence
    x_label: str
    x_scale: str  # "symlog" (0 is a point) or "log"
    hint: str  # the refusal's advice when runs differ in more
    required_points: int | None = None  # how many points the experiment asks for (None: no count)


INSTANCES = CurveAxis(
    name="curve", title="Generalisation curve", key="instances", knob=CURVE_KNOB,
    knobs=lambda runs: frozenset({CURVE_KNOB}), value=train_instances, column="training instances", unit="instances",
    sentence=f"the distinct generated drift instances training could meet (`--set {CURVE_KNOB}=N`; 0: the "
             "hand-written patterns only), same recipe and compute",
    x_label=f"distinct generated drift instances in training ({CURVE_KNOB})", x_scale="symlog",
    hint=f"a curve's points must cost the same compute, so change only --set {CURVE_KNOB}=N",
    required_points=REQUIRED_POINTS)
SIZES = CurveAxis(
    name="sizes", title="Model size", key="parameters", knob="tiny", knobs=_tiny_knobs, value=model_parameters,
    column="model parameters", unit="parameters",
    sentence="the tiny model's parameters (`--set 'tiny={...}'`), same recipe, data and steps (a larger model costs "
             "more compute)",
    x_label="parameters of the tiny model", x_scale="log",
    hint="model sizes compare one recipe, so change only the model's shape with --set 'tiny={...}'")
AXES = {axis.name: axis for axis in (INSTANCES, SIZES)}


def check_curve(runs: Sequence[SplitRun], oracle: SplitRun | None = None, axis: CurveAxis = INSTANCES) -> None:
    """Refuse what `split_pool.check_poolable` refuses but a difference in the axis's knobs: runs of different
    splits, case lists or recipes, an oracle trained with a split."""
    check_poolable(runs, oracle, free=NOT_RECIPE | axis.knobs(runs), command=f"--{axis.name}", hint=axis.hint)


def curve_sets(run: SplitRun) -> list[str]:
    """The sets the curve reads: what no training met (the hand-written unseen patterns and each held-out
    generated kind), then the reinforced and demonstrated ones, to show what transfer costs them."""
    order = ("unseen", "gen-unseen-a", "gen-unseen-b", "gen-unseen-c", "reinforced", "demonstrated")
    return [w for w in order if w in run.records]


def _point(which: str, runs: Sequence[SplitRun], first: Sequence[SplitRun], resamples: int) -> dict[str, Any]:
    from cells.evaluation import stats

    out: dict[str, Any] = {m: stats.success_ci([x.success for r in runs for x in r.records[which].get(m, ())])
                           .to_dict() for m in CURVE_MODELS}
    strata = {r.seed: r for r in first}
    pairs = {str(r.seed): (strata[r.seed].records[which]["trained"], r.records[which]["trained"])
             for r in runs if r.seed in strata and "trained" in r.records[which]}
    # "vs_fewest": against the first point (fewest instances, smallest model); the published JSONs' key
    out["vs_fewest"] = (stats.stratified_paired_difference(pairs, metric="success", resamples=resamples,
                                                           seed=BOOTSTRAP_SEED)["diff"] if pairs else None)
    return out


def curve(runs: Sequence[SplitRun], oracle: SplitRun | None = None, resamples: int = 10_000,
          axis: CurveAxis = INSTANCES) -> dict[str, Any]:
    """The curve's points along `axis`, smallest x first; see the module docstring."""
    from cells.evaluation import stats

    check_curve(runs, oracle, axis)
    by_x: dict[int, list[SplitRun]] = {}
    for run in runs:
        by_x.setdefault(axis.value(run), []).append(run)
    xs = sorted(by_x)
    if len(xs) < 2:
        raise SplitPoolError(f"every run given has {xs[0]} {axis.unit}: --{axis.name} needs runs at two values at "
                             f"least ({axis.hint})")
    sets = curve_sets(runs[0])
    points = [{axis.key: x, "runs": [{"run": r.name, "dir": str(r.path), "seed": r.seed} for r in by_x[x]],
               "sets": {w: _point(w, by_x[x], by_x[xs[0]], resamples) for w in sets}} for x in xs]
    return {"split": runs[0].split, "per_set": runs[0].per_set, "axis": axis.name, "knob": axis.knob, "sets": sets,
            "points": points, "required_points": axis.required_points,
            "oracle": None if oracle is None else {
                "run": oracle.name, "dir": str(oracle.path),
                "sets": {w: stats.success_ci([x.success for x in oracle.records[w][ORACLE_MODEL]]).to_dict()
                         for w in sets if ORACLE_MODEL in oracle.records.get(w, {})}},
            "bootstrap": {"resamples": resamples, "seed": BOOTSTRAP_SEED,
                          "method": "percentile; pairs resampled within each training seed"}}


def axis_of(result: Mapping[str, Any]) -> CurveAxis:
    """The axis a curve's JSON was drawn along (the generalisation curve's JSONs predate the field)."""
    return AXES[result.get("axis", INSTANCES.name)]


def _pct(e: Mapping[str, Any] | None, signed: bool = False) -> str:
    if e is None:
        return "-"
    s = "+" if signed else ""
    return f"{100 * e['value']:{s}.1f} [{100 * e['low']:{s}.1f}, {100 * e['high']:{s}.1f}]"


def curve_markdown(result: Mapping[str, Any], image: str | None = None) -> str:
    """The curve as tables: success after GRPO (and the warm start) per point and set, GRPO's paired gain over the
    first point, the oracle's row, and (the generalisation curve) how many points of the `required_points` exist."""
    axis = axis_of(result)
    points, sets = result["points"], result["sets"]
    head = [axis.column, "seeds", *sets]
    sep = "|" + "---|" * len(head)
    count = (f" {len(points)} of the {result['required_points']} points the experiment asks for."
             if result.get("required_points") else "")
    lines = [f"Drift split `{result['split']}`: success (%, 95% interval) on {result['per_set']} held-out episodes "
             f"per set and seed, against {axis.sentence}.{count}", ""]
    if image:
        lines += [f"![{axis.title.lower()}]({image})", ""]
    for model, title in (("trained", "After GRPO"), ("warm_start", "Warm start")):
        lines += [f"{title}:", "", "| " + " | ".join(head) + " |", sep]
        lines += [f"| {p[axis.key]:,} | {', '.join(str(r['seed']) for r in p['runs'])} | "
                  + " | ".join(_pct(p["sets"][w][model]) for w in sets) + " |" for p in points]
        if model == "trained" and result.get("oracle"):
            oracle = result["oracle"]
            lines.append(f"| oracle (every instance demonstrated, {oracle['run']}) | | "
                         + " | ".join(_pct(oracle["sets"].get(w)) for w in sets) + " |")
        lines.append("")
    lines += [f"After GRPO, paired difference against {points[0][axis.key]:,} {axis.unit} (points, same episodes, "
              "seeds present at both):", "", "| " + " | ".join(head) + " |", sep]
    first = {r["seed"] for r in points[0]["runs"]}
    lines += [f"| {p[axis.key]:,} | {', '.join(str(r['seed']) for r in p['runs'] if r['seed'] in first)} | "
              + " | ".join(_pct(p["sets"][w]["vs_fewest"], signed=True) for w in sets) + " |" for p in points[1:]]
    return "\n".join(lines)


def plot_curve(result: Mapping[str, Any], path: Path) -> Path:
    """Success after GRPO per unseen set against the axis's x (symlog for the instances: 0 is a point), 95%
    intervals as error bars, the oracle as a dashed line of the same colour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    axis = axis_of(result)
    unseen = [w for w in result["sets"] if "unseen" in w]
    xs = [p[axis.key] for p in result["points"]]
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
    if axis.x_scale == "symlog":
        ax.set_xscale("symlog", linthresh=10)
        ax.set_xlim(-1, max(xs) * 1.5)  # no negative counts: symlog would draw a decade of them
    else:
        ax.set_xscale("log")
        ax.set_xlim(min(xs) / 1.5, max(xs) * 1.5)
    ax.set_xlabel(axis.x_label)
    ax.set_ylabel("held-out success after GRPO (%)")
    ax.set_ylim(0, 100)
    ax.set_title(f"{axis.title}, split {result['split']} (dashed: oracle)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def curve_block(split: str, axis: CurveAxis = INSTANCES) -> str:
    """The docs block name of `split`'s curve along `axis`: `splits:curve:<split>`, `splits:sizes:<split>`."""
    return f"splits:{axis.name}:{split}"
