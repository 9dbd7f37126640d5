"""Rewards read off finished episodes: what GRPO trains on (step 13's `reward_fn`) and logs (the trainer's
`reward/<component>` metrics).

`episode_rewards(episode)` finds the scored rewards: those the env attached when the episode ended (nothing is
scored twice), a bare numeric `reward` (toy envs in tests), else step 8's `compute_rewards`.
`reward_components(episode)` flattens them to `{"reward", "r_task", ...}` floats, non-numeric ones skipped.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

COMPONENT_NAMES: tuple[str, ...] = ("r_task", "r_drift", "r_constraints", "r_format", "r_penalty", "brier")


def field_of(obj: Any, name: str) -> Any:
    """`obj[name]` for a mapping, else `obj.name`; None when missing."""
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def is_finite_number(value: Any) -> bool:
    """A real int or float (not a bool), finite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(float(value))


def episode_rewards(episode: Any) -> Any:
    """The Rewards-like object (or mapping) for `episode`.

    Order: the episode's own `rewards` (DriftCallEnv attaches them when it scores the episode, so
    nothing is scored twice), a bare numeric `reward` (toy envs), else step 8's `compute_rewards`.
    """
    attached = field_of(episode, "rewards")
    if attached is not None and not callable(attached):
        return attached
    if is_finite_number(field_of(episode, "reward")):
        return episode
    from cells.step_08_rewards import compute_rewards

    return compute_rewards(episode)


def reward_components(episode: Any) -> dict[str, float]:
    """Scalar reward plus every numeric component the episode's rewards expose (None ones skipped)."""
    rewards = episode_rewards(episode)
    out = {"reward": float(field_of(rewards, "reward"))}
    extra = field_of(rewards, "components")
    names = list(COMPONENT_NAMES) + (list(extra) if isinstance(extra, Mapping) else [])
    for name in names:
        value = extra.get(name) if isinstance(extra, Mapping) and name in extra else field_of(rewards, name)
        if is_finite_number(value):
            out[name] = float(value)
    return out
