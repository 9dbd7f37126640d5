"""TRL's unmodified GRPOTrainer trains on DriftCallToolEnv: a tiny model taught one expert episode in DriftCall's
own format (its tokenizer with the tool-calling template) plays it through TRL's tool loop, and every rollout's
episode and reward are the ones DriftCallEnv gives for the same actions."""

from __future__ import annotations

import functools
import math

import pytest

from cells.actions import format_action
from cells.step_10_env import DriftCallEnv

SEED, STAGE = 3, 1
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def taught(tmp_path_factory):
    """The cpu-smoke tiny model after full-weight steps on one expert conversation (rendered by the tool template,
    loss on the assistant turns) until it writes it back: ~20 s on 2 cores."""
    import torch

    from cells.agent.play import conversation
    from cells.agent.policies import ExpertPolicy
    from cells.training.sft_data import tokenize_conversation
    from cells.trl_env import tiny_tool_model

    model, tokenizer = tiny_tool_model(cache_dir=str(tmp_path_factory.mktemp("tiny")))
    example = tokenize_conversation(tokenizer, conversation(DriftCallEnv(STAGE), ExpertPolicy(), SEED))
    ids, labels = torch.tensor([example.input_ids]), torch.tensor([example.labels])
    torch.manual_seed(0)
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(200):
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        optimiser.step()
        optimiser.zero_grad()
        if loss.item() < 0.02:
            break
    assert loss.item() < 0.02, "the tiny model did not learn the episode"
    return model, tokenizer


def test_stock_grpo_trainer_plays_and_trains_on_the_factory(taught, tmp_path, monkeypatch):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from cells.trl_env import DriftCallToolEnv, driftcall_reward

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    model, tokenizer = taught
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    envs: list[DriftCallToolEnv] = []

    def factory() -> DriftCallToolEnv:
        envs.append(DriftCallToolEnv(stage=STAGE))
        return envs[-1]

    args = GRPOConfig(output_dir=str(tmp_path), max_steps=2, num_generations=4, per_device_train_batch_size=4,
                      max_completion_length=512, generation_kwargs={"max_new_tokens": 96},
                      max_tool_calling_iterations=8, temperature=1.0, learning_rate=1e-3, logging_steps=1,
                      use_cpu=True, report_to="none", save_strategy="no", seed=0)
    rows = Dataset.from_dict({"prompt": [[{"role": "user", "content": ""}]], "seed": [SEED], "stage": [STAGE]})
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=driftcall_reward,
                          train_dataset=rows, environment_factory=factory, args=args)
    trainer.train()

    logs = [h for h in trainer.state.log_history if "tools/call_frequency" in h]
    assert len(logs) == 2 and all(math.isfinite(h["loss"]) for h in logs)
    assert max(h["tools/call_frequency"] for h in logs) >= 1  # tool calls per rollout: they ran inside TRL
    assert max(h["driftcall/success"] for h in logs) > 0  # at least one rollout booked and submitted
    for env in envs:  # each rollout's episode: DriftCallEnv replaying its recorded actions gives the same bytes
        played = env.driftcall_env.episode()
        replay = DriftCallEnv(STAGE)
        replay.reset(seed=SEED)
        for record in played.actions:
            if replay.done:
                break
            replay.step_text(format_action(record.action) if record.action else record.raw_text or "")
        if not replay.done:
            replay.truncate()
        assert replay.episode().to_json() == played.to_json()
        assert replay.rewards().reward == played.rewards.reward
    assert any(not p.equal(before[n]) for n, p in model.named_parameters()), "TRL's optimiser changed no weight"


def test_the_factory_is_a_partial_of_its_stage():
    from cells.trl_env import DriftCallToolEnv

    env = functools.partial(DriftCallToolEnv, stage=3)()
    env.reset(seed=1)
    assert env.driftcall_env.stage == 3
