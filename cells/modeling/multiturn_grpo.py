"""Method bodies of `DriftCallGRPOTrainer` (step 14): a short coordinator over the `grpo_batch` helpers.

`generate_and_score_completions(self, inputs)` replaces TRL's method of the same name. `self` is a
`trl.GRPOTrainer` subclass carrying `rollout_group_fn`, `env_factory`, `reward_fn_driftcall` and
(optionally) `episode_dataset`. `scoring_methods(base)` gives the two overrides that score only the model's
own tokens of an episode (`cells.modeling.model_token_logps`).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
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
            step = int(run.row["step"])  # kept: dynamic sampling derives a group's replacement from it
            record = {**self.episode_dataset[step], "curriculum_step": step}
        else:
            raise BatchError("rows need `_meta` (goal, episode_seed) or a `step` index into an EpisodeDatasetAdapter")
        out.append((record, run.first_generation, run.count))
    return out


@contextmanager
def activation_checkpointing_off(model: Any, kwargs: dict[str, Any] | None) -> Iterator[None]:
    """Activation checkpointing off inside (rollouts and the no-grad log-prob passes have no backward pass to
    recompute for), back on after. TRL's `disable_gradient_checkpointing` and `unwrap_model_for_generation` do
    this through transformers' deprecated `gradient_checkpointing_*` names, each of which prints a FutureWarning
    on every GRPO step; this is the same through their replacements, `activation_checkpointing_*`."""
    was_on = bool(getattr(model, "is_activation_checkpointing", False))
    if was_on:
        model.activation_checkpointing_disable()
    try:
        yield
    finally:
        if was_on:
            model.activation_checkpointing_enable(kwargs)


@contextmanager
def model_for_rollout(self: Any) -> Iterator[Any]:
    """The trainer's model, unwrapped, with activation checkpointing off while it plays. Under DeepSpeed ZeRO-3
    (parameters gathered for generation) TRL's `unwrap_model_for_generation` does it, deprecated names included."""
    from trl.distributed import DistributedBackend
    from trl.models.utils import unwrap_model_for_generation

    if DistributedBackend(self.accelerator).is_zero3:
        with unwrap_model_for_generation(
            self.model_wrapped, self.accelerator, gather_deepspeed3_params=self.args.ds3_gather_for_generation,
            gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs,
        ) as model:
            yield model
        return
    model = self.accelerator.unwrap_model(self.model_wrapped)
    with activation_checkpointing_off(model, self.args.gradient_checkpointing_kwargs):
        yield model


def _accepts_first_generation(fn: Any) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable: no signature to read
        return False
    return any(p.name == "first_generation" or p.kind is p.VAR_KEYWORD for p in params)


def _rollout(self: Any, runs: list[tuple[dict[str, Any], int, int]], num_generations: int
             ) -> tuple[list[Any], list[Any], int | None]:
    """`(episodes, trajectories, decoding steps or None)`: `count` episodes per run, with the policy unwrapped and
    gradients off; all runs in one batched rollout when `rollout_group_fn` has `play_groups`
    (`cells.agent.groups.make_rollout_group_fn`: it also counts the decoding steps), else one
    `rollout_group_fn` call per run."""
    import torch

    from cells.agent.groups import GroupRequest

    play_groups = getattr(self.rollout_group_fn, "play_groups", None)
    split = play_groups is not None or _accepts_first_generation(self.rollout_group_fn)
    if not split:
        for _, _, count in runs:
            if count != num_generations:
                raise BatchError(f"this process holds {count} of a group's G={num_generations} episodes; a "
                                 "rollout_group_fn must accept `first_generation` to play part of a group "
                                 "(cells.agent.groups.make_rollout_group_fn does)")
    requests = [GroupRequest(record["_meta"]["goal"], int(record["_meta"]["episode_seed"]), count, first)
                for record, first, count in runs]
    with torch.no_grad(), model_for_rollout(self) as model:
        common = {"model": model, "tokenizer": self.processing_class, "env_factory": self.env_factory}
        decode_steps = None
        if play_groups is not None:
            result = play_groups(groups=requests, **common)
            played, decode_steps = list(result.groups), result.decode_steps
        else:
            played = [self.rollout_group_fn(goal=r.goal, episode_seed=r.episode_seed, num_generations=r.count,
                                            **({"first_generation": r.first_generation} if split else {}), **common)
                      for r in requests]
    episodes: list[Any] = []
    trajectories: list[Any] = []
    for request, (eps, trajs) in zip(requests, played, strict=True):
        if len(eps) != request.count or len(trajs) != request.count:
            raise BatchError(f"rollout_group_fn returned {len(eps)} episodes / {len(trajs)} trajectories; "
                             f"expected {request.count} each")
        if not all(hasattr(t, "completion_ids") and hasattr(t, "assistant_mask") for t in trajs):
            raise BatchError("rollout_group_fn must return TrajectoryTokens (token ids + assistant mask), "
                             "not text: use cells.agent.groups.make_rollout_group_fn")
        episodes.extend(eps)
        trajectories.extend(trajs)
    return episodes, trajectories, decode_steps


def old_and_ref_logps(self: Any, batch: dict[str, Any], mode: str) -> dict[str, Any]:
    """`old_per_token_logps` / `ref_per_token_logps` (B, C), exactly when TRL's own method computes them."""
    import torch
    from trl.trainer.utils import use_adapter

    out: dict[str, Any] = {}
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)  # (B, P+C)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)  # (B, P+C)
    keep = batch["completion_ids"].size(1)  # C
    size = self.args.per_device_train_batch_size if mode == "train" else self.args.per_device_eval_batch_size
    generate_every = self.args.steps_per_generation * self.num_iterations
    with torch.no_grad(), activation_checkpointing_off(self.model, self.args.gradient_checkpointing_kwargs), \
            scoring_model_tokens(self, batch):
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


@contextmanager
def scoring_model_tokens(self: Any, batch: Mapping[str, Any]) -> Iterator[None]:
    """While inside, `_get_per_token_logps_and_entropies` scores only `batch`'s model tokens
    (`completion_mask * tool_mask`): the only positions the loss, the KL term and the metrics read."""
    previous = getattr(self, "_driftcall_score_mask", None)
    self._driftcall_score_mask = batch["completion_mask"] * batch["tool_mask"]  # (B, C)
    try:
        yield
    finally:
        self._driftcall_score_mask = previous


def scoring_methods(base: type[Any]) -> dict[str, Callable[..., Any]]:
    """`_compute_loss` and `_get_per_token_logps_and_entropies` for a subclass of `base` (TRL's GRPOTrainer):
    the first marks the batch's model tokens, the second projects only those through the LM head, falling back
    to `base`'s own method for anything it does not cover (multimodal or MoE inputs, a DDP-wrapped model, a
    model with a logit multiplier)."""
    from cells.modeling.model_token_logps import model_token_logps, supports_model_token_scoring

    def _compute_loss(self: Any, model: Any, inputs: dict[str, Any]) -> Any:
        with scoring_model_tokens(self, inputs):
            return base._compute_loss(self, model, inputs)

    def _get_per_token_logps_and_entropies(self: Any, model: Any, input_ids: Any, attention_mask: Any,
                                           logits_to_keep: int, batch_size: int | None = None,
                                           compute_entropy: bool = False, compute_aux_loss: bool = False,
                                           **extra: Any) -> tuple[Any, Any, Any]:
        score = getattr(self, "_driftcall_score_mask", None)
        if (score is None or compute_aux_loss or any(v is not None for v in extra.values())
                or tuple(score.shape) != (input_ids.size(0), logits_to_keep)
                or self.accelerator.unwrap_model(model) is not model or not supports_model_token_scoring(model)):
            return base._get_per_token_logps_and_entropies(
                self, model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size,
                compute_entropy=compute_entropy, compute_aux_loss=compute_aux_loss, **extra)
        import torch

        size = batch_size or input_ids.size(0)  # row chunks, as TRL's method (memory peak)
        chunks = [model_token_logps(model, input_ids[i:i + size], attention_mask[i:i + size], score[i:i + size],
                                    temperature=self.temperature, compute_entropy=compute_entropy,
                                    cast_lm_head_to_fp32=bool(getattr(self.args, "cast_lm_head_to_fp32", False)),
                                    autocast=self.accelerator.autocast())
                  for i in range(0, input_ids.size(0), size)]
        logps = torch.cat([c[0] for c in chunks], dim=0)
        entropies = torch.cat([c[1] for c in chunks], dim=0) if compute_entropy else None
        return logps, entropies, None

    return {"_compute_loss": _compute_loss, "_get_per_token_logps_and_entropies": _get_per_token_logps_and_entropies}


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


def _score(self: Any, runs: list[tuple[dict[str, Any], int, int]], episodes: list[Any], trajectories: list[Any]
           ) -> list[float]:
    """The judge's reward of each played episode (`reward_fn_driftcall`), in run order."""
    records = [record for record, _, count in runs for _ in range(count)]
    return list(self.reward_fn_driftcall(
        prompts=[r["prompt"] for r in records], completions=[t.text for t in trajectories],
        _meta=[r["_meta"] for r in records], episodes=list(episodes)))


def _run_groups(self: Any, runs: list[tuple[dict[str, Any], int, int]], num_generations: int) -> list[int]:
    """The generation batch's group index of each run (a group may be split between processes)."""
    row = self.accelerator.process_index * sum(count for _, _, count in runs)
    out = []
    for _, _, count in runs:
        out.append(row // num_generations)
        row += count
    return out


def _group_labels(self: Any, runs: list[tuple[dict[str, Any], int, int]], episodes: list[Any],
                  groups: list[int]) -> dict[int, str]:
    """`{group: label}` over the whole generation batch (every process's), from each group's first episode."""
    mine: dict[int, str] = {}
    row = 0
    for (_, first, count), group in zip(runs, groups, strict=True):
        if first == 0:
            mine[group] = self.group_labels.of(episodes[row])
        row += count
    if self.accelerator.num_processes == 1:
        return mine
    from accelerate.utils import gather_object

    return {g: label for part in gather_object([mine]) for g, label in part.items()}


def _zero_groups(self: Any, all_rewards: Any, num_generations: int) -> list[bool]:
    """Per group of the generation batch: True when its G rewards are all equal (no advantage, no gradient)."""
    return [bool(z) for z in group_advantages(all_rewards, num_generations, self.scale_rewards)[1]
            .view(-1, num_generations)[:, 0].tolist()]


def _successes(episodes: list[Any]) -> list[float]:
    """1.0 for each episode the judge counts as a success (`r_task >= 1`), else 0.0."""
    from cells.modeling.episode_rewards import reward_components

    return [1.0 if reward_components(e).get("r_task", 0.0) >= 1.0 else 0.0 for e in episodes]


def _no_signal_groups(self: Any, all_rewards: Any, all_successes: Any, num_generations: int) -> list[bool]:
    """Per group: what dynamic sampling replaces (`self.resample_on`): equal rewards, or with "success" also
    a group whose episodes all succeed or all fail."""
    zero = _zero_groups(self, all_rewards, num_generations)
    if self.resample_on == "success":
        zero = [a or b for a, b in zip(zero, _zero_groups(self, all_successes, num_generations), strict=True)]
    return zero


def _gather_scores(self: Any, rewards: list[float], successes: list[float]) -> tuple[Any, Any]:
    """`(all_rewards, all_successes)`, each (B * processes,): every process's rewards and successes (0/1), in
    process order, in one collective (a (B, 2) tensor gathered along the batch)."""
    import torch

    local = torch.tensor(list(zip(rewards, successes, strict=True)), dtype=torch.float32,
                         device=self.accelerator.device).view(-1, 2)
    gathered = self.accelerator.gather(local)
    return gathered[:, 0].contiguous(), gathered[:, 1].contiguous()  # contiguous: callers `.view` them by group


def _resample_zero_variance(self: Any, runs: list[tuple[dict[str, Any], int, int]], groups: list[int],
                            played: list[list[Any]], rewards: list[float], successes: list[float],
                            gathered: tuple[Any, Any], num_generations: int) -> tuple[Any, Any, int, float]:
    """Dynamic sampling: replace each group without signal (`_no_signal_groups`: equal rewards, or with
    `resample_on="success"` equal successes) by a fresh record from the episode dataset and play it, up to
    `self.resample_rounds` times. `gathered` is `(all_rewards, all_successes)`, every process's. Edits `runs`,
    `played` (`[episodes, trajectories]`), `rewards` and `successes` in place; returns `(all_rewards,
    all_successes, groups replaced, seconds played)`. Every process sees the gathered rewards and successes, so
    all agree on which groups to replay (and call `gather` as often)."""
    replayable = self.episode_dataset is not None and all("curriculum_step" in r for r, _, _ in runs)
    all_rewards, all_successes = gathered
    replaced, seconds = 0, 0.0
    for round_ in range(self.resample_rounds if replayable else 0):
        zero = _no_signal_groups(self, all_rewards, all_successes, num_generations)
        if not any(zero):
            break
        replaced += sum(zero)
        redo = [i for i, group in enumerate(groups) if zero[group]]
        fresh = [(_replacement(self, runs[i][0], round_), runs[i][1], runs[i][2]) for i in redo]
        t0 = time.perf_counter()
        episodes, trajectories, _ = _rollout(self, fresh, num_generations) if fresh else ([], [], None)
        seconds += time.perf_counter() - t0
        new_rewards = _score(self, fresh, episodes, trajectories) if fresh else []
        new_successes = _successes(episodes)
        starts = [sum(count for _, _, count in runs[:i]) for i in range(len(runs))]
        at = 0
        for i, run in zip(redo, fresh, strict=True):
            span = slice(starts[i], starts[i] + run[2])
            played[0][span], played[1][span] = episodes[at:at + run[2]], trajectories[at:at + run[2]]
            rewards[span] = new_rewards[at:at + run[2]]
            successes[span] = new_successes[at:at + run[2]]
            runs[i] = run
            at += run[2]
        all_rewards, all_successes = _gather_scores(self, rewards, successes)
    return all_rewards, all_successes, replaced, seconds


def _replacement(self: Any, record: dict[str, Any], round_: int) -> dict[str, Any]:
    from cells.modeling.grpo_batch import replacement_step

    step = replacement_step(int(record["curriculum_step"]), round_)
    return {**self.episode_dataset[step], "curriculum_step": record["curriculum_step"]}


def generate_and_score_completions(self: Any, inputs: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Roll out this process's episodes, score them, and return the batch TRL's `_compute_loss` reads.

    Several processes (accelerate/torchrun): each plays its own rows (part of a group, possibly), rewards
    are gathered, advantages normalised per group over the whole generation batch and each process keeps
    its slice, exactly as TRL does for single-turn GRPO. With `resample_rounds > 0` (and an episode dataset),
    groups without signal (zero reward variance; with `resample_on="success"` also all-success or all-failure)
    are replaced by fresh episodes first (`_resample_zero_variance`)."""

    from cells.modeling.episode_rewards import reward_components
    from cells.modeling.grpo_batch import group_signal_metrics

    mode = "train" if self.model.training else "eval"
    g = self.num_generations if mode == "train" else self.num_generations_eval
    runs = self._driftcall_rows(inputs, g)
    t0 = time.perf_counter()
    episodes, trajectories, decode_steps = _rollout(self, runs, g)  # B (this process's rows) each
    seconds = time.perf_counter() - t0
    rewards = _score(self, runs, episodes, trajectories)
    groups = _run_groups(self, runs, g)
    labels = self.group_labels is not None and mode == "train"
    first_labels = _group_labels(self, runs, episodes, groups) if labels else {}
    played = [list(episodes), list(trajectories)]
    successes = _successes(episodes)
    all_rewards, all_successes = _gather_scores(self, rewards, successes)
    first_zero = _zero_groups(self, all_rewards, g)
    first_uniform = _zero_groups(self, all_successes, g)
    replaced, more_seconds = 0, 0.0
    if mode == "train" and self.resample_rounds:
        all_rewards, all_successes, replaced, more_seconds = _resample_zero_variance(
            self, runs, groups, played, rewards, successes, (all_rewards, all_successes), g)
    episodes, trajectories = played
    advantages, zero_std = group_advantages(all_rewards, g, self.scale_rewards)  # (B * processes,) each
    # RAFT's supervised pull on the policy's own successes, inside the same loss (zero-variance groups included)
    advantages = advantages + self.success_advantage * all_successes
    device = self.accelerator.device
    batch = pad_trajectories(trajectories, self.processing_class.pad_token_id, device)  # (B, P) / (B, C) tensors
    mine = slice(self.accelerator.process_index * len(rewards), (self.accelerator.process_index + 1) * len(rewards))
    batch["advantages"] = advantages[mine]
    loss_mask = batch["completion_mask"] * batch["tool_mask"]  # (B, C)
    batch["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
    batch.update(self._driftcall_logps(batch, mode))
    model_tokens = int(loss_mask.sum().item())
    final_zero = zero_std.view(-1, g)[:, 0].tolist()
    metrics = rollout_metrics(episodes, rewards, [reward_components(e) for e in episodes],
                              sum(final_zero) / len(final_zero), model_tokens, seconds + more_seconds, decode_steps)
    metrics["groups/zero_std_first_frac"] = sum(first_zero) / len(first_zero)
    # groups whose episodes all succeed or all fail: a gradient from partial credit at most (`resample_on`)
    metrics["groups/success_uniform_first_frac"] = sum(first_uniform) / len(first_uniform)
    final_uniform = _zero_groups(self, all_successes, g)
    metrics["groups/success_uniform_frac"] = sum(final_uniform) / len(final_uniform)
    metrics["groups/resampled"] = float(replaced)
    if labels:
        final_labels = _group_labels(self, runs, episodes, groups) if replaced else first_labels
        metrics.update(group_signal_metrics(
            self.group_labels.names, [(first_labels[i], bool(z)) for i, z in enumerate(first_zero)],
            [(final_labels[i], bool(z)) for i, z in enumerate(final_zero)]))
    metrics["reward/mean"] = all_rewards.mean().item()  # the whole generation batch, as TRL's `reward`
    metrics["reward/std"] = all_rewards.std().item() if all_rewards.numel() > 1 else 0.0
    _log(self, mode, metrics, all_rewards, zero_std)
    return batch
