"""Golden rewards: fixed seeds, fixed scripted players, committed values. A change to vendors, drift,
tasks, the env or the reward that moves any of them fails here and must be explained (then regenerate
with `UPDATE_GOLDEN=1 python -m pytest tests/test_golden_rewards.py`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cells.step_02_profiles import EVAL_SEEDS
from cells.step_10_env import DriftCallEnv
from cells.step_11_agent import EXPLOIT_POLICIES, ExpertPolicy, HonestFailurePolicy, NaivePolicy, play_episode

GOLDEN = Path(__file__).parent / "golden" / "rewards.json"
PLAYERS = {"expert": ExpertPolicy, "naive": NaivePolicy, "honest_failure": HonestFailurePolicy,
           "drift_then_quit": EXPLOIT_POLICIES["drift_then_quit"]}


def current_values() -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for stage in (1, 2, 3):
        for i in range(6):
            seed = EVAL_SEEDS.seed(10_000 + 10 * stage + i)
            for name, player in PLAYERS.items():
                _, rewards = play_episode(DriftCallEnv(stage), player(), seed=seed)
                out[f"{stage}:{seed}:{name}"] = {
                    "reward": round(rewards.reward, 6), "r_task": rewards.r_task,
                    "r_drift": None if rewards.r_drift is None else round(rewards.r_drift, 6),
                    "r_penalty": round(rewards.r_penalty, 6),
                }
    return out


def test_rewards_match_committed_golden_values():
    values = current_values()
    if os.environ.get("UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps(values, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    assert set(values) == set(golden)
    for key, expected in golden.items():
        assert values[key] == pytest.approx(expected), key
