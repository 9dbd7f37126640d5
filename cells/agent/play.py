"""Text-level episode driver: a scripted policy plays `DriftCallEnv` through `step_text`, exactly
as a model does (its actions are JSON text that the env parses), plus the SFT warm-start data.

    episode, rewards = play_episode(DriftCallEnv(stage=2), ExpertPolicy(), seed=7)
    results = play_many(make_env_factory(2), ExpertPolicy, seeds=range(100))
    conversations = expert_conversations(64, stage=1, seed=0)   # chat messages for SFT

Policies get a `GoalReader` at reset (the scripted players' perfect-NLU assumption, see
policies/base.py); a policy that needs none ignores it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from cells.agent.policies.base import GoalReader, Policy
from cells.errors import DriftCallError
from cells.step_04_datatypes import Episode, Rewards

MAX_POLICY_TURNS = 64  # far above every stage budget; a policy can never loop forever


class PlayError(DriftCallError, RuntimeError):
    """The env did not end within MAX_POLICY_TURNS (an env bug: budgets end every episode)."""


@dataclass(frozen=True)
class PlayResult:
    """One played episode."""

    seed: int
    episode: Episode
    rewards: Rewards
    transcript: tuple[str, ...]  # the assistant texts, in order
    applied: bool = True  # an exploit's trick changed something in this episode (its `applied`; others: True)


def play_episode(env: Any, policy: Policy, seed: int, on_turn: Callable[[Any, str], None] | None = None
                 ) -> tuple[Episode, Rewards]:
    """Reset `env` with `seed`, let `policy` act until done; returns the episode and its rewards."""
    result = _play(env, policy, seed, on_turn)
    return result.episode, result.rewards


def _play(env: Any, policy: Policy, seed: int, on_turn: Callable[[Any, str], None] | None = None) -> PlayResult:
    obs = env.reset(seed=seed)
    policy.reset(obs, GoalReader.from_goal(env.goal))
    texts = []
    for _ in range(MAX_POLICY_TURNS):
        if obs.done:
            return PlayResult(seed, env.episode(), env.rewards(), tuple(texts), trick_applied(policy))
        text = policy.act(obs)
        texts.append(text)
        if on_turn is not None:
            on_turn(obs, text)
        obs = env.step_text(text)
    raise PlayError(f"episode with seed {seed} did not end within {MAX_POLICY_TURNS} turns")


def trick_applied(policy: Policy) -> bool:
    """Whether an exploit's trick changed anything in the episode it just played (its `applied`); a policy
    without one (every honest player, and exploits whose trick is the whole episode) always applies."""
    return bool(getattr(policy, "applied", True))


def play_many(factory: Callable[[], Any], policy_factory: Callable[[], Policy], seeds: Iterable[int]
              ) -> list[PlayResult]:
    """One fresh env and policy per seed (envs are cheap); results in seed order."""
    return [_play(factory(), policy_factory(), int(seed)) for seed in seeds]


def conversation(env: Any, policy: Policy, seed: int, stop_after: Callable[[str], bool] | None = None,
                 after_reset: Callable[[Any], None] | None = None) -> list[dict[str, str]]:
    """The chat messages of one episode in the exact rendering the GRPO rollout uses:
    turn 0 = system prompt + utterance, assistant = the action text, user = rendered observation.
    With `stop_after`, the messages end at the first action text it accepts (the episode is left unfinished);
    `after_reset(env)` runs once the episode has started, before the first action (a drill's control)."""
    from cells.agent.prompt import initial_messages, render_observation

    obs = env.reset(seed=seed)
    if after_reset is not None:
        after_reset(env)
    policy.reset(obs, GoalReader.from_goal(env.goal))
    messages = initial_messages(env.goal, obs.available_tools)
    for _ in range(MAX_POLICY_TURNS):
        text = policy.act(obs)
        messages.append({"role": "assistant", "content": text})
        if stop_after is not None and stop_after(text):
            return messages
        obs = env.step_text(text)
        if obs.done:
            return messages
        messages.append({"role": "user", "content": render_observation(obs)})
    raise PlayError(f"episode with seed {seed} did not end within {MAX_POLICY_TURNS} turns")


def expert_conversations(n: int, stage: int = 1, seed: int = 0, language_weights: dict[str, float] | None = None,
                         tokenizer: Any = None, min_reward: float = 0.5) -> list[list[dict[str, str]]]:
    """`n` expert conversations on training seeds (TRAIN_SEEDS from `seed`), for the SFT warm start.

    Episodes the expert failed (reward < `min_reward`) are skipped so the warm start only imitates
    success. `tokenizer` is accepted for step 15's call and unused: rendering is text-level.
    """
    from cells.step_10_env import DriftCallEnv

    env = DriftCallEnv(stage, language_weights)
    return collect_expert(n, seed, lambda s: successful_conversation(env, s, min_reward))


def successful_conversation(env: Any, seed: int, min_reward: float) -> list[dict[str, str]] | None:
    """The expert's conversation on `seed`, or None when its episode earned less than `min_reward`."""
    from cells.agent.policies.expert import ExpertPolicy

    messages = conversation(env, ExpertPolicy(), seed)
    return messages if env.rewards().reward >= min_reward else None


def collect_expert(n: int, start: int, make: Callable[[int], list[dict[str, str]] | None],
                   what: str = "conversations", on_found: Callable[[], object] | None = None,
                   seeds_per_result: int = 4) -> list[list[dict[str, str]]]:
    """`n` results of `make(seed)` that are not None, over consecutive training seeds from index `start`
    (`TRAIN_SEEDS.seed`); `on_found` is called for each. Raises `PlayError` after `seeds_per_result * n + 100`
    seeds without `n` results (the expert fails too often, or `make` accepts too few seeds)."""
    from cells.step_02_profiles import TRAIN_SEEDS

    out: list[list[dict[str, str]]] = []
    index = start
    while len(out) < n:
        if index - start > seeds_per_result * n + 100:
            raise PlayError(f"too few {what}: {len(out)} of {n} after {index - start} seeds (the expert failed "
                            "too often, or too few seeds qualify)")
        messages = make(TRAIN_SEEDS.seed(index))
        index += 1
        if messages is not None:
            out.append(messages)
            if on_found is not None:
                on_found()
    return out
