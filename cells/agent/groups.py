"""GRPO groups played as rollouts: a `RolloutGroupFn` for the trainer (`make_rollout_group_fn`), several groups of
one step in ONE batched rollout (`play_groups`), and each episode's own sampling seed (`episode_sample_seed`).

The turn-by-turn driver they call is `cells/agent/rollout.rollout_batch`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cells.agent.rollout import (
    TrajectoryTokens,
    default_render_observation,
    default_system_prompt,
    rollout_batch,
)
from cells.agent.turns import DEFAULT_GENERATION, GenerationSpec
from cells.seeding import stable_int


@dataclass(frozen=True)
class GroupRequest:
    """`count` episodes of one GRPO group: its goal and seed, starting at episode `first_generation` (0..G-1)."""

    goal: Any
    episode_seed: int
    count: int
    first_generation: int = 0


@dataclass(frozen=True)
class PlayedGroups:
    """What `play_groups` returns: `(episodes, trajectories)` per requested group, in order, and the rollout's
    decoding steps (`RolloutResult.decode_steps`)."""

    groups: tuple[tuple[tuple[Any, ...], tuple[TrajectoryTokens, ...]], ...]
    decode_steps: int


def make_rollout_group_fn(
    *,
    system_prompt_fn: Callable[[Any, Any], str] = default_system_prompt,
    render_observation: Callable[[Any], str] = default_render_observation,
    generation: GenerationSpec = DEFAULT_GENERATION,
    **overrides: Any,
) -> Callable[..., tuple[tuple[Any, ...], tuple[TrajectoryTokens, ...]]]:
    """A `RolloutGroupFn` for the trainer: G fresh envs, same seed, same goal, one batched rollout with
    `generation` (and `overrides`, `GenerationSpec` fields by name).

    Episode k of a group (`first_generation + k`, counted over the whole group) samples from its own seed,
    `episode_sample_seed(episode_seed, k)`: the same tokens whether the group is played at once or split
    across processes. Keep `temperature` equal to the GRPOConfig's: TRL scores log-probs at that temperature.

    The function also carries `play_groups(*, model, tokenizer, groups, env_factory) -> PlayedGroups`: several
    groups (`GroupRequest`s) in ONE batched rollout. The trainer uses it for a step of several prompts: on a CPU
    a decoding step costs about the same for 16 rows as for 8 (per-token overhead, not arithmetic, bounds these
    small models), so two groups played together take ~half the time of two played in turn, and each episode's
    tokens are still its own seed's.
    """
    spec = generation.with_overrides(**overrides)

    def play_groups(*, model: Any, tokenizer: Any, groups: Sequence[GroupRequest], env_factory: Callable[[], Any]
                    ) -> PlayedGroups:
        rows = [(group, group.first_generation + k) for group in groups for k in range(group.count)]
        envs = [env_factory() for _ in rows]
        goal_of = {id(env): group.goal for env, (group, _) in zip(envs, rows, strict=True)}
        result = rollout_batch(
            envs, [group.episode_seed for group, _ in rows], model=model, tokenizer=tokenizer,
            system_prompt_fn=system_prompt_fn, goal_fn=lambda env, obs: goal_of[id(env)],
            render_observation=render_observation, generation=spec,
            sample_seeds=[episode_sample_seed(group.episode_seed, k) for group, k in rows],
        )
        assert result.trajectories is not None  # a tokenizer was given
        out, start = [], 0
        for group in groups:
            end = start + group.count
            out.append((result.episodes[start:end], result.trajectories[start:end]))
            start = end
        return PlayedGroups(tuple(out), result.decode_steps)

    def rollout_group(*, model: Any, tokenizer: Any, goal: Any, episode_seed: int, num_generations: int,
                      env_factory: Callable[[], Any], first_generation: int = 0,
                      ) -> tuple[tuple[Any, ...], tuple[TrajectoryTokens, ...]]:
        request = GroupRequest(goal, episode_seed, num_generations, first_generation)
        return play_groups(model=model, tokenizer=tokenizer, groups=[request], env_factory=env_factory).groups[0]

    rollout_group.play_groups = play_groups  # type: ignore[attr-defined]
    return rollout_group


def episode_sample_seed(episode_seed: int, generation: int) -> int:
    """Sampling seed of episode `generation` (0..G-1) of the GRPO group playing `episode_seed`."""
    return stable_int("rollout.episode", int(episode_seed), int(generation)) % 2**63


def rollout_group_fn_for_profile(profile: Any, **callables: Any) -> Callable[..., Any]:
    """`make_rollout_group_fn` with the profile's generation knobs (callables: system_prompt_fn, ...)."""
    return make_rollout_group_fn(generation=GenerationSpec.for_profile(profile), **callables)
