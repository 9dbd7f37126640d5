"""Fast learning check (issue 10): a reduced warm start on the REAL environment must learn the job's basics.

Reduced = the cpu-smoke model shape, stage 1, English, 1,280 fresh expert episodes, 160 SFT steps of 8 through
the pipeline's own `sft_warm_start` (every weight trained, as step 15 does on CPU). It then plays held-out
stage-1 seeds greedily through the same rollout driver the evaluation uses.

Thresholds come from measurement (below), with a margin; the untrained model is measured on the same
seeds as the contrast, so a broken warm start (labels, masks, collator, template, saving) fails here.
~15-30 s on 2 CPU cores.

Measured with this procedure (seed 1234, tiny tokenizer of TINY_BUILD_VERSION 7), untrained -> warm-started on the
20 held-out seeds: valid-action share 0.00 -> 0.71, tool calls the env answered `ok` 0 -> 22 (1.1 an episode), SFT
loss 8.16 -> 1.58 (~23 s in all), held-out stage-1 success 0 -> 0 (no booking). At this size the model has no copy
pretraining, so most of its calls repeat a key (`"to":"BOM","to":"BOM",...`) and fail schema checks, and which
tool it repeats varies with the data: with 640 / 960 / 1,280 / 1,920 episodes valid was 0.61 / 0.59 / 0.71 / 0.77,
`ok` calls 53 / 34 / 22 / 71 (mostly `payment.get_token`), their share of all calls 0.58 / 0.51 / 0.23 / 0.61. The
share is therefore not asserted (under build 6 it was 0.73-0.97, with fewer calls made); the count is, with a
margin. The untrained model scores 0.00 and 0 every time. Stage-1 success
is not asserted because nothing that fits in ~2 minutes here reaches it: a never-pretrained model first needs
copy pretraining (`cells.training.induction`, ~1,700 steps / ~2.4 min before the loss drops) to copy the payment
token and ids out of tool results, and then ~15 minutes of SFT; the cpu-learn run's held-out checkpoints were
33% / 33% / 87% / 95% success at 6 / 11 / 16 / 22 minutes of SFT (README, "The learning run"), 3.3% at 2.7 min of
SFT after copy pretraining in a shorter run. `tests/test_step_15_train_stage1.py` covers the copy pretraining and
search drills that make it book.
"""

from __future__ import annotations

import dataclasses
import os
import time

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from cells.step_02_profiles import get_profile

HELD_OUT = 20  # stage-1 English seeds from the evaluation range, five per goal domain
EPISODES = 1280  # 160 SFT steps of 8


@dataclasses.dataclass(frozen=True)
class Played:
    valid_share: float
    ok_calls_per_episode: float
    success: float
    booked: float


def play(model, tok, seeds):
    from cells.agent.rollout import rollout_batch
    from cells.step_10_env import DriftCallEnv

    result = rollout_batch([DriftCallEnv(1, {"en": 1.0}) for _ in seeds], list(seeds), model=model, tokenizer=tok,
                           greedy=True, max_new_tokens_per_turn=64, max_episode_tokens=768)
    eps = result.episodes
    turns = sum(e.turns_used for e in eps)
    calls = [r for e in eps for r in e.results]
    return Played(
        valid_share=(turns - sum(e.parse_failures for e in eps)) / max(1, turns),
        ok_calls_per_episode=sum(1 for r in calls if r.status.value == "ok") / len(eps),
        success=sum(1 for e in eps if e.rewards.r_task == 1.0) / len(eps),
        booked=sum(1 for e in eps if e.bookings) / len(eps),
    )


@pytest.mark.slow
def test_reduced_warm_start_learns_valid_actions_and_working_tool_calls(tmp_path):
    from cells.modeling.tiny import build_or_load_tiny
    from cells.step_07_tasks import eval_seeds
    from cells.training.sft_data import EpisodePlanItem, generate_conversations, tokenize_all
    from cells.training.warm_start import sft_warm_start

    t0 = time.perf_counter()
    profile = get_profile("cpu-smoke")
    model, tok, _ = build_or_load_tiny(profile.tiny, tmp_path / "tiny", profile.seed)
    tok.padding_side = "left"
    seeds = eval_seeds(HELD_OUT, 1, "en")
    untrained = play(model, tok, seeds)

    data = tokenize_all(tok, generate_conversations([EpisodePlanItem(1, EPISODES, (("en", 1.0),), profile.seed)]))
    result = sft_warm_start(model, tok, data, tmp_path / "ws", learning_rate=5e-3, batch_size=8, seed=profile.seed,
                            lr_scheduler_type="cosine", warmup_ratio=0.1, disable_tqdm=True)
    trained = play(model, tok, seeds)
    print(f"\nlearning check ({time.perf_counter() - t0:.0f}s, {result.tokens_per_s:,.0f} training tokens/s): "
          f"untrained {untrained} -> warm-started {trained}; loss {result.losses[0]:.2f} -> {result.losses[-1]:.2f}")

    assert result.full_model and result.steps == EPISODES // 8
    assert result.losses[-1] <= result.losses[0] - 3.0  # measured 8.16 -> 1.58 (7.90-8.45 -> 1.26-2.32)
    assert untrained.valid_share <= 0.05 and untrained.ok_calls_per_episode == 0.0  # measured 0.00 / 0
    assert trained.valid_share >= 0.4  # measured 0.71 (0.59-0.77 over the sizes in the docstring)
    assert trained.ok_calls_per_episode >= 0.5  # measured 1.1 (1.1-3.6)
