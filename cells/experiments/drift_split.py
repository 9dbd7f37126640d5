"""`python -m cells splits --run-dir runs/cpu-rl [--per-set 100] [--split latin]`: a finished CPU run's models on
held-out episodes stratified by drift split (what reinforcement adds where demonstrations stop).

Plays, greedily, the run's warm start (`training/warm_start/model`), its trained model (`export/`, step 24) and,
when `python -m cells control` has made one, its SFT-only control (`training/sft_control/model`) on `--per-set`
held-out cases of each pattern set of the split (`cells.evaluation.splits.split_cases` over `EVAL_SEEDS` from
`SPLIT_EVAL_FROM`: drifted stages 2 and 3, languages as generated; the split defaults to the run's
`drift_split`). A generated split (`cpu-gen`'s `latin-gen`) adds its held-out generated instances of each hold-out
kind, a set each (`gen-unseen-a`, `-b`, `-c`: `cells.evaluation.splits.generated_cases`), beside its base split's
sets played exactly as for that split. Reports per set and model success with a 95% interval, calibration of the
submitted confidence (ECE, Brier), turns per success and success per drift kind, per drift family and per
language, and paired differences (trained −
each other model) with bootstrap intervals, in `eval_splits.json`; every episode's record goes to
`records_splits.jsonl` (policy `<set>/<model>`, `cells.evaluation.split_pool`); with `--docs` also the block
`splits:<run>` of `docs/results.md`. A run trained without a split (the oracle, e.g. cpu-learn) can be played on
a split's sets too, with `--split`: every set was demonstrated to it. The held-out seeds only report: choose a
recipe on development cases (`python -m cells diagnose --reach`).

`python -m cells splits --pool runs/cpu-rl runs/cpu-rl-s1235 runs/cpu-rl-s1236 [--oracle runs/cpu-learn]
[--docs]` plays nothing: it pools the runs' saved records over training seeds (paired bootstrap resampling
within each seed; `cells.evaluation.split_pool`) into `docs/results/splits_pooled_<split>.json`, refusing runs
of another split or case list and runs without records (naming the command that makes them); with `--docs` it
also draws `docs/results/splits_pooled_<split>.png`, writes the block `splits:pooled:<split>` of
`docs/results.md` with the tables, the per-seed rows, calibration and the experiment's targets
(`cells.evaluation.split_report`) and the README's glance from this pool. One pool per split, so pooling
`cpu-gen`'s seeds leaves `cpu-rl`'s published. Seconds.
With `--docs` it first archives each run's records (gzipped, with `eval_splits.json`) under
`docs/results/splits/<run>/` and pools from there, so the docs name a command a fresh clone reruns:
`python -m cells splits --pool docs/results/splits/cpu-rl ... --docs`.

`python -m cells splits --curve runs/gen-n0-2001 runs/gen-2001 ... [--oracle RUN] [--docs]` plays nothing either: a
generated split's generalisation curve over runs of one recipe that differ only in `--set drift_train_instances=N`
and the seed (`cells.evaluation.split_curve`), into `docs/results/splits_curve_<split>.json`; with `--docs` (which
archives the runs' records as `--pool` does) the plot and the block `splits:curve:<split>` of `docs/results.md`.
`python -m cells splits --sizes runs/gen-2001 runs/gen-wide-2001 ...` does the same over runs that differ only in
the tiny model's shape (`--set 'tiny={...}'`): held-out success against the model's parameters, block
`splits:sizes:<split>`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cells.errors import DriftCallError

SPLIT_EVAL_FROM = 50_000_000  # eval-range index where the stratified scan starts (step 7's plan hashes its seeds)


class SplitEvalError(DriftCallError, RuntimeError):
    """The run directory lacks a model this evaluation plays, or names no split."""


def run_models(run_dir: Path) -> tuple[Any, dict[str, tuple[Any, Any]]]:
    """The run's profile and {name: (model, tokenizer)}: warm start, trained and, if present, the SFT control and
    the RAFT control (`python -m cells control --raft`)."""
    from cells.commands.diagnose import CONTROLS, control_model_path, load_control_model, model_to_play
    from cells.step_24_export import MISSING_EXPORT_HINT

    if not (run_dir / "export").is_dir():
        raise SplitEvalError(f"{run_dir / 'export'} is missing: {MISSING_EXPORT_HINT}")
    profile, warm, tokenizer = model_to_play(run_dir, warm_start=True)
    _, trained, trained_tok = model_to_play(run_dir, warm_start=False)
    models = {"warm_start": (warm, tokenizer), "trained": (trained, trained_tok)}
    for name, _ in CONTROLS.values():
        if (control_model_path(run_dir, name) / "model.safetensors").is_file():
            models[name] = (load_control_model(run_dir, name), tokenizer)
    return profile, models


def set_table(records: dict[str, list[Any]], profile: Any) -> dict[str, Any]:
    """Per model, success with its 95% interval, calibration of the submitted confidence (ECE, Brier), turns
    per success and success per drift kind and per language; paired success differences of the trained model
    against each other model (bootstrap interval, permutation p)."""
    from cells.evaluation import stats
    from cells.evaluation.split_pool import grpo_vs

    kw = {"resamples": profile.bootstrap_resamples, "seed": profile.seed}
    out: dict[str, Any] = {"success": {name: stats.success_ci([r.success for r in recs]).to_dict()
                                       for name, recs in records.items()}}
    out["paired"] = {grpo_vs(name): stats.paired_difference(recs, records["trained"], metric="success", **kw)
                     for name, recs in records.items() if name != "trained"}
    # greedy play gives one trial per case, so pass^k would only repeat success: left out
    out["calibration"] = {name: {k: v for k, v in stats.calibration(recs).items() if k != "bins"}
                          for name, recs in records.items()}
    out["turns"] = {name: stats.turns_per_success(recs) for name, recs in records.items()}
    out["by_kind"] = {name: stats.success_by_group(recs, "drift_kind") for name, recs in records.items()}
    out["by_family"] = {name: stats.success_by_group(recs, "family") for name, recs in records.items()}
    out["by_language"] = {name: stats.success_by_group(recs, "language") for name, recs in records.items()}
    return out


def split_plan(split: Any, per_set: int) -> dict[str, tuple[Any, ...]]:
    """The held-out cases of every evaluation set of `split` (`eval_sets`), from `SPLIT_EVAL_FROM`."""
    from cells.evaluation.splits import generated_plan, split_cases
    from cells.step_02_profiles import EVAL_SEEDS

    return {**split_cases(split, per_set, EVAL_SEEDS, start=SPLIT_EVAL_FROM),
            **generated_plan(split, per_set, EVAL_SEEDS, start=SPLIT_EVAL_FROM)}


def fired_in(split: Any, which: str, record: Any) -> bool:
    """Whether a record's fired drifts count in evaluation set `which`."""
    from cells.evaluation.splits import GENERATED_SETS

    if which in GENERATED_SETS:
        return bool(set(record.drift_patterns) & split.held_out(which.rsplit("-", 1)[-1]))
    return split.episode_set(record.drift_patterns) == which


def recipe_knobs(profile: Any) -> dict[str, Any]:
    """Every knob the run's trained model depends on (warm start and GRPO stages, flat), as `eval_splits.json`
    records it: `--pool` compares an oracle's with the recipe's, which must differ only in `drift_split`."""
    from cells.training.checkpoints import stage_knobs

    return stage_knobs(profile, 3)


def trained_instance_count(profile: Any) -> int | None:
    """How many distinct generated instances the run's training could meet, under the catalogue of this checkout
    (recorded with the evaluation, so a curve drawn after the catalogue grows still counts what the run had); None
    for a run trained without a generated split."""
    from cells.step_06_drift import GeneratedSplit, drift_split

    split = drift_split(profile.drift_split) if profile.drift_split else None
    return len(split.training_ids(profile.drift_train_instances)) if isinstance(split, GeneratedSplit) else None


def evaluate_split(run_dir: Path, per_set: int = 100, split_name: str | None = None) -> dict[str, Any]:
    """Play the run's models on `per_set` held-out cases per pattern set; write and return `eval_splits.json`."""
    from cells.evaluation.records import save_records_jsonl
    from cells.evaluation.runner import make_spec, run_model
    from cells.evaluation.split_pool import EVAL_FILE, RECORDS_FILE, tag
    from cells.evaluation.splits import eval_sets
    from cells.experiments.compute import run_compute
    from cells.step_06_drift import drift_split

    if per_set < 1:
        raise SplitEvalError(f"--per-set must be >= 1, got {per_set}")
    run_dir = Path(run_dir)
    profile, models = run_models(run_dir)
    name = split_name or profile.drift_split
    if not name:
        raise SplitEvalError(f"{run_dir} was trained without a drift_split: name one with --split (e.g. latin)")
    split = drift_split(name)
    cases = split_plan(split, per_set)
    out: dict[str, Any] = {"run": run_dir.name, "split": name, "trained_with_split": profile.drift_split or None,
                           "per_set": per_set, "seed": profile.seed, "recipe": recipe_knobs(profile),
                           "train_instances": trained_instance_count(profile), "records": RECORDS_FILE, "sets": {}}
    played: list[Any] = []
    for which in eval_sets(split):
        spec = make_spec(profile, cases[which], sampled_trials=0)
        records = {m: run_model(tag(which, m), model, tok, spec.cases, spec, greedy=True, trial=0)
                   for m, (model, tok) in models.items()}
        played += [r for recs in records.values() for r in recs]
        fired_here = [fired_in(split, which, r) for r in records["trained"]]
        out["sets"][which] = {**set_table(records, profile),
                              "fired_in_set": round(sum(fired_here) / max(1, len(fired_here)), 4)}
        print(f"[splits] {which}: " + "; ".join(f"{m} {v['value']:.1%}" for m, v in
                                                 out["sets"][which]["success"].items()))
    out["compute"] = [row.to_dict() for row in run_compute(run_dir)]  # what each model's training bought
    save_records_jsonl(played, run_dir / RECORDS_FILE)  # what `--pool` reads: no replay to pool seeds
    (run_dir / EVAL_FILE).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    return out


MODEL_WORDS = {"warm_start": "warm start", "trained": "after GRPO", "sft_control": "SFT-only control",
               "raft_control": "RAFT control", "raft_lora_control": "RAFT on GRPO's LoRA"}


def _pct(estimate: dict[str, Any], signed: bool = False) -> str:
    value, low, high = (100 * estimate[k] for k in ("value", "low", "high"))
    sign = "+" if signed else ""
    return f"{value:{sign}.1f}% [{low:{sign}.1f}, {high:{sign}.1f}]"


def splits_markdown(result: dict[str, Any]) -> str:
    """`eval_splits.json` as markdown: success per pattern set and model, then the paired differences."""
    from cells.evaluation.split_pool import grpo_vs

    sets = result["sets"]
    models = list(next(iter(sets.values()))["success"])
    lines = [f"Drift split `{result['split']}`; run trained with "
             f"{'that split' if result['trained_with_split'] else 'every pattern demonstrated (the oracle)'}; "
             f"{result['per_set']} held-out drifted episodes per pattern set, greedy (95% intervals).", "",
             "| pattern set | " + " | ".join(MODEL_WORDS.get(m, m) for m in models) + " |",
             "|---|" + "---|" * len(models)]
    for which, block in sets.items():
        lines.append(f"| {which} | " + " | ".join(_pct(block["success"][m]) for m in models) + " |")
    pairs = list(next(iter(sets.values()))["paired"])
    lines += ["", "Paired differences in success (same episodes, bootstrap 95% interval):", "",
              "| pattern set | " + " | ".join(pairs) + " |", "|---|" + "---|" * len(pairs)]
    for which, block in sets.items():
        lines.append(f"| {which} | " + " | ".join(_pct(block["paired"][p]["diff"], signed=True) for p in pairs) + " |")
    if all("calibration" in block for block in sets.values()):  # eval_splits.json before records were saved lacks it
        lines += ["", "Submitted confidence (ECE / Brier) and turns per success:", "",
                  "| pattern set | " + " | ".join(MODEL_WORDS.get(m, m) for m in models) + " |",
                  "|---|" + "---|" * len(models)]
        for which, block in sets.items():
            lines.append(f"| {which} | " + " | ".join(_secondary(block, m) for m in models) + " |")
    lines += _unseen_groups(sets)
    if result.get("compute"):
        from cells.evaluation.split_report import compute_markdown

        lines += ["", "What each model's training after the warm start cost and bought (`cells/experiments/compute.py`):",
                  "", *compute_markdown(result["compute"], MODEL_WORDS)]
    text = "\n".join(lines)
    for m in models:
        text = text.replace(grpo_vs(m), f"GRPO − {MODEL_WORDS.get(m, m)}")
    return text


def _unseen_groups(sets: dict[str, Any], model: str = "trained") -> list[str]:
    """Success after GRPO on the unseen sets, per drift family and per language: "rate (episodes)" per set."""
    unseen = [w for w, block in sets.items() if w.endswith("unseen") or "-unseen-" in w if "by_family" in block]
    if not unseen:
        return []
    lines = ["", "Unseen drift after GRPO: success per drift family, then per language (episodes in brackets):", "",
             "| group | " + " | ".join(unseen) + " |", "|---|" + "---|" * len(unseen)]
    for key in ("by_family", "by_language"):
        groups = sorted({g for w in unseen for g in sets[w][key].get(model, {})})
        for g in groups:
            cells = [sets[w][key].get(model, {}).get(g) for w in unseen]
            lines.append(f"| {g} | " + " | ".join("-" if c is None else f"{c['rate']:.1%} ({c['n']})" for c in cells)
                         + " |")
    return lines


def _secondary(block: dict[str, Any], model: str) -> str:
    cal, turns = block["calibration"][model], block["turns"][model]["turns_per_success"]
    return " / ".join("n/a" if x is None else f"{x:.3f}" for x in (cal["ece"], cal["brier"])) + " / " + (
        "n/a" if turns is None else f"{turns:.1f}")


def write_docs(result: dict[str, Any], run_dir: Path, docs: Path = Path("docs/results.md")) -> Path:
    """Rewrite (or append) the block `splits:<run>` of `docs` with `splits_markdown`."""
    from cells.evaluation.docblocks import render, write_block

    command = f"python -m cells splits --run-dir {run_dir} --per-set {result['per_set']} --split {result['split']}"
    block = render(f"splits:{result['run']}", "python -m cells splits --docs", splits_markdown(result),
                   run_command=command + " --docs")
    return write_block(docs, f"splits:{result['run']}", block)


POOLED_DIR = Path("docs/results")
SPLITS_ARCHIVE = Path("docs/results/splits")  # `--pool --docs` keeps each pooled run's records here


def archive_runs(run_dirs: list[Path], oracle_dir: Path | None, root: Path = SPLITS_ARCHIVE
                 ) -> tuple[list[Path], Path | None]:
    """Archive the runs' and the oracle's split records under `root` (`split_pool.archive_split_run`) and return
    the archive directories, so that docs pooled from them name a command a fresh clone can rerun."""
    from cells.evaluation.split_pool import archive_split_run

    return ([archive_split_run(Path(d), root) for d in run_dirs],
            archive_split_run(Path(oracle_dir), root) if oracle_dir else None)


def published_file(kind: str, split: str, suffix: str = "json", root: Path = POOLED_DIR) -> Path:
    """Where a published result of `split`'s runs goes, one of each kind per split: `splits_<kind>_<split>.<suffix>`,
    kind `pooled` (one recipe's seeds, `--pool`), `curve` (the generalisation curve, `--curve`) or `sizes` (model
    size, `--sizes`)."""
    return root / f"splits_{kind}_{split}.{suffix}"


def published(kind: str, root: Path = POOLED_DIR) -> list[Path]:
    """Every published JSON of `kind` (`published_file`), one per split."""
    return sorted(root.glob(f"splits_{kind}_*.json"))


def pooled_json(split: str, root: Path = POOLED_DIR) -> Path:
    return published_file("pooled", split, "json", root)


def pooled_png(split: str, root: Path = POOLED_DIR) -> Path:
    return published_file("pooled", split, "png", root)


def published_pools(root: Path = POOLED_DIR) -> list[Path]:
    return published("pooled", root)


def _save(result: dict[str, Any], out: Path) -> dict[str, Any]:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return result


def _saved_runs(run_dirs: list[Path], oracle_dir: Path | None) -> tuple[list[Any], Any]:
    """The saved split records of `run_dirs` and of the oracle (`split_pool.load_split_run`)."""
    from cells.evaluation.split_pool import load_split_run

    return [load_split_run(Path(d)) for d in run_dirs], load_split_run(Path(oracle_dir)) if oracle_dir else None


def pool_splits(run_dirs: list[Path], oracle_dir: Path | None = None, out: Path | None = None) -> dict[str, Any]:
    """Pool the saved split records of `run_dirs` (one per training seed) and the oracle's; write `out` (default
    the split's published pool, `pooled_json`)."""
    from cells.evaluation.split_pool import pool

    pooled = pool(*_saved_runs(run_dirs, oracle_dir))
    return _save(pooled, out or pooled_json(pooled["split"]))


def _records_command(flag: str, dirs: list[str], oracle: dict[str, Any] | None) -> str:
    """The `--docs` command that rereads the same saved records (`--pool` or `--curve`), as the docs cite it."""
    return (f"python -m cells splits {flag} " + " ".join(dirs) + (f" --oracle {oracle['dir']}" if oracle else "")
            + " --docs")


def pool_command(pooled: dict[str, Any]) -> str:
    return _records_command("--pool", [r["dir"] for r in pooled["runs"]], pooled.get("oracle"))


GLANCE = "splits:glance"  # the README's block: `glance_block` writes it from the pooled JSON


def glance_block(pooled: dict[str, Any]) -> str:
    """The README's block `splits:glance` (markers included; no commit: the README names none)."""
    from cells.evaluation.docblocks import render
    from cells.evaluation.split_report import glance_markdown

    return render(GLANCE, "python -m cells splits --pool --docs", glance_markdown(pooled, MODEL_WORDS),
                  run_command=pool_command(pooled), commit="")


def write_pooled_docs(pooled: dict[str, Any], docs: Path = Path("docs/results.md"), png: Path | None = None,
                      readme: Path | None = None) -> Path:
    """Draw `png` (default the split's, `pooled_png`) and rewrite (or append) the block `splits:pooled:<split>` of
    `docs`, the plot embedded; with `readme`, also its block `splits:glance` (which must exist there: the README's
    order is written by hand)."""
    import os

    from cells.evaluation.docblocks import render, write_block
    from cells.evaluation.split_report import plot_pooled, pooled_block, pooled_markdown

    png = png or pooled_png(pooled["split"])
    plot_pooled(pooled, png, MODEL_WORDS)
    image = Path(os.path.relpath(png, docs.parent)).as_posix()
    name = pooled_block(pooled["split"])
    block = render(name, "python -m cells splits --pool --docs", pooled_markdown(pooled, MODEL_WORDS, image),
                   run_command=pool_command(pooled))
    if readme is not None:
        write_block(readme, GLANCE, glance_block(pooled), append=False)
    return write_block(docs, name, block)


def curve_splits(run_dirs: list[Path], oracle_dir: Path | None = None, out: Path | None = None,
                 axis: str = "curve") -> dict[str, Any]:
    """A curve of `run_dirs` along `axis` (`split_curve.AXES`: "curve", the generalisation curve of runs differing
    only in `drift_train_instances`; "sizes", runs differing only in the tiny model's shape; and the seed) with the
    oracle's ceiling, from their saved split records; written to `out` (default the split's published one)."""
    from cells.evaluation.split_curve import AXES, curve

    result = curve(*_saved_runs(run_dirs, oracle_dir), axis=AXES[axis])
    return _save(result, out or published_file(axis, result["split"]))


def sizes_splits(run_dirs: list[Path], oracle_dir: Path | None = None, out: Path | None = None) -> dict[str, Any]:
    """Held-out success against the tiny model's size (`curve_splits` along "sizes")."""
    return curve_splits(run_dirs, oracle_dir, out, axis="sizes")


def curve_command(result: dict[str, Any]) -> str:
    from cells.evaluation.split_curve import axis_of

    return _records_command(f"--{axis_of(result).name}", [r["dir"] for p in result["points"] for r in p["runs"]],
                            result.get("oracle"))


def write_curve_docs(result: dict[str, Any], docs: Path = Path("docs/results.md"), png: Path | None = None) -> Path:
    """Draw `png` (default the split's, `published_file`) and rewrite (or append) the curve's block
    (`splits:curve:<split>` or `splits:sizes:<split>`)."""
    import os

    from cells.evaluation.docblocks import render, write_block
    from cells.evaluation.split_curve import axis_of, curve_block, curve_markdown, plot_curve

    axis = axis_of(result)
    png = plot_curve(result, png or published_file(axis.name, result["split"], "png"))
    name = curve_block(result["split"], axis)
    image = Path(os.path.relpath(png, docs.parent)).as_posix()
    block = render(name, f"python -m cells splits --{axis.name} --docs", curve_markdown(result, image),
                   run_command=curve_command(result))
    return write_block(docs, name, block)


def _pool_lines(result: dict[str, Any]) -> list[str]:
    return [f"[splits] {t['status']}: {t['target']}: {t['measured']}" for t in result["targets"]]


def _curve_lines(result: dict[str, Any]) -> list[str]:
    from cells.evaluation.split_curve import axis_of

    axis = axis_of(result)
    return [f"[{axis.name}] {p[axis.key]:,} {axis.unit}: " + "; ".join(
        f"{w} {p['sets'][w]['trained']['value']:.1%}" for w in result["sets"] if "unseen" in w) for p in result["points"]]


@dataclass(frozen=True)
class SavedRecordsCommand:
    """One of the commands that reread runs' saved records without playing (`--pool`, `--curve`)."""

    kind: str  # `published_file`'s kind: where the JSON and plot go
    compute: Callable[[list[Path], Path | None, Path | None], dict[str, Any]]  # runs, oracle, out -> result
    lines: Callable[[dict[str, Any]], list[str]]  # what to print of a result
    write_docs: Callable[[dict[str, Any]], Path]  # --docs: the block (and plot) from a result
    also_writes: str = ""  # what else --docs rewrites, for the user


def _saved_records_commands() -> dict[str, SavedRecordsCommand]:
    return {
        "pool": SavedRecordsCommand("pooled", pool_splits, _pool_lines,
                                    lambda r: write_pooled_docs(r, readme=Path("README.md")), " and README.md"),
        "curve": SavedRecordsCommand("curve", curve_splits, _curve_lines, write_curve_docs),
        "sizes": SavedRecordsCommand("sizes", sizes_splits, _curve_lines, write_curve_docs),
    }


def _from_saved_records(command: SavedRecordsCommand, run_dirs: list[str], args: argparse.Namespace) -> int:
    """`--pool` or `--curve`: read the runs' saved records (archived first with `--docs`), write and print."""
    runs, oracle = [Path(d) for d in run_dirs], Path(args.oracle) if args.oracle else None
    if args.docs:
        runs, oracle = archive_runs(runs, oracle)
        print(f"archived the records under {SPLITS_ARCHIVE}: reading them from there")
    result = command.compute(runs, oracle, Path(args.out) if args.out else None)
    print(f"wrote {Path(args.out) if args.out else published_file(command.kind, result['split'])}")
    print("\n".join(command.lines(result)))
    if args.docs:
        written = command.write_docs(result)
        print(f"wrote {written}, {published_file(command.kind, result['split'], 'png')}{command.also_writes}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cells splits", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", default="runs/cpu-rl")
    parser.add_argument("--per-set", type=int, default=100, help="held-out cases per pattern set (default 100)")
    parser.add_argument("--split", default=None, help="the drift split (default: the run's drift_split)")
    parser.add_argument("--docs", action="store_true", help="also write the tables into docs/results.md")
    parser.add_argument("--pool", nargs="+", metavar="RUN_DIR", default=None,
                        help=f"pool these runs' saved records over seeds (no play) into {pooled_json('<split>')}")
    parser.add_argument("--curve", nargs="+", metavar="RUN_DIR", default=None,
                        help="the generalisation curve of runs differing only in drift_train_instances and the seed, "
                             f"from their saved records (no play) into {published_file('curve', '<split>')}")
    parser.add_argument("--sizes", nargs="+", metavar="RUN_DIR", default=None,
                        help="held-out success against model size: runs differing only in the tiny model's shape "
                             "(--set 'tiny={...}') and the seed, from their saved records (no play) into "
                             f"{published_file('sizes', '<split>')}")
    parser.add_argument("--oracle", default=None, metavar="RUN_DIR",
                        help="with --pool, --curve or --sizes: a run with every pattern demonstrated, evaluated on the "
                             "same split")
    parser.add_argument("--out", default=None, metavar="JSON",
                        help=f"with --pool, --curve or --sizes and without --docs: where the JSON goes (default "
                             f"{published_file('<pooled|curve|sizes>', '<split>')}); another experiment's, kept beside "
                             "the published one")
    args = parser.parse_args(argv)
    chosen = [flag for flag in _saved_records_commands() if getattr(args, flag)]
    if len(chosen) > 1:
        parser.error(f"--{' and --'.join(chosen)} are separate commands: pool one recipe's seeds, or draw one curve "
                     "over runs")
    if args.oracle and not chosen:
        parser.error("--oracle goes with --pool, --curve or --sizes")
    if args.out and (not chosen or args.docs):
        parser.error("--out goes with --pool, --curve or --sizes, without --docs (the docs write their own JSON)")
    if chosen:
        return _from_saved_records(_saved_records_commands()[chosen[0]], getattr(args, chosen[0]), args)
    result = evaluate_split(Path(args.run_dir), args.per_set, args.split)
    print(splits_markdown(result))
    if args.docs:
        print(f"wrote {write_docs(result, Path(args.run_dir))}")
    return 0
