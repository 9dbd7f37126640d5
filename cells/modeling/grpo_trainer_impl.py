"""Method bodies of `DriftCallGRPOTrainer` (step 14): a short coordinator over the `grpo_batch` helpers.

`generate_and_score_completions(self, inputs)` replaces TRL's method of the same name. `self` is a
`trl.GRPOTrainer` subclass carrying `rollout_group_fn`, `env_factory`, `reward_fn_driftcall` and
(optionally) `episode_dataset`.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Mapping
from typing import Any

from cells.modeling.grpo_batch import (
    BatchError,
    group_advantages,
    pad_trajectories,
    prompt_runs,
    rollout_metrics,
)


def materialise_runs(self: Any, inputs: list[Mapping[str, Any]], num_generations: int
                       ) -> list[tuple[dict[str, Any], int, int]]:
    """`(record, first_generation, count)` per prompt run of this process's rows; a record is
    `{"prompt", "_meta"}`. With several processes a group's rows may be split between them (`prompt_runs`)."""
    def key(row: Mapping[str, Any]) -> Any:
        return row["step"] if "step" in row else row["_meta"]["episode_seed"]

    processes = self.accelerator.num_processes
    if (len(inputs) * processes) % num_generations:
        raise BatchError(f"a generation batch of {len(inputs)} rows on each of {processes} process(es) is not a "
                         f"multiple of G={num_generations}")
    out = []
    for run in prompt_runs(inputs, num_generations, key, offset=self.accelerator.process_index * len(inputs)):
        if "_meta" in run.row:
            record = dict(run.row)
        elif self.episode_dataset is not None:
            record = self.episode_dataset[int(run.row["step"])]
        else:
            raise BatchError("rows need `_meta` (goal, episode_seed) or a `step` index into an EpisodeDatasetAdapter")
        out.append((record, run.first_generation, run.count))
    return out


def _accepts_first_generation(fn: Any) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable: no signature to read
        return False
    return any(p.name == "first_generation" or p.kind is p.VAR_KEYWORD for p in params)


def _rollout(self: Any, runs: list[tuple[dict[str, Any], int, int]], num_generations: int
             ) -> tuple[list[Any], list[Any]]:
    """`count` episodes per run through `rollout_group_fn`, with the policy unwrapped and gradients off."""
    import torch
    from trl.models.utils import unwrap_model_for_generation

    split = _accepts_first_generation(self.rollout_group_fn)
    episodes: list[Any] = []
    trajectories: list[Any] = []
    with torch.no_grad(), unwrap_model_for_generation(
        self.model_wrapped, self.accelerator, gather_deepspeed3_params=self.args.ds3_gather_for_generation,
        gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs,
    ) as model:
        for record, first, count in runs:
            meta = record["_meta"]
            kwargs: dict[str, Any] = {"first_generation": first} if split else {}
            if not split and count != num_generations:
                raise BatchError(f"this process holds {count} of a group's G={num_generations} episodes; a "
                                 "rollout_group_fn must accept `first_generation` to play part of a group "
                                 "(cells.agent.rollout.make_rollout_group_fn does)")
            eps, trajs = self.rollout_group_fn(
                model=model, tokenizer=self.processing_class, goal=meta["goal"],
                episode_seed=int(meta["episode_seed"]), num_generations=count,
                env_factory=self.env_factory, **kwargs)
            if len(eps) != count or len(trajs) != count:
                raise BatchError(f"rollout_group_fn returned {len(eps)} episodes / {len(trajs)} trajectories; "
                                 f"expected {count} each")
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
    """Into TRL's `self._metrics[mode]` (averaged and logged at the next `log`). `rewards`/`zero_std` cover the
    whole generation batch (every process); the episode metrics are averaged over processes."""
    import torch

    sink = self._metrics[mode]
    sink["reward"].append(rewards.mean().item())  # TRL's own names, for its dashboards
    sink["reward_std"].append(rewards.std().item() if rewards.numel() > 1 else 0.0)
    sink["frac_reward_zero_std"].append(zero_std.float().mean().item())
    names = sorted(metrics)  # the same order on every process; processes may see different languages
    if self.accelerator.num_processes > 1:
        names = sorted({n for names_of in _gather_names(self, names) for n in names_of})
        local = torch.tensor([float(metrics.get(n, float("nan"))) for n in names], device=self.accelerator.device)
        values = torch.nanmean(self.accelerator.gather(local.unsqueeze(0)), dim=0).tolist()
    else:
        values = [float(metrics[n]) for n in names]
    for name, value in zip(names, values, strict=True):
        sink[name].append(value)


def _gather_names(self: Any, names: list[str]) -> list[list[str]]:
    from accelerate.utils import gather_object

    return list(gather_object([names]))


def generate_and_score_completions(self: Any, inputs: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Roll out this process's episodes, score them, and return the batch TRL's `_compute_loss` reads.

    Several processes (accelerate/torchrun): each plays its own rows (part of a group, possibly), rewards
    are gathered, advantages normalised per group over the whole generation batch and each process keeps
    its slice, exactly as TRL does for single-turn GRPO."""
    import torch

    from cells.step_13_grpo_config import reward_components

    mode = "train" if self.model.training else "eval"
    g = self.num_generations if mode == "train" else self.num_generations_eval
    runs = self._driftcall_rows(inputs, g)
    t0 = time.perf_counter()
    episodes, trajectories = _rollout(self, runs, g)  # B (this process's rows) each
    seconds = time.perf_counter() - t0
    records = [record for record, _, count in runs for _ in range(count)]
    rewards = self.reward_fn_driftcall(
        prompts=[r["prompt"] for r in records], completions=[t.text for t in trajectories],
        _meta=[r["_meta"] for r in records], episodes=list(episodes))
    device = self.accelerator.device
    batch = pad_trajectories(trajectories, self.processing_class.pad_token_id, device)  # (B, P) / (B, C) tensors
    rewards_t = torch.tensor(rewards, dtype=torch.float32, device=device)  # (B,)
    all_rewards = self.accelerator.gather(rewards_t)  # (B * processes,): every process's, in process order
    advantages, zero_std = group_advantages(all_rewards, g, self.scale_rewards)  # (B * processes,) each
    mine = slice(self.accelerator.process_index * len(rewards), (self.accelerator.process_index + 1) * len(rewards))
    batch["advantages"] = advantages[mine]
    loss_mask = batch["completion_mask"] * batch["tool_mask"]  # (B, C)
    batch["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
    batch.update(self._driftcall_logps(batch, mode))
    model_tokens = int(loss_mask.sum().item())
    zero_groups = zero_std.view(-1, g)[:, 0].float().mean().item()
    metrics = rollout_metrics(episodes, rewards, [reward_components(e) for e in episodes], zero_groups,
                              model_tokens, seconds)
    metrics["reward/mean"] = all_rewards.mean().item()  # the whole generation batch, as TRL's `reward`
    metrics["reward/std"] = all_rewards.std().item() if all_rewards.numel() > 1 else 0.0
    _log(self, mode, metrics, all_rewards, zero_std)
    return batch
