"""Step 11 - agent I/O: prompt rendering, scripted policies, episode drivers (docs/design.md#8-agent-io).

The face of `cells/agent/`:
- the action grammar (`cells.actions`, the env's, re-exported here): `parse_action(text)` /
  `format_action(action)`, one JSON object per assistant turn;
- `prompt`: `initial_messages(goal)` (system prompt + utterance: the only two turn-0 messages) and
  `render_observation(obs)` (`[tool_result] {...}` / `[user] ...` lines);
- `policies`: `ExpertPolicy` (adapts to every drift, tells the user, calibrated), `NaivePolicy`
  (competent without drift, never adapts), `HonestFailurePolicy` (naive that admits failure),
  `RandomPolicy(seed)` and the probe's exploits in `EXPLOIT_POLICIES`. All answer with text that
  goes through `DriftCallEnv.step_text`. Scripted players get a `GoalReader` at reset (perfect
  NLU of the utterance; never the hidden user facts, the drift schedule or vendor flags);
- `play`: `play_episode(env, policy, seed) -> (Episode, Rewards)`, `play_many(factory,
  policy_factory, seeds)`, `expert_conversations(n, stage, seed)` (SFT warm-start chats);
- `rollout` (token-level model rollouts): `rollout_batch`, `TrajectoryTokens`; `groups` (GRPO groups as
  rollouts): `make_rollout_group_fn`.

Reads `ctx.env_factory` (step 10; built here if absent) and `ctx.profile.seed`; writes
`ctx.reports["agent_smoke"]` ({stage: {policy: {"success", "reward"}}}).
Run alone: `python -m cells run --profile cpu-smoke --steps 10-11` (~1 s: 20 episodes per stage
and policy). Benchmarks: `python -m cells bench env`, `python -m cells bench policies --seeds 500`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cells.actions import ACTION_FORMAT_HELP, ActionParseError, format_action, parse_action
from cells.agent.groups import make_rollout_group_fn
from cells.agent.play import PlayResult, conversation, expert_conversations, play_episode, play_many
from cells.agent.policies import ExpertPolicy, GoalReader, HonestFailurePolicy, NaivePolicy, Policy
from cells.agent.policies.exploits import EXPLOIT_POLICIES
from cells.agent.policies.random_policy import RandomPolicy
from cells.agent.prompt import PINNED_SYSTEM_PROMPT, build_system_prompt, initial_messages, render_observation
from cells.agent.rollout import TrajectoryTokens, rollout_batch

if TYPE_CHECKING:  # pragma: no cover
    from cells.context import Context

__all__ = [
    "ACTION_FORMAT_HELP", "EXPLOIT_POLICIES", "PINNED_SYSTEM_PROMPT", "ActionParseError", "ExpertPolicy",
    "GoalReader", "HonestFailurePolicy", "NaivePolicy", "PlayResult", "Policy", "RandomPolicy",
    "TrajectoryTokens", "build_system_prompt", "conversation", "expert_conversations", "format_action",
    "initial_messages", "make_rollout_group_fn", "parse_action", "play_episode", "play_many",
    "render_observation", "rollout_batch", "run",
]

SMOKE_EPISODES = 20


def run(ctx: Context) -> Context:
    """Play a few expert and naive episodes per stage and print success and mean reward."""
    from cells.step_10_env import stage_env_factories

    factories = ctx.env_factory or stage_env_factories(ctx.profile)
    seeds = [ctx.profile.seed + i for i in range(SMOKE_EPISODES)]
    table: dict[int, dict[str, dict[str, float]]] = {}
    for stage, factory in factories.items():
        table[stage] = {}
        for policy in (ExpertPolicy, NaivePolicy):
            results = play_many(factory, policy, seeds)
            success = sum(r.rewards.r_task for r in results) / len(results)
            reward = sum(r.rewards.reward for r in results) / len(results)
            table[stage][policy.name] = {"success": success, "reward": reward}
            print(f"[agent] stage {stage} {policy.name:<7} success {success:.2f} mean reward {reward:.3f} "
                  f"({len(results)} episodes)")
    ctx.reports["agent_smoke"] = table
    return ctx
