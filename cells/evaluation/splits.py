"""Evaluation by drift split: which pattern set an episode's drifts belong to, case plans stratified by it, and
how often sampling reaches a success on each set (pass@G).

- `episode_set(split, pattern_ids)`: the set an episode counts in, from the patterns its schedule holds (or that
  fired): "unseen" when any is unseen, else "reinforced" when any is reinforced, else "demonstrated"; None
  without a drift. Why the precedence: an episode with one withheld pattern measures the withheld recovery, since
  the demonstrated one beside it is what the warm start already does.
- `split_cases(split, per_set, seeds, start)`: drifted cases (stages 2 and 3 in turn, languages as generated)
  from a seed range, scanned from index `start` and kept until each set has `per_set`. Development ranges
  (`PROBE_SEEDS` past the probe's and `diagnose`'s cases) choose the recipe; the held-out `EVAL_SEEDS` only
  report. A case's set comes from its full-catalogue schedule, the one evaluation plays (`env_for_case`).
- A generated split (`latin-gen`) adds three evaluation sets, `GENERATED_SETS`: the generated instances it holds
  out of each kind (a: the combinations of its base split's unseen patterns; b: held-out cells; c: held-out
  values), each played only against those instances (`generated_cases`: cases whose `drifts` names the set, so the
  env's pool holds only them). `eval_sets(split)` lists a split's sets; the hand-written sets stay exactly those
  of the base split, so their results compare with it.
- `reachability(model, tokenizer, cases, profile, samples)`: greedy success, mean sampled success and pass@G
  (a success in at least one of G samples at the profile's GRPO temperature) over cases: what GRPO can reinforce
  at all. GRPO reweights what the policy already samples; a case no sample solves gives a zero-variance group.
  `reach_by_pattern` breaks it down by the set's patterns; `split_cases(..., pattern=P)` plans cases of one: for
  a generated instance (`instance_cases`), seeds whose goal admits it, each played with only that instance.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from cells.errors import DriftCallError

SCAN_LIMIT_PER_CASE = 200  # seeds scanned per wanted case at most (the rarest set is ~5-10% of drifted seeds)
GENERATED_SETS = ("gen-unseen-a", "gen-unseen-b", "gen-unseen-c")  # a generated split's held-out instances, by kind
GENERATED_FROM = 1_000_000  # generated sets' cases start this far past the hand-written ones' scan
PATTERN_SCAN_FACTOR = 10  # with one pattern wanted: the rarest withheld pattern is in ~1% of drifted seeds


class SplitPlanError(DriftCallError, ValueError):
    """A stratified plan could not be filled: too few seeds of a pattern set in the scanned range."""


def episode_set(split: Any, pattern_ids: Iterable[str]) -> str | None:
    """The pattern set an episode with these drifts counts in (`DriftSplit.episode_set`); None without a drift."""
    return split.episode_set(pattern_ids)


def scheduled_patterns(seed: int, stage: int, language: str) -> tuple[str, ...]:
    """The pattern ids the full catalogue schedules for `seed` at `stage` in `language` (what evaluation plays)."""
    from cells.step_06_drift import build_schedule
    from cells.step_07_tasks import generate

    goal = generate(seed=seed, stage=stage, language_weights={language: 1.0})
    return tuple(s.pattern_id for s in build_schedule(stage, seed, goal))


def scheduled_set(split: Any, seed: int, stage: int, language: str) -> str | None:
    """`episode_set` of the drifts the full catalogue schedules for `seed` at `stage` in `language`."""
    return episode_set(split, scheduled_patterns(seed, stage, language))


def split_cases(split: Any, per_set: int, seeds: Any, start: int = 0, stages: tuple[int, ...] = (2, 3),
                sets: Sequence[str] | None = None, pattern: str | None = None) -> dict[str, tuple[Any, ...]]:
    """`per_set` drifted cases per pattern set (`sets`, default all three) from `seeds` (a step-2 `SeedRange`),
    scanned from index `start`, `stages` in turn; with `pattern`, only cases whose schedule holds it (and only
    its set); `SplitPlanError` when the range runs dry first."""
    from cells.drift.families import is_generated
    from cells.evaluation.runner import EvalCase
    from cells.step_02_profiles import LANGUAGES
    from cells.step_06_drift import PATTERN_SETS
    from cells.step_07_tasks import generate

    if pattern is not None and is_generated(pattern):
        return {instance_set(split, pattern): instance_cases(pattern, per_set, seeds, start, stages)}
    wanted = (split.set_of(pattern),) if pattern else tuple(sets or PATTERN_SETS)
    found: dict[str, list[Any]] = {which: [] for which in wanted}
    # a single pattern is in a few percent of drifted schedules: scan further for it
    limit = SCAN_LIMIT_PER_CASE * per_set * len(wanted) * (PATTERN_SCAN_FACTOR if pattern else 1)
    index = start
    while any(len(found[w]) < per_set for w in wanted):
        if index - start >= limit:
            short = {w: len(found[w]) for w in wanted if len(found[w]) < per_set}
            raise SplitPlanError(f"split {split.name!r}: after {limit} seeds of the {seeds.name} range from index "
                                 f"{start}, too few cases {short} of {per_set} wanted per set"
                                 + (f" scheduling {pattern!r}" if pattern else ""))
        seed, stage = seeds.seed(index), stages[(index - start) % len(stages)]
        index += 1
        language = generate(seed=seed, stage=stage, language_weights=dict.fromkeys(LANGUAGES, 1.0)).language
        patterns = scheduled_patterns(seed, stage, language)
        which = episode_set(split, patterns)
        if which in found and len(found[which]) < per_set and (pattern is None or pattern in patterns):
            found[which].append(EvalCase(seed, stage, language))
    return {w: tuple(found[w]) for w in wanted}


def instance_set(split: Any, pattern: str) -> str:
    """The set a generated instance evaluates in under `split`: its held-out kind's `GENERATED_SETS` entry, else
    its training set (demonstrated or reinforced); "generated" under a hand-written split, which places none."""
    from cells.step_06_drift import GeneratedSplit

    if not isinstance(split, GeneratedSplit):
        return "generated"
    which, kind = split.placement(pattern)
    return f"gen-unseen-{kind}" if which == "unseen" else which


def instance_cases(pattern: str, per_set: int, seeds: Any, start: int = 0, stages: tuple[int, ...] = (2, 3)
                   ) -> tuple[Any, ...]:
    """`per_set` drifted cases from `seeds` scanned from `start` whose goal admits generated instance `pattern`,
    each played with only it (`EvalCase.drifts` = its id): how a model meets one instance, held out or trained."""
    return admitting_cases(pattern, per_set, seeds, start, stages, f"admitting {pattern!r}")


def eval_sets(split: Any) -> tuple[str, ...]:
    """The evaluation sets of a split: the pattern sets, and a generated split's `GENERATED_SETS`."""
    from cells.step_06_drift import PATTERN_SETS, GeneratedSplit

    return (*PATTERN_SETS, *(GENERATED_SETS if isinstance(split, GeneratedSplit) else ()))


def generated_cases(split: Any, which: str, per_set: int, seeds: Any, start: int = 0,
                    stages: tuple[int, ...] = (2, 3)) -> tuple[Any, ...]:
    """`per_set` drifted cases of generated set `which` (`GENERATED_SETS`) from `seeds` scanned from `start`: seeds
    whose goal admits one of the held-out instances, played with only those (`EvalCase.drifts`)."""
    return admitting_cases(f"{split.name}:{which}", per_set, seeds, start, stages,
                           f"of {which} in split {split.name!r}")


def admitting_cases(drifts: str, per_set: int, seeds: Any, start: int, stages: tuple[int, ...], what: str
                    ) -> tuple[Any, ...]:
    """`per_set` cases from `seeds` scanned from `start` (`stages` in turn) whose goal admits a drift of the pool
    `drifts` names (`drift_setting`), each played with that pool; `SplitPlanError` naming `what` when too few."""
    from cells.evaluation.runner import EvalCase, drift_setting
    from cells.step_02_profiles import LANGUAGES
    from cells.step_06_drift import build_schedule
    from cells.step_07_tasks import generate

    pool = drift_setting(drifts)["drift_pool"]
    found: list[Any] = []
    index = start
    while len(found) < per_set:
        if index - start >= SCAN_LIMIT_PER_CASE * per_set:
            raise SplitPlanError(f"too few cases {what} ({len(found)} of {per_set}) after {index - start} seeds of "
                                 f"the {seeds.name} range from index {start}")
        seed, stage = seeds.seed(index), stages[(index - start) % len(stages)]
        index += 1
        goal = generate(seed=seed, stage=stage, language_weights=dict.fromkeys(LANGUAGES, 1.0))
        if build_schedule(stage, seed, goal, pool, "generated"):
            found.append(EvalCase(seed, stage, goal.language, drifts))
    return tuple(found)


def generated_plan(split: Any, per_set: int, seeds: Any, start: int = 0) -> dict[str, tuple[Any, ...]]:
    """`generated_cases` of each of a generated split's `GENERATED_SETS` (none for a hand-written split), each set
    scanned from its own offset past `start` (`GENERATED_FROM` apart), clear of the hand-written sets' scan."""
    return {which: generated_cases(split, which, per_set, seeds, start=start + GENERATED_FROM * (i + 1))
            for i, which in enumerate(w for w in eval_sets(split) if w in GENERATED_SETS)}


def reach_by_pattern(split: Any, which: str, cases: Sequence[Any], per_case: Sequence[int],
                     samples: int) -> dict[str, dict[str, Any]]:
    """Per pattern of set `which` that `cases` schedule: cases, mean sampled success and pass@G (`group_size_table`)
    from `per_case` successes of `samples` draws. A set's few patterns can differ from reachable to never solved."""
    own = split.ids(which)
    groups: dict[str, list[int]] = {}
    for case, k in zip(cases, per_case, strict=True):
        for p in dict.fromkeys(scheduled_patterns(case.seed, case.stage, case.language)):
            if p in own:
                groups.setdefault(p, []).append(k)
    return {p: {"cases": len(ks), "sampled_success": round(sum(ks) / (len(ks) * samples), 4),
                "by_group_size": group_size_table(ks, samples)} for p, ks in sorted(groups.items())}


def reachability(model: Any, tokenizer: Any, cases: Sequence[Any], profile: Any, samples: int,
                 greedy_counts: Callable[[Sequence[Any]], dict[str, Any]] | None = None) -> dict[str, Any]:
    """Greedy success, mean sampled success and pass@`samples` over `cases` (sampled at the profile's GRPO
    temperature and top-p); per case, how many samples succeeded; with `greedy_counts`, what it says of the greedy
    episodes under `"greedy_counts"`."""
    import dataclasses

    from cells.agent.rollout import GenerationSpec, rollout_batch
    from cells.evaluation.runner import env_for_case
    from cells.step_08_rewards import rewards_of

    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")

    def played(spec: Any) -> Sequence[Any]:
        return rollout_batch([env_for_case(c, profile.turn_budgets) for c in cases], [c.seed for c in cases],
                             model=model, tokenizer=tokenizer, generation=spec).episodes

    def successes(spec: Any) -> list[bool]:
        return [rewards_of(ep).r_task >= 1 for ep in played(spec)]

    sampled_spec = GenerationSpec.for_profile(profile, greedy=False)
    greedy_episodes = played(dataclasses.replace(sampled_spec, greedy=True))
    greedy = [rewards_of(ep).r_task >= 1 for ep in greedy_episodes]
    per_case = [0] * len(cases)
    for _ in range(samples):
        for i, ok in enumerate(successes(sampled_spec)):
            per_case[i] += ok
    n = max(1, len(cases))
    return {"cases": len(cases), "samples": samples, "temperature": sampled_spec.temperature,
            "greedy_success": round(sum(greedy) / n, 4),
            "sampled_success": round(sum(per_case) / (n * samples), 4),
            f"pass_at_{samples}": round(sum(k > 0 for k in per_case) / n, 4),
            "by_group_size": group_size_table(per_case, samples),
            "successes_per_case": per_case,
            **({"greedy_counts": greedy_counts(greedy_episodes)} if greedy_counts is not None else {})}


def group_size_table(per_case: Sequence[int], samples: int) -> dict[str, dict[str, float]]:
    """For each group size G <= `samples` among 2, 4, 8, 16, 32, from `per_case` successes of `samples` draws per
    case: pass@G (unbiased: 1 - C(n-c, G) / C(n, G)) and the expected share of groups of G whose successes are all
    equal, all solved or all failed. That share bounds the zero-variance groups GRPO would draw from below only
    through partial rewards: a group of failures that earn different partial credit still carries a gradient."""
    from math import comb

    out: dict[str, dict[str, float]] = {}
    for g in (2, 4, 8, 16, 32):
        if g > samples or not per_case:
            continue
        total = comb(samples, g)
        reach = sum(1 - comb(samples - c, g) / total for c in per_case) / len(per_case)
        same = sum((comb(c, g) + comb(samples - c, g)) / total for c in per_case) / len(per_case)
        out[str(g)] = {"pass_at": round(reach, 4), "all_same_success": round(same, 4)}
    return out
