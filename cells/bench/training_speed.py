"""`python -m cells bench train --profile cpu-learn`: training throughput of the profile's model.

Prints, from one process (ratios hold even when the machine is shared and absolute numbers are noisy):

1. SFT training tokens/s (real, unpadded tokens per second of `trainer.train()`) of the warm start exactly
   as step 15 runs it (`sft_warm_start`: every weight trained, length-grouped batches, right padding
   without a padding mask, the LM head applied to labelled positions only), alternating with the same
   data through TRL's stock `SFTTrainer` path (its chunked fused LM head over every position, gradient
   checkpointing on, TRL's padding collator): the reference our changes are measured against.
   On a machine shared with other jobs both figures swing by 2-3x from minute to minute; compare them
   only within one run, and rerun when the machine is quiet for absolute numbers.
2. GRPO seconds per step of `DriftCallGRPOTrainer` (G multi-turn episodes on the real env) on the model
   the SFT part just trained, its rollout generated tokens/s (model tokens per second of rollout) and its
   decoding steps (forward calls that sampled a token; plain TRL's is its completion length); then the same
   steps with the LoRA played unmerged (`cells.agent.merged`: rollouts merge it on the CPU). With the default
   20 SFT steps that model still writes mostly invalid actions, so its turns tend to run to the per-turn cap:
   the episodes' shape, not a trained policy's.
3. The floor: plain `trl.GRPOTrainer`, single-turn completions with as many generated tokens as our mean
   episode (`min_new_tokens` = `max_completion_length`), same model, same G; printed as the ratio of our
   seconds per generated token to its (target <= 1.5).

Time on 2 CPU cores: ~3-6 min for cpu-learn with the defaults (`--sft-steps`, `--grpo-steps` change it);
`--model-dir DIR` times GRPO and the floor on a saved warm start instead (episodes of a trained policy's shape).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cells.errors import DriftCallError

IGNORE_INDEX = -100


class ModelVocabularyError(DriftCallError, ValueError):
    """A saved model whose vocabulary is not the profile tokenizer's (its token ids would mean other strings)."""


@dataclasses.dataclass(frozen=True)
class TrainBench:
    """One `bench train` run's numbers."""

    profile: str
    params: int
    sft_tokens_per_s: float
    sft_padding_share: float
    sft_stock_tokens_per_s: float
    grpo_seconds_per_step: float
    rollout_tokens_per_s: float
    model_tokens_per_step: float
    floor_seconds_per_step: float
    floor_tokens_per_step: float
    decode_steps_per_step: float = 0.0  # rollout forward calls that sampled a token (RolloutResult.decode_steps)
    floor_decode_steps_per_step: float = 0.0  # plain TRL: one generate of max_completion_length tokens
    grpo_unmerged_seconds_per_step: float = 0.0  # ours with the LoRA played unmerged (`cells.agent.merged`)
    rollout_unmerged_tokens_per_s: float = 0.0
    rollout_share: float = 0.0  # of a GRPO step's wall time: the episodes' play (resampled groups included)

    @property
    def ratio_per_generated_token(self) -> float:
        ours = self.grpo_seconds_per_step / max(1.0, self.model_tokens_per_step)
        floor = self.floor_seconds_per_step / max(1.0, self.floor_tokens_per_step)
        return ours / floor if floor > 0 else float("nan")

    def lines(self) -> list[str]:
        stock_ratio = self.sft_tokens_per_s / max(1e-9, self.sft_stock_tokens_per_s)
        return [
            f"profile {self.profile}: {self.params:,} parameters, all trained by the warm start",
            f"SFT training tokens/s:                 {self.sft_tokens_per_s:>9,.0f}   "
            f"(padding: {100 * self.sft_padding_share:.1f}% of batch cells)",
            f"  same data, stock TRL SFTTrainer:     {self.sft_stock_tokens_per_s:>9,.0f}   "
            f"(ours: x{stock_ratio:.2f})",
            f"GRPO seconds per step (multi-turn):    {self.grpo_seconds_per_step:>9.1f}   "
            f"({self.model_tokens_per_step:,.0f} generated tokens per step)",
            f"GRPO steps per minute:                 {60 / max(1e-9, self.grpo_seconds_per_step):>9.1f}   "
            f"(rollout: {100 * self.rollout_share:.0f}% of a step; the rest is scoring, loss and optimiser)",
            f"rollout generated tokens/s:            {self.rollout_tokens_per_s:>9,.0f}   "
            f"(LoRA merged for play; unmerged: {self.rollout_unmerged_tokens_per_s:,.0f} tokens/s, "
            f"{self.grpo_unmerged_seconds_per_step:.1f} s/step)",
            f"decoding steps per GRPO step:          {self.decode_steps_per_step:>9,.0f}   "
            f"(plain TRL: {self.floor_decode_steps_per_step:,.0f})",
            f"plain TRL GRPOTrainer, single-turn:    {self.floor_seconds_per_step:>9.1f}   s/step "
            f"({self.floor_tokens_per_step:,.0f} generated tokens per step)",
            f"ours / plain TRL, per generated token: x{self.ratio_per_generated_token:.2f} (target <= 1.5)",
        ]

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "ratio_per_generated_token": self.ratio_per_generated_token}


class CountingCollator:
    """Wrap a collator that returns a real attention mask; count tokens the way `RightPadCollator` does."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.tokens = self.labelled = self.padded = 0

    def __call__(self, examples: Any) -> Any:
        batch = self.inner(examples)
        self.tokens += int(batch["attention_mask"].sum())
        self.labelled += int((batch["labels"] != IGNORE_INDEX).sum())
        self.padded += batch["input_ids"].numel()
        return batch


def bench_sft(model: Any, tok: Any, dataset: Any, profile: Any, steps: int, out: Path,
              rounds: int = 2) -> tuple[float, float, float]:
    """(tokens/s, padding share) of the pipeline's warm start, and tokens/s of stock TRL on the same data.

    The two alternate in `rounds` rounds of `steps // rounds` steps each, so a burst of load from other
    processes on a shared machine hits both; each figure is total tokens over total seconds. The pipeline's
    rounds train `model` itself (it leaves warm-started), TRL's rounds a copy of it.
    """
    import copy

    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    from cells.training.sft_data import RightPadCollator
    from cells.training.warm_start import sft_warm_start

    per_round = max(1, steps // rounds)

    def run(m: Any, collator: Any, labelled_loss: bool) -> float:
        extra = {} if labelled_loss else {"activation_checkpointing": True}  # TRL's SFTConfig default
        result = sft_warm_start(m, tok, dataset, out, learning_rate=profile.sft_learning_rate,
                                batch_size=profile.sft_batch_size or profile.num_generations, seed=profile.seed,
                                lr_scheduler_type=profile.sft_lr_scheduler, warmup_ratio=profile.sft_warmup_ratio,
                                collator=collator, max_steps=per_round, disable_tqdm=True, logging_steps=per_round,
                                labelled_loss=labelled_loss, **extra)
        return result.seconds

    ours = RightPadCollator(tok.pad_token_id)
    stock = CountingCollator(DataCollatorForLanguageModeling(pad_token_id=tok.pad_token_id))
    ours_s = stock_s = 0.0
    for _ in range(rounds):
        ours_s += run(model, ours, True)
        stock_s += run(copy.deepcopy(model), stock, False)
    return ours.tokens / ours_s, 1 - ours.tokens / max(1, ours.padded), stock.tokens / stock_s


def bench_grpo(ctx: Any, steps: int) -> tuple[float, float, float, float, float]:
    """(seconds per step, rollout tokens/s, generated tokens per step, decoding steps per step, rollout share of a
    step) of DriftCallGRPOTrainer, stage 1."""
    from cells.training.grpo_stage import build_stage_trainer
    from cells.training.stages import curriculum_max_steps

    # the failure curriculum's greedy mining happens before the first step: not what a step costs
    ctx.profile = dataclasses.replace(ctx.profile, steps_per_stage=(steps, 0, 0), grpo_failure_candidates=0)
    assert curriculum_max_steps(ctx) == steps
    trainer = build_stage_trainer(ctx, 1, Path(ctx.run_dir) / "grpo", [])
    trainer.args.save_strategy = "no"
    trainer.args.disable_tqdm = True
    t0 = time.perf_counter()
    trainer.train()
    seconds = (time.perf_counter() - t0) / steps
    logs = [h for h in trainer.state.log_history if "rollout/tokens_per_s" in h]
    rate = sum(h["rollout/tokens_per_s"] for h in logs) / len(logs)
    episodes = ctx.profile.num_generations * ctx.profile.prompts_per_step  # one step's batch
    tokens = sum(h["rollout/model_tokens_mean"] for h in logs) / len(logs) * episodes
    decode_steps = sum(h.get("rollout/decode_steps", 0.0) for h in logs) / len(logs)
    rollout_share = sum(h.get("rollout/seconds", 0.0) for h in logs) / len(logs) / seconds
    return seconds, rate, tokens, decode_steps, rollout_share


def bench_floor(model: Any, tok: Any, profile: Any, completion_tokens: int, steps: int, out: Path) -> tuple[float, float]:
    """(seconds per step, generated tokens per step) of plain TRL GRPOTrainer, single-turn, same prompts."""
    from datasets import Dataset
    from trl import GRPOTrainer

    from cells.agent.chat import render_initial_prompt
    from cells.step_07_tasks import generate
    from cells.step_13_grpo_config import build_grpo_config

    weights = dict(profile.language_weights[0])
    prompts = [render_initial_prompt(tok, generate(seed=s, stage=1, language_weights=weights)) for s in range(steps)]
    config = build_grpo_config(profile, 1, out, max_steps=steps, save_strategy="no", disable_tqdm=True,
                               max_completion_length=completion_tokens,
                               generation_kwargs={"min_new_tokens": completion_tokens})

    def zero(completions: Any, **_: Any) -> list[float]:
        return [0.0] * len(completions)

    trainer = GRPOTrainer(model=model, reward_funcs=zero, args=config, processing_class=tok,
                          train_dataset=Dataset.from_dict({"prompt": prompts}))
    t0 = time.perf_counter()
    trainer.train()
    seconds = (time.perf_counter() - t0) / steps
    return seconds, float(completion_tokens * profile.num_generations * profile.prompts_per_step)


def load_played_model(model_dir: str | Path, tokenizer: Any) -> Any:
    """A saved full model (e.g. a run's `training/warm_start/model`) for the GRPO timings; its vocabulary must be
    the profile tokenizer's (the tiny tokenizer is rebuilt from the project's corpus, as that run built it)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    if model.config.vocab_size != len(tokenizer):
        raise ModelVocabularyError(f"{model_dir}: vocabulary of {model.config.vocab_size} tokens, but the profile's tokenizer has "
                         f"{len(tokenizer)}; pass a model trained with this profile and corpus, or no --model-dir")
    return model


def run_bench(profile_name: str, sft_episodes: int, sft_steps: int, grpo_steps: int,
              model_dir: str | None = None) -> TrainBench:
    """Everything above on a throwaway run directory; `model_dir`: time GRPO and the floor on that saved model
    instead of the one the SFT timing trained (a warm start plays episodes of their real shape)."""
    from cells.agent.merged import unmerged_play
    from cells.pipeline import make_context
    from cells.step_02_profiles import get_profile
    from cells.step_12_model import attach_adapter, boot_model, count_parameters
    from cells.step_15_train_stage1 import warm_start_conversations
    from cells.training.sft_data import tokenize_all
    from cells.training.stages import drop_reference_adapter

    profile = dataclasses.replace(get_profile(profile_name), sft_episodes=sft_episodes)
    with tempfile.TemporaryDirectory(prefix="bench_train_") as tmp:
        ctx = make_context(profile_name, tmp)
        ctx.profile = profile
        model, tok = boot_model(profile, tmp)
        params = count_parameters(model).total
        dataset = tokenize_all(tok, warm_start_conversations(ctx), progress=True)
        sft, padding, stock_rate = bench_sft(model, tok, dataset, profile, sft_steps, Path(tmp) / "sft")
        if model_dir is not None:
            model = load_played_model(model_dir, tok)
        ctx.model, ctx.tokenizer = (model if hasattr(model, "peft_config") else attach_adapter(model, profile)), tok
        grpo_s, rollout_rate, tokens, decode_steps, rollout_share = bench_grpo(ctx, grpo_steps)
        drop_reference_adapter(ctx.model)  # each trainer adds its own frozen `ref` copy
        with unmerged_play():  # the same steps with the adapter's operations in every decoding step
            unmerged_s, unmerged_rate, _, _, _ = bench_grpo(ctx, grpo_steps)
        mean_completion = max(1, round(tokens / (profile.num_generations * profile.prompts_per_step)))
        drop_reference_adapter(ctx.model)  # the plain trainer adds its own frozen `ref` copy
        floor_s, floor_tokens = bench_floor(ctx.model, tok, profile, mean_completion, grpo_steps, Path(tmp) / "floor")
    return TrainBench(profile_name, params, sft, padding, stock_rate, grpo_s, rollout_rate, tokens, floor_s, floor_tokens,
                      decode_steps, float(mean_completion), unmerged_s, unmerged_rate, rollout_share)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m cells bench train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="cpu-learn")
    parser.add_argument("--sft-episodes", type=int, default=240, help="fresh expert episodes generated for the SFT timing")
    parser.add_argument("--sft-steps", type=int, default=20, help="SFT optimiser steps timed (each collator)")
    parser.add_argument("--grpo-steps", type=int, default=2, help="GRPO steps timed (ours, then plain TRL)")
    parser.add_argument("--model-dir", default=None,
                        help="a saved full model to time GRPO on, e.g. runs/cpu-learn/training/warm_start/model "
                             "(default: the model the SFT timing trained)")
    args = parser.parse_args(argv)
    with contextlib.redirect_stdout(sys.stderr):  # the trainers' log lines: progress, not the bench's result
        bench = run_bench(args.profile, args.sft_episodes, args.sft_steps, args.grpo_steps, args.model_dir)
    for line in bench.lines():
        print(line)
    return 0
