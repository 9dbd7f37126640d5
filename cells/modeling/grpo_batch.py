"""Small, separately tested helpers behind `DriftCallGRPOTrainer._generate_and_score_completions`.

- `prompt_runs`: this process's rows of the generation batch -> runs of one prompt (TRL repeats each G
  times; with several processes a group may be split between them).
- `pad_trajectories`: `TrajectoryTokens` -> the padded tensors TRL's loss reads (prompt left-padded,
  completion right-padded, `tool_mask` 1 on model tokens, 0 on env/template tokens and padding).
- `group_advantages`: group-relative advantages from episode rewards, as TRL's `scale_rewards` says.
- `rollout_metrics`: slash-named metrics (reward components, parse failures, drift, languages, speed).
- Dynamic sampling: `replacement_step` (the dataset record that replaces a zero-variance group), `GroupLabels`
  and `group_signal_metrics` (zero-variance groups per label, at the first draw and after resampling).
- Across processes: `run_groups` (which group each run belongs to), `gather_scores` (every process's rewards and
  successes), `zero_variance_groups`, `log_step_metrics` (into TRL's metric sink, averaged over processes).
"""

from __future__ import annotations

import inspect
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cells.errors import DriftCallError
from cells.step_02_profiles import knob_cap, knob_choices

ADVANTAGE_EPS = 1e-4  # TRL's epsilon in (r - mean) / (std + eps)
# Replacement records for zero-variance groups come from dataset indices past any curriculum step (a run has at
# most a few thousand): `RESAMPLE_FROM` plus a digest of (step, round) within `RESAMPLE_SPAN`, so a replacement is
# the same record on every process and after a resume, and never one of the curriculum's own steps. A digest rather
# than an arithmetic offset: the failure curriculum cycles a list of n seeds (record i plays seed i mod n), and an
# offset that n divides would replay the very seed that gave no signal.
RESAMPLE_FROM = 500_000
RESAMPLE_SPAN = 400_000  # below the episode dataset's 1,000,000 records


class BatchError(DriftCallError, ValueError):
    """The generation batch does not have the shape the trainer relies on."""


@dataclass(frozen=True)
class PromptRun:
    """Consecutive rows of one prompt on this process: `count` episodes of its group, the first of them
    episode `first_generation` (0..G-1) of the group."""

    row: Mapping[str, Any]
    first_generation: int
    count: int


def prompt_runs(inputs: Sequence[Mapping[str, Any]], num_generations: int, key: Callable[[Mapping[str, Any]], Any],
                offset: int = 0) -> list[PromptRun]:
    """This process's rows as runs of one prompt each.

    TRL's RepeatSampler repeats every prompt G times in a row over the global generation batch, and each
    process holds the contiguous slice starting at global row `offset`; so row i is episode
    `(offset + i) % G` of its group, and a group may be split between processes (checked with `key`)."""
    if not inputs:
        raise BatchError("empty generation batch")
    runs: list[list[Any]] = []
    for i, row in enumerate(inputs):
        generation = (offset + i) % num_generations
        if i and generation:
            if repr(key(row)) != repr(key(runs[-1][0])):
                raise BatchError(f"rows {offset + i - 1} and {offset + i} of the generation batch are in one group of "
                                 f"G={num_generations} but hold different prompts; TRL's RepeatSampler repeats each "
                                 "prompt G times in a row")
            runs[-1][2] += 1
        else:
            runs.append([row, generation, 1])
    return [PromptRun(row, first, count) for row, first, count in runs]


def pad_trajectories(trajectories: Sequence[Any], pad_id: int, device: Any = None) -> dict[str, Any]:
    """Pad `TrajectoryTokens` into TRL's tensors: prompt left-padded, completion right-padded."""
    import torch

    n = len(trajectories)
    p_len = max(len(t.prompt_ids) for t in trajectories)
    c_len = max(1, max(len(t.completion_ids) for t in trajectories))
    prompt_ids = torch.full((n, p_len), pad_id, dtype=torch.long)  # (B, P)
    prompt_mask = torch.zeros((n, p_len), dtype=torch.long)  # (B, P)
    completion_ids = torch.full((n, c_len), pad_id, dtype=torch.long)  # (B, C)
    completion_mask = torch.zeros((n, c_len), dtype=torch.long)  # (B, C): attention over the completion
    tool_mask = torch.zeros((n, c_len), dtype=torch.long)  # (B, C): 1 = model token (trained)
    for row, traj in enumerate(trajectories):
        p, c = len(traj.prompt_ids), len(traj.completion_ids)
        prompt_ids[row, p_len - p:] = torch.tensor(traj.prompt_ids, dtype=torch.long)
        prompt_mask[row, p_len - p:] = 1
        if c:
            completion_ids[row, :c] = torch.tensor(traj.completion_ids, dtype=torch.long)
            completion_mask[row, :c] = 1
            tool_mask[row, :c] = torch.tensor(traj.assistant_mask, dtype=torch.long)
    out = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
           "completion_mask": completion_mask, "tool_mask": tool_mask}
    return {k: v.to(device) for k, v in out.items()} if device is not None else out


def group_advantages(rewards: Any, num_generations: int, scale: str = "group") -> tuple[Any, Any]:
    """`(advantages (B,), zero_std (B,) bool)`: `(r - group mean) / (std + eps)` per TRL's `scale_rewards`.

    `scale`: "group" divides by each group's std, "batch" by the whole batch's, "none" not at all.
    Std is the unbiased sample std, as in TRL.
    """
    import torch

    grouped = rewards.view(-1, num_generations)  # (B/G, G)
    mean = grouped.mean(dim=1).repeat_interleave(num_generations)  # (B,)
    group_std = grouped.std(dim=1).repeat_interleave(num_generations)  # (B,)
    if scale not in (scales := knob_choices("grpo_scale_rewards")):
        raise BatchError(f"scale_rewards must be one of {scales}, got {scale!r}")
    if scale in ("group", "none"):
        std = group_std
    else:  # "batch"
        std = rewards.std().expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
    advantages = rewards - mean
    if scale != "none":
        advantages = advantages / (std + ADVANTAGE_EPS)
    zero_std = torch.isclose(group_std, torch.zeros_like(group_std))
    return advantages, zero_std


def step_advantages(trajectories: Sequence[Any], rewards: Sequence[float], num_generations: int,
                    scale: str = "group") -> list[list[float]]:
    """Per trajectory, one advantage per assistant turn (`turn_spans`): GiGPO's step-level credit (arXiv
    2505.10978). A group's G episodes start from the same reset and drift schedule, so two of them whose tokens
    before turn k are identical stand in the same environment state there (an *anchor state*); at turn k each is
    compared with the others of its anchor group by episode reward, `(r - mean) / (std + eps)` (no division for
    `scale="none"`), 0 in an anchor group of one. Where all G share the state (turn 0) this is the episode
    advantage; where two actions part, the whole contrast lands on the turn that parted them, not on every token
    of a 10-16-turn episode. `trajectories` hold whole groups, in order (G consecutive trajectories per group)."""
    import statistics

    if len(trajectories) % num_generations or len(rewards) != len(trajectories):
        raise BatchError(f"step advantages need whole groups: {len(trajectories)} trajectories, {len(rewards)} "
                         f"rewards, G={num_generations}")
    out: list[list[float]] = [[0.0] * len(t.turn_spans) for t in trajectories]
    for start in range(0, len(trajectories), num_generations):
        anchors: dict[tuple[int, tuple[int, ...]], list[tuple[int, int]]] = defaultdict(list)
        for i in range(start, start + num_generations):
            ids = trajectories[i].completion_ids
            for k, (begin, _) in enumerate(trajectories[i].turn_spans):
                anchors[(k, tuple(ids[:begin]))].append((i, k))
        for members in anchors.values():
            if len(members) < 2:
                continue
            values = [float(rewards[i]) for i, _ in members]
            mean, std = statistics.fmean(values), statistics.stdev(values)
            for (i, k), value in zip(members, values, strict=True):
                out[i][k] = (value - mean) if scale == "none" else (value - mean) / (std + ADVANTAGE_EPS)
    return out


def per_token_advantages(episode_advantages: Any, trajectories: Sequence[Any], steps: Sequence[Sequence[float]],
                         weight: float, completion_len: int) -> Any:
    """(B, C) advantages: each trajectory's episode advantage on every token, plus `weight` x its step advantage on
    the tokens of each of its turns (`step_advantages`); what TRL's loss reads when advantages are per token."""

    out = episode_advantages.view(-1, 1).repeat(1, completion_len).clone()  # (B, C)
    for row, (traj, per_turn) in enumerate(zip(trajectories, steps, strict=True)):
        for (begin, end), value in zip(traj.turn_spans, per_turn, strict=True):
            out[row, begin:end] += weight * value
    return out


def contrast_metrics(row_groups: Sequence[int], contrast: Sequence[bool], tokens: Sequence[int],
                     kept: Sequence[int]) -> dict[str, float]:
    """Where the step's gradient can point at success: the share of groups with a success and a failure
    (`groups/contrast_frac`), of this process's episodes and model tokens in such groups (`episodes/contrast_frac`,
    `tokens/contrast_frac`), and of its model tokens that reach the update (`tokens/updated_frac`; their count,
    `tokens/updated`, and of those episodes, `episodes/updated`: what the step trained on, beside what the
    equal-compute controls train on, `cells/experiments/compute.py`)."""
    total = sum(tokens) or 1
    in_contrast = [r for r, g in enumerate(row_groups) if contrast[g]]
    updated = sum(tokens[r] for r in kept)
    return {"groups/contrast_frac": sum(contrast) / max(1, len(contrast)),
            "episodes/contrast_frac": len(in_contrast) / max(1, len(row_groups)),
            "tokens/contrast_frac": sum(tokens[r] for r in in_contrast) / total,
            "tokens/updated_frac": updated / total, "tokens/updated": float(updated),
            "episodes/updated": float(len(kept))}


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


def rollout_metrics(
    episodes: Sequence[Any],
    rewards: Sequence[float],
    components: Sequence[Mapping[str, float]],
    zero_std_groups: float,
    model_tokens: int,
    seconds: float,
    decode_steps: int | None = None,
) -> dict[str, float]:
    """Slash-named metrics for one generation batch (means over its episodes)."""
    n = len(episodes)
    mean = sum(rewards) / n
    var = sum((r - mean) ** 2 for r in rewards) / max(1, n - 1)
    out: dict[str, float] = {"reward/mean": mean, "reward/std": var ** 0.5, "groups/zero_std_frac": zero_std_groups}
    sums: dict[str, list[float]] = defaultdict(list)
    for comp in components:
        for name, value in comp.items():
            if name != "reward":
                sums[name].append(float(value))
    out.update({f"reward/{name}": sum(v) / len(v) for name, v in sums.items()})
    failures, turns, fired = 0, 0, 0
    by_lang: dict[str, list[float]] = defaultdict(list)
    for episode, reward in zip(episodes, rewards, strict=True):
        failures += int(_get(episode, "parse_failures", 0) or 0)
        turns += int(_get(episode, "turns_used", 0) or 0)
        fired += int(bool(_get(episode, "drifts", ()) or ()))
        lang = _get(_get(episode, "goal"), "language")
        if lang:
            by_lang[str(lang)].append(reward)
    out["episode/parse_failure_rate"] = failures / turns if turns else 0.0
    out["episode/turns_mean"] = turns / n
    out["drift/fired_rate"] = fired / n
    out.update({f"reward/lang/{lang}": sum(v) / len(v) for lang, v in sorted(by_lang.items())})
    out["rollout/model_tokens_mean"] = model_tokens / n
    out["rollout/tokens_per_s"] = model_tokens / seconds if seconds > 0 else 0.0
    out["rollout/seconds"] = seconds
    if decode_steps is not None:
        out["rollout/decode_steps"] = float(decode_steps)
    return out


def replacement_step(step: int, round_: int) -> int:
    """The dataset index whose record replaces the group of curriculum step `step` in resampling round `round_`."""
    from cells.seeding import stable_int

    if not 0 <= round_ < (rounds := knob_cap("grpo_resample_rounds")):
        raise BatchError(f"resampling round {round_} outside [0, {rounds})")
    return RESAMPLE_FROM + stable_int("grpo.resample", int(step), round_) % RESAMPLE_SPAN


@dataclass(frozen=True)
class GroupLabels:
    """How the trainer names a group in its per-label signal metrics: `of(episode)` (the group's first episode)
    returns one of `names`. Every name is logged at every step, zero counts included, so folding the logs over a
    stage divides sums, not means of shares."""

    names: tuple[str, ...]
    of: Callable[[Any], str]


def group_signal_metrics(names: Sequence[str], first: Sequence[tuple[str, bool]],
                         final: Sequence[tuple[str, bool]]) -> dict[str, float]:
    """Counts per label: `groups/<label>/first_n` groups and `first_zero` of them with zero reward variance at the
    first draw; `n` and `zero` the same for the groups the loss saw (after resampling). `first`/`final` hold
    `(label, zero_variance)` per group of the generation batch."""
    out: dict[str, float] = {}
    for name in names:
        for prefix, groups in (("first_", first), ("", final)):
            mine = [zero for label, zero in groups if label == name]
            out[f"groups/{name}/{prefix}n"] = float(len(mine))
            out[f"groups/{name}/{prefix}zero"] = float(sum(mine))
    unknown = {label for label, _ in (*first, *final)} - set(names)
    if unknown:
        raise BatchError(f"group labels {sorted(unknown)} are not among the declared {list(names)}")
    return out


def accepts_first_generation(fn: Any) -> bool:
    """Whether a `rollout_group_fn` can play part of a group (it takes `first_generation`, or any keyword)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable: no signature to read
        return False
    return any(p.name == "first_generation" or p.kind is p.VAR_KEYWORD for p in params)


def run_groups(counts: Sequence[int], first_row: int, num_generations: int) -> list[int]:
    """The generation batch's group index of each run of `counts` episodes, this process's rows starting at global
    row `first_row` (a group may be split between processes)."""
    out, row = [], first_row
    for count in counts:
        out.append(row // num_generations)
        row += count
    return out


def episode_successes(episodes: Sequence[Any]) -> list[float]:
    """1.0 for each episode the judge counts as a success (`r_task >= 1`), else 0.0."""
    from cells.modeling.episode_rewards import reward_components

    return [1.0 if reward_components(e).get("r_task", 0.0) >= 1.0 else 0.0 for e in episodes]


def zero_variance_groups(all_rewards: Any, num_generations: int, scale: str) -> list[bool]:
    """Per group of the generation batch: True when its G rewards are all equal (no advantage, no gradient)."""
    return [bool(z) for z in group_advantages(all_rewards, num_generations, scale)[1]
            .view(-1, num_generations)[:, 0].tolist()]


def gather_scores(accelerator: Any, rewards: Sequence[float], successes: Sequence[float]) -> tuple[Any, Any]:
    """`(all_rewards, all_successes)`, each (B * processes,): every process's rewards and successes (0/1), in
    process order, in one collective (a (B, 2) tensor gathered along the batch)."""
    import torch

    local = torch.tensor(list(zip(rewards, successes, strict=True)), dtype=torch.float32,
                         device=accelerator.device).view(-1, 2)
    gathered = accelerator.gather(local)
    return gathered[:, 0].contiguous(), gathered[:, 1].contiguous()  # contiguous: callers `.view` them by group


def log_step_metrics(sink: Any, accelerator: Any, metrics: Mapping[str, float], rewards: Any, zero_std: Any) -> None:
    """Into TRL's metric sink (`trainer._metrics[mode]`, averaged and logged at the next `log`). `rewards`/`zero_std`
    cover the whole generation batch (every process); the episode metrics are averaged over processes."""
    import torch

    sink["reward"].append(rewards.mean().item())  # TRL's own names, for its dashboards
    sink["reward_std"].append(rewards.std().item() if rewards.numel() > 1 else 0.0)
    sink["frac_reward_zero_std"].append(zero_std.float().mean().item())
    names = sorted(metrics)  # the same order on every process; processes may see different languages
    if accelerator.num_processes > 1:
        from accelerate.utils import gather_object

        names = sorted({n for names_of in gather_object([names]) for n in names_of})
        local = torch.tensor([float(metrics.get(n, float("nan"))) for n in names], device=accelerator.device)
        values = torch.nanmean(accelerator.gather(local.unsqueeze(0)), dim=0).tolist()
    else:
        values = [float(metrics[n]) for n in names]
    for name, value in zip(names, values, strict=True):
        sink[name].append(value)
