"""OpenEnv interface over `DriftCallEnv` (DESIGN §7): pydantic Action/Observation/State types and an
`openenv.core.env_server.Environment` subclass, so OpenEnv clients, `create_fastapi_app` and
TRL's environment integrations can drive the same core the trainer uses in process.

    from openenv.core.env_server import create_fastapi_app
    app = create_fastapi_app(lambda: DriftCallOpenEnv(stage=2), DriftCallActionModel, DriftCallObservationModel)

The judge-only parts (drift schedule, fired drifts) never appear in observations; `state` exposes
the episode id and step count only, like every OpenEnv env.
"""

from __future__ import annotations

from typing import Any

from openenv.core.env_server import Action, Environment, Observation, State
from pydantic import Field

from cells.step_04_models import ActionType, DriftCallAction, DriftCallObservation, ModelValidationError
from cells.step_10_env import DriftCallEnv, InvalidActionError


class DriftCallActionModel(Action):
    """One agent turn: either structured fields, or the raw model output in `text` (parsed by the env)."""

    text: str | None = Field(default=None, description="Raw model output; parsed like a model turn if given")
    action_type: str | None = Field(default=None, description="tool_call|speak|clarify|probe_schema|submit|abort")
    tool: str | None = Field(default=None, description="'domain.verb' for tool_call, a bare domain for probe_schema")
    args: dict[str, Any] = Field(default_factory=dict, description="tool arguments (tool_call only)")
    message: str | None = Field(default=None, description="text for speak/clarify/submit")
    confidence: float | None = Field(default=None, ge=0.0, le=1.0, description="submit only")
    rationale: str | None = Field(default=None, max_length=200, description="optional, never scored")


class DriftCallObservationModel(Observation):
    """What the agent sees; `done` and `reward` (set when done) come from the OpenEnv base."""

    turn: int = Field(description="turns used so far")
    budget_remaining: int = Field(description="turns left")
    goal_utterance: str | None = Field(default=None, description="the user's request (turn 0 only)")
    user_message: dict[str, Any] | None = Field(default=None, description="latest simulated-user message")
    last_result: dict[str, Any] | None = Field(default=None, description="the ToolResult this turn produced")
    available_tools: list[dict[str, Any]] = Field(default_factory=list, description="tool docs as at reset")
    parse_error: str | None = Field(default=None, description="why the last raw output did not parse")


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


def to_observation_model(obs: DriftCallObservation) -> DriftCallObservationModel:
    data = obs.to_dict()
    return DriftCallObservationModel(
        turn=data["turn"], budget_remaining=data["budget_remaining"], goal_utterance=data["goal_utterance"],
        user_message=data["user_message"], last_result=data["last_result"],
        available_tools=data["available_tools"], parse_error=data["parse_error"],
        done=data["done"], reward=data["reward"],
    )


class DriftCallOpenEnv(Environment[DriftCallActionModel, DriftCallObservationModel, State]):
    """`DriftCallEnv` behind the OpenEnv `Environment` API; one instance per session."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # no shared mutable state between instances

    def __init__(self, stage: int = 1, language_weights: dict[str, float] | None = None, **kwargs: Any) -> None:
        super().__init__()
        self.core = DriftCallEnv(stage, language_weights, **kwargs)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> DriftCallObservationModel:
        return to_observation_model(self.core.reset(seed=seed, episode_id=episode_id))

    def step(self, action: DriftCallActionModel, timeout_s: float | None = None, **kwargs: Any) -> DriftCallObservationModel:
        if action.text is not None:
            return to_observation_model(self.core.step_text(action.text))
        return to_observation_model(self.core.step(to_core_action(action)))

    @property
    def state(self) -> State:
        core_state = self.core.state
        return State(episode_id=core_state.episode_id, step_count=core_state.turn)

    def close(self) -> None:
        self.core.close()
