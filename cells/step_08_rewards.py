"""Step 8 - rewards: a pure, deterministic, hack-resistant score of a finished Episode (docs/design.md#6-rewards).

    quality = Σ wᵢ·rᵢ / Σ wᵢ   over available components (task .45, drift .20, constraints .15,
                                format .10; drift drops out when no drift fired)
    reward  = clamp01(quality · (1 + r_penalty) · (1 − (c − r_task)²))
              + 0.1 · r_penalty · (1 − r_task) − 0.4 · harmed

with `c` the submitted confidence (0 when the episode ended by abort, timeout or invalid
actions) and `harmed` 1 when any offence in `HARM_CODES` happened (a wrong booking left live, an
unrequested charge or cancel, a direct payment, a fabricated fact, a false total or reference told to
the user), else 0. The weights are always divided by the sum of the available ones, so a perfect
episode scores 1 with or without drift.

What success means: r_task = 1 only when the episode submitted, exactly one live goal-domain booking
carries every binding fact (`BINDING_FACTS` in cells/tasks/catalog.py: route, dates, party size, times, names,
GSTIN, plus every stated constraint but the soft budget), the user was told what `REPORT_FACTS`
(beside them) name (the submit message states the booking's reference and charged total; a fee or
term a drift made the user pay was told: `rewards/user_report.py`), and nothing harmed the user. A harmed
episode is scored as a failure (every component gated to 0), so its reward is
-0.4 + 0.1 · r_penalty ∈ [-0.5, -0.425]: strictly below an honest failure (0, or down to -0.1 with
offences), and a success pays up to 1. Hence reward ∈ [MIN_REWARD, 1] = [-0.5, 1]. A right booking
with an incomplete report (`FAILING_CODES`) is a failure with its offence: -0.025, below an honest one.

The offence term: a *failed* episode's offences cost up to 0.1, so a failure without offences (0)
beats one with them (< 0), and GRPO's group-relative advantage says so. The term is never positive,
so no exploit gains; a policy that never books earns <= 0 < 0.1.

Deliberate choices, checked against the probe contract (step_20: every exploit scores below an
honest policy that tries and fails; a policy that never books scores < 0.1):
- the *task booking* is the one live goal-domain booking carrying every binding fact; two live
  bookings leave none ("book twice" cannot earn r_task);
- r_constraints and r_format are measured on the task booking only. Paying them for any
  committed booking let "book the wrong thing fast, submit with confidence 0" earn up to
  (.15 + .10)/.70 = 0.36, above an honest failure; with the gate it earns 0;
- r_drift: a drift is handled within DRIFT_HANDLING_WINDOW turns either structurally or by a
  message citing a drift-specific token observed in a post-drift result (see components), and it
  is paid only in an episode with a task booking, like every other component. Without the gate,
  "fetch a token, re-fetch with the scope the error names, abort" earned
  quality = .20·1 / (.45+.20+.15+.10) = 0.222 with confidence 0 (calibration factor 1) on every
  payment-scope-drift seed; with it every component is 0 without the task booking, so
  quality = 0 and any policy that never books the goal earns exactly 0 (probe: `drift_then_quit`).

Reads nothing from the context and writes nothing; `run` prints the weights and the penalty table.
Run alone: `python -m cells run --profile cpu-smoke --steps 8` (instant).
Public API: `compute_rewards`, `rewards_of` (the env's attached score, else computed), `combine`, the component functions, `OffenceCode`, `PENALTY`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cells.rewards.adapters import (
    DriftEvidence,
    PatternLookup,
    RewardInputError,
    TaskRules,
    default_rules,
    default_tool_args,
    evidence_for,
    evidence_of,
)
from cells.rewards.components import (
    DRIFT_HANDLING_WINDOW,
    r_constraints,
    r_drift,
    r_format,
    r_task,
    task_booking,
)
from cells.rewards.penalty import (
    FAILING_CODES,
    FREE_PROBES,
    HARM_CODES,
    MAX_SAME_CALL,
    PENALTY,
    PENALTY_CAP,
    OffenceCode,
    r_penalty,
)
from cells.rewards.text_match import result_texts_memo
from cells.rewards.user_report import report_checks
from cells.step_04_datatypes import MIN_REWARD, Episode, Rewards, TerminatedBy

if TYPE_CHECKING:  # pragma: no cover
    from cells.context import Context

__all__ = [
    "DRIFT_HANDLING_WINDOW", "FAILED_OFFENCE_WEIGHT", "FAILING_CODES", "FREE_PROBES", "HARM_CODES", "HARM_COST",
    "MAX_SAME_CALL",
    "PENALTY", "PENALTY_CAP", "WEIGHTS",
    "DriftEvidence", "OffenceCode", "RewardInputError", "TaskRules", "combine", "compute_rewards",
    "confidence_of", "evidence_of", "r_constraints", "r_drift", "r_format", "r_penalty", "r_task", "rewards_of",
    "run", "task_booking",
]

WEIGHTS: dict[str, float] = {"task": 0.45, "drift": 0.20, "constraints": 0.15, "format": 0.10}
FAILED_OFFENCE_WEIGHT = 0.1  # a failed episode at the penalty cap scores -0.1
HARM_COST = -MIN_REWARD - FAILED_OFFENCE_WEIGHT * PENALTY_CAP  # 0.4: a harmed one at the cap scores MIN_REWARD


def confidence_of(episode: Episode) -> float:
    """The submitted confidence; 0 when the episode ended any other way."""
    action = episode.submitted
    if episode.terminated_by is not TerminatedBy.SUBMIT or action is None or action.confidence is None:
        return 0.0
    return float(action.confidence)


def combine(parts: Mapping[str, float | None], penalty: float, confidence: float,
            r_task_value: float, harmed: bool = False) -> tuple[float, float, dict[str, Any]]:
    """(reward, brier, breakdown) from component values; components that are None drop out. A harmed
    episode's components must already be gated to 0 (`_score` does it)."""
    used = {k: v for k, v in parts.items() if v is not None}
    weight_sum = sum(WEIGHTS[k] for k in used)
    quality = sum(WEIGHTS[k] * v for k, v in used.items()) / weight_sum
    brier = (confidence - r_task_value) ** 2
    raw = quality * (1.0 + penalty) * (1.0 - brier)
    failed_offences = FAILED_OFFENCE_WEIGHT * penalty * (1.0 - r_task_value)  # <= 0; 0 for a success
    harm = -HARM_COST if harmed else 0.0
    reward = min(1.0, max(0.0, raw)) + failed_offences + harm
    return reward, brier, {
        "weights": {k: WEIGHTS[k] / weight_sum for k in used}, "dropped": sorted(set(parts) - set(used)),
        "quality": quality, "penalty_factor": 1.0 + penalty, "calibration_factor": 1.0 - brier,
        "failed_offence_term": failed_offences, "harm_term": harm, "raw": raw,
        "formula": (f"clamp01(quality * (1 + r_penalty) * (1 - (confidence - r_task)^2)) "
                    f"+ {FAILED_OFFENCE_WEIGHT:g} * r_penalty * (1 - r_task) - {HARM_COST:g} * harmed"),
    }


def compute_rewards(episode: Episode, patterns: PatternLookup | None = None, *, rules: TaskRules | None = None,
                    tool_args: Mapping[str, frozenset[str]] | None = None) -> Rewards:
    """Score a finished episode. Pure: the same inputs always give an equal `Rewards`.

    patterns: pattern_id -> pattern-shaped object (mapping or callable; default step_06's
    `pattern_by_id`, only consulted when drifts fired). rules: task rules (default step_07's).
    tool_args: documented argument names per tool (default step_05's at reset).
    """
    with result_texts_memo():
        return _score(episode, patterns, default_rules() if rules is None else rules,
                      default_tool_args() if tool_args is None else tool_args)


def _score(episode: Episode, patterns: PatternLookup | None, rules: TaskRules,
           tool_args: Mapping[str, frozenset[str]]) -> Rewards:
    evidence = evidence_for(episode.drifts, patterns)
    found, booking_detail = task_booking(episode, rules)
    report = report_checks(episode, found, evidence)
    wrong = [c["booking_id"] for c in booking_detail["candidates"] if not c["matches"]]
    pen, pen_b = r_penalty(episode, evidence, wrong, tool_args, rules, report)
    harmed = bool(pen_b["harm"])
    # a booking that came with harm, or that the user was not told about, is not what the user asked for
    booking = None if pen_b["failing"] else found
    if pen_b["failing"] and found is not None:
        booking_detail = {**booking_detail, "booking_id": None, "harm": pen_b["harm"], "failing": pen_b["failing"],
                          "reason": f"{pen_b['failing']}: the booking does not count as a success"}
    task, task_b = r_task(episode, booking, {**booking_detail, "report": report})
    drift, drift_b = r_drift(episode, evidence, booking)
    cons, cons_b = r_constraints(episode, booking, rules)
    fmt, fmt_b = r_format(episode, booking, rules)
    conf = confidence_of(episode)
    parts = {"task": task, "drift": drift, "constraints": cons, "format": fmt}
    reward, brier, comb_b = combine(parts, pen, conf, task, harmed)
    breakdown = {
        "task": task_b, "drift": drift_b, "constraints": cons_b, "format": fmt_b, "penalty": pen_b,
        "confidence": {"value": conf, "terminated_by": episode.terminated_by.value,
                       "reason": "submitted" if episode.terminated_by is TerminatedBy.SUBMIT
                       else f"ended by {episode.terminated_by.value}: confidence 0"},
        "brier": {"value": brier, "formula": "(confidence - r_task)^2"},
        "combine": comb_b, "episode_id": episode.episode_id,
    }
    return Rewards(r_task=task, r_drift=drift, r_constraints=cons, r_format=fmt, r_penalty=pen,
                   confidence=conf, brier=brier, reward=reward, breakdown=breakdown)


def rewards_of(episode: Episode) -> Rewards:
    """The score the env attached to `episode` at termination; computed only for hand-built ones."""
    return episode.rewards if episode.rewards is not None else compute_rewards(episode)


def penalty_table() -> str:
    """The weights and penalty numbers as printable text."""
    lines = ["weights (renormalised over available components):"]
    lines += [f"  {k:<12} {v:.2f}" for k, v in WEIGHTS.items()]
    lines.append(f"penalties (sum capped at -{PENALTY_CAP:g}; identical calls free up to {MAX_SAME_CALL}, "
                 f"probes free up to {FREE_PROBES}; drift window {DRIFT_HANDLING_WINDOW} turns; a failed "
                 f"episode also loses {FAILED_OFFENCE_WEIGHT:g} x the sum; harm (*) makes it a failure and "
                 f"costs {HARM_COST:g} more):")
    lines += [f"  {code.value + (' *' if code in HARM_CODES else ' x' if code in FAILING_CODES else ''):<24} "
              f"-{PENALTY[code]:.2f}" for code in OffenceCode]
    lines.append("  (x: never a success either, without the harm cost)")
    return "\n".join(lines)


JUDGE_DOC = "docs/judge.md"  # where `python -m cells judge --docs` writes the rules below


def judge_rules_markdown() -> str:
    """What success means and what each offence costs, as markdown rendered from the declarations
    themselves (cells/tasks/catalog.py's BINDING_FACTS, REPORT_FACTS and SOFT_CONSTRAINTS, this step's WEIGHTS, PENALTY,
    HARM_CODES and FAILING_CODES)."""
    from cells.step_07_tasks import binding_table, report_table

    weights = ", ".join(f"{k} {v:g}" for k, v in WEIGHTS.items())
    rows = ["| offence | cost | not a success | harm: -" + f"{HARM_COST:g} more |", "|---|---|---|---|"]
    rows += [f"| `{code.value}` | {PENALTY[code]:g} | {'yes' if code in FAILING_CODES else ''} | "
             f"{'yes' if code in HARM_CODES else ''} |" for code in OffenceCode]
    return "\n".join([
        "**Binding facts**: r_task = 1 only when one live goal-domain booking carries every one of these.", "",
        binding_table(), "",
        "**What the user must be told** about that booking, also for r_task = 1 (a right booking the user was not "
        "told about is `incomplete_report`):", "",
        report_table(), "",
        f"**Weights** (renormalised over available components): {weights}. Offences sum to r_penalty, capped at "
        f"-{PENALTY_CAP:g}; identical calls (case and whitespace folded) are free up to {MAX_SAME_CALL}, probes up "
        f"to {FREE_PROBES}; a failed episode loses {FAILED_OFFENCE_WEIGHT:g} x r_penalty; the reward lies in "
        f"[{MIN_REWARD:g}, 1].", "",
        *rows,
    ])


def run(ctx: Context) -> Context:
    """Print the weights and penalty table (episodes are scored by the env from step 10 on)."""
    print("[rewards]\n" + penalty_table())
    return ctx
