"""Method bodies of `DriftCallGRPOTrainer` (step 14): a short coordinator over the `grpo_batch` helpers.

`generate_and_score_completions(self, inputs)` replaces TRL's method of the same name. `self` is a
`trl.GRPOTrainer` subclass carrying `rollout_group_fn`, `env_factory`, `reward_fn_driftcall` and
(optionally) `episode_dataset`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from cells.modeling.grpo_batch import (
    BatchError,
    group_advantages,
    group_rows,
    pad_trajectories,
    rollout_metrics,
)


def materialise_groups(self: Any, inputs: list[Mapping[str, Any]], num_generations: int) -> list[dict[str, Any]]:
    """One `{"prompt", "_meta"}` record per distinct prompt of the generation batch."""
    def key(row: Mapping[str, Any]) -> Any:
        return row["step"] if "step" in row else row["_meta"]["episode_seed"]

    records = []
    for row in group_rows(inputs, num_generations, key):
        if "_meta" in row:
            records.append(dict(row))
        elif self.episode_dataset is not None:
            records.append(self.episode_dataset[int(row["step"])])
        else:
            raise BatchError("rows need `_meta` (goal, episode_seed) or a `step` index into an EpisodeDatasetAdapter")
    return records


def _rollout(self: Any, records: list[dict[str, Any]], num_generations: int) -> tuple[list[Any], list[Any]]:
    """G episodes per record through `rollout_group_fn`, with the policy unwrapped and gradients off."""
    import torch
    from trl.models.utils import unwrap_model_for_generation

    episodes: list[Any] = []
    trajectories: list[Any] = []
    with torch.no_grad(), unwrap_model_for_generation(
        self.model_wrapped, self.accelerator, gather_deepspeed3_params=self.args.ds3_gather_for_generation,
        gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs,
    ) as model:
        for record in records:
            meta = record["_meta"]
            eps, trajs = self.rollout_group_fn(
                model=model, tokenizer=self.processing_class, goal=meta["goal"],
                episode_seed=int(meta["episode_seed"]), num_generations=num_generations,
                env_factory=self.env_factory)
            if len(eps) != num_generations or len(trajs) != num_generations:
                raise BatchError(f"rollout_group_fn returned {len(eps)} episodes / {len(trajs)} trajectories; "
                                 f"expected G={num_generations} each")
            if not all(hasattr(t, "completion_ids") and hasattr(t, "assistant_mask") for t in trajs):
                raise BatchError("rollout_group_fn must return TrajectoryTokens (token ids + assistant mask), "
                                 "not text: use cells.agent.rollout.make_rollout_group_fn")
            episodes.extend(eps)
            trajectories.extend(trajs)
    return episodes, trajectories


def old_and_ref_logps(self: Any, batch: dict[str, Any], mode: str) -> dict[str, Any]:
    """`old_per_token_logps` / `ref_per_token_logps` (B, C), exactly when TRL's own method computes them."""
    import torch
    from trl.models.utils import disable_gradient_checkpointing
    from trl.trainer.utils import use_adapter

    out: dict[str, Any] = {}
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)  # (B, P+C)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)  # (B, P+C)
    keep = batch["completion_ids"].size(1)  # C
    size = self.args.per_device_train_batch_size if mode == "train" else self.args.per_device_eval_batch_size
    generate_every = self.args.steps_per_generation * self.num_iterations
    with torch.no_grad(), disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
        if self.args.gradient_accumulation_steps % generate_every != 0:  # samples go stale before they are used
            out["old_per_token_logps"] = self._get_per_token_logps_and_entropies(
                self.model, ids, attention, keep, batch_size=size)[0]
        if self.beta != 0.0:
            if self.ref_model is not None:
                ref = self._get_per_token_logps_and_entropies(self.ref_model, ids, attention, keep, batch_size=size)
            else:
                unwrapped = self.accelerator.unwrap_model(self.model)
                if not hasattr(unwrapped, "peft_config"):
                    raise BatchError("beta != 0 needs a reference: a peft model or a trainer built with beta != 0")
                name = "ref" if "ref" in unwrapped.peft_config else None
                with use_adapter(unwrapped, adapter_name=name):  # adapter off = the frozen base model
                    ref = self._get_per_token_logps_and_entropies(self.model, ids, attention, keep, batch_size=size)
            out["ref_per_token_logps"] = ref[0]
    return out


def _log(self: Any, mode: str, metrics: Mapping[str, float], rewards: Any, zero_std: Any) -> None:
    """Into TRL's `self._metrics[mode]` (averaged and logged at the next `log`)."""
    sink = self._metrics[mode]
    sink["reward"].append(rewards.mean().item())  # TRL's own names, for its dashboards
    sink["reward_std"].append(rewards.std().item() if rewards.numel() > 1 else 0.0)
    sink["frac_reward_zero_std"].append(zero_std.float().mean().item())
    for name, value in metrics.items():
        sink[name].append(float(value))


def generate_and_score_completions(self: Any, inputs: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Roll out G episodes per prompt, score them, and return the batch TRL's `_compute_loss` reads."""
    import torch

    from cells.step_13_grpo_config import reward_components

    if self.accelerator.num_processes > 1:
        raise BatchError("DriftCallGRPOTrainer groups episodes per process; run it on one process")
    mode = "train" if self.model.training else "eval"
    g = self.num_generations if mode == "train" else self.num_generations_eval
    records = self._driftcall_rows(inputs, g)  # B/G records
    t0 = time.perf_counter()
    episodes, trajectories = _rollout(self, records, g)  # B each
    seconds = time.perf_counter() - t0
    rewards = self.reward_fn_driftcall(
        prompts=[r["prompt"] for r in records for _ in range(g)], completions=[t.text for t in trajectories],
        _meta=[r["_meta"] for r in records for _ in range(g)], episodes=list(episodes))
    device = self.accelerator.device
    batch = pad_trajectories(trajectories, self.processing_class.pad_token_id, device)  # (B, P) / (B, C) tensors
    rewards_t = torch.tensor(rewards, dtype=torch.float32, device=device)  # (B,)
    advantages, zero_std = group_advantages(rewards_t, g, self.scale_rewards)  # (B,), (B,)
    batch["advantages"] = advantages
    loss_mask = batch["completion_mask"] * batch["tool_mask"]  # (B, C)
    batch["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
    batch.update(self._driftcall_logps(batch, mode))
    model_tokens = int(loss_mask.sum().item())
    zero_groups = zero_std.view(-1, g)[:, 0].float().mean().item()
    metrics = rollout_metrics(episodes, rewards, [reward_components(e) for e in episodes], zero_groups,
                              model_tokens, seconds)
    _log(self, mode, metrics, rewards_t, zero_std)
    return batch
