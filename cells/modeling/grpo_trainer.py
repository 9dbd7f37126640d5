"""`DriftCallGRPOTrainer`: TRL's `GRPOTrainer` whose completions are whole multi-turn DriftCall episodes.

It imports trl and torch at the top, so it is imported only when training starts (`cells/training/grpo_stage.py`
builds it); `cells/step_14_trainer.py` is its light face (`make_driftcall_grpo_trainer_cls()` returns this class).

One GRPO step, top-down: TRL's `training_step` -> `_prepare_inputs` -> `_generate_and_score_completions` (here):
1. `_records`: this process's rows of the generation batch as runs of one prompt, each a dataset record;
2. `_play`: G episodes per record through `rollout_group_fn` (`cells/agent/groups.py` over `cells/agent/rollout.py`),
   the policy unwrapped and gradients off;
3. `_score`: the judge's reward of each episode (`reward_fn_driftcall`, step 13's `reward_fn`);
4. dynamic sampling (`resample_rounds > 0`): groups without signal are replaced and played again
   (`_resample_without_signal`);
5. group-relative advantages, the padded batch and `old_`/`ref_per_token_logps`: exactly what TRL's `_compute_loss`
   reads, `tool_mask` (1 = model token) included so environment tokens get no gradient.
Loss, KL, clipping and the optimiser step are TRL's own; `_compute_loss` and `_get_per_token_logps_and_entropies`
only make TRL's log-prob pass project the model's own tokens through the LM head (`model_token_logps.py`).
Several processes (accelerate/torchrun): each plays its own rows (part of a group, possibly), rewards are gathered,
advantages normalised per group over the whole generation batch and each process keeps its slice, as TRL does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from trl import GRPOTrainer

from cells.modeling.adaptive_kl import (
    BETA_KL,
    DEFAULT_BETA_MAX,
    DEFAULT_BETA_MIN,
    DEFAULT_KP,
    AdaptiveKLCallback,
)
from cells.modeling.episode_dataset import (
    EnvFactory,
    EpisodeDatasetAdapter,
    RolloutGroupFn,
    TrainerSetupError,
)
from cells.modeling.episode_rewards import reward_components
from cells.modeling.grpo_batch import (
    BatchError,
    accepts_first_generation,
    contrast_metrics,
    episode_successes,
    gather_scores,
    group_advantages,
    group_signal_metrics,
    log_step_metrics,
    pad_trajectories,
    per_token_advantages,
    prompt_runs,
    replacement_step,
    rollout_metrics,
    run_groups,
    step_advantages,
    zero_variance_groups,
)
from cells.modeling.model_token_logps import model_token_logps, supports_model_token_scoring
from cells.step_02_profiles import knob_cap, knob_choices

Run = tuple[dict[str, Any], int, int]  # (dataset record, first generation of its group, episodes on this process)


def _placeholder_reward(completions: Any = None, **_unused: Any) -> list[float]:
    """Satisfies GRPOTrainer's `reward_funcs`; never called (rewards come from episodes)."""
    return [0.0] * (len(completions) if completions is not None else 0)


class DriftCallGRPOTrainer(GRPOTrainer):
    """GRPOTrainer whose completions are whole multi-turn DriftCall episodes.

    Construction adds, over `GRPOTrainer`'s own arguments: `rollout_group_fn` (plays G episodes of one goal),
    `env_factory` (a fresh env per episode), `reward_fn_driftcall` (rewards from the episodes), adaptive KL
    (`enable_adaptive_kl`, `adaptive_kl_*`: an `AdaptiveKLCallback`, registered first so reporters see its keys),
    dynamic sampling (`resample_rounds`, `resample_on`), `group_labels` (per-label zero-variance counts in the logs),
    `success_advantage` (added to each successful episode's advantage after scaling: a RAFT-like pull towards
    the policy's own successes inside the same loss; 0 = off) and `advantage_on` (`"success"`: the advantages
    compare the episodes' task success, 0/1, instead of their rewards). An `EpisodeDatasetAdapter` as `train_dataset` is
    handed to TRL as a dataset of step indices and materialised here.
    """

    def __init__(self, *args: Any, rollout_group_fn: RolloutGroupFn, env_factory: EnvFactory,
                 reward_fn_driftcall: Callable[..., list[float]], enable_adaptive_kl: bool = True,
                 adaptive_kl_target: float | None = None, adaptive_kl_kp: float = DEFAULT_KP,
                 adaptive_kl_beta_min: float = DEFAULT_BETA_MIN, adaptive_kl_beta_max: float = DEFAULT_BETA_MAX,
                 resample_rounds: int = 0, resample_on: str = "reward", group_labels: Any = None,
                 success_advantage: float = 0.0, keep: str = "all", step_advantage: float = 0.0,
                 advantage_on: str = "reward", group_trace: str | None = None, **kwargs: Any) -> None:
        if not 0 <= int(resample_rounds) <= (cap := knob_cap("grpo_resample_rounds")):
            raise TrainerSetupError(f"resample_rounds must be in [0, {cap}], got {resample_rounds!r}")
        if resample_on not in (criteria := knob_choices("grpo_resample_on")):
            raise TrainerSetupError(f"resample_on must be one of {criteria}, got {resample_on!r}")
        if success_advantage < 0:
            raise TrainerSetupError(f"success_advantage must be >= 0, got {success_advantage!r}")
        if keep not in (kept := knob_choices("grpo_keep")):
            raise TrainerSetupError(f"keep must be one of {kept}, got {keep!r}")
        if step_advantage < 0:
            raise TrainerSetupError(f"step_advantage must be >= 0, got {step_advantage!r}")
        if advantage_on not in (scores := knob_choices("grpo_advantage_on")):
            raise TrainerSetupError(f"advantage_on must be one of {scores}, got {advantage_on!r}")
        kwargs.setdefault("reward_funcs", [_placeholder_reward])  # TRL requires one; rewards come from episodes
        self.resample_rounds = int(resample_rounds)  # dynamic sampling: replays of a zero-variance group per step
        self.resample_on = resample_on  # which groups count as without signal: equal rewards, or equal successes
        self.group_labels = group_labels  # a grpo_batch.GroupLabels
        self.success_advantage = float(success_advantage)
        self.keep = keep  # "success_contrast": only groups with a success and a failure reach the update
        self.step_advantage = float(step_advantage)  # GiGPO's weight on the step-level advantage (0: off)
        self.advantage_on = advantage_on  # "success": advantages (episode and step) compare task success, not reward
        self.group_trace = group_trace  # a JSON-lines file: one line per group played (`_trace_groups`)
        self.episode_dataset: EpisodeDatasetAdapter | None = None
        if isinstance(kwargs.get("train_dataset"), EpisodeDatasetAdapter):
            self.episode_dataset = kwargs["train_dataset"]
            kwargs["train_dataset"] = self.episode_dataset.step_index_dataset(kwargs.get("args"))
        super().__init__(*args, **kwargs)
        self.rollout_group_fn = rollout_group_fn
        self.env_factory = env_factory
        self.reward_fn_driftcall = reward_fn_driftcall
        self.adaptive_kl_callback: AdaptiveKLCallback | None = None
        if enable_adaptive_kl:
            target = adaptive_kl_target if adaptive_kl_target is not None else BETA_KL
            self.adaptive_kl_callback = AdaptiveKLCallback(
                target, kp=adaptive_kl_kp, beta_min=adaptive_kl_beta_min, beta_max=adaptive_kl_beta_max, trainer=self)
            self.add_callback(self.adaptive_kl_callback)
            # first in line, so reporters (and the metrics.csv writer) see the five `train/*` keys it adds
            self.callback_handler.callbacks.remove(self.adaptive_kl_callback)
            self.callback_handler.callbacks.insert(0, self.adaptive_kl_callback)

    # --------------------------------------------------------------------------------- one GRPO step, top-down
    def _generate_and_score_completions(self, inputs: list[Mapping[str, Any]]) -> dict[str, Any]:
        """Play this process's episodes, score them, and return the batch TRL's `_compute_loss` reads."""
        mode = "train" if self.model.training else "eval"
        g = self.num_generations if mode == "train" else self.num_generations_eval
        runs = self._records(inputs, g)
        t0 = time.perf_counter()
        episodes, trajectories, decode_steps = self._play(runs, g)  # B (this process's rows) each
        seconds = time.perf_counter() - t0
        rewards = self._score(runs, episodes, trajectories)
        counts = [count for _, _, count in runs]
        groups = run_groups(counts, self.accelerator.process_index * sum(counts), g)
        labels = self.group_labels is not None and mode == "train"
        first_labels = self._group_labels(runs, episodes, groups) if labels else {}
        played = [list(episodes), list(trajectories)]
        successes = episode_successes(episodes)
        all_rewards, all_successes = gather_scores(self.accelerator, rewards, successes)
        first_zero = zero_variance_groups(all_rewards, g, self.scale_rewards)
        first_uniform = zero_variance_groups(all_successes, g, self.scale_rewards)
        replaced, more_seconds = 0, 0.0
        if mode == "train" and self.resample_rounds:
            all_rewards, all_successes, replaced, more_seconds = self._resample_without_signal(
                runs, groups, played, rewards, successes, (all_rewards, all_successes), g)
        episodes, trajectories = played
        advantages, zero_std = group_advantages(all_rewards, g, self.scale_rewards)  # (B * processes,) each
        if self.advantage_on == "success":  # zero_std stays the rewards': TRL's metric and dynamic sampling's
            advantages, _ = group_advantages(all_successes, g, self.scale_rewards)
        # RAFT's supervised pull on the policy's own successes, inside the same loss (zero-variance groups included)
        advantages = advantages + self.success_advantage * all_successes
        index = self.accelerator.process_index
        mine = advantages[index * len(rewards):(index + 1) * len(rewards)]  # this process's slice, (B,)
        row_groups = [group for group, (_, _, count) in zip(groups, runs, strict=True) for _ in range(count)]
        contrast = [not z for z in zero_variance_groups(all_successes, g, self.scale_rewards)]  # per batch group
        rows = self._rows_to_update(row_groups, contrast)
        batch = pad_trajectories([trajectories[r] for r in rows], self.processing_class.pad_token_id,
                                 self.accelerator.device)
        scores = successes if self.advantage_on == "success" else rewards  # what the step advantage compares too
        batch["advantages"] = self._update_advantages(mine, trajectories, scores, runs, g, rows, contrast,
                                                      row_groups, batch["completion_ids"].size(1))
        loss_mask = batch["completion_mask"] * batch["tool_mask"]  # (B', C): the rows that reach the update
        batch["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
        t1 = time.perf_counter()
        batch.update(self._old_and_ref_logps(batch, mode))
        logp_seconds = time.perf_counter() - t1
        final_zero = zero_std.view(-1, g)[:, 0].tolist()
        tokens = [int(sum(t.assistant_mask)) for t in trajectories]
        metrics = rollout_metrics(episodes, rewards, [reward_components(e) for e in episodes],
                                  sum(final_zero) / len(final_zero), sum(tokens), seconds + more_seconds,
                                  decode_steps)
        metrics.update(contrast_metrics(row_groups, contrast, tokens, rows))
        metrics["episodes/played"] = float(all_rewards.numel() + replaced * g)  # every process's, replays included
        metrics["time/rollout_s"] = seconds + more_seconds
        metrics["time/logps_s"] = logp_seconds
        if self.group_trace and mode == "train":
            self._trace_groups(runs, groups, episodes, rewards, successes, mine.tolist())
        metrics["groups/zero_std_first_frac"] = sum(first_zero) / len(first_zero)
        # groups whose episodes all succeed or all fail: a gradient from partial credit at most (`resample_on`)
        metrics["groups/success_uniform_first_frac"] = sum(first_uniform) / len(first_uniform)
        final_uniform = zero_variance_groups(all_successes, g, self.scale_rewards)
        metrics["groups/success_uniform_frac"] = sum(final_uniform) / len(final_uniform)
        metrics["groups/resampled"] = float(replaced)
        if labels:
            final_labels = self._group_labels(runs, episodes, groups) if replaced else first_labels
            metrics.update(group_signal_metrics(
                self.group_labels.names, [(first_labels[i], bool(z)) for i, z in enumerate(first_zero)],
                [(final_labels[i], bool(z)) for i, z in enumerate(final_zero)]))
        metrics["reward/mean"] = all_rewards.mean().item()  # the whole generation batch, as TRL's `reward`
        metrics["reward/std"] = all_rewards.std().item() if all_rewards.numel() > 1 else 0.0
        log_step_metrics(self._metrics[mode], self.accelerator, metrics, all_rewards, zero_std)
        return batch

    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        """TRL's step (which logs its wall time, `step_time`), with this process's CPU time logged beside it,
        `step_cpu`: the compute the equal-compute controls are given (`training.metrics.grpo_compute_seconds`)."""
        c0 = time.process_time()
        loss = super().training_step(*args, **kwargs)
        self._metrics["train"]["step_cpu"].append(time.process_time() - c0)
        return loss

    def _rows_to_update(self, row_groups: list[int], contrast: list[bool]) -> list[int]:
        """This process's rows that reach the update: all, or with `keep="success_contrast"` those of groups with a
        success and a failure (Reinforce-Rej, arXiv 2504.11343: the others cost a backward pass and carry no
        gradient towards success). When no group has a contrast, every row stays with advantage 0
        (`_update_advantages`): the step then moves nothing but keeps TRL's bookkeeping whole."""
        rows = list(range(len(row_groups)))
        if self.keep == "success_contrast" and any(contrast[g] for g in row_groups):
            rows = [r for r in rows if contrast[row_groups[r]]]
        return rows

    def _update_advantages(self, mine: Any, trajectories: list[Any], rewards: list[float], runs: list[Run],
                           num_generations: int, rows: list[int], contrast: list[bool], row_groups: list[int],
                           completion_len: int) -> Any:
        """The kept rows' advantages: (B',) per episode, or (B', C) per token with GiGPO's step advantage
        (`step_advantage > 0`, which needs each group whole on this process)."""
        if self.keep == "success_contrast" and not any(contrast[g] for g in row_groups):
            return torch.zeros_like(mine)  # every row stays (`_rows_to_update`), none moves the policy
        if not self.step_advantage:
            return mine[rows]
        if any(first != 0 or count != num_generations for _, first, count in runs):
            raise BatchError(f"step_advantage needs every group of G={num_generations} on one process; this "
                             "process holds part of one (use one process, or a batch of whole groups per process)")
        steps = step_advantages(trajectories, rewards, num_generations, self.scale_rewards)
        per_token = per_token_advantages(mine, trajectories, steps, self.step_advantage,
                                         max(1, max(len(t.completion_ids) for t in trajectories)))
        return per_token[rows, :completion_len]

    def _trace_groups(self, runs: list[Run], groups: list[int], episodes: list[Any], rewards: list[float],
                      successes: list[float], advantages: list[float]) -> None:
        """One JSON line per group this process played: its drift patterns, rewards, successes and advantages
        (`cells.training.signal.group_trace_report` reads them: which patterns GRPO samples successes on, and what
        advantage a success gets)."""
        import json

        lines, row = [], 0
        for (_, first, count), group in zip(runs, groups, strict=True):
            span = slice(row, row + count)
            lines.append(json.dumps({
                "step": int(self.state.global_step), "group": group, "first_generation": first,
                "patterns": sorted({s.pattern_id for e in episodes[span] for s in getattr(e, "schedule", ())}),
                "rewards": [round(r, 6) for r in rewards[span]], "successes": successes[span],
                "advantages": [round(a, 6) for a in advantages[span]]}, sort_keys=True))
            row += count
        index = self.accelerator.process_index  # one file per process: no two writers share one
        path = self.group_trace if index == 0 else f"{self.group_trace}.rank{index}"
        with open(path, "a", encoding="utf-8") as fh:
            fh.write("".join(line + "\n" for line in lines))

    def _records(self, inputs: list[Mapping[str, Any]], num_generations: int) -> list[Run]:
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
                raise BatchError("rows need `_meta` (goal, episode_seed) or a `step` index into an "
                                 "EpisodeDatasetAdapter")
            out.append((record, run.first_generation, run.count))
        return out

    def _play(self, runs: list[Run], num_generations: int) -> tuple[list[Any], list[Any], int | None]:
        """`(episodes, trajectories, decoding steps or None)`: `count` episodes per run, with the policy unwrapped and
        gradients off; all runs in one batched rollout when `rollout_group_fn` has `play_groups`
        (`cells.agent.groups.make_rollout_group_fn`: it also counts the decoding steps), else one
        `rollout_group_fn` call per run."""
        from cells.agent.groups import GroupRequest

        play_groups = getattr(self.rollout_group_fn, "play_groups", None)
        split = play_groups is not None or accepts_first_generation(self.rollout_group_fn)
        for _, _, count in runs if not split else ():
            if count != num_generations:
                raise BatchError(f"this process holds {count} of a group's G={num_generations} episodes; a "
                                 "rollout_group_fn must accept `first_generation` to play part of a group "
                                 "(cells.agent.groups.make_rollout_group_fn does)")
        requests = [GroupRequest(record["_meta"]["goal"], int(record["_meta"]["episode_seed"]), count, first)
                    for record, first, count in runs]
        with torch.no_grad(), self._model_for_rollout() as model:
            common = {"model": model, "tokenizer": self.processing_class, "env_factory": self.env_factory}
            decode_steps = None
            if play_groups is not None:
                result = play_groups(groups=requests, **common)
                played, decode_steps = list(result.groups), result.decode_steps
            else:
                played = [self.rollout_group_fn(goal=r.goal, episode_seed=r.episode_seed, num_generations=r.count,
                                                **({"first_generation": r.first_generation} if split else {}),
                                                **common)
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

    def _score(self, runs: list[Run], episodes: list[Any], trajectories: list[Any]) -> list[float]:
        """The judge's reward of each played episode (`reward_fn_driftcall`), in run order."""
        records = [record for record, _, count in runs for _ in range(count)]
        return list(self.reward_fn_driftcall(
            prompts=[r["prompt"] for r in records], completions=[t.text for t in trajectories],
            _meta=[r["_meta"] for r in records], episodes=list(episodes)))

    def _resample_without_signal(self, runs: list[Run], groups: list[int], played: list[list[Any]],
                                 rewards: list[float], successes: list[float], gathered: tuple[Any, Any],
                                 num_generations: int) -> tuple[Any, Any, int, float]:
        """Dynamic sampling: replace each group without signal (equal rewards, or with `resample_on="success"`
        equal successes) by a fresh record from the episode dataset and play it, up to `self.resample_rounds`
        times. `gathered` is `(all_rewards, all_successes)`, every process's. Edits `runs`, `played`
        (`[episodes, trajectories]`), `rewards` and `successes` in place; returns `(all_rewards, all_successes,
        groups replaced, seconds played)`. Every process sees the gathered scores, so all agree on which groups to
        replay (and call `gather` as often)."""
        replayable = self.episode_dataset is not None and all("curriculum_step" in r for r, _, _ in runs)
        all_rewards, all_successes = gathered
        replaced, seconds = 0, 0.0
        for round_ in range(self.resample_rounds if replayable else 0):
            zero = zero_variance_groups(all_rewards, num_generations, self.scale_rewards)
            if self.resample_on == "success":
                uniform = zero_variance_groups(all_successes, num_generations, self.scale_rewards)
                zero = [a or b for a, b in zip(zero, uniform, strict=True)]
            if not any(zero):
                break
            replaced += sum(zero)
            redo = [i for i, group in enumerate(groups) if zero[group]]
            fresh = [(self._replacement(runs[i][0], round_), runs[i][1], runs[i][2]) for i in redo]
            t0 = time.perf_counter()
            episodes, trajectories, _ = self._play(fresh, num_generations) if fresh else ([], [], None)
            seconds += time.perf_counter() - t0
            new_rewards = self._score(fresh, episodes, trajectories) if fresh else []
            new_successes = episode_successes(episodes)
            starts = [sum(count for _, _, count in runs[:i]) for i in range(len(runs))]
            at = 0
            for i, run in zip(redo, fresh, strict=True):
                span = slice(starts[i], starts[i] + run[2])
                played[0][span], played[1][span] = episodes[at:at + run[2]], trajectories[at:at + run[2]]
                rewards[span] = new_rewards[at:at + run[2]]
                successes[span] = new_successes[at:at + run[2]]
                runs[i] = run
                at += run[2]
            all_rewards, all_successes = gather_scores(self.accelerator, rewards, successes)
        return all_rewards, all_successes, replaced, seconds

    def _replacement(self, record: dict[str, Any], round_: int) -> dict[str, Any]:
        """The dataset record that replaces `record`'s group in resampling round `round_` (`replacement_step`)."""
        assert self.episode_dataset is not None  # `_resample_without_signal` checked
        step = replacement_step(int(record["curriculum_step"]), round_)
        return {**self.episode_dataset[step], "curriculum_step": record["curriculum_step"]}

    def _old_and_ref_logps(self, batch: dict[str, Any], mode: str) -> dict[str, Any]:
        """`old_per_token_logps` / `ref_per_token_logps` (B, C), exactly when TRL's own method computes them."""
        from trl.trainer.utils import use_adapter

        out: dict[str, Any] = {}
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)  # (B, P+C)
        attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)  # (B, P+C)
        keep = batch["completion_ids"].size(1)  # C
        size = self.args.per_device_train_batch_size if mode == "train" else self.args.per_device_eval_batch_size
        generate_every = self.args.steps_per_generation * self.num_iterations
        with torch.no_grad(), activation_checkpointing_off(self.model, self.args.gradient_checkpointing_kwargs), \
                self._scoring_model_tokens(batch):
            if self.args.gradient_accumulation_steps % generate_every != 0:  # samples go stale before they are used
                out["old_per_token_logps"] = self._get_per_token_logps_and_entropies(
                    self.model, ids, attention, keep, batch_size=size)[0]
            if self.beta != 0.0:
                if self.ref_model is not None:
                    ref = self._get_per_token_logps_and_entropies(self.ref_model, ids, attention, keep,
                                                                  batch_size=size)
                else:
                    unwrapped = self.accelerator.unwrap_model(self.model)
                    if not hasattr(unwrapped, "peft_config"):
                        raise BatchError("beta != 0 needs a reference: a peft model or a trainer built with "
                                         "beta != 0")
                    name = "ref" if "ref" in unwrapped.peft_config else None
                    with use_adapter(unwrapped, adapter_name=name):  # adapter off = the frozen base model
                        ref = self._get_per_token_logps_and_entropies(self.model, ids, attention, keep,
                                                                      batch_size=size)
                out["ref_per_token_logps"] = ref[0]
        return out

    # ------------------------------------------------------- TRL's log-prob pass, on the model's own tokens only
    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> Any:
        with self._scoring_model_tokens(inputs):
            return super()._compute_loss(model, inputs)

    def _get_per_token_logps_and_entropies(self, model: Any, input_ids: Any, attention_mask: Any,
                                           logits_to_keep: int, batch_size: int | None = None,
                                           compute_entropy: bool = False, compute_aux_loss: bool = False,
                                           **extra: Any) -> tuple[Any, Any, Any]:
        """Inside `_scoring_model_tokens`, project only the batch's model tokens through the LM head; anything it
        does not cover (multimodal or MoE inputs, a DDP-wrapped model, a model with a logit multiplier) falls back
        to TRL's own method."""
        score = getattr(self, "_driftcall_score_mask", None)
        if (score is None or compute_aux_loss or any(v is not None for v in extra.values())
                or tuple(score.shape) != (input_ids.size(0), logits_to_keep)
                or self.accelerator.unwrap_model(model) is not model or not supports_model_token_scoring(model)):
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size,
                compute_entropy=compute_entropy, compute_aux_loss=compute_aux_loss, **extra)
        size = batch_size or input_ids.size(0)  # row chunks, as TRL's method (memory peak)
        chunks = [model_token_logps(model, input_ids[i:i + size], attention_mask[i:i + size], score[i:i + size],
                                    temperature=self.temperature, compute_entropy=compute_entropy,
                                    cast_lm_head_to_fp32=bool(getattr(self.args, "cast_lm_head_to_fp32", False)),
                                    autocast=self.accelerator.autocast())
                  for i in range(0, input_ids.size(0), size)]
        logps = torch.cat([c[0] for c in chunks], dim=0)
        entropies = torch.cat([c[1] for c in chunks], dim=0) if compute_entropy else None
        return logps, entropies, None

    @contextmanager
    def _scoring_model_tokens(self, batch: Mapping[str, Any]) -> Iterator[None]:
        """While inside, `_get_per_token_logps_and_entropies` scores only `batch`'s model tokens
        (`completion_mask * tool_mask`): the only positions the loss, the KL term and the metrics read."""
        previous = getattr(self, "_driftcall_score_mask", None)
        self._driftcall_score_mask = batch["completion_mask"] * batch["tool_mask"]  # (B, C)
        try:
            yield
        finally:
            self._driftcall_score_mask = previous

    @contextmanager
    def _model_for_rollout(self) -> Iterator[Any]:
        """The trainer's model, unwrapped, with activation checkpointing off while it plays. Under DeepSpeed ZeRO-3
        (parameters gathered for generation) TRL's `unwrap_model_for_generation` does it, deprecated names
        included."""
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

    # ------------------------------------------------------------------------------------- group labels
    def _group_labels(self, runs: list[Run], episodes: list[Any], groups: list[int]) -> dict[int, str]:
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
