"""Step 7 - tasks: the seeded multilingual goal generator and the simulated user (docs/design.md#5-tasks).

`generate(seed, stage, language_weights) -> GoalSpec` is pure and deterministic: every decision
(language, domain, template, slots, constraints, wording, hidden facts) draws from its own
`rng_for(seed, "task.<decision>")`; no `hash()`, wall clock or global RNG. Goals are in the
airline, cab, restaurant or hotel domain (payment is never a goal), spoken natively in Hindi
(Devanagari), Tamil, Kannada, English or romanised Hinglish. Slots stay canonical (IATA codes,
place ids like "BLR:KORAMANGALA", ISO dates, enum values) while the utterance speaks them in the
user's language; mapping one to the other is part of the task (`crosses_year(goal)`: a date slot in the
next calendar year, a January date asked for in December with the year unsaid; ~2.5% of goals). Stage 1
goals carry 1 constraint, stage 2 1-2, stage 3 2-3 plus compound templates and a possible mid-episode
language switch.

Seeds: the generator is seed-agnostic. Callers draw seeds from the ranges in
`cells.step_02_profiles` (`TRAIN_SEEDS` for training, `PROBE_SEEDS` for the hacking probe,
`EVAL_SEEDS` for held-out evaluation, never trained on); `eval_seeds(n, stage, language)` gives
deterministic, domain-stratified evaluation seeds for one (stage, language) cell.

Data: `cells/data/templates.yaml` (templates, validated on first use) and `cells/data/i18n.yaml`
(cities, places, dates, clauses, user replies, question keywords).

Reads `ctx.profile.seed`; writes `<run_dir>/sample_goals.jsonl` (`ctx.artifacts["sample_goals"]`).
Run alone: `python -m cells run --profile cpu-smoke --steps 7` (< 1 s on every profile).
"""

from __future__ import annotations

import json
from functools import cache
from typing import TYPE_CHECKING

from cells.distributed import is_main_process
from cells.step_02_profiles import EVAL_SEEDS
from cells.step_04_datatypes import GOAL_DOMAINS, LANGUAGES, GoalSpec, stable_int
from cells.tasks.catalog import (
    BINDING_FACTS,
    CONSTRAINT_DETAIL_KEYS,
    INTENTS,
    REPORT_FACTS,
    REQUIRED_SLOTS,
    SLOT_TO_DETAIL,
    SOFT_CONSTRAINTS,
    UNREGISTERED_GSTIN,
    USER_ONLY_ARGS,
    BindingFact,
    ReportFact,
    TaskDataError,
    Template,
    binding_checks,
    binding_table,
    check_constraint,
    report_table,
    template_by_id,
    templates,
    templates_for,
)
from cells.tasks.generator import (
    STAGE_CONSTRAINTS,
    TaskGenerationError,
    crosses_year,
    generate,
    in_later_year,
    may_cross_year,
    render_values,
)
from cells.tasks.i18n import LANGUAGE_SCRIPT, amounts_in, money, nfc, script_of, spoken_date, spoken_time
from cells.tasks.user import SimulatedUser, acknowledge, detect_topics, language_at, opening, reply

if TYPE_CHECKING:  # pragma: no cover
    from cells.context import Context

__all__ = [
    "BINDING_FACTS", "CONSTRAINT_DETAIL_KEYS", "INTENTS", "LANGUAGE_SCRIPT", "REPORT_FACTS", "REQUIRED_SLOTS",
    "SLOT_TO_DETAIL", "SOFT_CONSTRAINTS", "STAGE_CONSTRAINTS", "UNREGISTERED_GSTIN", "USER_ONLY_ARGS", "BindingFact",
    "ReportFact", "SimulatedUser", "TaskDataError", "TaskGenerationError", "Template", "acknowledge", "amounts_in",
    "binding_checks", "binding_table", "check_constraint", "crosses_year", "detect_topics", "eval_seeds", "generate",
    "in_later_year", "language_at", "may_cross_year", "money", "nfc", "opening", "render_values", "reply",
    "report_table", "run", "script_of", "spoken_date", "spoken_time", "template_by_id", "templates", "templates_for",
]

_MAX_TRIES_PER_SEED = 50


@cache
def eval_seeds(n: int, stage: int, language: str) -> tuple[int, ...]:
    """`n` distinct held-out seeds from `EVAL_SEEDS` for one (stage, language) evaluation cell.

    With weights `{language: 1}` each seed's goal is in `language`; domains are stratified
    round-robin (airline, cab, restaurant, hotel, ...). Deterministic across processes.
    """
    if language not in LANGUAGES:
        raise TaskGenerationError(f"language must be one of {LANGUAGES}, got {language!r}")
    size = EVAL_SEEDS.stop - EVAL_SEEDS.start
    chosen: list[int] = []
    for i in range(n * _MAX_TRIES_PER_SEED):
        if len(chosen) == n:
            break
        seed = EVAL_SEEDS.start + stable_int("eval_seeds", stage, language, i) % size
        goal = generate(seed, stage, {language: 1.0})
        if seed not in chosen and goal.domain == GOAL_DOMAINS[len(chosen) % len(GOAL_DOMAINS)]:
            chosen.append(seed)
    if len(chosen) < n:
        raise TaskGenerationError(f"found only {len(chosen)} of {n} eval seeds for stage {stage}, {language}")
    return tuple(chosen)


def sample_goals(base_seed: int, per_cell: int = 1) -> tuple[GoalSpec, ...]:
    """`per_cell` goals per (stage, language), from consecutive seeds after `base_seed`."""
    goals = []
    for stage in (1, 2, 3):
        for li, lang in enumerate(LANGUAGES):
            for k in range(per_cell):
                seed = base_seed + (stage * len(LANGUAGES) + li) * per_cell + k
                goals.append(generate(seed, stage, {lang: 1.0}))
    return tuple(goals)


def run(ctx: Context) -> Context:
    """Generate sample goals per stage and language, print a table, write sample_goals.jsonl."""
    goals = sample_goals(ctx.profile.seed)
    path = ctx.run_dir / "sample_goals.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    if is_main_process():  # several processes: one writer (cells.distributed)
        with path.open("w", encoding="utf-8") as fh:
            for goal in goals:
                fh.write(json.dumps(goal.to_dict(), ensure_ascii=False, sort_keys=True) + "\n")
    ctx.artifacts["sample_goals"] = path
    print(f"[tasks] {len(templates())} templates; {len(goals)} sample goals -> {path}")
    print("  what a task booking must carry for r_task = 1 (BINDING_FACTS):\n" + binding_table())
    print("  what the agent must tell the user about it (REPORT_FACTS):\n" + report_table())
    print(f"  {'st':<3}{'domain':<11}{'lang':<9}{'template':<34}{'#c':<3}utterance")
    for g in goals:
        print(f"  {g.stage:<3}{g.domain:<11}{g.language:<9}{g.template_id:<34}{len(g.constraints):<3}"
              f"{g.seed_utterance[:60]}")
    return ctx
