"""`DriftCallToolEnv`: DriftCall as a class for TRL's `GRPOTrainer(environment_factory=...)`.

TRL builds one instance per rollout slot, lists its public methods as the model's tools, calls
`reset(**dataset_row)` before each rollout (the text it returns is appended to the prompt's last message), runs
each parsed tool call as a method call (the returned text becomes a `tool` message), and ends the rollout at
the first turn that calls no tool. Here:

- the public methods are the 16 vendor tools (`airline_search` ... `payment_refund`, generated from the tool
  registry by `cells.trl_env.tools`, called by the model under their registry names, `airline.search`) and
  the conversation actions `speak`, `clarify`, `probe_schema`, `submit`, `abort`;
- every call becomes one action of a `DriftCallEnv` episode, sent as the action grammar's JSON text through
  `DriftCallEnv.step_text`: the env's own parser and checks judge it, as they judge a model's text turn, and
  the returned text is `render_observation` of the observation, what DriftCall's own rollouts show;
- `reset(seed=..., stage=...)` draws the seeded episode (`seed_dataset` makes the rows, a group of G rollouts
  shares its row's seed) and returns the turn-0 prompt: the system prompt with the tool docs as at reset and
  the caller's time, then the user's utterance, exactly the text `cells.agent.prompt.initial_messages` folds;
- `driftcall_reward` (TRL reward function) plays a rollout's last turn, when it called no tool, through
  `step_text` (so `{"action":"submit",...}` as plain text submits), ends a still-running episode as a timeout
  (a rollout out of turns or tokens, as DriftCall's trainer does), and returns the judge's reward of the episode:
  the number `DriftCallEnv` gives for the same episode (tests/test_trl_env.py).

    trainer = GRPOTrainer(model=..., processing_class=tok, reward_funcs=driftcall_reward,
                          train_dataset=seed_dataset(64, stage=2), environment_factory=DriftCallToolEnv, args=...)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from cells.agent.prompt import render_observation, system_prompt_for
from cells.errors import DriftCallError
from cells.step_02_profiles import EVAL_SEEDS, TRAIN_SEEDS
from cells.step_04_datatypes import ActionType, stable_int
from cells.step_06_drift import DriftPool
from cells.step_10_env import DriftCallEnv
from cells.trl_env.tools import vendor_tool_methods

EPISODE_OVER = "[done] the call has ended; reply without calling a tool"


class ToolEnvError(DriftCallError, RuntimeError):
    """The factory was used in a way it cannot serve (no seed at reset, no environments for the reward)."""


class DriftCallToolEnv:
    """One DriftCall episode at a time, its actions as tool methods (see the module docstring).

    `stage`, `language_weights`, `max_turns` and `drift_pool` are `DriftCallEnv`'s; a dataset row's `stage`
    overrides `stage` for that episode. `functools.partial(DriftCallToolEnv, stage=2)` is a factory."""

    def __init__(self, stage: int = 1, language_weights: dict[str, float] | None = None,
                 max_turns: int | None = None, drift_pool: DriftPool | None = None) -> None:
        self.stage = stage
        self._env_kwargs: dict[str, Any] = {"language_weights": language_weights, "max_turns": max_turns,
                                            "drift_pool": drift_pool}
        self._envs: dict[int, DriftCallEnv] = {}
        self._env: DriftCallEnv | None = None

    def reset(self, seed: int | None = None, stage: int | None = None, **row: Any) -> str:
        """Start the seeded episode of a dataset row (`seed`, optional `stage`); returns its turn-0 prompt text."""
        if seed is None:
            raise ToolEnvError("DriftCallToolEnv.reset needs the episode's seed: pass "
                               "train_dataset=seed_dataset(...) (a `seed` column) to GRPOTrainer")
        stage = self.stage if stage is None else int(stage)
        if stage not in self._envs:
            self._envs[stage] = DriftCallEnv(stage, **self._env_kwargs)
        self._env = self._envs[stage]
        obs = self._env.reset(seed=int(seed))
        system = system_prompt_for(tools=obs.available_tools, now=obs.now)
        return f"{system}\n\n{obs.goal_utterance}"

    @property
    def driftcall_env(self) -> DriftCallEnv:
        """The `DriftCallEnv` playing the current episode (`episode()`, `rewards()`, `state` once it ends)."""
        if self._env is None:
            raise ToolEnvError("no episode yet: TRL calls reset() before the first tool call")
        return self._env

    # ------------------------------------------------------------------------ conversation actions
    def speak(self, message: str) -> str:
        """Tell the user something in their language (a drift you noticed, a fee) and hear their reply.

        Args:
            message: what to say, in the user's language

        Returns:
            The user's reply.
        """
        return self._act({"action": ActionType.SPEAK.value, "message": message})

    def clarify(self, message: str) -> str:
        """Ask the user for a fact only they know (an OTP, a GSTIN, names, flexibility on budget or time).

        Args:
            message: the question, in the user's language

        Returns:
            The user's answer.
        """
        return self._act({"action": ActionType.CLARIFY.value, "message": message})

    def probe_schema(self, domain: str) -> str:
        """Read a vendor's current argument docs and response fields (costs a turn; probing often is penalised).

        Args:
            domain: the vendor: airline, cab, restaurant, hotel or payment

        Returns:
            The vendor's current schema.
        """
        return self._act({"action": ActionType.PROBE_SCHEMA.value, "domain": domain})

    def submit(self, message: str, confidence: float) -> str:
        """End the call: report the booking (its reference and the total charged) and your confidence.

        Args:
            message: the report to the user, in their language
            confidence: your probability (0-1) that the booking meets the request

        Returns:
            That the call has ended.
        """
        return self._act({"action": ActionType.SUBMIT.value, "message": message, "confidence": confidence})

    def abort(self, message: str | None = None) -> str:
        """End the call without a booking, telling the user why.

        Args:
            message: why, in the user's language

        Returns:
            That the call has ended.
        """
        action = {"action": ActionType.ABORT.value} | ({} if message is None else {"message": message})
        return self._act(action)

    # ------------------------------------------------------------------------ plumbing (not tools)
    def _call_vendor(self, tool_name: str, arguments: dict[str, Any]) -> str:
        """A vendor tool method's body (`cells.trl_env.tools`): one tool_call action with the arguments as sent."""
        return self._act({"action": ActionType.TOOL_CALL.value, "tool": tool_name, "args": arguments})

    def _act(self, action: dict[str, Any]) -> str:
        env = self.driftcall_env
        if env.done:
            return EPISODE_OVER
        obs = env.step_text(action_text(action))
        text = render_observation(obs)
        return f"{text}\n{EPISODE_OVER}" if obs.done else text


for _name, _method in vendor_tool_methods().items():
    setattr(DriftCallToolEnv, _name, _method)


def action_text(action: dict[str, Any]) -> str:
    """An action object as the grammar's compact JSON text (`cells.actions.format_action`'s layout)."""
    return json.dumps(action, ensure_ascii=False, separators=(",", ":"))


def final_turn_text(completion: Any) -> str | None:
    """The text of a rollout's last turn when that turn called no tool (TRL ended the rollout on it), else None."""
    if not isinstance(completion, list) or not completion:
        return None
    last = completion[-1]
    if not isinstance(last, dict) or last.get("role") != "assistant" or last.get("tool_calls"):
        return None
    content = last.get("content")
    return content if isinstance(content, str) and content.strip() else None


def finish_episode(env: DriftCallToolEnv, final_text: str | None) -> float:
    """End `env`'s episode after TRL's rollout: play the last turn's text (when it called no tool), end a still
    running episode as a timeout, and return the judge's reward."""
    inner = env.driftcall_env
    if not inner.done and final_text is not None:
        inner.step_text(final_text)
    if not inner.done:
        inner.truncate()
    return inner.rewards().reward


def driftcall_reward(completions: Sequence[Any], environments: Sequence[DriftCallToolEnv] | None = None,
                     log_metric: Any = None, **_: Any) -> list[float]:
    """TRL reward function: each rollout's episode ended (`finish_episode`) and scored by the judge. Logs the
    share of episodes that succeeded (`driftcall/success`) when TRL passes `log_metric`."""
    if environments is None:
        raise ToolEnvError("driftcall_reward reads the rollouts' environments: pass "
                           "environment_factory=DriftCallToolEnv to GRPOTrainer")
    rewards = [finish_episode(env, final_turn_text(c)) for c, env in zip(completions, environments, strict=True)]
    if log_metric is not None and environments:
        success = [env.driftcall_env.rewards().r_task for env in environments]
        log_metric("driftcall/success", sum(success) / len(success))
    return rewards


def seed_dataset(n: int, stage: int = 1, *, split: str = "train", first: int = 0) -> Any:
    """A `datasets.Dataset` of `n` episodes for `GRPOTrainer(train_dataset=...)`: an empty user `prompt` (reset's
    text fills it), the episode `seed` and its `stage`. Seeds come from the training range (`split="train"`) or the
    held-out evaluation range (`"eval"`), drawn by a stable digest of (stage, index), so a dataset is the same
    in any process."""
    from datasets import Dataset

    seeds = {"train": TRAIN_SEEDS, "eval": EVAL_SEEDS}
    if split not in seeds:
        raise ValueError(f"split must be one of {sorted(seeds)}, got {split!r}")
    reserved = seeds[split]
    size = reserved.stop - reserved.start
    rows = [reserved.seed(stable_int("trl_env.seed_dataset", split, stage, first + i) % size) for i in range(n)]
    return Dataset.from_dict({"prompt": [[{"role": "user", "content": ""}] for _ in rows], "seed": rows,
                              "stage": [stage] * n})
