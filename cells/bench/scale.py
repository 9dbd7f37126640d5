"""`python -m cells bench scale`: GRPO throughput of one process against N (same global batch), one run.

    python -m cells bench scale [--profile cpu-learn --processes 2 --steps 4 --rounds 2 --model-dir DIR]

Each measurement is a real `DriftCallGRPOTrainer` stage on the real env (stage 2, the profile's G, prompts per
step, turn caps and model), launched as `python -m cells.bench.scale worker` for one process and
through `accelerate launch --multi_gpu --num_processes N` for N (the launcher `docs/scaling.md` documents; on a
machine without a GPU it starts N gloo processes). The global batch is the same in both (`build_grpo_config`
splits it), so seconds per optimiser step compare directly; the first step is warm-up and not counted. One
process gets every core's threads, each of N processes 1/N of them. Rounds alternate the two so load from
other jobs hits both alike.

`--model-dir`: a saved full model (e.g. a run's `training/warm_start/model`), so episodes run their real
length; by default the profile's untrained tiny model, whose episodes end after three invalid turns.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

STAGE = 2


def worker(out: Path, profile_name: str, steps: int, model_dir: str | None) -> None:
    """One GRPO stage of `steps` steps in this process (or in each launched one); rank 0 writes `out/result.json`."""
    import torch
    from transformers import Gemma3ForCausalLM, TrainerCallback

    from cells.agent.groups import rollout_group_fn_for_profile
    from cells.distributed import (
        end_other_process,
        is_main_process,
        launched_processes,
        leave_process_group,
        main_process_first,
    )
    from cells.step_02_profiles import TRAIN_SEEDS, get_profile
    from cells.step_07_tasks import generate
    from cells.step_10_env import stage_env_factories
    from cells.step_12_model import attach_adapter, boot_model
    from cells.step_13_grpo_config import build_grpo_config, reward_fn
    from cells.step_14_trainer import EpisodeDatasetAdapter, make_driftcall_grpo_trainer_cls

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // launched_processes()))
    profile = get_profile(profile_name)
    with main_process_first():
        base, tokenizer = boot_model(profile, out / "model_cache")
    if model_dir is not None:
        base = Gemma3ForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model = attach_adapter(base.unload() if hasattr(base, "peft_config") else base, profile)
    env_factory = stage_env_factories(profile)[STAGE]
    data = EpisodeDatasetAdapter(task_gen=generate, env_factory=env_factory, stage=STAGE,
                                 stage_base_seed=TRAIN_SEEDS.seed(0), language_weights=profile.languages_for_stage(STAGE),
                                 tokenizer=tokenizer)
    config = build_grpo_config(profile, STAGE, out / "trainer", max_steps=steps, save_strategy="no", disable_tqdm=True)
    stamps: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            stamps.append(time.perf_counter())

    trainer = make_driftcall_grpo_trainer_cls()(
        model=model, args=config, train_dataset=data, processing_class=tokenizer,
        rollout_group_fn=rollout_group_fn_for_profile(profile), env_factory=env_factory, reward_fn_driftcall=reward_fn,
        enable_adaptive_kl=False, callbacks=[Clock()])
    t0 = time.perf_counter()
    trainer.train()
    tokens = [h["rollout/model_tokens_mean"] for h in trainer.state.log_history if "rollout/model_tokens_mean" in h]
    if is_main_process():
        (out / "result.json").write_text(json.dumps({
            "processes": launched_processes(), "episodes_per_step": profile.prompts_per_step * profile.num_generations,
            "step_seconds": [b - a for a, b in zip([t0, *stamps], stamps, strict=False)],
            "model_tokens_per_episode": sum(tokens) / max(1, len(tokens))}))
    leave_process_group()
    end_other_process()


def measure(processes: int, profile: str, steps: int, model_dir: str | None) -> dict[str, Any]:
    """Run the worker under `processes` processes; its result plus seconds per step after the warm-up step."""
    from cells.distributed import launch_command

    with tempfile.TemporaryDirectory() as tmp:
        args = ["-m", "cells.bench.scale", "worker", tmp, profile, str(steps), model_dir or ""]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        env.pop("WORLD_SIZE", None)
        if processes > 1:
            env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // processes))
        done = subprocess.run(launch_command(processes, *args), env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{processes}-process run failed:\n{done.stderr[-3000:]}")
        result = json.loads((Path(tmp) / "result.json").read_text())
    timed = result["step_seconds"][1:] or result["step_seconds"]
    return {**result, "seconds_per_step": sum(timed) / len(timed)}


def main(argv: list[str]) -> int:
    if argv[:1] == ["worker"]:
        out, profile, steps, model_dir = argv[1:5]
        worker(Path(out), profile, int(steps), model_dir or None)
        return 0
    parser = argparse.ArgumentParser(prog="python -m cells bench scale", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="cpu-learn")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4, help="GRPO steps per measurement (the first is warm-up)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating 1-process / N-process measurements")
    parser.add_argument("--model-dir", default=None, help="a saved full model to start from (default: untrained)")
    args = parser.parse_args(argv)
    rows: dict[int, list[dict[str, Any]]] = {1: [], args.processes: []}
    for _ in range(args.rounds):
        for n in rows:
            rows[n].append(measure(n, args.profile, args.steps, args.model_dir))
            print(f"  {n} process(es): {rows[n][-1]['seconds_per_step']:.2f} s/step", flush=True)
    print(f"profile {args.profile}, stage {STAGE}, {rows[1][0]['episodes_per_step']} episodes per optimiser step "
          f"(the global batch), {args.steps - 1} timed steps x {args.rounds} rounds, {os.cpu_count()} CPUs")
    print(f"{'processes':>9} {'s/step':>8} {'episodes/s':>11} {'model tokens/episode':>21}")
    per_step = {}
    for n, results in rows.items():
        per_step[n] = sum(r["seconds_per_step"] for r in results) / len(results)
        tokens = sum(r["model_tokens_per_episode"] for r in results) / len(results)
        print(f"{n:>9} {per_step[n]:>8.2f} {results[0]['episodes_per_step'] / per_step[n]:>11.2f} {tokens:>21.0f}")
    print(f"speed-up of {args.processes} processes over 1: {per_step[1] / per_step[args.processes]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

