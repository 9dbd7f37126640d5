"""Step 18 - baseline evaluation: the model before GRPO and the scripted reference policies on frozen held-out seeds.

The plan is `profile.eval_episodes_per_cell` seeds per (stage, language) from the reserved
evaluation range (`cells.evaluation.runner.eval_plan`). The model is evaluated with its LoRA
adapter disabled: on GPU profiles the pretrained base before the warm start and GRPO; on CPU
profiles (`warm_start_full`) the warm-started base, because the warm start trains that base
itself (step 15) - so there the paired comparison of step 19 is the GRPO effect alone, and the
warm start's own effect is measured against a third point: the same tiny base before any training
(`untrained_base`, reloaded from step 12's cache), evaluated on the same seeds and decoding; step 19
pairs warm start − untrained (the SFT effect) and trained − warm start (the GRPO effect). Trial 0 is greedy, pass^k uses
`profile.pass_k` sampled trials. The scripted random, naive and expert policies play the same
seeds as reference rows.

Reads `ctx.profile`, `ctx.model`, `ctx.tokenizer` (step 12; without a model only the reference rows
are produced). Writes `ctx.reports["baseline"]`, `ctx.reports["reference"]`, `ctx.reports["eval_spec"]`,
and `eval_baseline.json`, `eval_reference.json`, `records_baseline.jsonl` in the run directory; with
`warm_start_full` also `ctx.reports["untrained"]`, `eval_untrained.json`, `records_untrained.jsonl`.
Run alone: `python -m cells run --profile cpu-smoke --steps 12,18` (~1 min on 2 CPU cores for cpu-smoke).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from cells.context import Context

REFERENCE_POLICIES: tuple[str, ...] = ("random", "naive", "expert")


def reference_factories() -> dict[str, Any]:
    """Scripted reference policies by report name (fresh instance per episode)."""
    from cells.step_11_agent import ExpertPolicy, NaivePolicy, RandomPolicy

    return {"random": lambda: RandomPolicy(seed=0), "naive": NaivePolicy, "expert": ExpertPolicy}


def adapter_disabled(model: Any) -> Any:
    """Context manager running a peft model without its adapter (a no-op for plain models)."""
    disable = getattr(model, "disable_adapter", None)
    return disable() if callable(disable) else contextlib.nullcontext()


def evaluate_references(ctx: Context, spec: Any) -> dict[str, Any]:
    from cells.evaluation.runner import evaluate, report_for

    greedy, sampled = [], []
    for name, factory in reference_factories().items():
        g, s = evaluate(name, spec, policy_factory=factory)
        greedy.extend(g)
        sampled.extend(s)
    return report_for(greedy, sampled, ctx.profile)


VOICE_POLICIES: tuple[str, ...] = ("naive", "expert")  # the scripted players that read what the user says


def _both_ways(text: list[Any], heard: list[Any]) -> dict[str, float]:
    return {f"{what}_{way}": round(sum(getattr(r, what) for r in rs) / len(rs), 4)
            for way, rs in (("text", text), ("voice", heard)) for what in ("success", "reward")}


def evaluate_voice(ctx: Context, per_cell: int, model: Any = None, tokenizer: Any = None) -> dict[str, Any]:
    """The scripted players (and `model`, greedy, when given) on the same held-out cases with and without the
    voice boundary (step 9): success and reward both ways, and the character error rate of the opening
    requests heard, per language.

    The scripted players take the task from the goal, as every scripted player does, so what speech can cost
    them is what they read from the user's later lines (passenger names, an MFA code, a GSTIN); a model reads
    everything through it. {"skipped": why} when the boundary cannot run here."""
    from cells.evaluation.runner import eval_plan, make_spec, run_model, run_scripted
    from cells.step_07_tasks import generate
    from cells.step_09_audio import character_error_rate, default_boundary, voice_support

    problems = [p for p in voice_support().values() if p]
    if problems:
        return {"skipped": "; ".join(problems)}
    boundary, cases = default_boundary(), eval_plan(per_cell)
    factories, budgets = reference_factories(), ctx.profile.turn_budgets
    out: dict[str, Any] = {"episodes_per_policy": len(cases), "policies": {}, "cer_by_language": {}}
    for name in VOICE_POLICIES:
        text = run_scripted(name, factories[name], cases, turn_budgets=budgets)
        heard = run_scripted(name, factories[name], cases, turn_budgets=budgets, voice=boundary)
        out["policies"][name] = _both_ways(text, heard)
    if model is not None:
        spec = make_spec(ctx.profile, cases, sampled_trials=0)
        text, heard = (run_model("model", model, tokenizer, cases, spec, greedy=True, trial=0, voice=v)
                       for v in (None, boundary))
        out["policies"]["model"] = _both_ways(text, heard)
    by_language: dict[str, list[float]] = {}
    for case in cases:  # the opening requests, heard once above (the boundary is memoised)
        said = generate(case.seed, case.stage, {case.language: 1.0}).seed_utterance
        by_language.setdefault(case.language, []).append(
            character_error_rate(said, boundary.hear(said, case.language).transcript))
    out["cer_by_language"] = {lang: round(sum(v) / len(v), 3) for lang, v in by_language.items()}
    return out


def evaluate_model(ctx: Context, spec: Any, name: str, model: Any = None) -> tuple[dict[str, Any], list[Any]]:
    """Report and greedy records for `model` (default `ctx.model`) under the spec; the report's `generation`
    block says how many tokens the model generated, how fast, and the process's peak memory."""
    from cells.evaluation.runner import GenerationMeter, evaluate, report_for

    meter = GenerationMeter()
    greedy, sampled = evaluate(name, spec, model=ctx.model if model is None else model, tokenizer=ctx.tokenizer,
                               on_batch=meter)
    report = report_for(greedy, sampled, ctx.profile)
    report["generation"] = meter.to_dict()
    return report, greedy


def untrained_base(ctx: Context) -> Any:
    """The tiny base exactly as step 12 built it, before any training (profiles with `warm_start_full`, whose
    warm start trains the base itself); None for other profiles, whose adapter-off model is already untrained."""
    if not ctx.profile.warm_start_full or ctx.profile.tiny is None:
        return None
    from pathlib import Path

    from cells.modeling.tiny import build_or_load_tiny

    base, _, _ = build_or_load_tiny(ctx.profile.tiny, Path(ctx.run_dir) / "tiny_model", ctx.profile.seed)
    return base


def _evaluate_and_save(ctx: Context, spec: Any, name: str, model: Any = None) -> None:
    from cells.evaluation.records import save_records_jsonl
    from cells.evaluation.report import save_report_json

    report, records = evaluate_model(ctx, spec, name, model)
    report["eval_spec"] = spec.to_dict()
    ctx.reports[name] = report
    ctx.reports[f"{name}_records"] = records
    ctx.artifacts[f"eval_{name}"] = save_report_json(report, ctx.run_dir / f"eval_{name}.json")
    save_records_jsonl(records, ctx.run_dir / f"records_{name}.jsonl")


def run(ctx: Context) -> Context:
    """Evaluate reference policies and (if booted) the base model; save JSON reports."""
    from cells.evaluation.report import save_report_json
    from cells.evaluation.runner import eval_plan, make_spec

    spec = make_spec(ctx.profile, eval_plan(ctx.profile.eval_episodes_per_cell))
    ctx.reports["eval_spec"] = spec.to_dict()
    ctx.reports["reference"] = evaluate_references(ctx, spec)
    ctx.artifacts["eval_reference"] = save_report_json(ctx.reports["reference"], ctx.run_dir / "eval_reference.json")
    if ctx.model is not None:
        with adapter_disabled(ctx.model):
            _evaluate_and_save(ctx, spec, "baseline")
        untrained = untrained_base(ctx)
        if untrained is not None:
            _evaluate_and_save(ctx, spec, "untrained", untrained)
    if ctx.profile.voice_eval_per_cell > 0:
        ctx.reports["voice"] = evaluate_voice(ctx, ctx.profile.voice_eval_per_cell)
        ctx.artifacts["eval_voice"] = save_report_json(ctx.reports["voice"], ctx.run_dir / "eval_voice.json")
        for name, row in ctx.reports["voice"].get("policies", {}).items():
            print(f"[eval] {name:>8} with the voice boundary: success {row['success_text']:.3f} -> "
                  f"{row['success_voice']:.3f}, reward {row['reward_text']:.3f} -> {row['reward_voice']:.3f}")
        if "skipped" in ctx.reports["voice"]:
            print(f"[eval] voice boundary skipped: {ctx.reports['voice']['skipped']}")
    for name, block in ctx.reports["reference"]["policies"].items():
        print(f"[eval] {name:>8}: success={block['success']['value']:.3f} n={block['n_episodes']}")
    for name in ("untrained", "baseline"):
        if name in ctx.reports:
            block = ctx.reports[name]["policies"][name]
            gen = ctx.reports[name]["generation"]
            print(f"[eval] {name}: success={block['success']['value']:.3f} parse_fail={block['parse_failures']}; "
                  f"{gen['generated_tokens']:,} tokens generated at {gen['tokens_per_s']} tokens/s")
    return ctx
