"""Run any policy on a frozen, stratified held-out seed plan and turn the episodes into `EvalRecord`s.

One function evaluates everything (`evaluate`): scripted policies (expert, naive, random,
exploits) play through text, models play through the batched rollout driver with the same
prompts the trainer uses. The plan (`eval_plan`) draws seeds from the reserved evaluation range
via `step_07.eval_seeds`, stratified by stage and language; `EvalSpec` pins the plan and the
decoding so baseline and final can be checked to match (`check_same_spec`).

Decoding: trial 0 is greedy (the headline metrics); pass^k uses `k` extra sampled trials at
`SAMPLED_TEMPERATURE` (identical for baseline and final). Scripted policies are deterministic, so
their sampled trials repeat trial 0 and their pass^k equals their success rate.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from cells.errors import DriftCallError
from cells.evaluation.records import EvalRecord, record_from_episode

SAMPLED_TEMPERATURE = 0.7


class EvalMismatchError(DriftCallError, ValueError):
    """Baseline and final evaluations used different seeds or decoding; paired statistics would lie."""


@dataclasses.dataclass(frozen=True)
class EvalCase:
    """One held-out task: a seed whose goal is in `language` at curriculum `stage`; `drifts` "" plays the
    catalogue's own schedule, "generated" the generated families', "<split>:<set>" only a generated split's
    held-out instances of that set (`drift_setting`)."""

    seed: int
    stage: int
    language: str
    drifts: str = ""


def drift_setting(drifts: str) -> dict[str, Any]:
    """The env arguments a case's `drifts` names: none for "" (the catalogue), a drift source ("generated", "both":
    step 2's `DRIFT_SOURCES`), else "<split>:<set>": the generated instances a generated split holds out for
    evaluation set `<set>` (`cells.evaluation.splits.GENERATED_SETS`), as the env's pool, or one generated instance
    id ("gen/...": the pool holds only it, so every drift the case schedules is that instance)."""
    from cells.drift.families import is_generated
    from cells.step_02_profiles import DRIFT_SOURCES

    if not drifts:
        return {}
    if drifts in DRIFT_SOURCES:
        return {"drift_source": drifts}
    from cells.step_06_drift import DriftPool, GeneratedSplit, drift_split

    if is_generated(drifts):
        return {"drift_pool": DriftPool(frozenset({drifts})), "drift_source": "generated"}

    name, _, which = drifts.partition(":")
    split = drift_split(name)
    if not isinstance(split, GeneratedSplit):
        raise ValueError(f"case drifts {drifts!r}: {name!r} is no generated split; held-out instances come from one")
    return {"drift_pool": DriftPool(split.held_out(which.rsplit("-", 1)[-1])), "drift_source": "generated"}


@dataclasses.dataclass(frozen=True)
class EvalSpec:
    """Everything that must match between a baseline and a final evaluation."""

    cases: tuple[EvalCase, ...]
    sampled_trials: int
    sampled_temperature: float
    max_new_tokens_per_turn: int
    max_episode_tokens: int
    turn_budgets: tuple[int, ...] | None = None  # per stage; None: the env's defaults

    def to_dict(self) -> dict[str, Any]:
        """As `dataclasses.asdict`, a case's `drifts` left out where it is "" (the catalogue's own schedule), so specs
        saved before cases had it compare equal."""
        out = dataclasses.asdict(self)
        out["cases"] = [{k: v for k, v in c.items() if k != "drifts" or v} for c in out["cases"]]
        return out


def eval_plan(per_cell: int, stages: Iterable[int] = (1, 2, 3), languages: Sequence[str] | None = None,
              offset: int = 0) -> tuple[EvalCase, ...]:
    """`per_cell` held-out seeds for every (stage, language); `offset` skips seeds (disjoint plans)."""
    from cells.step_04_datatypes import LANGUAGES
    from cells.step_07_tasks import eval_seeds

    langs = tuple(languages or LANGUAGES)
    cases = []
    for stage in stages:
        for lang in langs:
            seeds = eval_seeds(per_cell + offset, stage, lang)[offset:]
            cases.extend(EvalCase(s, stage, lang) for s in seeds)
    return tuple(cases)


def probe_cases(n: int, start: int = 0, stages: tuple[int, ...] = (1, 2, 3),
                generated: bool = False) -> tuple[EvalCase, ...]:
    """`n` cases from the reserved probe range (from its index `start`), `stages` in turn, languages as generated:
    the probe's (step 20, `generated=True`: every other round of the drifted stages meets the drift families'
    instances instead of the catalogue's) from index 0, development cases (diagnose, the warm start's gate) further
    on."""
    from cells.step_02_profiles import LANGUAGES, PROBE_SEEDS
    from cells.step_07_tasks import generate

    cases = []
    for i in range(n):
        seed, stage = PROBE_SEEDS.seed(start + i), stages[i % len(stages)]
        language = generate(seed=seed, stage=stage, language_weights=dict.fromkeys(LANGUAGES, 1.0)).language
        generated_round = generated and stage > 1 and (start + i) // len(stages) % 2 == 1
        cases.append(EvalCase(seed, stage, language, "generated" if generated_round else ""))
    return tuple(cases)


def make_spec(profile: Any, cases: tuple[EvalCase, ...], sampled_trials: int | None = None) -> EvalSpec:
    return EvalSpec(
        cases=cases,
        sampled_trials=profile.pass_k if sampled_trials is None else sampled_trials,
        sampled_temperature=SAMPLED_TEMPERATURE,
        max_new_tokens_per_turn=profile.max_new_tokens_per_turn,
        max_episode_tokens=profile.max_episode_tokens,
        turn_budgets=tuple(profile.turn_budgets),
    )


def check_same_spec(baseline: dict[str, Any], final: dict[str, Any]) -> None:
    """Raise `EvalMismatchError` naming the first field where two spec dicts differ."""
    for key in sorted(set(baseline) | set(final)):
        if baseline.get(key) != final.get(key):
            raise EvalMismatchError(
                f"baseline and final evaluations differ in {key!r}; rerun both with the same profile and plan"
            )


def env_for_case(case: EvalCase, turn_budgets: Sequence[int] | None = None, voice: Any = None) -> Any:
    """A fresh env for `case`: its stage, only its language, the stage's budget from `turn_budgets` (a profile's
    or a spec's) or else the env's default; `voice` (a step-9 `VoiceBoundary`) puts speech in the loop."""
    from cells.step_10_env import DriftCallEnv

    return DriftCallEnv(case.stage, {case.language: 1.0},
                        max_turns=None if turn_budgets is None else turn_budgets[case.stage - 1], voice=voice,
                        **drift_setting(case.drifts))


def play_greedy(model: Any, tokenizer: Any, cases: Sequence[EvalCase], profile: Any) -> Any:
    """One greedy batched rollout (`RolloutResult`) of `model` over `cases` with the profile's generation knobs and
    turn budgets: the probe's, the export check's and `diagnose`'s play."""
    from cells.agent.rollout import GenerationSpec, rollout_batch

    return rollout_batch([env_for_case(c, profile.turn_budgets) for c in cases], [c.seed for c in cases], model=model,
                         tokenizer=tokenizer, generation=GenerationSpec.for_profile(profile, greedy=True))


def run_scripted(name: str, policy_factory: Callable[[], Any], cases: Sequence[EvalCase],
                 trial: int = 0, turn_budgets: Sequence[int] | None = None, voice: Any = None) -> list[EvalRecord]:
    """Play each case with a fresh scripted policy (through `voice`, a step-9 boundary, when given); returns one
    record per case."""
    from cells.step_11_agent import play_episode

    records = []
    for case in cases:
        episode, rewards = play_episode(env_for_case(case, turn_budgets, voice), policy_factory(), seed=case.seed)
        records.append(record_from_episode(name, trial, episode, rewards))
    return records


def run_model(name: str, model: Any, tokenizer: Any, cases: Sequence[EvalCase], spec: EvalSpec, *,
              greedy: bool, trial: int, batch_size: int = 64, bar: Any = None,
              on_batch: Callable[[Any], None] | None = None, voice: Any = None) -> list[EvalRecord]:
    """Play each case with the model through the batched rollout driver (same prompts as training);
    `bar` (a progress bar) advances by each finished batch; `on_batch` gets each batch's `RolloutResult`;
    `voice` (a step-9 boundary) puts speech between the user and the model."""
    from cells.agent.rollout import GenerationSpec, rollout_batch
    from cells.step_08_rewards import rewards_of

    records = []
    for start in range(0, len(cases), batch_size):
        chunk = cases[start:start + batch_size]
        result = rollout_batch(
            [env_for_case(c, spec.turn_budgets, voice) for c in chunk], [c.seed for c in chunk], model=model,
            tokenizer=tokenizer,
            generation=GenerationSpec(max_new_tokens_per_turn=spec.max_new_tokens_per_turn,
                                      max_episode_tokens=spec.max_episode_tokens,
                                      temperature=spec.sampled_temperature, greedy=greedy),
        )
        records.extend(record_from_episode(name, trial, ep, rewards_of(ep)) for ep in result.episodes)
        if on_batch is not None:
            on_batch(result)
        if bar is not None:
            bar.update(len(chunk))
    return records


def evaluate(name: str, spec: EvalSpec, *, policy_factory: Callable[[], Any] | None = None,
             model: Any = None, tokenizer: Any = None,
             on_batch: Callable[[Any], None] | None = None) -> tuple[list[EvalRecord], list[EvalRecord]]:
    """(greedy records, sampled-trial records) for one policy or model over the spec's cases; a model's
    rollout batches also go to `on_batch` (e.g. `GenerationMeter`)."""
    if (policy_factory is None) == (model is None):
        raise ValueError("evaluate() takes exactly one of policy_factory= or model=")
    if policy_factory is not None:
        greedy = run_scripted(name, policy_factory, spec.cases, turn_budgets=spec.turn_budgets)
        # Scripted policies and the env are deterministic: every sampled trial repeats trial 0.
        sampled = [dataclasses.replace(r, trial=t) for t in range(spec.sampled_trials) for r in greedy]
        return greedy, sampled
    from cells.progress import progress_bar

    with progress_bar(len(spec.cases) * (1 + spec.sampled_trials), f"eval {name}") as bar:
        greedy = run_model(name, model, tokenizer, spec.cases, spec, greedy=True, trial=0, bar=bar, on_batch=on_batch)
        sampled: list[EvalRecord] = []
        for t in range(spec.sampled_trials):
            sampled.extend(run_model(name, model, tokenizer, spec.cases, spec, greedy=False, trial=t, bar=bar,
                                     on_batch=on_batch))
    return greedy, sampled


class GenerationMeter:
    """An `on_batch` sink: generated tokens and generation seconds over an evaluation's rollout batches."""

    def __init__(self) -> None:
        self.tokens = 0
        self.seconds = 0.0
        self.episodes = 0

    def __call__(self, result: Any) -> None:
        self.tokens += int(result.generated_tokens)
        self.seconds += float(result.seconds)
        self.episodes += len(result.episodes)

    def to_dict(self) -> dict[str, Any]:
        """For a report's `generation` block: what was generated, how fast, and the process's peak memory."""
        from cells.step_01_setup import peak_memory_mb

        return {"episodes": self.episodes, "generated_tokens": self.tokens, "seconds": round(self.seconds, 2),
                "tokens_per_s": round(self.tokens / self.seconds, 2) if self.seconds > 0 else None,
                "peak_memory_mb": round(peak_memory_mb(), 1)}


def report_for(greedy: Sequence[EvalRecord], sampled: Sequence[EvalRecord], profile: Any) -> dict[str, Any]:
    """`build_eval_report` over greedy records, with pass^k taken from the sampled trials."""
    from cells.evaluation import stats
    from cells.evaluation.report import build_eval_report

    report = build_eval_report(greedy, bootstrap_resamples=profile.bootstrap_resamples, seed=profile.seed)
    by_policy = stats.by_policy(sampled)
    for name, block in report["policies"].items():
        if by_policy.get(name):
            block["pass_k"] = stats.pass_hat_k(by_policy[name], profile.pass_k)
            block["pass_k_decoding"] = f"{len({r.trial for r in by_policy[name]})} sampled trials, T={SAMPLED_TEMPERATURE}"
    return report
