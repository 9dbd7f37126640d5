"""The README's "Use it from your trainer" examples: each is held here, run here, and must appear in the README
verbatim (CI also runs the TRL one in a fresh virtual environment after `pip install .`: .ci/install_check)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

TRL_EXAMPLE = '''\
from trl import GRPOConfig, GRPOTrainer
from cells.trl_env import DriftCallToolEnv, driftcall_reward, seed_dataset, tiny_tool_model

model, tokenizer = tiny_tool_model()  # offline tiny model; or any model whose chat template calls tools
trainer = GRPOTrainer(
    model=model, processing_class=tokenizer, reward_funcs=driftcall_reward,
    environment_factory=DriftCallToolEnv, train_dataset=seed_dataset(8, stage=2),
    args=GRPOConfig(output_dir="grpo-driftcall", max_steps=2, num_generations=2, per_device_train_batch_size=2,
                    max_completion_length=512, max_tool_calling_iterations=12,
                    generation_kwargs={"max_new_tokens": 96}, report_to="none", use_cpu=True),
)
trainer.train()
'''

OPENENV_EXAMPLE = '''\
import os
from cells.server.client import RemoteDriftCallEnv  # OpenEnv's EnvClient, one server session

with RemoteDriftCallEnv(os.environ["DRIFTCALL_URL"], token=os.environ["DRIFTCALL_TOKEN"]) as env:
    obs = env.reset(seed=7)  # the goal, the caller's time, the tools as at reset
    obs = env.step_text('{"action":"tool_call","tool":"payment.get_token","args":{}}')
    print(obs.last_result.status.value, obs.last_result.response)
'''


def readme_block(name: str) -> str:
    """The code of the README's `<!-- example:NAME -->` block."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(rf"<!-- example:{name} -->\n```python\n(.*?)```", text, flags=re.DOTALL)
    assert found, f"README.md has no <!-- example:{name} --> python block"
    return found.group(1)


@pytest.mark.parametrize(("name", "code"), [("trl", TRL_EXAMPLE), ("openenv", OPENENV_EXAMPLE)])
def test_the_readme_shows_the_tested_example(name, code):
    assert readme_block(name) == code


@pytest.mark.slow
def test_the_trl_example_trains(tmp_path, monkeypatch):
    """Stock TRL's GRPOTrainer on DriftCallToolEnv, as the README shows it (an untrained model: its turns call no
    tool, so each rollout is one turn the reward function plays and the judge scores)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    scope: dict = {}
    exec(compile(TRL_EXAMPLE, "README.md:trl", "exec"), scope)
    trainer = scope["trainer"]
    assert trainer.state.global_step == 2
    logged = [h for h in trainer.state.log_history if "rewards/driftcall_reward/mean" in h]
    assert logged and all(h["driftcall/success"] == 0.0 for h in logged)
    assert all(e.driftcall_env.done for e in trainer.environments)  # every rollout's episode was scored


def test_the_openenv_example_plays_over_the_server(capsys, monkeypatch):
    from test_server import TOKEN, served

    with served(stage=2) as url:
        monkeypatch.setenv("DRIFTCALL_URL", url)
        monkeypatch.setenv("DRIFTCALL_TOKEN", TOKEN)
        exec(compile(OPENENV_EXAMPLE, "README.md:openenv", "exec"), {"__name__": "example"})
    printed = capsys.readouterr().out
    assert printed.startswith("ok {") and "'payment_token': 'tok_" in printed

