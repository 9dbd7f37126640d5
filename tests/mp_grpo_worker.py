"""One GRPO step of `DriftCallGRPOTrainer` on the tiny model, as one process or as each of several.

    python tests/mp_grpo_worker.py OUT_DIR TINY_CACHE                     # one process
    accelerate launch --multi_gpu --num_processes 2 ... tests/mp_grpo_worker.py OUT_DIR TINY_CACHE

The global generation batch is the same however many processes run (`build_grpo_config` divides it):
1 prompt x G=4 episodes, so with 2 processes each holds half a group. Each process writes
`rank<k>.json` (its rows, episode texts, rewards, advantages); rank 0 also writes the LoRA weights before
and after the step (`lora.pt`). `tests/test_step_14_multiprocess.py` compares the two runs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))  # toy_env
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # cells, when run as a script

G = 4
STAGE_BASE_SEED = 10


def vowel_share(text: str) -> float:
    """A graded reward an untrained model's samples always spread on (digits are too rare)."""
    letters = [c for c in text.lower() if c.isalpha()]
    return sum(c in "aeiou" for c in letters) / len(letters) if letters else 0.0


def main(out: Path, cache: Path) -> None:
    import torch
    from peft import get_peft_model
    from toy_env import ToyEnv, toy_goal

    from cells import step_14_trainer as s14
    from cells.agent.groups import make_rollout_group_fn
    from cells.distributed import leave_process_group, wait_for_everyone
    from cells.modeling.tiny import build_or_load_tiny, corpus_texts
    from cells.step_02_profiles import get_profile
    from cells.step_12_model import lora_config
    from cells.step_13_grpo_config import build_grpo_config, reward_fn

    profile = dataclasses.replace(get_profile("cpu-smoke"), num_generations=G, prompts_per_step=1)
    base, tok, _ = build_or_load_tiny(profile.tiny, cache, 0, texts=corpus_texts(include_fixtures=False))
    torch.manual_seed(0)  # LoRA init; DDP also broadcasts rank 0's weights
    model = get_peft_model(base, lora_config(profile))
    cfg = build_grpo_config(profile, 1, out / "trainer", max_steps=1, beta=0.04, learning_rate=1e-2,
                            save_strategy="no", disable_tqdm=True)

    def env_factory() -> ToyEnv:
        return ToyEnv(turns=2, scorer=vowel_share)

    seen: dict[str, list] = {"rows": [], "texts": [], "rewards": [], "advantages": []}

    def recording_reward_fn(**kwargs):
        rewards = reward_fn(**kwargs)
        seen["texts"] += list(kwargs["completions"])
        seen["rewards"] += [float(r) for r in rewards]
        return rewards

    data = s14.EpisodeDatasetAdapter(task_gen=toy_goal, env_factory=env_factory, stage=1,
                                     stage_base_seed=STAGE_BASE_SEED, language_weights={"en": 1.0}, tokenizer=tok)
    trainer = s14.make_driftcall_grpo_trainer_cls()(
        model=model, args=cfg, train_dataset=data, processing_class=tok,
        rollout_group_fn=make_rollout_group_fn(max_new_tokens_per_turn=8, max_episode_tokens=64),
        env_factory=env_factory, reward_fn_driftcall=recording_reward_fn)
    def lora() -> dict:
        return {n: p.detach().cpu().clone() for n, p in trainer.model.named_parameters() if "lora_" in n}

    before = lora()
    generate = trainer._generate_and_score_completions

    def recording_generate(inputs):
        seen["rows"] += [int(r["step"]) for r in inputs]
        batch = generate(inputs)
        seen["advantages"] += batch["advantages"].tolist()
        return batch

    trainer._generate_and_score_completions = recording_generate
    trainer.train()
    rank, world = trainer.accelerator.process_index, trainer.accelerator.num_processes
    if rank == 0:
        torch.save({"before": before, "after": lora()}, out / "lora.pt")
    joined = torch.distributed.is_initialized()
    leave_process_group()
    wait_for_everyone()  # after leaving: a no-op, not a barrier on a destroyed group
    left = joined and not torch.distributed.is_initialized()
    (out / f"rank{rank}.json").write_text(json.dumps({"world": world, "left_group": left, **seen}))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
