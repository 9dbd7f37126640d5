"""`python -m cells control --run-dir runs/cpu-learn`: the SFT-only control for a finished CPU run's GRPO effect.

The question it answers: were GRPO's minutes better spent than the same minutes of more supervised
warm start? It reloads the run's warm-started model (`training/warm_start/model`), trains it further
with the same `sft_warm_start` on *fresh* expert conversations (a seed block the warm start never used)
for as many training tokens as the warm start's own measured throughput would process in the compute the run's
GRPO stages took: their per-step CPU time (`step_cpu` in `training/metrics.csv`; CPU time, not wall time, so
other work sharing the cores changes neither side), or their wall time (`step_time`) for older runs. Its data follow the warm
start's recipe (stages, languages, turn budgets, both kinds of drills: `training.sft_data.sft_plan_item`) on seed blocks the
warm start never used, cut to that token budget (`take_token_budget`), so the control's length per example
is the warm start's and its compute is GRPO's. It then evaluates on exactly the run's evaluation spec
(`eval_baseline.json`'s cases and decoding) and pairs it:

- `eval_sft_control.json`, `records_sft_control.jsonl`: the control's report and greedy records;
- `eval_paired_control.json`: control − warm start (what the extra SFT minutes bought);
- `eval_paired_grpo_vs_control.json`: trained (GRPO) − control (GRPO against the same minutes of SFT).

The continued SFT uses a fresh cosine schedule peaking at `CONTROL_LR_SHARE` (`training.warm_start`'s
`CONTINUED_SFT_LR_SHARE`) of the profile's SFT learning rate. Only CPU full warm-start profiles have a saved full model to continue from. Its time is the GRPO time
plus one evaluation (~15 min for cpu-learn); it reports, whichever way the comparison comes out.

`--train-only` trains and saves the control (`training/sft_control/model`, its record in `training/sft_control/
control.json`) without evaluating it: for development comparisons (`diagnose --reach --control sft`), on a run
whose held-out evaluation (steps 18-19) was never played.

`python -m cells control --raft` runs control (b) instead, rejection-sampling SFT on the model's own successes
(`cells/experiments/raft.py`, which builds on this module).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from cells.errors import DriftCallError
from cells.training.warm_start import CONTINUED_SFT_LR_SHARE as CONTROL_LR_SHARE

TRAIN_ONLY_HELP = ("train and save the control without evaluating it (no steps 18-19 needed): for development "
                   "comparisons with `diagnose --reach --control`")
CONTROL_SEED_BLOCK = 3  # SFT seed blocks 0-2 (stride `SFT_STAGE_SEED_STRIDE`) are the warm start's stages 1-3


class ControlError(DriftCallError, RuntimeError):
    """The run directory cannot host the control (no GRPO metrics, no baseline eval; no full warm start raises
    `WarmStartError`)."""


def grpo_seconds(metrics_csv: Path) -> tuple[float, str]:
    """The compute the run's GRPO optimiser steps took, rollouts included, and its measure: CPU seconds ("cpu"),
    or wall seconds ("wall") for a run logged before steps recorded their CPU time
    (`training.metrics.grpo_compute_seconds`)."""
    from cells.training.metrics import grpo_compute_seconds

    if not metrics_csv.is_file():
        raise ControlError(f"{metrics_csv} is missing: the run has no GRPO steps to match")
    per_stage, measure = grpo_compute_seconds(metrics_csv)
    return sum(per_stage.values()), measure


def control_plan(profile: Any, n: int) -> list[Any]:
    """The `EpisodePlanItem`s of `n` fresh expert conversations (plus their drills), stages split as the warm
    start's (`training.sft_data.sft_plan_item`), on seed blocks it never used."""
    from cells.training.sft_data import sft_plan_item, stage_split

    return [sft_plan_item(profile, count, stage, CONTROL_SEED_BLOCK + stage - 1)
            for stage, count in stage_split(n, profile.sft_stages) if count]


def control_conversations(profile: Any, n: int) -> list[list[dict[str, Any]]]:
    """`n` fresh expert conversations (plus their drills), rendered as the warm start's (`control_plan`)."""
    from cells.training.sft_data import generate_conversations

    return generate_conversations(control_plan(profile, n), progress=True)


def examples_per_conversation(profile: Any) -> float:
    """Examples (a conversation and its drills of both kinds) per conversation in the warm start's recipe."""
    plan = control_plan(profile, max(profile.sft_episodes, len(profile.sft_stages)))
    return sum(item.examples for item in plan) / sum(item.count for item in plan)


def control_token_budget(grpo_s: float, warm: dict[str, Any], measure: str = "wall") -> int:
    """Training tokens the warm start's measured throughput processes in `grpo_s` seconds of `measure` (its tokens
    per CPU second for "cpu", when the warm start recorded them; else per wall second)."""
    if measure == "cpu" and float(warm.get("tokens_per_cpu_s") or 0.0) > 0:
        return int(grpo_s * float(warm["tokens_per_cpu_s"]))
    return int(grpo_s * float(warm["tokens_per_s"]))


def conversations_for_budget(budget: int, warm: dict[str, Any], epochs: int, batch_size: int,
                             per_conversation: float = 1.0) -> int:
    """Conversations to generate for `budget` tokens at the warm start's tokens per example (one pass), with a
    10% margin that `take_token_budget` cuts off (drills and stages vary the length per example). Each
    conversation brings its drills, `per_conversation` examples in all (`examples_per_conversation`), and the
    warm start's `examples` count those too."""
    per_example = float(warm["tokens"]) / (float(warm["examples"]) * max(epochs, 1))
    examples = 1.1 * budget / per_example
    return max(batch_size, int(examples / per_conversation) + 1)


def take_token_budget(dataset: Any, budget: int, batch_size: int) -> Any:
    """The longest prefix of `dataset` (interleaved by stage, drills spread) whose `length`s sum to <= `budget`;
    at least one batch."""
    total, keep = 0, 0
    for length in dataset["length"]:
        if total + length > budget and keep >= batch_size:
            break
        total, keep = total + length, keep + 1
    return dataset.select(range(keep))


EVAL_FILES = ("eval_baseline.json", "records_baseline.jsonl", "records_final.jsonl")  # steps 18-19's, paired against


def save_control_record(out_dir: Path, record: dict[str, Any]) -> Path:
    """The control's training record beside its model (`<out_dir>/control.json`), also when it is not evaluated."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "control.json"
    path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def run_control(run_dir: Path, evaluate: bool = True) -> dict[str, Any]:
    """Train the control in `run_dir`, then (unless not `evaluate`) evaluate and pair it; returns the two paired
    reports, or only the training record under "control" with `evaluate=False`."""
    from cells.training.sft_data import tokenize_all
    from cells.training.warm_start import load_run_warm_start, sft_warm_start

    run_dir = Path(run_dir)
    profile, model, tokenizer = load_run_warm_start(run_dir)
    summary = run_dir / "training" / "warm_start" / "warm_start.json"
    if not summary.is_file():
        raise ControlError(f"{summary} is missing: the warm start's own record (step 15 writes it) sizes the control")
    for name in EVAL_FILES if evaluate else ():
        if not (run_dir / name).is_file():
            raise ControlError(f"{run_dir / name} is missing: run steps 18-19 first (or train only: --train-only)")
    warm = json.loads(summary.read_text(encoding="utf-8"))["training"]
    seconds, measure = grpo_seconds(run_dir / "training" / "metrics.csv")
    budget = control_token_budget(seconds, warm, measure)
    n = conversations_for_budget(budget, warm, profile.sft_epochs, profile.sft_batch_size,
                                 examples_per_conversation(profile))
    dataset = take_token_budget(tokenize_all(tokenizer, control_conversations(profile, n), progress=True), budget,
                                profile.sft_batch_size)
    print(f"[control] GRPO took {seconds / 60:.1f} min of {measure} time = {budget:,} tokens at the warm start's "
          f"throughput: continuing the warm start on {len(dataset):,} fresh examples")
    result = sft_warm_start(model, tokenizer, dataset, run_dir / "training" / "sft_control",
                            learning_rate=CONTROL_LR_SHARE * profile.sft_learning_rate,
                            batch_size=profile.sft_batch_size, seed=profile.seed, lr_scheduler_type="cosine",
                            warmup_ratio=profile.sft_warmup_ratio)
    print(f"[control] {result.tokens:,} tokens in {result.seconds / 60:.1f} min ({result.tokens_per_s:,.0f}/s)")

    record = {"grpo_seconds": seconds, "grpo_measure": measure, "token_budget": budget, **result.to_dict()}
    save_control_record(run_dir / "training" / "sft_control", record)
    if not evaluate:
        print(f"[control] saved, not evaluated: `python -m cells diagnose --reach --control sft --run-dir {run_dir}`")
        return {"control": record}
    return evaluate_and_pair(run_dir, profile, model, tokenizer, "sft_control", "control", record)


def evaluate_and_pair(run_dir: Path, profile: Any, model: Any, tokenizer: Any, name: str, short: str,
                      record: dict[str, Any], tag: str = "control") -> dict[str, Any]:
    """Evaluate a control model `name` on exactly the run's evaluation spec (`eval_baseline.json`'s cases and
    decoding), write `eval_<name>.json` (with `record` under "control") and `records_<name>.jsonl`, and pair it:
    `eval_paired_<short>.json` (control − warm start) and `eval_paired_grpo_vs_<short>.json` (trained − control).
    Returns the two paired reports under `<short>_vs_warm_start` and `grpo_vs_<short>`."""
    from cells.evaluation.records import load_records_jsonl, save_records_jsonl
    from cells.evaluation.report import compare_reports, save_report_json
    from cells.evaluation.runner import EvalCase, evaluate, make_spec, report_for

    stored = json.loads((run_dir / "eval_baseline.json").read_text(encoding="utf-8"))["eval_spec"]
    spec = make_spec(profile, tuple(EvalCase(**c) for c in stored["cases"]))
    greedy, sampled = evaluate(name, spec, model=model, tokenizer=tokenizer)
    report = report_for(greedy, sampled, profile)
    report["eval_spec"], report["control"] = spec.to_dict(), record
    save_report_json(report, run_dir / f"eval_{name}.json")
    save_records_jsonl(greedy, run_dir / f"records_{name}.jsonl")
    kw = {"bootstrap_resamples": profile.bootstrap_resamples, "seed": profile.seed}
    out = {f"{short}_vs_warm_start": compare_reports(load_records_jsonl(run_dir / "records_baseline.jsonl"), greedy,
                                                     **kw),
           f"grpo_vs_{short}": compare_reports(greedy, load_records_jsonl(run_dir / "records_final.jsonl"), **kw)}
    save_report_json(out[f"{short}_vs_warm_start"], run_dir / f"eval_paired_{short}.json")
    save_report_json(out[f"grpo_vs_{short}"], run_dir / f"eval_paired_grpo_vs_{short}.json")
    for key, paired in out.items():
        d = paired["metrics"]["success"]["diff"]
        print(f"[{tag}] {key}: success {d['value']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cells control", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", default="runs/cpu-learn")
    parser.add_argument("--train-only", action="store_true", help=TRAIN_ONLY_HELP)
    args = parser.parse_args(argv)
    run_control(Path(args.run_dir), evaluate=not args.train_only)
    return 0
