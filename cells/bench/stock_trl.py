"""`python -m cells bench trl --run-dir runs/cpu-learn`: TRL's stock GRPOTrainer on `DriftCallToolEnv`, against ours.

From a run's saved warm start (`<run-dir>/training/warm_start/model`, with the tokenizer that run built):

1. Speed: GRPO seconds per step of DriftCall's trainer (`DriftCallGRPOTrainer`, stage 1, as `bench train` times
   it) and of TRL's unmodified `GRPOTrainer(environment_factory=DriftCallToolEnv)` (stage-1 rows of
   `seed_dataset`), each on the warm start with a fresh LoRA of the profile's shape, the profile's G and episodes
   per step, `--speed-steps` steps each, alternating in one process (ratios hold on a shared machine).
2. Learning: TRL's `GRPOTrainer` + `DriftCallToolEnv` for `--steps` steps on training seeds of stages 2 and 3 in
   turn (drift: where a warm start fails most), the profile's GRPO config (`build_grpo_config`: learning rate,
   G, episodes per step, fixed beta 0.04: stock TRL has no adaptive KL), then held-out success before and after,
   greedy, on `eval_plan(--eval-per-cell)`, paired on identical seeds.

The tokenizer gets the tool-calling template (`cells.trl_env.with_tool_calling`), under which a conversation renders
as DriftCall's own rollouts render it, so the warm start plays through TRL as it was trained; evaluation plays
through DriftCall's rollout driver with the model's own template, for both models.

Time on 2 CPU cores: ~15-25 min with the defaults (the learning steps dominate).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cells.errors import DriftCallError


class BenchInputError(DriftCallError, ValueError):
    """The run directory holds no saved warm start."""


def _load(model_dir: Path) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)


def stock_trainer(model: Any, tokenizer: Any, profile: Any, rows: Any, out: Path, steps: int) -> Any:
    """TRL's unmodified GRPOTrainer on `DriftCallToolEnv`, with the profile's GRPO config and a fresh LoRA."""
    from trl import GRPOTrainer

    from cells.step_12_model import lora_config
    from cells.step_13_grpo_config import build_grpo_config
    from cells.trl_env import DriftCallToolEnv, driftcall_reward

    config = build_grpo_config(profile, 1, out, max_steps=steps, save_strategy="no", disable_tqdm=True,
                               max_tool_calling_iterations=max(profile.turn_budgets),
                               generation_kwargs={"max_new_tokens": profile.max_new_tokens_per_turn})
    return GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=driftcall_reward, args=config,
                       train_dataset=rows, environment_factory=DriftCallToolEnv, peft_config=lora_config(profile))


def time_stock(model_dir: Path, tokenizer: Any, profile: Any, steps: int, out: Path) -> float:
    """Seconds per step of the stock trainer on stage-1 rows."""
    from cells.trl_env import seed_dataset

    trainer = stock_trainer(_load(model_dir), tokenizer, profile, seed_dataset(steps * profile.prompts_per_step, 1),
                            out, steps)
    t0 = time.perf_counter()
    trainer.train()
    return (time.perf_counter() - t0) / steps


def time_ours(model_dir: Path, tokenizer: Any, profile: Any, steps: int, out: Path) -> float:
    """Seconds per step of DriftCall's trainer, stage 1, exactly as `bench train` times it."""
    from cells.bench.training_speed import bench_grpo
    from cells.pipeline import make_context
    from cells.step_12_model import attach_adapter

    ctx = make_context(profile.name, out)
    ctx.profile = profile
    ctx.model, ctx.tokenizer = attach_adapter(_load(model_dir), profile), tokenizer
    return bench_grpo(ctx, steps)[0]


def held_out(model: Any, tokenizer: Any, profile: Any, cases: Any) -> list[Any]:
    """Greedy records of `model` on `cases` through DriftCall's rollout driver."""
    from cells.evaluation.records import record_from_episode
    from cells.evaluation.runner import play_greedy

    result = play_greedy(model, tokenizer, cases, profile)
    return [record_from_episode("model", 0, e, e.rewards) for e in result.episodes]


def learning_rows(steps: int, profile: Any) -> Any:
    """`steps` steps of rows: each step's prompts from one stage, 2 and 3 in turn, training seeds."""
    from datasets import concatenate_datasets

    from cells.trl_env import seed_dataset

    per_step = profile.prompts_per_step
    parts = [seed_dataset(per_step, stage=2 + i % 2, first=i * per_step) for i in range(steps)]
    return concatenate_datasets(parts)


def _success_line(label: str, records: list[Any]) -> str:
    by_stage = []
    for stage in (1, 2, 3):
        sel = [r for r in records if r.stage == stage]
        by_stage.append(f"{stage}: {100 * sum(r.success for r in sel) / max(1, len(sel)):.1f}%")
    overall = 100 * sum(r.success for r in records) / max(1, len(records))
    return f"{label:<34}{overall:>6.1f}%   (by stage {', '.join(by_stage)}; {len(records)} episodes)"


def warm_start_line(run_dir: Path) -> str:
    """What the run's warm start was: its data and steps (`warm_start.json`) and the knobs the run changed."""
    import json

    summary, profile = run_dir / "training" / "warm_start" / "warm_start.json", run_dir / "profile.json"
    if not summary.is_file():
        return "warm start: no warm_start.json in the run"
    training = json.loads(summary.read_text(encoding="utf-8"))["training"]
    knobs = json.loads(profile.read_text(encoding="utf-8")).get("knobs_set", []) if profile.is_file() else []
    changed = f"; the run changed {', '.join(knobs)}" if knobs else ""
    return (f"warm start: {training['examples']:,} examples, {training['steps']:,} SFT steps in "
            f"{training['seconds'] / 60:.1f} min{changed}")


def run_bench(run_dir: Path, profile_name: str, steps: int, speed_steps: int, per_cell: int) -> list[str]:
    from cells.evaluation.runner import eval_plan
    from cells.evaluation.stats import paired_difference
    from cells.modeling.tiny import CHAT_TEMPLATE
    from cells.step_02_profiles import get_profile
    from cells.trl_env import tiny_tool_model

    model_dir = run_dir / "training" / "warm_start" / "model"
    if not (model_dir / "config.json").is_file():
        raise BenchInputError(f"no saved warm start in {model_dir}: run `python -m cells run --profile {profile_name} "
                              "--steps 1-15` first")
    profile = get_profile(profile_name)
    _, tool_tokenizer = tiny_tool_model(profile_name, cache_dir=str(run_dir / "tiny_model"))
    own_tokenizer = copy.deepcopy(tool_tokenizer)
    own_tokenizer.chat_template = CHAT_TEMPLATE  # DriftCall's rollouts (and the warm start's SFT) render with it
    lines = [f"profile {profile_name}, warm start {model_dir}: G={profile.num_generations}, "
             f"{profile.prompts_per_step * profile.num_generations} episodes per step, LoRA r={profile.lora_r}",
             warm_start_line(run_dir)]
    with tempfile.TemporaryDirectory(prefix="bench_trl_") as tmp:
        ours_s = time_ours(model_dir, own_tokenizer, profile, speed_steps, Path(tmp) / "ours")
        stock_s = time_stock(model_dir, tool_tokenizer, profile, speed_steps, Path(tmp) / "stock_speed")
        lines += [f"GRPO seconds per step, stage 1 ({speed_steps} steps each, the first included):",
                  f"  DriftCall's trainer:              {ours_s:>6.1f}",
                  f"  stock TRL GRPOTrainer + factory:  {stock_s:>6.1f}   (x{stock_s / ours_s:.2f} ours; goal <= 1.5)"]
        cases = eval_plan(per_cell)
        before = held_out(_load(model_dir), own_tokenizer, profile, cases)
        trainer = stock_trainer(_load(model_dir), tool_tokenizer, profile, learning_rows(steps, profile),
                                Path(tmp) / "stock_learn", steps)
        t0 = time.perf_counter()
        trainer.train()
        train_s = time.perf_counter() - t0
        after = held_out(trainer.model.merge_and_unload(), own_tokenizer, profile, cases)
    diff = paired_difference(before, after, metric="success")["diff"]
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    lines += [f"stock TRL learning: {steps} steps on stages 2-3 training seeds in {train_s / 60:.1f} min "
              f"({train_s / steps:.1f} s/step); mean training reward first {rewards[0]:.3f}, last {rewards[-1]:.3f}",
              "held-out success, greedy:",
              _success_line("  warm start", before),
              _success_line("  after stock TRL GRPO", after),
              f"  after - before (paired, 95% CI): {100 * diff['value']:+.1f} pts "
              f"[{100 * diff['low']:+.1f}, {100 * diff['high']:+.1f}]"]
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m cells bench trl", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", default="runs/cpu-learn", help="a run with a saved warm start (steps 1-15)")
    parser.add_argument("--profile", default="cpu-learn", help="the profile whose env and generation knobs it plays")
    parser.add_argument("--steps", type=int, default=20, help="stock TRL GRPO steps for the learning measurement")
    parser.add_argument("--speed-steps", type=int, default=2, help="GRPO steps timed per trainer")
    parser.add_argument("--eval-per-cell", type=int, default=2, help="held-out episodes per (stage, language)")
    args = parser.parse_args(argv)
    with contextlib.redirect_stdout(sys.stderr):  # the trainers' log lines: progress, not the bench's result
        lines = run_bench(Path(args.run_dir), args.profile, args.steps, args.speed_steps, args.eval_per_cell)
    for line in lines:
        print(line)
    return 0
