"""The warm start's development gate: SFT continues while the model's development success is below a target and
still rising, within a set number of extra rounds.

Why: GRPO reinforces what the policy already samples, so a warm start that came out weak (the same
recipe and data, another seed) leaves most of GRPO's groups without a success to reinforce, and GRPO adds little
on it. Choosing the best of the SFT run's own checkpoints cannot mend that: with a cosine schedule the last one is
the best and a weak run is weak at every checkpoint. More SFT does: the SFT-only control, which continues the same
SFT, still gains on such a seed. So after the planned SFT the model plays `warm_start_dev_cases` development
cases greedily, and while their success is below `sft_extend_target` and rose by at least `MIN_GAIN` since the
last round (the first round always runs), it trains one more round of `sft_extend_share` x `sft_episodes` fresh
conversations (the warm start's recipe, on seeds it never used), a cosine schedule peaking at
`CONTINUED_SFT_LR_SHARE` of the SFT learning rate (as the SFT-only control's), up to `sft_extend_rounds` rounds.

Development cases come from the probe range at `DEV_CASES_FROM` (after the probe's own cases and `diagnose`'s
`--dev` and `--reach` cases): the held-out evaluation seeds never choose anything.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

DEV_CASES_FROM = 60_000  # probe-range index of the gate's first case (diagnose: --dev 20,000, --reach 40,000)
MIN_GAIN = 0.02  # a round that raised development success by less than this ends the extension (it flattened)
EXTENSION_SEED_BLOCK = 6  # SFT seed blocks 0-2: the warm start; 3-5: the SFT-only control; 6: these rounds
ROUND_STAGE_STRIDE = 5_000_000  # seeds of round r, stage s start at block 6 + (3r + s - 1) x this (12 fit a block)


@dataclass(frozen=True)
class GateRound:
    """One development check: after `extra_examples` conversations of extension (0: the planned SFT alone)."""

    round: int
    extra_examples: int
    dev_success: float
    seconds: float  # SFT seconds of the extension so far (development plays excluded)
    decision: str  # "target reached" | "flattened" | "extend" | "rounds spent"


def dev_cases(n: int) -> tuple[Any, ...]:
    """`n` development cases, stages 1-3 in turn, from the probe range at `DEV_CASES_FROM`."""
    from cells.evaluation.runner import probe_cases

    return probe_cases(n, start=DEV_CASES_FROM)


def dev_success(profile: Any, model: Any, tokenizer: Any, n: int) -> float:
    """Greedy success of `model` on `dev_cases(n)` with the profile's generation knobs."""
    from cells.evaluation.runner import make_spec, run_model

    cases = dev_cases(n)
    records = run_model("warm_start_gate", model, tokenizer, cases, make_spec(profile, cases, sampled_trials=0),
                        greedy=True, trial=0)
    return sum(r.success for r in records) / len(records)


def decide(success: float, previous: float | None, target: float, round_: int, rounds: int) -> str:
    """What the gate does after a development check (see the module docstring)."""
    if success >= target:
        return "target reached"
    if previous is not None and success - previous < MIN_GAIN:
        return "flattened"
    return "extend" if round_ < rounds else "rounds spent"


def extension_conversations(profile: Any, round_: int) -> list[list[dict[str, Any]]]:
    """Round `round_`'s fresh conversations: `sft_extend_share` x `sft_episodes`, split over the warm start's
    stages and recipe, on seeds neither the warm start nor the SFT-only control uses."""
    from cells.training.sft_data import generate_conversations, sft_plan_item, stage_split

    n = max(1, round(profile.sft_extend_share * profile.sft_episodes))
    plan = [sft_plan_item(profile, count, stage, EXTENSION_SEED_BLOCK,
                          offset=(3 * round_ + stage - 1) * ROUND_STAGE_STRIDE)
            for stage, count in stage_split(n, profile.sft_stages) if count]
    return generate_conversations(plan, progress=n >= 500)


def extend_warm_start(profile: Any, model: Any, tokenizer: Any, out: Any) -> list[GateRound]:
    """Run the gate on the freshly warm-started `model` (trained in place); the rounds it took, in order."""
    import time

    from cells.training.sft_data import tokenize_all
    from cells.training.warm_start import CONTINUED_SFT_LR_SHARE, sft_warm_start

    rounds: list[GateRound] = []
    previous: float | None = None
    extra, seconds = 0, 0.0
    for round_ in range(profile.sft_extend_rounds + 1):
        model.eval()
        success = dev_success(profile, model, tokenizer, profile.warm_start_dev_cases)
        model.train()
        decision = decide(success, previous, profile.sft_extend_target, round_, profile.sft_extend_rounds)
        rounds.append(GateRound(round_, extra, success, round(seconds, 1), decision))
        print(f"[warm start gate] round {round_}: development success {100 * success:.1f}% on "
              f"{profile.warm_start_dev_cases} cases after {extra:,} extra conversations: {decision}")
        if decision != "extend":
            break
        conversations = extension_conversations(profile, round_)
        dataset = tokenize_all(tokenizer, conversations, progress=True)
        t0 = time.perf_counter()
        sft_warm_start(model, tokenizer, dataset, out, learning_rate=profile.sft_learning_rate * CONTINUED_SFT_LR_SHARE,
                       batch_size=profile.sft_batch_size or profile.num_generations, seed=profile.seed + round_ + 1,
                       use_cpu=profile.is_cpu, bf16=profile.precision == "bf16", fp16=profile.precision == "fp16",
                       lr_scheduler_type="cosine", max_length=profile.max_prompt_tokens + profile.max_episode_tokens)
        seconds += time.perf_counter() - t0
        extra += len(conversations)
        previous = success
    return rounds


def rounds_to_dicts(rounds: list[GateRound]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rounds]
