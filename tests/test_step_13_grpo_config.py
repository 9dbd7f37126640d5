"""Step 13: real GRPOConfig per profile/stage, precision rules, reward_fn from episodes."""

from __future__ import annotations

import dataclasses
import math
import sys
import types

import pytest

from cells import step_13_grpo_config as s13
from cells.modeling.episode_rewards import reward_components
from cells.step_02_profiles import get_profile


def test_cpu_config_is_a_real_grpo_config(tmp_path):
    from trl import GRPOConfig

    prof = get_profile("cpu-smoke")
    cfg = s13.build_grpo_config(prof, 2, tmp_path)
    assert isinstance(cfg, GRPOConfig)
    assert cfg.learning_rate == prof.learning_rate
    assert getattr(cfg.lr_scheduler_type, "value", cfg.lr_scheduler_type) == "cosine"
    assert cfg.num_generations == prof.num_generations
    assert cfg.per_device_train_batch_size == prof.prompts_per_step * prof.num_generations
    assert cfg.beta == s13.BETA_KL == 0.04
    assert cfg.use_cpu and not cfg.bf16 and not cfg.fp16
    assert cfg.report_to in ([], "none", ["none"])
    assert cfg.remove_unused_columns is False and cfg.shuffle_dataset is False
    assert cfg.logging_steps == 1 and cfg.max_steps == prof.steps_per_stage[1]
    assert cfg.max_completion_length == prof.max_episode_tokens
    assert cfg.output_dir == str(tmp_path)
    assert cfg.scale_rewards == prof.grpo_scale_rewards == "group"
    batch = s13.build_grpo_config(dataclasses.replace(prof, grpo_scale_rewards="batch"), 2, tmp_path)
    assert batch.scale_rewards == "batch"


def test_without_a_reference_beta_is_0_and_the_upper_clip_is_the_profiles(tmp_path):
    prof = dataclasses.replace(get_profile("cpu-smoke"), grpo_reference=False, grpo_clip_high=0.28)
    cfg = s13.build_grpo_config(prof, 2, tmp_path)
    assert cfg.beta == 0.0 and cfg.epsilon == 0.2 and cfg.epsilon_high == 0.28
    assert s13.build_grpo_config(get_profile("cpu-smoke"), 2, tmp_path).epsilon_high == 0.2  # the default: symmetric
    with pytest.raises(ValueError, match="grpo_clip_high must be >= 0"):
        dataclasses.replace(prof, grpo_clip_high=-0.1)


def test_grpo_iterations_become_trls_num_iterations_and_must_be_at_least_one(tmp_path):
    prof = get_profile("cpu-smoke")
    assert prof.grpo_iterations == 1 and s13.build_grpo_config(prof, 2, tmp_path).num_iterations == 1
    assert s13.build_grpo_config(dataclasses.replace(prof, grpo_iterations=3), 2, tmp_path).num_iterations == 3
    with pytest.raises(ValueError, match="grpo_iterations must be >= 1"):
        dataclasses.replace(prof, grpo_iterations=0)


def test_overrides_win_and_bad_stage_raises(tmp_path):
    prof = get_profile("cpu-smoke")
    cfg = s13.build_grpo_config(prof, 1, tmp_path, max_steps=7, beta=0.0)
    assert cfg.max_steps == 7 and cfg.beta == 0.0
    for bad in (0, 4, "1"):
        with pytest.raises(s13.GRPOConfigError, match="stage"):
            s13.build_grpo_config(prof, bad, tmp_path)


def test_precision_rules(monkeypatch):
    assert s13._precision_kwargs(get_profile("cpu-smoke")) == {"use_cpu": True, "bf16": False, "fp16": False}
    monkeypatch.setattr(s13, "_bf16_supported", lambda: True)
    assert s13._precision_kwargs(get_profile("colab-a100"))["bf16"] is True
    assert s13._precision_kwargs(get_profile("colab-t4")) == {"bf16": False, "fp16": True}
    monkeypatch.setattr(s13, "_bf16_supported", lambda: False)  # A100 profile on a GPU without bf16
    assert s13._precision_kwargs(get_profile("colab-a100")) == {"bf16": False, "fp16": True}


class _Ep:
    def __init__(self, reward):
        self.reward = reward


def test_reward_fn_reads_episode_rewards():
    eps = [_Ep(0.25), {"reward": 1}, types.SimpleNamespace(rewards=types.SimpleNamespace(reward=0.5))]
    out = s13.reward_fn(prompts=["p"] * 3, completions=["a", "b", "c"], _meta=None, episodes=eps)
    assert out == [0.25, 1.0, 0.5] and all(isinstance(v, float) for v in out)


@pytest.mark.parametrize("bad", [float("nan"), "0.3", None, True])
def test_reward_fn_rejects_non_numeric(bad, monkeypatch):
    monkeypatch.setitem(sys.modules, "cells.step_08_rewards",
                        types.SimpleNamespace(compute_rewards=lambda e: {"reward": bad}))
    with pytest.raises(s13.GRPOConfigError, match="numeric reward"):
        s13.reward_fn(prompts=["p"], completions=["a"], _meta=None, episodes=[{"reward": bad}])


def test_reward_fn_length_mismatch():
    with pytest.raises(s13.GRPOConfigError, match="must match"):
        s13.reward_fn(prompts=["p"], completions=["a", "b"], _meta=None, episodes=[_Ep(0.1)])


def test_reward_fn_falls_back_to_step_08(monkeypatch):
    seen = []

    def compute_rewards(episode):
        seen.append(episode)
        return types.SimpleNamespace(reward=0.7, r_task=1.0, r_drift=None, r_constraints=0.5, r_format=1.0,
                                     r_penalty=-0.1, brier=0.09)

    monkeypatch.setitem(sys.modules, "cells.step_08_rewards", types.SimpleNamespace(compute_rewards=compute_rewards))
    episode = types.SimpleNamespace(goal="g")  # a real Episode carries no reward of its own
    assert s13.reward_fn(prompts=["p"], completions=["c"], _meta=[{}], episodes=[episode]) == [0.7]
    comps = reward_components(episode)
    assert comps == {"reward": 0.7, "r_task": 1.0, "r_constraints": 0.5, "r_format": 1.0, "r_penalty": -0.1,
                     "brier": 0.09}  # r_drift None is skipped
    assert seen == [episode, episode]


def test_env_episodes_are_scored_once_on_the_way_to_the_trainer(monkeypatch):
    """The env scores at termination and attaches the score; reward_fn and reward_components reuse it."""
    from cells import step_08_rewards
    from cells.agent.play import play_many
    from cells.agent.policies import ExpertPolicy
    from cells.step_10_env import make_env_factory

    calls = []
    real = step_08_rewards.compute_rewards
    monkeypatch.setattr(step_08_rewards, "compute_rewards", lambda ep, *a, **k: calls.append(1) or real(ep, *a, **k))
    played = play_many(make_env_factory(2), ExpertPolicy, [1, 2, 3])
    episodes = [p.episode for p in played]
    assert len(calls) == 3 and all(ep.rewards == p.rewards for ep, p in zip(episodes, played, strict=True))
    values = s13.reward_fn(prompts=["p"] * 3, completions=["c"] * 3, _meta=None, episodes=episodes)
    comps = [reward_components(ep) for ep in episodes]
    assert step_08_rewards.rewards_of(episodes[0]) is episodes[0].rewards
    assert len(calls) == 3, "reward_fn / reward_components / rewards_of scored an env episode again"
    assert values == [p.rewards.reward for p in played] and comps[0]["reward"] == values[0]
    assert real(episodes[0]) == episodes[0].rewards  # the attached score is exactly step 8's


def test_reward_components_from_toy_mapping():
    ep = types.SimpleNamespace(reward=0.3, components={"r_format": 1.0, "custom": 0.5})
    comps = reward_components(ep)
    assert comps["reward"] == 0.3 and comps["r_format"] == 1.0 and comps["custom"] == 0.5
    assert all(math.isfinite(v) for v in comps.values())
