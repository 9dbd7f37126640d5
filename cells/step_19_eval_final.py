"""Step 19 - final evaluation: the trained model on exactly the baseline's seeds and decoding, with paired statistics.

Refuses to compare when the plan or decoding differs from step 18's (`EvalMismatchError`), and
`compare_reports` refuses when the (seed, stage, language, trial) keys differ (`SeedMismatchError`).

Reads `ctx.reports["eval_spec"]`, `ctx.reports["baseline_records"]` (step 18), `ctx.model`, `ctx.tokenizer`.
Writes `ctx.reports["final"]`, `ctx.reports["paired"]`, `eval_final.json`, `eval_paired.json`,
`records_final.jsonl`. When step 18 also evaluated the untrained base (`warm_start_full` profiles), it
adds `ctx.reports["paired_warm_start"]` / `eval_paired_warm_start.json`: warm start − untrained on the
same keys, so the report shows the SFT effect and the GRPO effect (`paired`) separately. Run: after steps 12-18 in the same run (`python -m cells run --profile cpu-smoke`).
Time: like step 18's model part (~1 min for cpu-smoke).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cells.errors import DriftCallError

if TYPE_CHECKING:  # pragma: no cover
    from cells.context import Context


class MissingStepError(DriftCallError, RuntimeError):
    """Step 19 ran without the model or the baseline evaluation it compares against."""


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.3f}"


def run(ctx: Context) -> Context:
    """Evaluate the trained model and compute paired final − baseline statistics."""
    from cells.evaluation.records import save_records_jsonl
    from cells.evaluation.report import compare_reports, save_report_json
    from cells.evaluation.runner import EvalCase, check_same_spec, make_spec
    from cells.step_18_eval_baseline import evaluate_model

    if ctx.model is None or "baseline_records" not in ctx.reports:
        raise MissingStepError("step 19 needs the model (step 12) and the baseline evaluation (step 18) in this run")
    stored = ctx.reports["eval_spec"]
    cases = tuple(EvalCase(**c) for c in stored["cases"])
    spec = make_spec(ctx.profile, cases)
    check_same_spec(stored, spec.to_dict())
    report, records = evaluate_model(ctx, spec, "trained")
    report["eval_spec"] = spec.to_dict()
    paired = compare_reports(ctx.reports["baseline_records"], records,
                             bootstrap_resamples=ctx.profile.bootstrap_resamples, seed=ctx.profile.seed)
    ctx.reports["final"], ctx.reports["paired"] = report, paired
    ctx.artifacts["eval_final"] = save_report_json(report, ctx.run_dir / "eval_final.json")
    ctx.artifacts["eval_paired"] = save_report_json(paired, ctx.run_dir / "eval_paired.json")
    if "untrained_records" in ctx.reports:
        sft = compare_reports(ctx.reports["untrained_records"], ctx.reports["baseline_records"],
                              bootstrap_resamples=ctx.profile.bootstrap_resamples, seed=ctx.profile.seed)
        ctx.reports["paired_warm_start"] = sft
        ctx.artifacts["eval_paired_warm_start"] = save_report_json(sft, ctx.run_dir / "eval_paired_warm_start.json")
        gain = sft["metrics"]["success"]["diff"]
        print(f"[eval] warm start − untrained: success {_fmt(gain['value'])} CI [{_fmt(gain['low'])}, "
              f"{_fmt(gain['high'])}]")
    save_records_jsonl(records, ctx.run_dir / "records_final.jsonl")
    diff = paired["metrics"]["reward"]["diff"]
    print(f"[eval] trained: success={report['policies']['trained']['success']['value']:.3f}; paired reward "
          f"diff={_fmt(diff['value'])} CI [{_fmt(diff['low'])}, {_fmt(diff['high'])}]")
    return ctx
