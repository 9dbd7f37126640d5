"""`python -m cells curve --run-dir runs/cpu-rl [--per-set 100] [--every 10] [--sets reinforced] [--docs]`: the
learning curve of a finished CPU run's GRPO on held-out episodes of one or more pattern sets of its drift split.

GRPO saves its LoRA every `save_every` steps (`training/stage<N>/checkpoint-<step>`). This command plays the warm
start (step 0) and every checkpoint at least `--every` steps past the previous one (the last one always) greedily on
the first `--per-set` held-out cases of each set: the same cases `python -m cells splits` plays
(`split_cases(..., EVAL_SEEDS, start=SPLIT_EVAL_FROM)`), so the curve's end point is the trained model's
success there, up to the export's merge. Why after training, from checkpoints, rather than inside the run: the
held-out play then costs the training run nothing, and a curve can be drawn for any run that kept its
checkpoints. Writes `eval_curve.json` and `plots/learning_curve.png` in the run dir; with `--docs`, the block
`curve:<run>` of docs/results.md and the plot beside it in docs/results/. The held-out seeds only report.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cells.errors import DriftCallError

CURVE_FILE = "eval_curve.json"
CURVE_PLOT = "learning_curve.png"


class CurveError(DriftCallError, RuntimeError):
    """The run directory has no warm start, no GRPO checkpoints or no drift split to draw a curve over."""


@dataclass(frozen=True)
class CurvePoint:
    """Held-out success of the policy after `step` GRPO optimiser steps (0: the warm start) on one pattern set."""

    stage: int
    step: int
    pattern_set: str
    success: float
    low: float
    high: float
    n: int


def curve_checkpoints(run_dir: Path, every: int) -> list[tuple[int, int, Path]]:
    """`(stage, global step, checkpoint)` of GRPO's saved checkpoints over stages 1-3, each at least `every` steps
    past the previous one kept, the run's last checkpoint always included."""
    from cells.training.checkpoints import checkpoint_step, list_checkpoints

    if every < 1:
        raise CurveError(f"--every must be >= 1, got {every}")
    found = [(stage, checkpoint_step(c), c) for stage in (1, 2, 3)
             for c in list_checkpoints(Path(run_dir) / "training" / f"stage{stage}")]
    if not found:
        raise CurveError(f"{run_dir}/training has no GRPO checkpoints (stage1-3/checkpoint-N): run steps 15-17 with "
                         "save_every > 0 first")
    kept: list[tuple[int, int, Path]] = []
    for point in found:
        if not kept or point[1] - kept[-1][1] >= every or point is found[-1]:
            kept.append(point)
    return kept


def point(stage: int, step: int, which: str, successes: list[bool]) -> CurvePoint:
    """Success over `successes` (at least one) with its 95% interval."""
    from cells.evaluation import stats

    estimate = stats.success_ci(successes)
    if estimate.value is None or estimate.low is None or estimate.high is None:
        raise CurveError(f"no episodes played for {which} at step {step}")
    return CurvePoint(stage, step, which, estimate.value, estimate.low, estimate.high, estimate.n)


def learning_curve(run_dir: Path, per_set: int = 100, every: int = 10, sets: tuple[str, ...] = ("reinforced",)
                   ) -> dict[str, Any]:
    """Play the warm start and the kept checkpoints on `per_set` held-out cases of each of `sets`; write and return
    `eval_curve.json`."""
    from cells.evaluation.runner import play_greedy
    from cells.evaluation.splits import split_cases
    from cells.experiments.drift_split import SPLIT_EVAL_FROM
    from cells.progress import progress_bar
    from cells.step_02_profiles import EVAL_SEEDS
    from cells.step_06_drift import PATTERN_SETS, drift_split
    from cells.step_08_rewards import rewards_of
    from cells.step_12_model import attach_adapter
    from cells.training.checkpoints import load_adapter_weights
    from cells.training.warm_start import load_run_warm_start

    run_dir = Path(run_dir)
    unknown = [s for s in sets if s not in PATTERN_SETS]
    if unknown or not sets or per_set < 1:
        raise CurveError(f"--sets must name some of {PATTERN_SETS} (got {list(sets)}) and --per-set must be >= 1 "
                         f"(got {per_set})")
    checkpoints = curve_checkpoints(run_dir, every)
    profile, warm, tokenizer = load_run_warm_start(run_dir)
    if not profile.drift_split:
        raise CurveError(f"{run_dir} was trained without a drift_split: the curve is drawn per pattern set")
    cases = split_cases(drift_split(profile.drift_split), per_set, EVAL_SEEDS, start=SPLIT_EVAL_FROM, sets=sets)
    policy = attach_adapter(warm, profile)  # a fresh LoRA: zero update, so step 0 plays the warm start itself
    policy.eval()
    points: list[CurvePoint] = []
    bar = progress_bar(len(checkpoints) + 1, "curve checkpoints", unit="ckpt")
    for stage, step, ckpt in [(0, 0, None), *checkpoints]:
        if ckpt is not None:
            load_adapter_weights(policy, ckpt)
        for which in sets:
            played = play_greedy(policy, tokenizer, cases[which], profile).episodes
            points.append(point(stage, step, which, [rewards_of(e).r_task >= 1 for e in played]))
        bar.update(1)
        bar.write(f"[curve] step {step}: " + "; ".join(f"{p.pattern_set} {p.success:.1%}" for p in points[-len(sets):]))
    bar.close()
    out = {"run": run_dir.name, "split": profile.drift_split, "per_set": per_set, "every": every,
           "points": [asdict(p) for p in points]}
    (run_dir / CURVE_FILE).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    plot_curve(out, run_dir / "plots" / CURVE_PLOT)
    return out


def plot_curve(curve: dict[str, Any], path: Path) -> Path:
    """Success against GRPO step per pattern set, with 95% bands and the stage boundaries marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    by_set: dict[str, list[dict[str, Any]]] = {}
    for p in curve["points"]:
        by_set.setdefault(p["pattern_set"], []).append(p)
    for which, pts in by_set.items():
        steps = [p["step"] for p in pts]
        ax.plot(steps, [100 * p["success"] for p in pts], marker="o", label=which)
        ax.fill_between(steps, [100 * p["low"] for p in pts], [100 * p["high"] for p in pts], alpha=0.2)
    firsts: dict[int, int] = {}
    for p in curve["points"]:
        firsts.setdefault(p["stage"], p["step"])
    for stage, step in firsts.items():
        if stage >= 2:
            ax.axvline(step, color="grey", linestyle=":", linewidth=1)
    ax.set(xlabel="GRPO optimiser step (0 = warm start)", ylabel="held-out success (%)", ylim=(0, 100),
           title=f"{curve['run']}: {curve['per_set']} held-out episodes per set, greedy")
    ax.legend(loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def curve_markdown(curve: dict[str, Any], plot: str) -> str:
    """The curve as a table (one row per step, one column per set) with the plot embedded."""
    sets = list(dict.fromkeys(p["pattern_set"] for p in curve["points"]))
    rows: dict[int, dict[str, Any]] = {}
    for p in curve["points"]:
        rows.setdefault(p["step"], {"stage": p["stage"]})[p["pattern_set"]] = p
    lines = [f"Run `{curve['run']}` (split `{curve['split']}`): held-out success during GRPO, {curve['per_set']} "
             "drifted episodes per set, greedy, 95% intervals. Step 0 is the warm start.", "",
             f"![learning curve]({plot})", "",
             "| GRPO step | stage | " + " | ".join(sets) + " |", "|---|---|" + "---|" * len(sets)]
    for step, row in rows.items():
        cells = [f"{100 * row[s]['success']:.1f}% [{100 * row[s]['low']:.1f}, {100 * row[s]['high']:.1f}]"
                 for s in sets]
        lines.append(f"| {step} | {row['stage'] or 'warm start'} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_docs(curve: dict[str, Any], run_dir: Path, docs: Path = Path("docs/results.md")) -> Path:
    """Copy the plot next to docs/results.md and rewrite (or append) its block `curve:<run>`."""
    import shutil

    from cells.evaluation.docblocks import render, write_block

    assets = docs.parent / "results"
    assets.mkdir(parents=True, exist_ok=True)
    plot = assets / f"curve_{curve['run']}.png"
    shutil.copyfile(Path(run_dir) / "plots" / CURVE_PLOT, plot)
    command = (f"python -m cells curve --run-dir {run_dir} --per-set {curve['per_set']} --every {curve['every']} "
               f"--sets {','.join(dict.fromkeys(p['pattern_set'] for p in curve['points']))} --docs")
    block = render(f"curve:{curve['run']}", "python -m cells curve --docs",
                   curve_markdown(curve, f"results/{plot.name}"), run_command=command)
    return write_block(docs, f"curve:{curve['run']}", block)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cells curve", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", default="runs/cpu-rl")
    parser.add_argument("--per-set", type=int, default=100, help="held-out cases per pattern set (default 100)")
    parser.add_argument("--every", type=int, default=10, help="GRPO steps between curve points at least (default 10)")
    parser.add_argument("--sets", default="reinforced", help="comma-separated pattern sets (default reinforced)")
    parser.add_argument("--docs", action="store_true", help="also write the curve into docs/results.md")
    args = parser.parse_args(argv)
    curve = learning_curve(Path(args.run_dir), args.per_set, args.every,
                           tuple(s.strip() for s in args.sets.split(",") if s.strip()))
    print(curve_markdown(curve, str(Path(args.run_dir) / "plots" / CURVE_PLOT)))
    if args.docs:
        print(f"wrote {write_docs(curve, Path(args.run_dir))}")
    return 0
