"""`python -m cells results --run-dir runs/cpu-learn`: write a finished run's results into `docs/results.md`.

Nothing in the section is typed by hand: every number is read from the run directory's JSON and CSV
files (`eval_*.json`, `eval_paired*.json`, `probe.json`, `training/warm_start/warm_start.json`,
`training/metrics.csv`, `timings.json`, `profile.json`) and formatted here; the one plot (held-out
success by stage, before and after each training phase) is drawn from the same reports into
`docs/results/`. The section replaces whatever sits between the profile's markers (`markers(name)`:
`<!-- results:cpu-learn:begin ... -->` ... `<!-- results:cpu-learn:end -->`, see `cells.evaluation.docblocks`)
in `docs/results.md`, so rerunning the command after a new run rewrites that profile's section and nothing
else. It then rewrites the README's results-at-a-glance block (`glance_block`) from the sections now in
`docs/results.md`, so the README's headline numbers are the docs' numbers. Without run files it keeps the
existing section, says so, and still rewrites the glance block.

The learning targets (`targets`) are the ones set for cpu-learn; each row says met / NOT met with the
measured value, so a missed target is reported by how much rather than left out.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cells.commands.diagnose import REFUSALS_FILES
from cells.errors import DriftCallError
from cells.evaluation import docblocks
from cells.evaluation.markdown import table
from cells.evaluation.report import load_report_json
from cells.training.induction import copied_exactly_text

COMMAND = "python -m cells results"
GLANCE = "results:glance"  # the README's block; `glance_block` writes it
GLANCE_ORDER = ("cpu-learn", "cpu-smoke", "cpu-gemma")  # the headline run first; other profiles after these


def markers(profile: str) -> tuple[str, str]:
    """The lines that open and close `profile`'s generated results section."""
    return docblocks.markers(f"results:{profile}", COMMAND)
PLOT_NAME = "success_by_stage.png"


class ResultsError(DriftCallError, ValueError):
    """The run directory lacks a file the results section needs, or the README has no results markers."""


@dataclass(frozen=True)
class Target:
    """One 'done when' target: `ok` is None when the run lacks the number."""

    name: str
    goal: str
    measured: str
    ok: bool | None

    def row(self) -> list[str]:
        verdict = "—" if self.ok is None else ("met" if self.ok else "**NOT met**")
        return [self.name, self.goal, self.measured, verdict]


def _load(run_dir: Path, name: str, required: bool = True) -> dict[str, Any] | None:
    path = run_dir / name
    if not path.is_file():
        if required:
            raise ResultsError(f"{path} is missing: run `python -m cells run --profile <name>` to the end first")
        return None
    return load_report_json(path)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _est(e: Mapping[str, Any] | None, points: bool = True) -> str:
    """`+12.3 pts [4.0, 20.1]` for a success difference (points), or `0.123 [0.04, 0.20]`."""
    if not e or e.get("value") is None:
        return "n/a"
    scale, unit, fmt = (100, " pts", "{:+.1f}") if points else (1, "", "{:+.3f}")
    lo, hi = e.get("low"), e.get("high")
    ci = "" if lo is None or hi is None else f" [{fmt.format(scale * lo)}, {fmt.format(scale * hi)}]"
    return fmt.format(scale * e["value"]) + unit + ci


def _success(report: Mapping[str, Any] | None, policy: str, stage: str | None = None) -> Mapping[str, Any] | None:
    pol = ((report or {}).get("policies") or {}).get(policy)
    if pol is None:
        return None
    return pol["success"] if stage is None else (pol.get("by_stage") or {}).get(stage, {}).get("success")


def _rate(e: Mapping[str, Any] | None) -> str:
    if not e or e.get("value") is None:
        return "—"
    lo, hi = e.get("low"), e.get("high")
    ci = "" if lo is None or hi is None else f" [{100 * lo:.0f}, {100 * hi:.0f}]"
    return f"{100 * e['value']:.1f}%{ci}"


def zero_variance_by_stage(metrics_csv: Path) -> dict[int, float]:
    """Mean zero-variance-group fraction per GRPO stage from `training/metrics.csv` (empty when absent)."""
    from cells.training.metrics import read_metrics_csv

    if not metrics_csv.is_file():
        return {}
    per: dict[int, list[float]] = {}
    for row in read_metrics_csv(metrics_csv):
        if row.get("zero_std_group_frac") is not None:
            per.setdefault(int(row["stage"]), []).append(float(row["zero_std_group_frac"]))
    return {stage: sum(v) / len(v) for stage, v in sorted(per.items())}


def _max_offence_share(probe: Mapping[str, Any] | None) -> tuple[str, float] | None:
    trained = ((probe or {}).get("policies") or {}).get("trained")
    if trained is None:
        return None
    shares = trained.get("offence_episode_share") or {}
    return max(shares.items(), key=lambda kv: kv[1]) if shares else ("none", 0.0)


ONE_PIECE_MINUTES = 60.0  # `python -m cells run --profile cpu-learn`, one invocation, on a 2-core machine


def one_piece_target(timings: Mapping[str, float] | None, warm: Mapping[str, Any]) -> Target:
    """The wall-time target: the recorded steps' minutes, judged only when one invocation trained everything
    (a reused warm start's minutes are not in `timings.json`, so that run says so instead of passing)."""
    goal = f"<= {ONE_PIECE_MINUTES:.0f} min"
    if not timings:
        return Target("one command, wall time", goal, "n/a", None)
    minutes = sum(timings.values()) / 60
    if warm_start_reused(timings, warm):
        return Target("one command, wall time", goal, f"{minutes:.1f} min over a reused warm start", None)
    return Target("one command, wall time", goal, f"{minutes:.1f} min", minutes <= ONE_PIECE_MINUTES)


def targets(reports: Mapping[str, Any], zero_var: Mapping[int, float]) -> list[Target]:
    """The learning targets set for cpu-learn, measured on this run (the wall-time one is `one_piece_target`)."""
    s1 = _success(reports.get("baseline"), "baseline", "1")
    drifted = ((reports.get("paired") or {}).get("by_drift") or {}).get("drifted", {}).get("success", {}).get("diff")
    out = [Target("held-out stage-1 success after the warm start", ">= 60%", _rate(s1),
                  None if not s1 else s1["value"] >= 0.60),
           Target("GRPO gain on drifted (stage 2-3) episodes, paired", ">= +10 pts, CI excluding 0", _est(drifted),
                  None if not drifted or drifted.get("low") is None
                  else drifted["value"] >= 0.10 and drifted["low"] > 0)]
    worst = _max_offence_share(reports.get("probe"))
    out.append(Target("worst offence class in the trained model's probe episodes", "<= 1% of episodes",
                      "n/a" if worst is None else f"{worst[0]}: {_pct(worst[1])}",
                      None if worst is None else worst[1] <= 0.01))
    late = [zero_var[s] for s in (2, 3) if s in zero_var]
    out.append(Target("zero-variance GRPO groups, stages 2-3", "<= 30%",
                      ", ".join(f"stage {s}: {_pct(zero_var[s])}" for s in (2, 3) if s in zero_var) or "n/a",
                      None if not late else max(late) <= 0.30))
    return out


def load_reports(run_dir: Path) -> dict[str, Any]:
    """The run's evaluation and probe reports, keyed as the pipeline's `ctx.reports` names them."""
    reports = {"baseline": _load(run_dir, "eval_baseline.json"), "final": _load(run_dir, "eval_final.json"),
               "paired": _load(run_dir, "eval_paired.json"), "reference": _load(run_dir, "eval_reference.json"),
               "untrained": _load(run_dir, "eval_untrained.json", required=False),
               "paired_warm_start": _load(run_dir, "eval_paired_warm_start.json", required=False),
               "probe": _load(run_dir, "probe.json", required=False),
               "control": _load(run_dir, "eval_sft_control.json", required=False),
               "paired_control": _load(run_dir, "eval_paired_control.json", required=False),
               "paired_grpo_vs_control": _load(run_dir, "eval_paired_grpo_vs_control.json", required=False)}
    return {k: v for k, v in reports.items() if v is not None}


def _stagetable(reports: Mapping[str, Any], full_warm_start: bool) -> str:
    """Success per stage for each evaluated model. Step 18's `baseline` is the adapter-off model: the warm-started
    base where the warm start trains every weight, else the pretrained model before any training."""
    columns = [("untrained", "untrained"), ("baseline", "baseline"), ("final", "trained"),
               ("control", "sft_control"), ("reference", "expert")]
    present = [(k, p) for k, p in columns if _success(reports.get(k), p) is not None]
    names = {"untrained": "untrained", "baseline": "after warm start" if full_warm_start else "pretrained (adapter off)",
             "final": "after warm start + GRPO" if not full_warm_start else "after GRPO",
             "control": "SFT-only control", "reference": "expert"}
    rows = []
    for stage in ("1", "2", "3", None):
        label = "all" if stage is None else stage
        rows.append([label, *[_rate(_success(reports.get(k), p, stage)) for k, p in present]])
    return table(["stage", *[names[k] for k, _ in present]], rows)


def _pairedtable(paired: Mapping[str, Any] | None) -> str:
    if not paired:
        return "_not measured in this run_\n"
    rows = [["all", str(paired["metrics"]["success"].get("n_pairs")), _est(paired["metrics"]["success"]["diff"]),
             _est(paired["metrics"]["reward"]["diff"], points=False)]]
    for key, label in (("by_stage", "stage "), ("by_drift", ""), ("by_drift_kind", "drift kind: "),
                       ("by_language", "language: ")):
        for group, d in (paired.get(key) or {}).items():
            rows.append([f"{label}{group}", str(d["success"].get("n_pairs")), _est(d["success"]["diff"]),
                         _est(d["reward"]["diff"], points=False)])
    return table(["episodes", "pairs", "Δ success [95% CI]", "Δ mean reward [95% CI]"], rows)


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def warm_start_reused(timings: Mapping[str, float] | None, warm: Mapping[str, Any]) -> bool:
    """True when the run directory's warm start was trained by an earlier invocation: step 15's recorded time
    is shorter than the SFT that `warm_start.json` says it took (a resumed run loads the saved model)."""
    sft_seconds = (warm.get("training") or {}).get("seconds")
    return bool(timings) and sft_seconds is not None and timings.get("step_15_train_stage1", 0.0) < sft_seconds


def _minutes(timings: Mapping[str, float] | None, reused: bool = False) -> str:
    if not timings:
        return "n/a"
    first = "GRPO stage 1" if reused else "warm start + GRPO stage 1"
    phases = {first: "step_15_train_stage1", "GRPO stage 2": "step_16_train_stage2",
              "GRPO stage 3": "step_17_train_stage3", "evaluation (18-19)": ("step_18_eval_baseline",
                                                                              "step_19_eval_final")}
    parts = []
    for label, mods in phases.items():
        secs = sum(timings.get(m, 0.0) for m in ((mods,) if isinstance(mods, str) else mods))
        parts.append(f"{label} {secs / 60:.1f}")
    return f"{sum(timings.values()) / 60:.1f} min in all ({'; '.join(parts)} min)"


def _examples_what(profile: dict[str, Any], examples: int) -> str:
    """What a warm start's `examples` were: fresh conversations and, from the profile's knobs, its drills by kind."""
    from cells.training.sft_data import item_field_drill_share

    conversations = int(profile.get("sft_episodes") or examples)
    drills = examples - conversations
    if drills <= 0:
        return "fresh expert conversations"
    searches = round(conversations * float(profile.get("sft_search_drills") or 0.0))
    bookings = round(conversations * float(profile.get("sft_booking_drills") or 0.0))
    year_turns = round(conversations * float(profile.get("sft_year_turn_drills") or 0.0))
    fields = round(conversations * float(profile.get("sft_field_drills") or 0.0))
    item_fields = round(conversations * item_field_drill_share(
        str(profile.get("drift_split") or ""), int(profile.get("drift_train_instances", -1)),
        float(profile.get("sft_item_field_drills") or 0.0)))
    recoveries = drills - searches - bookings - year_turns - fields - item_fields  # stages 2-3 only: the rest
    counted = ((searches, "search drills"), (bookings, "booking drills"), (year_turns, "year-turn drills"),
               (fields, "field drills"), (item_fields, "item-field drills"), (recoveries, "recovery drills"))
    kinds = [f"{n:,} {what}" for n, what in counted if n > 0]
    return f"examples ({conversations:,} fresh expert conversations + {' + '.join(kinds)})"


def _seed_flag(name: str, seed: Any) -> str:
    """` --seed N` when the run's seed is not its preset's (the command that made it needed the flag)."""
    from cells.step_02_profiles import PROFILES

    preset = PROFILES.get(name)
    return "" if preset is None or seed is None or seed == preset.seed else f" --seed {seed}"


def _how_run(name: str, run_dir: Path, timings: Mapping[str, float] | None, warm: Mapping[str, Any],
             seed: Any = None) -> str:
    """The header sentence: the commands behind the run directory and its wall time; a reused warm start says
    so and names its own recorded minutes, which the steps' wall time does not contain."""
    then = f"then `python -m cells results --run-dir {run_dir}`"
    if not warm_start_reused(timings, warm):
        where = "" if run_dir.name == name else f" --run-dir {run_dir}"
        return (f"`python -m cells run --profile {name}{_seed_flag(name, seed)}{where} --fresh`, {then}. "
                f"Wall time: {_minutes(timings)}.")
    sft = warm["training"]["seconds"]
    copy = (warm.get("copy_pretrain") or {}).get("seconds", 0.0)
    steps = sum(timings.values())  # non-empty: warm_start_reused needs recorded timings
    return (f"`python -m cells run --profile {name}{_seed_flag(name, seed)} --run-dir {run_dir}` over a warm start "
            f"trained by an earlier invocation and reused here (its own record, `training/warm_start/warm_start.json`: SFT "
            f"{_duration(sft)}, copy pretraining {_duration(copy)}), {then}. Wall time of the steps recorded in this "
            f"directory: {_minutes(timings, reused=True)}; with the warm start's recorded SFT and copy pretraining "
            f"{(steps + sft + copy) / 60:.1f} min (its data generation and checkpoint plays not included).")


def _generation_lines(reports: Mapping[str, Any], memory: Mapping[str, float] | None) -> list[str]:
    """Generation speed of each evaluated model (its report's `generation` block) and the run's peak memory."""
    rows = [[name, f"{g['episodes']}", f"{g['generated_tokens']:,}", f"{g['seconds']:.0f}",
             f"{g['tokens_per_s']:.1f}" if g.get("tokens_per_s") else "-"]
            for name, key in (("untrained", "untrained"), ("baseline (adapter off)", "baseline"), ("trained", "final"))
            if (g := (reports.get(key) or {}).get("generation"))]
    lines = []
    if rows:
        lines += ["Held-out evaluation, generation (greedy, batched):", "",
                  table(["model", "episodes", "generated tokens", "seconds", "tokens/s"], rows)]
    if memory:
        lines += [f"Peak resident memory of the run: {max(memory.values()):,.0f} MiB (`memory.json`, per step).", ""]
    return lines


def _date_slots_clause(diag: dict[str, Any]) -> str:
    """`diagnose.json`'s search dates by one- and two-digit day and at the year's turn, as a clause ("" for a file
    without them)."""
    from cells.commands.diagnose import DATE_KINDS

    parts = [f"{diag.get(f'{kind}_slots_right', 0)} of {diag[f'{kind}_slots']} {words}"
             for kind, words in DATE_KINDS.items() if diag.get(f"{kind}_slots")]
    return f" (the dates in them right: {', '.join(parts)})" if parts else ""


def failures_line(failures: dict[str, Any]) -> str:
    """One sentence from `diagnose_failures.json` (`python -m cells diagnose --failures`)."""
    def counts(key: str) -> str:
        return ", ".join(f"{name} {n}" for name, n in failures.get(key, {}).items()) or "none"

    return (f"Where the trained model still fails (`python -m cells diagnose --failures`: its "
            f"{failures.get('failures', 0)} failed held-out episodes replayed greedily): by domain {counts('by_domain')}; "
            f"by template {counts('by_template')}; why {counts('by_failure')}; ended by {counts('by_end')}.")


def probe_offences_line(probe: dict[str, Any]) -> str:
    """One sentence from `diagnose_probe.json` (`python -m cells diagnose --probe`)."""
    codes = ", ".join(f"{code} {n}" for code, n in probe.get("by_code", {}).items()) or "none"

    def reading(i: dict[str, Any]) -> str:
        if i.get("nearest_shown") is None:
            return "nothing shown before it"
        return f"{i['reading']}: closest shown `{i['nearest_shown']}`, similarity {i['similarity']:.2f}"

    ids = "; ".join(f"`{i['value']}` ({reading(i)})" for i in probe.get("invented_ids", []))
    failed = ", ".join(f"{why} {n}" for why, n in probe.get("by_failure", {}).items())
    return (f"The trained model's offences in the probe (`python -m cells diagnose --probe`: its "
            f"{probe.get('episodes', 0)} probe episodes replayed greedily): {probe.get('offending_episodes', 0)} of "
            f"them had an offence; episodes per class: {codes}." + (f" Why their tasks failed: {failed}." if failed else "")
            + (f" Invented ids: {ids}." if ids else ""))


def refusals_line(refusals: dict[str, Any], warm_start: bool = False) -> str:
    """One sentence from `diagnose_refusals.json` (`python -m cells diagnose --refusals`), or with `warm_start`
    from `diagnose_refusals_warm_start.json` (`... --refusals --warm-start`)."""
    codes = "; ".join(f"{code} {c['repeated']} of {c['refused']} (booked {c['booked']})"
                      for code, c in refusals.get("by_code", {}).items()) or "none"
    command, model = ("--refusals --warm-start", "the warm start") if warm_start else ("--refusals", "the trained model")
    return (f"After a refused booking or order call (`python -m cells diagnose {command}`: {model} on "
            f"{refusals.get('episodes', 0)} drifted probe-range episodes, greedy, the first refusal of each): it "
            f"sent the same call again unchanged after {refusals.get('repeated', 0)} of {refusals.get('refused', 0)} "
            f"refusals, and {refusals.get('booked', 0)} of those episodes still booked. By error code, repeated of "
            f"refused: {codes}.")


def results_section(run_dir: Path, plot_path: Path | None = None, readme_dir: Path | None = None,
                    commit: str | None = None) -> str:
    """The results section (markers and provenance line included) for the finished run in `run_dir`."""
    run_dir = Path(run_dir)
    profile = _load(run_dir, "profile.json")
    reports = load_reports(run_dir)
    warm = _load(run_dir / "training" / "warm_start", "warm_start.json", required=False) or {}
    timings = _load(run_dir, "timings.json", required=False)
    zero_var = zero_variance_by_stage(run_dir / "training" / "metrics.csv")
    name = profile.get("name", "?")
    begin, end = markers(name)
    parts = [begin, docblocks.provenance(f"{COMMAND} --run-dir {run_dir}", commit), "",
             f"Profile `{name}` (seed {profile.get('seed')}), run directory `{run_dir.name}`: "
             f"{_how_run(name, run_dir, timings, warm, profile.get('seed'))}", ""]
    training = warm.get("training")
    if training:
        what = f"{training['examples']:,} {_examples_what(profile, training['examples'])}"
        parts += [f"Warm start: {what}, {training['tokens']:,} tokens "
                  f"({training['trained_tokens']:,} trained), {training['steps']:,} optimiser steps in "
                  f"{_duration(training['seconds'])} ({training['tokens_per_s']:,.0f} training tokens/s).", ""]
    copied = warm.get("copy_pretrain")
    if copied:
        reached = "reached" if copied["converged"] else "did NOT reach"
        parts += [f"Copy pretraining before the warm start (`cells.training.induction`): {copied['steps']:,} steps in "
                  f"{_duration(copied['seconds'])}, final loss {copied['final_loss']:.3f} ({reached} the stop loss "
                  f"{profile.get('copy_pretrain_stop_loss')})" + copied_exactly_text(copied.get("copy_accuracy")) + ".", ""]
    final = warm.get("eval")
    if final:
        by_stage = ", ".join(f"stage {st} {_pct(v['success_rate'])}" for st, v in (final.get("success_by_stage") or {}).items())
        parts += [f"Held-out play right after the warm start ({final['episodes']} episodes, greedy): "
                  f"{_pct(final['valid_share'])} of {final['turns']} turns were valid actions; success {by_stage}.", ""]
    checkpoints = warm.get("checkpoints") or []
    if checkpoints:
        rows = [[str(c["step"]), f"{c['seconds'] / 60:.1f}", _pct(c["valid_share"]),
                 ", ".join(f"{st}: {_pct(v['success_rate'])}" for st, v in (c.get("success_by_stage") or {}).items())]
                for c in checkpoints]
        parts += [f"Held-out checkpoints during the warm start ({checkpoints[0].get('episodes', '?')} episodes each, "
                  "greedy; minutes of SFT, checkpoint plays excluded):", "",
                  table(["SFT step", "minutes", "valid actions", "success by stage"], rows)]
    parts += ["Held-out success by stage (greedy; Wilson 95% CI):", "",
              _stagetable(reports, bool(profile.get("warm_start_full")))]
    if reports.get("paired_warm_start"):
        parts += ["The SFT effect, warm start − untrained, paired on identical seeds:", "",
                  _pairedtable(reports["paired_warm_start"])]
    parts += ["The GRPO effect, trained − warm start, paired on identical seeds:" if reports.get("paired_warm_start")
              else "Trained − baseline, paired on identical seeds:", "", _pairedtable(reports.get("paired"))]
    diag = _load(run_dir, "diagnose.json", required=False)
    if diag:
        parts += ["Where the warm start's bookings fail (`python -m cells diagnose`, the warm-start eval's "
                  f"{diag.get('episodes', 0)} held-out episodes, greedy): "
                  f"{diag.get('write_calls_with_issued_token', 0)} of {diag.get('write_calls', 0)} booking/order calls "
                  f"carried the payment token the gateway had issued in that episode (a token was issued in "
                  f"{diag.get('episodes_with_token', 0)} episodes); {diag.get('searches_with_goal_slots_right', 0)} "
                  f"of {diag.get('searches', 0)} searches had every goal slot (cities, dates) right"
                  f"{_date_slots_clause(diag)}; {diag.get('episodes_with_booking', 0)} episodes booked anything.", ""]
    failures = _load(run_dir, "diagnose_failures.json", required=False)
    if failures:
        parts += [failures_line(failures), ""]
    probe_offences = _load(run_dir, "diagnose_probe.json", required=False)
    if probe_offences:
        parts += [probe_offences_line(probe_offences), ""]
    for warm_start in (True, False):
        refusals = _load(run_dir, REFUSALS_FILES[warm_start], required=False)
        if refusals:
            parts += [refusals_line(refusals, warm_start), ""]
    if reports.get("paired_grpo_vs_control"):
        control = (reports.get("control") or {}).get("control") or {}
        took = (f"; it took {control['seconds'] / 60:.1f} min here ({control['tokens']:,} tokens, "
                f"{control['trained_tokens']:,} trained)" if control.get("seconds") else "")
        budget = (f" ({control['token_budget']:,} tokens, the warm start's recipe and length per example)"
                  if control.get("token_budget") else "")
        parts += [f"SFT-only control (`python -m cells control`): the warm start trained further on fresh expert "
                  f"conversations instead, sized to GRPO's {control.get('grpo_seconds', 0.0) / 60:.1f} minutes at the "
                  f"warm start's recorded tokens/s{budget}{took}. Control − warm start:", "",
                  _pairedtable(reports.get("paired_control")), "GRPO − control:", "",
                  _pairedtable(reports["paired_grpo_vs_control"])]
    else:
        parts += ["SFT-only control: not run for this run directory (`python -m cells control --run-dir ...`).", ""]
    if zero_var:
        parts += ["Zero-variance GRPO groups (all G episodes earned the same reward): "
                  + ", ".join(f"stage {s} {_pct(v)}" for s, v in zero_var.items()) + ".", ""]
    parts += _generation_lines(reports, _load(run_dir, "memory.json", required=False))
    if profile.get("warm_start_full"):
        rows = [t.row() for t in (one_piece_target(timings, warm), *targets(reports, zero_var))]
        parts += ["Learning targets (set for cpu-learn):", "", table(["target", "goal", "measured", ""], rows)]
    if plot_path is not None:
        rel = plot_path.relative_to(readme_dir) if readme_dir and plot_path.is_relative_to(readme_dir) else plot_path
        parts += [f"![held-out success by stage]({Path(rel).as_posix()})", ""]
    parts += ["Determinism: the seeds, expert data, evaluation plan and judge are deterministic; the CPU kernels "
              "are not bit-exact across thread counts and machines, so a rerun with the same seed reproduces "
              "these numbers up to that floating-point noise.", "", end]
    return "\n".join(parts)


def plot_success_by_stage(run_dir: Path, path: Path) -> Path | None:
    """Held-out success by stage for untrained / warm start / trained (step 21's grouped bars)."""
    from cells.step_21_plots import plot_group_bars

    return plot_group_bars(load_reports(Path(run_dir)), "by_stage", path)


def replace_section(readme_text: str, section: str, profile: str) -> str:
    """`readme_text` with `profile`'s results markers and what lies between them replaced by `section`."""
    opening, closing = markers(profile)
    if docblocks.find_block(readme_text, f"results:{profile}") is None:
        raise ResultsError(f"the file has no results markers for {profile!r}: add a line {opening!r} and, below "
                           f"it, {closing!r} where the results should go")
    return docblocks.replace_block(readme_text, f"results:{profile}", section)


def write_readme_results(run_dir: Path, readme: Path, assets: Path) -> Path:
    """Draw the plot into `assets`, then rewrite the results section of `readme` (by default `docs/results.md`)
    in place; returns `readme`."""
    run_dir, readme = Path(run_dir), Path(readme)
    profile = _load(run_dir, "profile.json")
    name = profile.get("name", "run")
    plot = plot_success_by_stage(run_dir, Path(assets) / f"{name}_{PLOT_NAME}")
    text = replace_section(readme.read_text(encoding="utf-8"),
                           results_section(run_dir, plot, readme.resolve().parent if plot else None), name)
    readme.write_text(text, encoding="utf-8")
    return readme


# ------------------------------------------------------------------------------ the README's glance block
def _tables_after(text: str, caption: str) -> list[list[str]] | None:
    """The markdown table that follows the first line starting with `caption` in `text`, as rows of cells
    (header first, the separator dropped); None when there is none."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(caption):
            rows = []
            for row in lines[i + 1:]:
                if row.startswith("|"):
                    if not set(row) <= set("|-: "):
                        rows.append([c.strip() for c in row.strip().strip("|").split("|")])
                elif rows:
                    break
            return rows or None
    return None


def _no_ci(cell: str) -> str:
    return cell.split(" [", 1)[0]


def glance_row(profile: str, section: str) -> list[str]:
    """One glance row from a profile's results section in `docs/results.md`: held-out success on all stages
    before and after each training phase, GRPO's paired effect on drifted episodes, and the wall time."""
    import re

    stages = _tables_after(section, "Held-out success by stage") or [[]]
    header, all_row = stages[0], next((r for r in stages[1:] if r[:1] == ["all"]), [])
    by_column = dict(zip(header, all_row, strict=False))
    columns = (("untrained", "pretrained (adapter off)"), ("after warm start",),
               ("after GRPO", "after warm start + GRPO"), ("SFT-only control",), ("expert",))
    cells = [next((_no_ci(by_column[c]) for c in names if c in by_column), "—") for names in columns]
    grpo = (_tables_after(section, "The GRPO effect") or _tables_after(section, "Trained − baseline") or [[]])
    drifted = next((r for r in grpo[1:] if r[:1] == ["drifted"]), None)
    wall = re.search(r"Wall time[^:]*: ([0-9.,]+ (?:min|s)) in all", section)
    return [f"[`{profile}`](docs/results.md)", *cells, drifted[2] if drifted and len(drifted) > 2 else "—",
            wall.group(1) if wall else "—"]


def glance_block(results_text: str) -> str:
    """The README's results-at-a-glance block (markers included, at most 15 lines), read from the generated
    sections of `docs/results.md` so the README shows the docs' numbers and nothing typed."""
    import re

    found = re.findall(r"<!-- results:([\w.-]+):begin", results_text)
    profiles = [p for p in GLANCE_ORDER if p in found] + [p for p in found if p not in GLANCE_ORDER and p != "glance"]
    rows = [glance_row(p, docblocks.block_body(results_text, f"results:{p}") or "") for p in profiles]
    body = (table(["profile", "before training", "after warm start", "after GRPO", "SFT-only control", "expert",
                   "GRPO on drifted episodes (paired, 95% CI)", "wall time"], rows[:8])
            + "\nHeld-out success over all stages, greedy." + _headline_sentence(profiles, rows)
            + " Every table, interval and plot: [docs/results.md](docs/results.md).")
    return docblocks.render(GLANCE, COMMAND, body, commit="")


def _headline_sentence(profiles: list[str], rows: list[list[str]]) -> str:
    """What the headline run's GRPO column says, in words (" On `cpu-learn`, ..."; "" without that run): GRPO adds
    to the warm start where the paired interval lies above 0, loses where below, else does not add."""
    import re

    if not profiles or profiles[0] != GLANCE_ORDER[0]:
        return ""
    bounds = re.search(r"\[([-+−]?[\d.]+), ([-+−]?[\d.]+)\]", rows[0][6])
    if bounds is None:
        return ""
    low, high = (float(b.replace("−", "-")) for b in bounds.groups())
    verdict = ("adds to the warm start on drifted episodes: the paired 95% interval lies above 0" if low > 0
               else "loses against the warm start on drifted episodes: the paired 95% interval lies below 0"
               if high < 0 else "does not add to the warm start on drifted episodes: the paired 95% interval spans 0")
    return f" On `{profiles[0]}`, GRPO {verdict}."


def write_glance(results_md: Path, readme: Path) -> Path:
    """Rewrite the results-at-a-glance block of `readme` from `results_md`; returns `readme`."""
    block = glance_block(Path(results_md).read_text(encoding="utf-8"))
    return docblocks.write_block(Path(readme), GLANCE, block, append=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cells results", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", default="runs/cpu-learn")
    parser.add_argument("--readme", default="docs/results.md", help="the file holding the results sections")
    parser.add_argument("--glance", default="README.md",
                        help="the file whose results-at-a-glance block is rewritten from --readme ('' : none)")
    parser.add_argument("--assets", default="docs/results", help="where the plot is written")
    parser.add_argument("--print", action="store_true", help="print the section instead of writing the file")
    args = parser.parse_args(argv)
    if args.print:
        print(results_section(Path(args.run_dir)))
        return 0
    if (Path(args.run_dir) / "profile.json").is_file():
        path = write_readme_results(Path(args.run_dir), Path(args.readme), Path(args.assets).resolve())
        print(f"[results] rewrote the results section of {path} from {args.run_dir}")
    else:
        print(f"[results] no run files in {args.run_dir}: kept the existing section of {args.readme}")
    if args.glance:
        print(f"[results] rewrote the results at a glance in {write_glance(Path(args.readme), Path(args.glance))} "
              f"from {args.readme}")
    return 0
