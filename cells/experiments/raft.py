"""`python -m cells control --run-dir runs/cpu-rl --raft`: control (b), rejection-sampling SFT (RAFT) at GRPO's compute.

The question it answers: does GRPO's reward teach anything that plain supervised learning on the model's *own*
successful episodes does not? GRPO trains on on-policy samples weighted by a group-relative advantage; RAFT keeps
the on-policy samples that succeed and does SFT on them, no negative signal, no baseline, no KL. Much of what RL
seems to add can be on-policy data alone (arXiv 2510.18874), and GRPO's edge over RAFT is largely its use of the
failed samples and its dropping of zero-variance groups (arXiv 2504.11343); so GRPO − RAFT separates what the
reward teaches from what on-policy data teaches, as control (a) (`cells/experiments/control.py`) separates GRPO from
more expert demonstrations.

How: from the run's warm start (`training/warm_start/model`, every weight trains, as in control (a)), stage by
stage in GRPO's curriculum order, rounds of

1. sampling: `RAFT_ROUND_GROUPS` training seeds, G = `profile.num_generations` episodes each, at the profile's GRPO
   temperature and top-p, in the envs GRPO trains in (`step_10_env.stage_env_factories`: with a `drift_split`,
   drifts from its reinforcement pool, demonstrated + reinforced). Seeds: the stage's GRPO block
   (`grpo_stage.first_grpo_seed`) shifted by `RAFT_SEED_OFFSET`, which neither GRPO (at most a few thousand
   seeds from the block's start) nor the warm start's expert data (tens of thousands from the same starts)
   reaches; with the failure curriculum (`grpo_failure_candidates`) the seeds the
   greedy policy fails among as many candidates there, cycled, as GRPO does (`cells.training.failures`);
2. filtering: episodes with `r_task >= 1` become SFT examples of the model's own tokens (`raft_example`: prompt
   and completion ids; labels only where the rollout's assistant mask is 1, the tokens the model sampled);
3. training: one `sft_warm_start` pass over the round's examples.

Why alternate small rounds rather than sample once then train: each round samples from the model the previous
round trained, which is on-policy RAFT (the iterated form of both papers); a single sample-then-train pass would
be off-policy after its first step. Rounds of 8 groups keep a round to seconds on 2 cores, so the budget is met
within half a round.

Compute is matched per stage: stage s gets the compute GRPO's stage s took, rollouts included
(`training.metrics.grpo_compute_seconds`: the CPU seconds of its steps, `step_cpu` in `training/metrics.csv`, and
RAFT's rounds are timed on the same process CPU clock, so other work sharing the cores changes neither side; a run
logged before steps recorded CPU time is matched on wall-clock, `step_time`). Rounds run while the
stage's remaining budget is at least half the last round's measured cost (sampling + training), so the total is
within half a round of GRPO's either way (`spend`). Mining the failure curriculum is outside both budgets (GRPO's
mining happens before its first step, outside `step_time`). Environment episodes are reported beside GRPO's
(steps × prompts_per_step × G, plus resampled groups × G).

Learning rate: the same peak as control (a) (`CONTROL_LR_SHARE` of the SFT rate) on a cosine over the *budget's
seconds*, constant within a round: the step count is not known in advance. No warm-up: the first examples are
the model's own samples, whose loss is already low. Each round starts a fresh optimiser (one TRL trainer per
round). Outputs, as control (a)'s: `training/raft_control/model` (model + tokenizer), `eval_raft_control.json`
(with the sampling tally under "control"), `records_raft_control.jsonl`, `eval_paired_raft.json` (RAFT − warm
start) and `eval_paired_grpo_vs_raft.json` (trained − RAFT). Time: GRPO's time plus one evaluation. The tally is
also saved beside the model (`training/raft_control/control.json`); `--train-only` stops there, for development
comparisons (`diagnose --reach --control raft`) on a run that never played its held-out evaluation.

`--lora`: the same rounds on GRPO's adapter instead of every weight (a fresh LoRA of the profile's r and alpha over
the warm start, at GRPO's learning rate, merged when saved: `training/raft_lora_control`, `--control raft-lora`).
RAFT and GRPO otherwise differ in what trains (every weight at the SFT-derived rate vs a LoRA) as well as in their
objective and episode count; this variant leaves only the latter two.
"""

from __future__ import annotations

import argparse
import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cells.experiments.control import (
    CONTROL_LR_SHARE,
    EVAL_FILES,
    TRAIN_ONLY_HELP,
    ControlError,
    evaluate_and_pair,
    save_control_record,
)

RAFT_SEED_OFFSET = 50_000_000  # into each stage's 1e8-seed block: GRPO and the warm start use only its first ~1e5
LORA_HELP = ("train GRPO's LoRA (the profile's r and alpha, at GRPO's learning rate) instead of every weight: "
             "saved as training/raft_lora_control, played with `diagnose --reach --control raft-lora`")
RAFT_ROUND_GROUPS = 8  # groups per sampling round: 64 episodes at G=8, a few seconds of sampling on 2 cores
RUN_FILES = ("training/metrics.csv", *EVAL_FILES)


class RaftError(ControlError):
    """The run directory cannot host the RAFT control: no GRPO metrics to match, or no evaluation to pair with."""


@dataclass
class RaftTally:
    """What the RAFT control did, in all and per stage."""

    episodes: int = 0  # environment episodes sampled
    kept: int = 0  # of those, successful (`r_task >= 1`): the SFT examples
    rounds: int = 0
    tokens: int = 0  # real tokens the trainer saw
    trained_tokens: int = 0  # of those, labelled (the model's own assistant tokens)
    steps: int = 0  # optimiser steps
    sample_seconds: float = 0.0
    train_seconds: float = 0.0
    mining_seconds: float = 0.0  # failure-curriculum mining, outside the budget like GRPO's
    losses: list[float] = field(default_factory=list)
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return self.sample_seconds + self.train_seconds

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "seconds": round(self.seconds, 3),
                "kept_share": round(self.kept / self.episodes, 4) if self.episodes else 0.0}


def raft_example(trajectory: Any) -> dict[str, Any]:
    """One episode as `sft_warm_start` trains on it (`input_ids`, `labels`, `length`, as `sft_data.tokenize_all`
    builds them): the turn-0 prompt then the completion; labels are the model's own tokens where the rollout's
    `assistant_mask` is 1, -100 on the prompt and on everything the template or environment inserted."""
    from cells.training.sft_data import IGNORE_INDEX

    ids = [*trajectory.prompt_ids, *trajectory.completion_ids]
    labels = [IGNORE_INDEX] * len(trajectory.prompt_ids) + [
        int(t) if m else IGNORE_INDEX for t, m in zip(trajectory.completion_ids, trajectory.assistant_mask, strict=True)]
    return {"input_ids": ids, "labels": labels, "length": len(ids)}


def succeeded(episode: Any) -> bool:
    """The judge's task success, the filter RAFT keeps by."""
    from cells.step_08_rewards import rewards_of

    return rewards_of(episode).r_task >= 1


def kept_examples(episodes: Sequence[Any], trajectories: Sequence[Any],
                  keep: Callable[[Any], bool] = succeeded) -> list[dict[str, Any]]:
    """`raft_example`s of the episodes `keep` accepts (default: the successful ones), in order."""
    return [raft_example(t) for e, t in zip(episodes, trajectories, strict=True) if keep(e)]


def spend(budget_s: float, play_round: Callable[[], None], clock: Callable[[], float] = time.perf_counter
          ) -> list[float]:
    """Call `play_round` while the budget lasts: a round starts while the remaining seconds are at least half the
    last round's measured cost (the first always, if the budget is positive). Returns each round's seconds."""
    costs: list[float] = []
    spent = 0.0
    while budget_s - spent > 0 and (not costs or budget_s - spent >= costs[-1] / 2):
        t0 = clock()
        play_round()
        costs.append(clock() - t0)
        spent += costs[-1]
    return costs




def raft_first_seed(stage: int) -> int:
    """First training seed of stage `stage`'s RAFT block (inside GRPO's stage block, past what GRPO plays)."""
    from cells.training.grpo_stage import first_grpo_seed

    return first_grpo_seed(stage) + RAFT_SEED_OFFSET


def stage_seeds(model: Any, tokenizer: Any, profile: Any, factory: Any, first: int) -> tuple[int, ...]:
    """The stage's seeds to cycle, as GRPO's: with the failure curriculum, the candidates the greedy policy fails;
    () otherwise (or if it fails none), meaning consecutive seeds from `first`."""
    from cells.training.failures import failing_seeds

    if profile.grpo_failure_candidates <= 0:
        return ()
    model.eval()
    return tuple(failing_seeds(model, tokenizer, profile, factory,
                               list(range(first, first + profile.grpo_failure_candidates))))


def sample_round(model: Any, tokenizer: Any, profile: Any, factory: Any, seeds: Sequence[int],
                 visits: Sequence[int]) -> tuple[list[dict[str, Any]], int]:
    """Play G sampled episodes on the seed of each visit (`seeds` cycled, else `visits` are the seeds); returns
    the kept examples and the episodes played. Each episode samples from its own seed (visit, generation)."""
    from cells.agent.rollout import GenerationSpec, rollout_batch
    from cells.seeding import stable_int

    rows = [(seeds[v % len(seeds)] if seeds else v, v, k) for v in visits for k in range(profile.num_generations)]
    model.eval()
    result = rollout_batch([factory() for _ in rows], [s for s, _, _ in rows], model=model, tokenizer=tokenizer,
                           generation=GenerationSpec.for_profile(profile, greedy=False),
                           sample_seeds=[stable_int("raft.episode", s, v, k) % 2**63 for s, v, k in rows])
    assert result.trajectories is not None  # a tokenizer was given
    return kept_examples(result.episodes, result.trajectories), len(rows)


def cosine_lr(peak: float, spent: float, total: float) -> float:
    """The learning rate after `spent` of `total` budget seconds: a cosine from `peak` to 0."""
    return peak * 0.5 * (1 + math.cos(math.pi * min(1.0, spent / total))) if total > 0 else peak


def train_round(model: Any, tokenizer: Any, profile: Any, examples: list[dict[str, Any]], out_dir: Path,
                learning_rate: float, seed: int) -> Any:
    """One `sft_warm_start` pass over `examples` (saved to `out_dir/model`, or `out_dir/adapter` for a LoRA); its
    `WarmStartResult`. A LoRA trains with the same loss as every weight does (labelled positions only), so the two
    variants differ in what trains, not in how the loss is computed."""
    from datasets import Dataset  # type: ignore[import-untyped]

    from cells.training.warm_start import sft_warm_start

    dataset = Dataset.from_dict({k: [e[k] for e in examples] for k in ("input_ids", "labels", "length")})
    return sft_warm_start(model, tokenizer, dataset, out_dir, learning_rate=learning_rate,
                          batch_size=profile.sft_batch_size or profile.num_generations, seed=seed,
                          lr_scheduler_type="constant", labelled_loss=True)


def raft_stage(model: Any, tokenizer: Any, profile: Any, stage: int, budget_s: float, total_s: float,
               out_dir: Path, tally: RaftTally, *, round_groups: int = RAFT_ROUND_GROUPS,
               clock: Callable[[], float] = time.perf_counter, peak_lr: float | None = None) -> None:
    """Sample-filter-train rounds on stage `stage`'s GRPO envs for `budget_s` seconds (`spend`), into `tally`.
    `total_s` (all stages' budget) sets the learning rate's cosine, from `peak_lr` (default `raft_peak_lr`)."""
    from cells.progress import progress_bar
    from cells.step_10_env import stage_env_factories

    peak = raft_peak_lr(profile, lora=False) if peak_lr is None else peak_lr
    factory = stage_env_factories(profile)[stage]
    first = raft_first_seed(stage)
    t0 = clock()
    seeds = stage_seeds(model, tokenizer, profile, factory, first)
    tally.mining_seconds += clock() - t0
    visits = itertools.count(0 if seeds else first)
    before, spent_before = RaftTally(tally.episodes, tally.kept, tally.rounds), tally.seconds
    bar = progress_bar(max(1, round(budget_s)), f"[raft] stage {stage}", unit="s")

    def one_round() -> None:
        t = clock()
        bar.set_postfix_str("sampling")
        examples, played = sample_round(model, tokenizer, profile, factory, seeds,
                                        [next(visits) for _ in range(round_groups)])
        tally.episodes, tally.kept, tally.rounds = tally.episodes + played, tally.kept + len(examples), tally.rounds + 1
        tally.sample_seconds += clock() - t
        t = clock()
        if examples:
            bar.set_postfix_str(f"training on {len(examples)}")
            result = train_round(model, tokenizer, profile, examples, out_dir,
                                 cosine_lr(peak, tally.seconds, total_s),
                                 profile.seed + tally.rounds)
            tally.tokens, tally.trained_tokens = tally.tokens + result.tokens, tally.trained_tokens + result.trained_tokens
            tally.steps += result.steps
            tally.losses.extend(result.losses)
        tally.train_seconds += clock() - t
        bar.update(max(0, min(bar.total, round(tally.seconds - spent_before)) - bar.n))  # seconds of the budget
        bar.set_postfix_str(f"{tally.kept - before.kept}/{tally.episodes - before.episodes} kept")

    costs = spend(budget_s, one_round, clock)
    bar.close()
    tally.stages[str(stage)] = {"budget_s": round(budget_s, 3), "seconds": round(sum(costs), 3),
                                "rounds": len(costs), "episodes": tally.episodes - before.episodes,
                                "kept": tally.kept - before.kept, "first_seed": first, "cycled_seeds": len(seeds)}


def check_run_dir(run_dir: Path, evaluate: bool = True) -> None:
    """`RaftError` naming what the run directory lacks and the command that makes it (the evaluation's files only
    when the control is to be `evaluate`d)."""
    if not (run_dir / "profile.json").is_file():
        raise RaftError(f"{run_dir / 'profile.json'} is missing: {run_dir} is not a run directory "
                        "(`python -m cells run --profile cpu-rl` makes one)")
    for name in RUN_FILES if evaluate else RUN_FILES[:1]:
        if not (run_dir / name).is_file():
            why = ("the run has no GRPO steps whose seconds RAFT matches (run steps 15-17)" if name.endswith(".csv")
                   else "RAFT is evaluated and paired on the run's own evaluation (run steps 18-19; or train "
                        "only: --train-only)")
            raise RaftError(f"{run_dir / name} is missing: {why}")


CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.process_time, "wall": time.perf_counter}
# (the control's name in the run directory, its short tag in the paired files) for every weight / GRPO's LoRA
RAFT_NAMES: dict[bool, tuple[str, str]] = {False: ("raft_control", "raft"), True: ("raft_lora_control", "raft_lora")}


def raft_peak_lr(profile: Any, lora: bool) -> float:
    """Every weight: control (a)'s peak (`CONTROL_LR_SHARE` of the SFT rate); GRPO's LoRA: GRPO's own rate, so that
    variant differs from GRPO in its objective and data only."""
    return profile.learning_rate if lora else CONTROL_LR_SHARE * profile.sft_learning_rate


def run_raft(run_dir: Path, *, round_groups: int = RAFT_ROUND_GROUPS,
             clock: Callable[[], float] | None = None, evaluate: bool = True, lora: bool = False) -> dict[str, Any]:
    """Train and (unless not `evaluate`) evaluate the RAFT control in `run_dir`; returns the two paired reports, or
    only its tally under "raft". Its budget per stage is GRPO's compute there, spent on the same clock
    (`CLOCKS[measure]`, unless `clock` is given). `lora`: train GRPO's adapter (the profile's LoRA, fresh over the
    warm start, at GRPO's learning rate) instead of every weight, merged into the saved model
    (`training/raft_lora_control`): whether RAFT's lead over GRPO comes from the weights it trains or from its
    objective and episodes."""
    from cells.training.metrics import grpo_compute_seconds, grpo_episodes
    from cells.training.warm_start import load_run_warm_start

    run_dir = Path(run_dir)
    check_run_dir(run_dir, evaluate)
    metrics = run_dir / "training" / "metrics.csv"
    budgets, measure = grpo_compute_seconds(metrics)
    total = sum(budgets.values())
    clock = clock or CLOCKS[measure]
    profile, model, tokenizer = load_run_warm_start(run_dir)
    name, short = RAFT_NAMES[lora]
    out_dir, peak = run_dir / "training" / name, raft_peak_lr(profile, lora)
    if lora:
        from cells.step_12_model import attach_adapter

        model = attach_adapter(model, profile)
    print(f"[raft] GRPO took {total / 60:.1f} min of {measure} time (" + ", ".join(
        f"stage {s} {b / 60:.1f}" for s, b in budgets.items()) + f"): sampling G={profile.num_generations} at "
        f"T={profile.temperature}, keeping successes, training " + (
            f"GRPO's LoRA (r={profile.lora_r}) on them" if lora else "every weight on them") + f", peak lr {peak:g}")
    tally = RaftTally()
    for stage, budget in budgets.items():
        raft_stage(model, tokenizer, profile, stage, budget, total, out_dir, tally, round_groups=round_groups,
                   clock=clock, peak_lr=peak)
    if lora:  # one model file, loaded like the other controls
        model = model.merge_and_unload()
    model.save_pretrained(str(out_dir / "model"))  # also when no round kept an episode: the warm start, evaluated
    tokenizer.save_pretrained(str(out_dir / "model"))
    played = grpo_episodes(metrics, profile)
    print(f"[raft] {tally.episodes:,} episodes (GRPO: {played:,}), {tally.kept:,} kept "
          f"({100 * tally.to_dict()['kept_share']:.1f}%), {tally.trained_tokens:,} trained tokens of {tally.tokens:,} "
          f"in {tally.steps} steps, {tally.seconds / 60:.1f} min ({tally.sample_seconds / 60:.1f} sampling)")
    record = {"kind": "raft", "grpo_seconds": total, "grpo_measure": measure,
              "grpo_stage_seconds": {str(s): b for s, b in budgets.items()},
              "grpo_episodes": played, "learning_rate_peak": peak,
              "trains": {"lora_r": profile.lora_r, "lora_alpha": profile.lora_alpha} if lora else "every weight",
              "round_groups": round_groups, "saved_dir": str(out_dir / "model"), **tally.to_dict()}
    save_control_record(out_dir, record)
    if not evaluate:
        print(f"[raft] saved, not evaluated: `python -m cells diagnose --reach --control {short.replace('_', '-')} "
              f"--run-dir {run_dir}`")
        return {"raft": record}
    return evaluate_and_pair(run_dir, profile, model, tokenizer, name, short, record, tag="raft")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cells control --raft", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", default="runs/cpu-rl")
    parser.add_argument("--train-only", action="store_true", help=TRAIN_ONLY_HELP)
    parser.add_argument("--lora", action="store_true", help=LORA_HELP)
    args = parser.parse_args(argv)
    run_raft(Path(args.run_dir), evaluate=not args.train_only, lora=args.lora)
    return 0
