"""The failure curriculum: GRPO on the training seeds the policy fails.

A warm start that already solves most episodes greedily gives GRPO little to learn from on the seeds it
solves (its samples solve them too: every reward in the group equal, or nearly), and the few it fails are
where the held-out failures are. With `profile.grpo_failure_candidates = N`, each stage first plays N of its
training seeds greedily with the current policy and trains on the ones it fails (cycled), so every group is
drawn where a sample can beat the greedy play. The list is saved as `training/stage<n>/failure_seeds.json`
and reused when the stage resumes, so an interrupted stage trains on the same seeds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SEEDS_FILE = "failure_seeds.json"
BATCH = 64  # episodes per batched greedy rollout


def failing_seeds(model: Any, tokenizer: Any, profile: Any, env_factory: Any, seeds: list[int]) -> list[int]:
    """The seeds of `seeds` whose greedy episode (the profile's generation knobs, `env_factory`'s envs) does not
    complete the task (`r_task < 1`), in order."""
    from cells.agent.rollout import GenerationSpec, rollout_batch
    from cells.step_08_rewards import rewards_of

    spec = GenerationSpec.for_profile(profile, greedy=True)
    failed = []
    for start in range(0, len(seeds), BATCH):
        chunk = seeds[start:start + BATCH]
        result = rollout_batch([env_factory() for _ in chunk], chunk, model=model, tokenizer=tokenizer, generation=spec)
        failed += [seed for seed, episode in zip(chunk, result.episodes, strict=True) if rewards_of(episode).r_task < 1]
    return failed


def stage_failure_seeds(model: Any, tokenizer: Any, profile: Any, env_factory: Any, first_seed: int,
                        stage_dir: Path) -> tuple[int, ...]:
    """The stage's curriculum seeds: saved ones if the stage has started before with the same candidates, else
    mined now from the `profile.grpo_failure_candidates` seeds from `first_seed` (and saved). () when the knob
    is 0 or the policy fails none of them (the stage then trains on every seed in order)."""
    from cells.distributed import is_main_process, main_process_first

    candidates = profile.grpo_failure_candidates
    if candidates <= 0:
        return ()
    path = Path(stage_dir) / SEEDS_FILE
    wanted = {"candidates": candidates, "first_seed": first_seed}
    with main_process_first():  # several processes: the main one mines and saves, the others read its list
        saved = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        if {k: saved.get(k) for k in wanted} != wanted:
            was_training = model.training
            model.eval()
            failed = failing_seeds(model, tokenizer, profile, env_factory, list(range(first_seed, first_seed + candidates)))
            model.train(was_training)
            saved = {**wanted, "failed": failed}
            if is_main_process():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(saved), encoding="utf-8")
    print(f"[failures] stage curriculum: {len(saved['failed'])} of {saved['candidates']} training seeds failed "
          f"greedily; the stage trains on those")
    return tuple(saved["failed"])
