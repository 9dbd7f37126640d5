"""OpenEnv interface over `DriftCallEnv` (docs/design.md#7-environment), on the `openenv` 0.10 package: pydantic
Action/Observation/State types and an `openenv.core.env_server.Environment` subclass, so OpenEnv
servers and clients and TRL's environment integrations drive the same core the trainer uses in process.

    from openenv.core.env_server import create_app
    app = create_app(lambda: DriftCallOpenEnv(stage=2), DriftCallActionModel, DriftCallObservationModel,
                     state_cls=DriftCallStateModel)

`cells/server/` serves it (auth, session cap, limits); `cells.server.client` plays it remotely.

What the agent sees: observations (turn, budget, the goal utterance at turn 0, the latest user message,
the last tool result, the tool docs as at reset) and `state` (episode id, turns used, done). The drift
schedule, the fired drifts, the goal's hidden facts (`goal.user`), the reward breakdown and the finished
`Episode` are the judge view: `state.judge`, filled only while `JUDGE_VIEW` is true, which the server sets
for connections that present the judge token (a context variable, because OpenEnv's WebSocket loop reads
`env.state` itself and passes no caller identity).

Which drifts a served episode meets (`DriftCallEnv(drift_source=...)`: the catalogue, the generated families'
instances, or both) comes from the `DRIFTCALL_DRIFT` environment variable when the caller names none, so every
server process, env workers included, serves the same (`python -m cells serve --drift generated` sets it).

Importing this module imports `openenv.core.env_server`, which pulls gradio (~4 s): step modules and
`cells.server` import it inside functions only.
"""

from __future__ import annotations

import contextvars
import dataclasses
import os
import re
from typing import Any, Literal

from openenv.core.env_server import Action, Environment, Observation, State
from openenv.core.env_server.types import EnvironmentMetadata
from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from cells.step_04_datatypes import (
    ActionType,
    DriftCallAction,
    DriftCallObservation,
    DriftCallState,
    ModelValidationError,
)
from cells.step_10_env import DriftCallEnv, EnvError, InvalidActionError

JUDGE_VIEW: contextvars.ContextVar[bool] = contextvars.ContextVar("driftcall_judge_view", default=False)
MAX_SEED = 2**63 - 1
MAX_TEXT_CHARS = 16_000  # a raw model turn; far above any generation budget (64-256 tokens)
_EPISODE_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
ActionTypeName = Literal["tool_call", "speak", "clarify", "probe_schema", "submit", "abort"]


class ResetArgumentError(EnvError, ValueError):
    """reset() got a seed, episode id or keyword it cannot use; the env is unchanged."""


class DriftCallActionModel(Action):
    """One agent turn: the raw model output in `text` (parsed by the env, like a model turn), or the
    structured fields; `truncate` is for rollout drivers only (the rollout ran out of context)."""

    text: str | None = Field(default=None, max_length=MAX_TEXT_CHARS,
                             description="Raw model output; parsed like a model turn (a parse failure costs a turn)")
    action_type: ActionTypeName | None = Field(default=None, description="structured action kind (when no text)")
    tool: str | None = Field(default=None, max_length=64,
                             description="'domain.verb' for tool_call, a bare domain for probe_schema")
    args: dict[str, Any] = Field(default_factory=dict, description="tool arguments (tool_call only)")
    message: str | None = Field(default=None, max_length=4000, description="text for speak/clarify/submit")
    confidence: float | None = Field(default=None, ge=0.0, le=1.0, description="submit only")
    rationale: str | None = Field(default=None, max_length=200, description="optional, never scored")
    truncate: bool = Field(default=False, description="end the running episode as a timeout (rollout drivers)")

    @model_validator(mode="after")
    def _one_kind(self) -> DriftCallActionModel:
        kinds = (self.text is not None) + (self.action_type is not None) + bool(self.truncate)
        if kinds != 1:
            # a PydanticCustomError, not ValueError: its error dict stays JSON-serialisable (OpenEnv echoes it)
            raise PydanticCustomError("one_action_kind", "give exactly one of: text (raw model output), "
                                                          "action_type (structured), truncate")
        return self


class DriftCallObservationModel(Observation):
    """What the agent sees; `done` and `reward` (set when done) come from the OpenEnv base."""

    turn: int = Field(description="turns used so far")
    budget_remaining: int = Field(description="turns left")
    goal_utterance: str | None = Field(default=None, description="the user's request (turn 0 only)")
    now: str | None = Field(default=None, description="the caller's local time, ISO 8601 IST (turn 0 only)")
    user_message: dict[str, Any] | None = Field(default=None, description="latest simulated-user message")
    last_result: dict[str, Any] | None = Field(default=None, description="the ToolResult this turn produced")
    available_tools: list[dict[str, Any]] | None = Field(
        default=None, description="tool docs as at reset, on reset's observation only: they never change within an "
                                  "episode (drift shows in the API's behaviour, not its docs); null on every step")
    parse_error: str | None = Field(default=None, description="why the last raw output did not parse")


class DriftCallStateModel(State):
    """`episode_id` and `step_count` (turns used) from OpenEnv, plus `done`; `judge` only for the judge."""

    stage: int = Field(description="curriculum stage this server plays (1-3)")
    done: bool = Field(default=False, description="the episode has ended")
    judge: dict[str, Any] | None = Field(
        default=None, description="judge token only: state (goal with hidden facts, drift schedule, fired drifts), "
                                  "and once done the rewards (with breakdown) and the Episode")


def to_core_action(model: DriftCallActionModel) -> DriftCallAction:
    """Convert the pydantic action into the core frozen action (raises InvalidActionError)."""
    try:
        kind = ActionType(model.action_type)
        return DriftCallAction(
            action_type=kind, tool_name=model.tool, tool_args=dict(model.args) if kind is ActionType.TOOL_CALL else {},
            message=model.message, confidence=model.confidence, rationale=model.rationale,
        )
    except (ValueError, ModelValidationError) as exc:
        raise InvalidActionError(str(exc)) from exc


def observation_fields(obs: DriftCallObservation, tools: list[dict[str, Any]] | None, share: bool = False
                       ) -> dict[str, Any]:
    """Every field of `DriftCallObservationModel` for a core observation, as plain JSON values (what an env
    worker sends; the server builds the model from them). `tools`: the encoded `obs.available_tools` on reset's
    observation, None on a step's (the docs are the episode's constants: sent once, not on every step). `share`:
    the last result's response is the episode's own object, not a copy (for a caller that serialises at once)."""
    result = obs.last_result
    return {
        "turn": obs.turn, "budget_remaining": obs.budget_remaining, "goal_utterance": obs.goal_utterance,
        "now": obs.now, "user_message": None if obs.user_message is None else obs.user_message.to_dict(),
        "last_result": None if result is None else result.to_dict_sharing() if share else result.to_dict(),
        "available_tools": tools, "parse_error": obs.parse_error, "done": obs.done, "reward": obs.reward,
        "metadata": {},
    }


def from_observation_payload(payload: dict[str, Any], tools: list[dict[str, Any]] | None = None
                             ) -> DriftCallObservation:
    """The core observation back from OpenEnv's wire form `{"observation": {...}, "done", "reward"}`. A step's
    observation carries no tool docs: `tools` are those of the episode's reset observation (as sent)."""
    fields = {k: v for k, v in payload["observation"].items() if k != "metadata"}
    if fields.get("available_tools") is None:
        fields["available_tools"] = tools or []
    return DriftCallObservation.from_dict({**fields, "done": payload["done"], "reward": payload["reward"]})


def check_reset_args(seed: Any, episode_id: Any, extra: dict[str, Any]) -> None:
    if extra:
        raise ResetArgumentError(f"unknown reset argument(s) {sorted(extra)}; allowed: seed, episode_id")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED):
        raise ResetArgumentError(f"seed must be an integer in [0, {MAX_SEED}], got {seed!r:.40}")
    if episode_id is not None and (not isinstance(episode_id, str) or not _EPISODE_ID.fullmatch(episode_id)):
        raise ResetArgumentError("episode_id must be 1-128 characters of [A-Za-z0-9._:-]")


DRIFT_ENV = "DRIFTCALL_DRIFT"  # the drift source served sessions meet (step 2's DRIFT_SOURCES; default handwritten)


class DriftCallOpenEnv(Environment[DriftCallActionModel, DriftCallObservationModel, DriftCallStateModel]):
    """`DriftCallEnv` behind the OpenEnv `Environment` API; one instance per session."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # no shared mutable state between instances
    # Whether an observation's last result shares the episode's response object (`observation_fields`): only
    # where each observation is serialised at once and then dropped (the server: cells/server/served.py)
    SHARES_RESULTS = False

    def __init__(self, stage: int = 1, language_weights: dict[str, float] | None = None, **kwargs: Any) -> None:
        super().__init__()
        kwargs.setdefault("drift_source", os.environ.get(DRIFT_ENV) or "handwritten")
        self.core = DriftCallEnv(stage, language_weights, **kwargs)
        self._tools: tuple[tuple[Any, ...], list[dict[str, Any]]] | None = None  # (docs, encoded)

    # the model is built without validation: its fields come from a validated frozen core observation
    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> DriftCallObservationModel:
        return DriftCallObservationModel.model_construct(**self.reset_fields(seed, episode_id, **kwargs))

    def step(self, action: DriftCallActionModel, timeout_s: float | None = None, **kwargs: Any) -> DriftCallObservationModel:
        return DriftCallObservationModel.model_construct(**self.step_fields(action))

    def reset_fields(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> dict[str, Any]:
        """`reset`'s observation as `observation_fields` (an env worker sends these, not the model)."""
        check_reset_args(seed, episode_id, kwargs)
        return self._wire(self.core.reset(seed=seed, episode_id=episode_id), reset=True)

    def step_fields(self, action: DriftCallActionModel) -> dict[str, Any]:
        """`step`'s observation as `observation_fields`."""
        if action.truncate:
            self.core.truncate()
            live = self.core.state
            return observation_fields(DriftCallObservation(
                turn=live.turn, budget_remaining=live.max_turns - live.turn, done=True,
                reward=self.core.rewards().reward), None)
        if action.text is not None:
            return self.step_text_fields(action.text)
        return self._wire(self.core.step(to_core_action(action)))

    def step_text_fields(self, text: str) -> dict[str, Any]:
        """`step_fields` for a raw model output (`DriftCallActionModel(text=...)`, the common action): what an env
        worker runs for it, with no action model built."""
        return self._wire(self.core.step_text(text))

    def _wire(self, obs: DriftCallObservation, reset: bool = False) -> dict[str, Any]:
        if not reset:
            return observation_fields(obs, None, self.SHARES_RESULTS)
        docs = obs.available_tools  # one object per domain (`reset_tool_docs`): re-encoded when the domain changes
        if self._tools is None or self._tools[0] is not docs:
            self._tools = (docs, [t.to_dict() for t in docs])
        return observation_fields(obs, self._tools[1], self.SHARES_RESULTS)

    @property
    def state(self) -> DriftCallStateModel:
        episode_id, turns, done = self.progress()
        judge = judge_view(self.core) if JUDGE_VIEW.get() and episode_id is not None else None
        return DriftCallStateModel(episode_id=episode_id, step_count=turns, stage=self.core.stage, done=done,
                                   judge=judge)

    def progress(self) -> tuple[str | None, int, bool]:
        """(episode id, turns used, done) of the running or last episode; (None, 0, False) before reset.
        What `state` shows an agent, without building the core's full state."""
        return self.core.progress()

    def get_metadata(self) -> EnvironmentMetadata:
        return env_metadata(self.core.stage)

    def close(self) -> None:
        self.core.close()


def env_metadata(stage: int) -> EnvironmentMetadata:
    """What `/metadata` answers."""
    return EnvironmentMetadata(
        name="DriftCall", version="0.1.0",
        description=f"Multilingual phone concierge whose vendor APIs drift mid-episode (stage {stage}). "
                    "Act with raw model output in `text`, or structured fields.",
    )


def judge_view(core: DriftCallEnv) -> dict[str, Any]:
    """Everything the judge may see: full state, and once done the rewards and the Episode."""
    view: dict[str, Any] = {"state": core.state.to_dict()}
    if core.done:
        view.update(_ended_parts(core))
    return view


def _ended_parts(core: DriftCallEnv) -> dict[str, Any]:
    """What the judge view adds once the episode has ended: its rewards and the Episode."""
    return {"rewards": core.rewards().to_dict(), "episode": core.episode().to_dict()}


# The judge view across a process boundary (env workers, cells/server/workers.py), sent as changes: OpenEnv
# reads `state` synchronously, so the server must hold a judge session's view before it is asked for it,
# and re-encoding the whole state on every call made a judge session's step ~50% dearer for the worker (its
# actions and results grow with the episode). Fields the env only appends to travel as their new items,
# fields fixed for an episode travel once, the rest (a few small values) on every call. What is left (each new
# item and the end's Episode encoded once) still costs a judge session ~30% more than an agent's, against ~45%.
_STATE_FIELDS = tuple(f.name for f in dataclasses.fields(DriftCallState))
_APPENDED = ("fired", "actions", "results")  # the env only ever appends to these within an episode
_PER_EPISODE = ("episode_id", "seed", "stage", "goal", "max_turns", "schedule")
_PER_CALL = tuple(f for f in _STATE_FIELDS if f not in _APPENDED and f not in _PER_EPISODE)


class JudgeViewFeed:
    """Worker side: what changed in the judge view since this feed's last `change`, for `JudgeViewMirror`."""

    def __init__(self) -> None:
        self.sent: dict[str, int] = {}  # items of each appended field the mirror holds; {} before the first change
        self.ended = False

    def change(self, core: DriftCallEnv, reset: bool) -> dict[str, Any]:
        """The change since the last call; `reset`: `core` was reset since then (a reset to the same seed
        keeps the episode id, so the caller says so)."""
        state = core.state
        change: dict[str, Any] = {"set": state.to_dict_of(_PER_CALL)}
        if reset or not self.sent:
            self.sent, self.ended = dict.fromkeys(_APPENDED, 0), False
            change["fixed"] = state.to_dict_of(_PER_EPISODE)
        change["append"] = {name: [item.to_dict() for item in getattr(state, name)[self.sent[name]:]]
                            for name in _APPENDED}
        self.sent = {name: len(getattr(state, name)) for name in _APPENDED}
        if core.done and not self.ended:
            self.ended = True
            change["ended"] = _ended_parts(core)
        return change


class JudgeViewMirror:
    """Server side: `judge_view(core)` rebuilt from a `JudgeViewFeed`'s changes, equal to it after every call."""

    def __init__(self) -> None:
        self.parts: dict[str, Any] = {}
        self.ended: dict[str, Any] = {}

    def apply(self, change: dict[str, Any]) -> None:
        if "fixed" in change:
            self.parts = {**change["fixed"], **{name: [] for name in _APPENDED}}
            self.ended = {}
        self.parts.update(change["set"])
        for name, items in change["append"].items():
            self.parts[name] = self.parts[name] + items  # a new list: views handed out earlier stay as they were
        self.ended = change.get("ended", self.ended)

    def view(self) -> dict[str, Any] | None:
        """The judge view, or None before the first change."""
        if not self.parts:
            return None
        return {"state": {name: self.parts[name] for name in _STATE_FIELDS}, **self.ended}
