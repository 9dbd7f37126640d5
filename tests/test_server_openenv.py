"""cells/openenv_env.py in process: the pydantic boundary types, the judge view, reset arguments."""

from __future__ import annotations

import json
import typing

import pytest

from cells.openenv_env import (
    JUDGE_VIEW,
    MAX_SEED,
    ActionTypeName,
    DriftCallActionModel,
    DriftCallObservationModel,
    DriftCallOpenEnv,
    DriftCallStateModel,
    ResetArgumentError,
    from_observation_payload,
)
from cells.step_04_datatypes import ActionType


def test_action_kinds_match_the_core_enum() -> None:
    assert set(typing.get_args(ActionTypeName)) == {a.value for a in ActionType}


@pytest.mark.parametrize("fields", [{}, {"text": "x", "action_type": "speak"}, {"text": "x", "truncate": True},
                                    {"bogus": 1}, {"action_type": "submit", "confidence": 1.5},
                                    {"text": "x" * 16_001}])
def test_action_model_refuses_ambiguous_or_out_of_range_actions(fields: dict) -> None:
    with pytest.raises(ValueError):
        DriftCallActionModel(**fields)


def test_boundary_types_round_trip_through_json() -> None:
    env = DriftCallOpenEnv(stage=2)
    obs = env.reset(seed=5)
    action = DriftCallActionModel(action_type="submit", message="done", confidence=0.5)
    assert DriftCallActionModel.model_validate_json(action.model_dump_json()) == action
    wire = DriftCallObservationModel.model_validate_json(obs.model_dump_json())
    assert wire.model_dump() == obs.model_dump()
    state = env.state
    assert DriftCallStateModel.model_validate_json(state.model_dump_json()) == state
    core = env.core.reset(seed=5)
    payload = {"observation": obs.model_dump(exclude={"done", "reward"}), "done": obs.done, "reward": obs.reward}
    assert from_observation_payload(json.loads(json.dumps(payload))).to_json() == core.to_json()


def test_fields_are_the_observation_models_fields() -> None:
    """What an env worker sends (`reset_fields`/`step_fields`) builds the model `reset`/`step` return."""
    by_model, by_fields = DriftCallOpenEnv(stage=3), DriftCallOpenEnv(stage=3)
    actions = [DriftCallActionModel(text='{"action":"speak","message":"hi"}'), DriftCallActionModel(text="not json"),
               DriftCallActionModel(action_type="submit", message="done", confidence=0.4)]
    pairs = [(by_model.reset(seed=9), by_fields.reset_fields(seed=9))]
    pairs += [(by_model.step(a), by_fields.step_fields(a)) for a in actions]
    for model, fields in pairs:
        assert set(fields) == set(DriftCallObservationModel.model_fields)
        assert DriftCallObservationModel.model_validate(fields).model_dump_json() == model.model_dump_json()
    assert pairs[-1][0].done and by_fields.progress() == (by_model.state.episode_id, 3, True)


def test_judge_view_only_when_the_flag_is_set() -> None:
    env = DriftCallOpenEnv(stage=2)
    assert env.state.episode_id is None and env.state.judge is None  # before reset: no error, nothing to show
    env.reset(seed=3)
    assert env.state.judge is None and "schedule" not in env.state.model_dump_json()
    flag = JUDGE_VIEW.set(True)
    try:
        judge = env.state.judge
        assert judge is not None and "schedule" in judge["state"] and "episode" not in judge
        env.step(DriftCallActionModel(action_type="abort", message="bye"))
        judge = env.state.judge
        assert judge is not None and judge["episode"]["terminated_by"] == "abort" and "breakdown" in judge["rewards"]
    finally:
        JUDGE_VIEW.reset(flag)


def test_truncate_ends_a_running_episode_with_its_reward() -> None:
    env = DriftCallOpenEnv(stage=1)
    env.reset(seed=1)
    env.step(DriftCallActionModel(text='{"action":"speak","message":"hi"}'))
    obs = env.step(DriftCallActionModel(truncate=True))
    assert obs.done and obs.reward == env.core.rewards().reward and obs.turn == 1
    assert env.core.episode().terminated_by.value == "timeout"


@pytest.mark.parametrize("kwargs", [{"seed": -1}, {"seed": MAX_SEED + 1}, {"seed": True}, {"seed": "7"},
                                    {"episode_id": "a b"}, {"episode_id": "x" * 129}, {"stage": 3}])
def test_reset_refuses_bad_arguments_and_leaves_the_env_alone(kwargs: dict) -> None:
    env = DriftCallOpenEnv(stage=1)
    env.reset(seed=2)
    before = env.state
    with pytest.raises(ResetArgumentError):
        env.reset(**kwargs)
    assert env.state == before
    assert env.reset(seed=MAX_SEED, episode_id="ok-1.2:3").turn == 0


def test_the_judge_views_changes_rebuild_it_exactly_after_every_call() -> None:
    """What a worker sends a judge session (`JudgeViewFeed`) rebuilds on the server (`JudgeViewMirror`) the view
    `judge_view` encodes whole, byte for byte as JSON: across expert episodes with drift, invalid outputs, a
    reset to the same seed mid-episode (same episode id) and an episode's end (rewards and Episode once)."""
    from test_server import expert_texts

    from cells.openenv_env import JudgeViewFeed, JudgeViewMirror, judge_view
    from cells.step_10_env import DriftCallEnv

    core, feed, mirror = DriftCallEnv(3), JudgeViewFeed(), JudgeViewMirror()
    assert mirror.view() is None
    sizes = []

    def check(reset: bool) -> None:
        earlier = mirror.view()
        frozen = json.dumps(earlier)
        change = feed.change(core, reset=reset)
        mirror.apply(change)
        assert json.dumps(mirror.view()) == json.dumps(judge_view(core))
        assert json.dumps(earlier) == frozen  # a view handed out before is not changed by later calls
        sizes.append((len(json.dumps(change)), len(json.dumps(judge_view(core)))))

    cut, _ = expert_texts(3, 4)
    core.reset(seed=4)
    check(reset=True)
    for text in cut[:3]:  # played in part, then the same seed again: the same episode id
        core.step_text(text)
        check(reset=False)
    drifted = 0
    for seed in (4, 17, 23):
        texts, episode = expert_texts(3, seed)
        drifted += bool(episode.drifts)
        core.reset(seed=seed)
        check(reset=True)
        for i, text in enumerate(texts):
            if i == 1:
                core.step_text("not json at all")  # a parse failure: counted in the state, no action appended
                check(reset=False)
            core.step_text(text)
            check(reset=False)
        assert core.done
    assert "rewards" in mirror.view() and mirror.view()["state"]["done"] is True and drifted >= 1
    mid_episode = [sent / whole for sent, whole in sizes[1:-1]]
    assert sum(mid_episode) / len(mid_episode) < 0.5  # changes, not the whole view again


@pytest.mark.parametrize("stage", (1, 2, 3))
def test_the_served_env_sharing_results_sends_what_a_copying_env_sends(stage: int) -> None:
    """`ServedEnv` puts the episode's own response objects in its observations (`SHARES_RESULTS`); serialised they
    equal the copies `DriftCallOpenEnv` makes, and the episode's record is the same."""
    from cells.agent.play import _play
    from cells.agent.policies import ExpertPolicy
    from cells.server.served import served_env_cls
    from cells.step_10_env import DriftCallEnv

    for seed in (2, 5, 8):
        texts = _play(DriftCallEnv(stage), ExpertPolicy(), seed).transcript
        copying, sharing = DriftCallOpenEnv(stage=stage), served_env_cls()(stage)
        assert sharing.SHARES_RESULTS and not copying.SHARES_RESULTS
        pairs = [(copying.reset(seed=seed), sharing.reset(seed=seed))]
        pairs += [(copying.step(DriftCallActionModel(text=t)), sharing.step(DriftCallActionModel(text=t)))
                  for t in texts]
        assert any(c.last_result for c, _ in pairs)
        for copied, shared in pairs:
            assert shared.model_dump_json() == copied.model_dump_json()
        assert sharing.core.episode().to_json() == copying.core.episode().to_json()
