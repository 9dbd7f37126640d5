"""GRPO against environments on other processes (issue 15): a short `DriftCallGRPOTrainer` stage whose env
factory opens sessions on two local `python -m cells serve` processes plays exactly the episodes the same
stage plays in process (each episode's `Episode.to_json()`, byte for byte)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from cells.distributed import free_port

os.environ.setdefault("HF_HUB_OFFLINE", "1")

TOKEN, JUDGE = "agent-token-0123456789", "judge-token-0123456789"
ROOT = Path(__file__).resolve().parents[1]
STAGE, G, STEPS = 1, 4, 2
pytestmark = pytest.mark.xdist_group("remote_envs")


@contextmanager
def servers(n: int) -> Iterator[list[str]]:
    """`n` real server processes (`python -m cells serve --stage STAGE`) on free loopback ports."""
    procs, urls = [], []
    env = {**os.environ, "DRIFTCALL_TOKEN": TOKEN, "DRIFTCALL_JUDGE_TOKEN": JUDGE}
    try:
        for _ in range(n):
            port = free_port()
            procs.append(subprocess.Popen([sys.executable, "-m", "cells", "serve", "--stage", str(STAGE),
                                           "--port", str(port)], cwd=ROOT, env=env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            urls.append(f"http://127.0.0.1:{port}")
        for proc, url in zip(procs, urls, strict=True):
            deadline = time.monotonic() + 60
            while True:
                assert proc.poll() is None and time.monotonic() < deadline, f"server {url} did not start"
                try:
                    if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.2)
        yield urls
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)


def train_stage(env_factory, tmp_path: Path) -> list[str]:
    """STEPS GRPO steps of the tiny model (same init every call) with `env_factory`; every episode it scored."""
    import torch
    from peft import get_peft_model

    from cells.agent.groups import make_rollout_group_fn
    from cells.modeling.tiny import build_or_load_tiny
    from cells.step_02_profiles import get_profile
    from cells.step_07_tasks import generate
    from cells.step_10_env import DEFAULT_LANGUAGE_WEIGHTS
    from cells.step_12_model import lora_config
    from cells.step_13_grpo_config import build_grpo_config, reward_fn
    from cells.step_14_trainer import EpisodeDatasetAdapter, make_driftcall_grpo_trainer_cls

    profile = dataclasses.replace(get_profile("cpu-smoke"), num_generations=G, prompts_per_step=2)
    base, tok, _ = build_or_load_tiny(profile.tiny, tmp_path.parent / "tiny", 0)
    torch.manual_seed(0)
    model = get_peft_model(base, lora_config(profile))
    played: list[str] = []

    def recording_reward_fn(**kwargs):
        played.extend(e.to_json() for e in kwargs["episodes"])
        return reward_fn(**kwargs)

    data = EpisodeDatasetAdapter(task_gen=generate, env_factory=env_factory, stage=STAGE, stage_base_seed=500,
                                 language_weights=DEFAULT_LANGUAGE_WEIGHTS, tokenizer=tok)
    trainer = make_driftcall_grpo_trainer_cls()(
        model=model, args=build_grpo_config(profile, STAGE, tmp_path, max_steps=STEPS, save_strategy="no",
                                            disable_tqdm=True),
        train_dataset=data, processing_class=tok, env_factory=env_factory, reward_fn_driftcall=recording_reward_fn,
        rollout_group_fn=make_rollout_group_fn(max_new_tokens_per_turn=12, max_episode_tokens=120))
    trainer.train()
    return played


@pytest.mark.slow
def test_a_grpo_stage_against_two_servers_plays_the_in_process_episodes(tmp_path):
    from cells.server.client import remote_env_factory
    from cells.step_10_env import make_env_factory

    local = train_stage(make_env_factory(STAGE), tmp_path / "local")
    with servers(2) as urls:
        remote = train_stage(remote_env_factory(urls, judge_token=JUDGE), tmp_path / "remote")
    assert len(local) == STEPS * 2 * G
    assert remote == local


def test_remote_env_factory_spreads_envs_over_the_servers_in_turn():
    from cells.server.client import remote_env_factory

    make = remote_env_factory(["http://a:1", "http://b:2"], judge_token=JUDGE)
    assert [make().client._base_url for _ in range(4)] == ["http://a:1", "http://b:2", "http://a:1", "http://b:2"]
    with pytest.raises(ValueError, match="at least one"):
        remote_env_factory([])
