"""DriftCallEnv (step 10): usage errors, budgets, notices, invalid outputs, the simulated user's
language, schedule secrecy, fuzzing through step_text, cross-process determinism, OpenEnv adapter."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cells.actions import format_action
from cells.agent.policies import ExpertPolicy, GoalReader
from cells.step_04_datatypes import (
    DOMAINS,
    MIN_REWARD,
    ActionType,
    DriftCallAction,
    TerminatedBy,
    canonical_json,
)
from cells.step_05_vendors import TOOL_NAMES
from cells.step_06_drift import load_catalogue
from cells.step_07_tasks import generate, script_of
from cells.step_10_env import (
    MAX_CONSECUTIVE_INVALID,
    STAGE_TURN_BUDGETS,
    DriftCallEnv,
    EnvNotResetError,
    EpisodeDoneError,
    EpisodeNotDoneError,
    InvalidActionError,
)
from cells.tasks.i18n import LANGUAGE_SCRIPT

ROOT = Path(__file__).resolve().parents[1]
SPEAK = DriftCallAction(ActionType.SPEAK, message="ok")


def _seed_for(domain: str, stage: int = 2, start: int = 0) -> int:
    return next(s for s in range(start, start + 500) if generate(s, stage, {"en": 1.0}).domain == domain)


# ---------------------------------------------------------------------------------------------- usage errors
def test_step_before_reset_raises_and_state_is_unavailable() -> None:
    env = DriftCallEnv(1)
    with pytest.raises(EnvNotResetError):
        env.step(SPEAK)
    with pytest.raises(EnvNotResetError):
        env.step_text('{"action":"speak","message":"hi"}')
    with pytest.raises(EnvNotResetError):
        _ = env.state
    with pytest.raises(EpisodeNotDoneError):
        env.episode()
    with pytest.raises(EpisodeNotDoneError):
        env.rewards()


def test_progress_is_the_agent_visible_part_of_state_at_every_turn() -> None:
    env = DriftCallEnv(2)
    assert env.progress() == (None, 0, False)  # before reset: no error (a server answers it for idle sessions)
    obs = env.reset(seed=11)
    policy = ExpertPolicy()
    policy.reset(obs, GoalReader.from_goal(env.goal))
    while True:
        state = env.state
        assert env.progress() == (state.episode_id, state.turn, state.done)
        if obs.done:
            break
        obs = env.step_text(policy.act(obs))
    assert env.progress()[1:] == (obs.turn, True)


def test_non_action_to_step_raises_and_changes_nothing() -> None:
    env = DriftCallEnv(2)
    env.reset(seed=3)
    env.step(SPEAK)
    before = env.state.to_json()
    for bad in ('{"action":"speak","message":"hi"}', {"action": "speak"}, None, 42):
        with pytest.raises(InvalidActionError):
            env.step(bad)  # type: ignore[arg-type]
    assert env.state.to_json() == before


def test_episode_and_rewards_before_done_raise() -> None:
    env = DriftCallEnv(1)
    env.reset(seed=1)
    env.step(SPEAK)
    with pytest.raises(EpisodeNotDoneError):
        env.episode()
    with pytest.raises(EpisodeNotDoneError):
        env.rewards()


def test_step_after_done_raises_and_changes_nothing() -> None:
    env = DriftCallEnv(1)
    env.reset(seed=2)
    obs = env.step(DriftCallAction(ActionType.ABORT))
    assert obs.done and obs.reward == 0.0
    before = (env.state.to_json(), env.episode().to_json(), env.rewards().to_json())
    with pytest.raises(EpisodeDoneError):
        env.step(SPEAK)
    with pytest.raises(EpisodeDoneError):
        env.step_text("anything")
    assert (env.state.to_json(), env.episode().to_json(), env.rewards().to_json()) == before


# ---------------------------------------------------------------------------------------------- budgets
@pytest.mark.parametrize("stage", [1, 2, 3])
def test_turn_budgets_by_stage(stage: int) -> None:
    env = DriftCallEnv(stage)
    obs = env.reset(seed=11)
    assert obs.budget_remaining == STAGE_TURN_BUDGETS[stage] == {1: 8, 2: 12, 3: 16}[stage]
    turns = 0
    while not obs.done:
        obs = env.step(SPEAK)
        turns += 1
    assert turns == STAGE_TURN_BUDGETS[stage] and obs.budget_remaining == 0
    assert env.episode().terminated_by is TerminatedBy.TIMEOUT and env.rewards().reward == 0.0


def test_max_turns_override() -> None:
    env = DriftCallEnv(3, max_turns=2)
    env.reset(seed=1)
    env.step(SPEAK)
    assert env.step(SPEAK).done


# ---------------------------------------------------------------------------------------------- invalid outputs
def test_three_consecutive_invalid_outputs_end_the_episode() -> None:
    env = DriftCallEnv(3)
    env.reset(seed=5)
    for i in range(MAX_CONSECUTIVE_INVALID):
        obs = env.step_text("not json")
        assert obs.parse_error and obs.turn == i + 1
        assert obs.user_message is not None and obs.user_message.kind == "format_hint"
    assert obs.done and env.episode().terminated_by is TerminatedBy.INVALID_ACTIONS
    assert env.episode().parse_failures == 3 and all(r.action is None for r in env.episode().actions)


def test_a_valid_output_resets_the_invalid_count() -> None:
    env = DriftCallEnv(3)
    env.reset(seed=5)
    for text in ("x", "y", format_action(SPEAK), "z", "w", format_action(SPEAK), "v"):
        assert not env.step_text(text).done
    assert env.state.parse_failures == 5


# ---------------------------------------------------------------------------------------------- notices, user
def test_terms_notice_is_delivered_once() -> None:
    seed = _seed_for("airline")
    env = DriftCallEnv(2, {"en": 1.0}, forced_pattern="airline_cabin_baggage_5kg")
    env.reset(seed=seed)
    slots = env.goal.slots
    search = DriftCallAction(ActionType.TOOL_CALL, tool_name="airline.search",
                             tool_args={"from": slots["from"], "to": slots["to"], "date": slots["date"]})
    first = env.step(search)  # turn 1: before min_turn 2, no drift yet
    assert "_notice" not in first.last_result.response
    second, third = env.step(search), env.step(search)
    assert "5 kg" in second.last_result.response["_notice"]
    assert "_notice" not in third.last_result.response
    assert [d.pattern_id for d in env.state.fired] == ["airline_cabin_baggage_5kg"]


def test_a_drill_requirement_binds_only_the_running_episode_and_is_no_drift() -> None:
    seed = _seed_for("hotel")
    env = DriftCallEnv(1, {"en": 1.0})
    with pytest.raises(EnvNotResetError):
        env.require_argument("hotel.search", "rooms", "int")
    prompt = env.reset(seed=seed).available_tools
    env.require_argument("hotel.search", "rooms", "int")
    slots = env.goal.slots
    query = {"city": slots["city"], "check_in": slots["check_in"], "check_out": slots["check_out"]}
    search = DriftCallAction(ActionType.TOOL_CALL, tool_name="hotel.search", tool_args=query)
    refused = env.step(search).last_result.response
    assert (refused["error_code"], refused["field_name"]) == ("MISSING_REQUIRED_FIELD", "rooms")
    repaired = DriftCallAction(ActionType.TOOL_CALL, tool_name="hotel.search",
                               tool_args={**query, "rooms": slots["rooms"]})
    after = env.step(repaired)
    assert after.last_result.status.value == "ok"
    assert env.state.fired == () and after.available_tools == prompt  # no drift event, the docs unchanged
    env.reset(seed=seed)  # the next episode starts without it
    assert env.step(search).last_result.status.value == "ok"


@pytest.mark.parametrize("lang", ["hi", "ta", "kn", "en", "hinglish"])
def test_user_answers_clarify_in_the_goal_language(lang: str) -> None:
    env = DriftCallEnv(2, {lang: 1.0})
    for seed in range(6):
        env.reset(seed=seed)
        obs = env.step(DriftCallAction(ActionType.CLARIFY, message="What is your budget? OTP?"))
        msg = obs.user_message
        assert msg is not None and msg.kind == "reply" and msg.language == lang
        assert script_of(msg.text) in (LANGUAGE_SCRIPT[lang], "mixed")
        if LANGUAGE_SCRIPT[lang] != "latin":
            assert any(LANGUAGE_SCRIPT[lang] == script_of(w) for w in msg.text.split())


def test_schedule_never_appears_in_observations() -> None:
    ids = [p.id for p in load_catalogue()]
    for stage in (2, 3):
        env = DriftCallEnv(stage)
        for seed in range(40):
            obs = env.reset(seed=seed)
            policy = ExpertPolicy()
            policy.reset(obs, GoalReader.from_goal(env.goal))
            seen = [obs.to_json()]
            while not obs.done:
                obs = env.step_text(policy.act(obs))
                seen.append(obs.to_json())
            text = "\n".join(seen)
            assert env.episode().schedule, "stage 2/3 episodes always have a schedule"
            assert not [i for i in ids if i in text]
            assert "min_turn" not in text and "\"schedule\"" not in text and "pattern_id" not in text


# ---------------------------------------------------------------------------------------------- fuzz
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 10**6) | st.text(max_size=10)
    | st.sampled_from(["BLR", "DEL", "2026-05-02", "2026-05-02T08:30", "payments.basic", "payments.v2", "veg",
                       "standard", "mini", "D01", "UNREGISTERED", "BLR:AIRPORT"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
_ARG_KEYS = st.sampled_from(["from", "to", "date", "city", "pickup", "drop", "pickup_time", "vehicle_class",
                             "flight_id", "passengers", "passenger_count", "items", "restaurant_id", "hotel_id",
                             "room_type", "check_in", "check_out", "rooms", "gst_number", "payment_token",
                             "mfa_code", "scope", "amount_inr", "payment_id", "booking_id", "order_id", "diet"])
_ACTIONS = st.one_of(
    st.fixed_dictionaries({"action": st.just("tool_call"),
                           "tool": st.sampled_from([*TOOL_NAMES, "airline.fly", "x", "hotel"]),
                           "args": st.dictionaries(_ARG_KEYS | st.text(max_size=6), _VALUES, max_size=6)}),
    st.fixed_dictionaries({"action": st.sampled_from(["speak", "clarify"]), "message": st.text(max_size=40)}),
    st.fixed_dictionaries({"action": st.just("probe_schema"), "domain": st.sampled_from([*DOMAINS, "x"])}),
    st.fixed_dictionaries({"action": st.just("submit"), "message": st.text(max_size=20),
                           "confidence": st.floats(-1, 2) | st.just(float("nan"))}),
    st.fixed_dictionaries({"action": st.just("abort")}),
)
_TEXTS = st.one_of(_ACTIONS.map(lambda o: json.dumps(o, ensure_ascii=False)), st.text(max_size=60))
FUZZ_EXAMPLES, STEPS_PER_EXAMPLE = 400, 25


@pytest.mark.slow
def test_fuzz_step_text_never_crashes_and_keeps_invariants() -> None:
    """>= 10,000 hypothesis-generated outputs (actions and arbitrary strings) through step_text."""
    envs = [DriftCallEnv(stage) for stage in (1, 2, 3)]
    steps = [0]

    @settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.data(), st.integers(0, 10_000), st.sampled_from([0, 1, 2]))
    def play(data: st.DataObject, seed: int, which: int) -> None:
        env = envs[which]
        env.reset(seed=seed)
        for _ in range(STEPS_PER_EXAMPLE):
            obs = env.step_text(data.draw(_TEXTS))
            steps[0] += 1
            state = env.state
            assert len(state.actions) == state.turn == obs.turn
            assert obs.budget_remaining == state.max_turns - state.turn
            if obs.done:
                rewards = env.rewards()
                assert MIN_REWARD <= rewards.reward <= 1.0 and obs.reward == rewards.reward
                assert env.episode().turns_used == len(env.episode().actions)
                with pytest.raises(EpisodeDoneError):
                    env.step_text("{}")
                env.reset(seed=seed + 1)

    play()
    assert steps[0] >= 10_000


# ---------------------------------------------------------------------------------------------- determinism
_DIGEST_SCRIPT = """
import hashlib, json
from cells.agent.policies import ExpertPolicy, GoalReader
from cells.agent.policies.random_policy import RandomPolicy
from cells.step_04_datatypes import canonical_json
from cells.step_10_env import DriftCallEnv
h = hashlib.sha256()
for stage in (1, 2, 3):
    env = DriftCallEnv(stage)
    for seed in range(6):
        for policy in (ExpertPolicy(), RandomPolicy(seed)):
            obs = env.reset(seed=seed)
            policy.reset(obs, GoalReader.from_goal(env.goal))
            h.update(obs.to_json().encode())
            while not obs.done:
                obs = env.step_text(policy.act(obs))
                h.update(obs.to_json().encode())
            h.update(env.episode().to_json().encode())
            h.update(canonical_json(env.rewards().to_dict()).encode())
print(h.hexdigest())
"""


def _digest(hash_seed: str) -> str:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", _DIGEST_SCRIPT], cwd=ROOT, env=env, capture_output=True,
                         text=True, check=True, timeout=120)
    return out.stdout.strip()


def test_same_seed_same_actions_identical_across_processes() -> None:
    first, second = _digest("0"), _digest("4242")
    assert len(first) == 64 and first == second


def test_same_seed_same_trajectory_in_process() -> None:
    def run() -> str:
        env = DriftCallEnv(3)
        obs = env.reset(seed=77)
        policy = ExpertPolicy()
        policy.reset(obs, GoalReader.from_goal(env.goal))
        while not obs.done:
            obs = env.step_text(policy.act(obs))
        return hashlib.sha256((env.episode().to_json() + canonical_json(env.rewards().to_dict())).encode()).hexdigest()

    assert run() == run()


# ---------------------------------------------------------------------------------------------- turn-0 prompt
def test_render_initial_prompt_is_system_plus_utterance() -> None:
    from cells.agent.chat import render_initial_prompt
    from cells.agent.prompt import initial_messages

    class Recorder:
        def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False):
            self.messages, self.gen = messages, add_generation_prompt
            return "rendered"

    env = DriftCallEnv(2, {"ta": 1.0})
    obs = env.reset(seed=9)
    tok = Recorder()
    assert render_initial_prompt(tok, env.goal) == "rendered" and tok.gen is True
    assert [m["role"] for m in tok.messages] == ["system", "user"]
    assert tok.messages[1]["content"] == env.goal.seed_utterance == obs.goal_utterance
    assert tok.messages == initial_messages(env.goal, obs.available_tools)
    assert all(t.name in tok.messages[0]["content"] for t in obs.available_tools)


def test_the_caller_time_is_observed_at_turn_0_and_ends_the_system_prompt() -> None:
    """Users name dates without a year; the year of a January date asked in December is only knowable from it."""
    from cells.agent.prompt import format_now, initial_messages
    from cells.agent.rollout import default_system_prompt

    assert format_now("2026-12-10T18:30:00+05:30") == "Now: Thursday 2026-12-10 18:30 IST"
    env = DriftCallEnv(1)
    seed = next(s for s in range(2_000) if env.reset(seed=s) and env.goal.slots.get("date", "").startswith("2027-"))
    obs = env.reset(seed=seed)
    assert obs.now == env.goal.now and obs.now.startswith("2026-12-")
    system = initial_messages(env.goal, obs.available_tools)[0]["content"]
    assert system.endswith("\n" + format_now(env.goal.now))
    assert default_system_prompt(None, obs) == system  # what a rollout (or a remote client) builds from the observation
    later = env.step_text('{"action":"speak","message":"ok"}')
    assert later.now is None


# ---------------------------------------------------------------------------------------------- OpenEnv
def test_openenv_adapter_reset_step_state_and_text_actions() -> None:
    from cells.openenv_env import DriftCallActionModel, DriftCallOpenEnv

    env = DriftCallOpenEnv(stage=1)
    obs = env.reset(seed=4)
    assert obs.turn == 0 and obs.done is False and obs.reward is None and obs.goal_utterance
    assert env.state.step_count == 0 and env.state.episode_id
    obs = env.step(DriftCallActionModel(action_type="speak", message="hello"))
    assert obs.turn == 1 and obs.user_message and obs.user_message["kind"] == "ack"
    obs = env.step(DriftCallActionModel(text="garbage"))
    assert obs.parse_error and obs.turn == 2 and env.state.step_count == 2
    with pytest.raises(ValueError, match="action_type"):  # the pydantic boundary refuses unknown kinds
        DriftCallActionModel(action_type="fly")
    with pytest.raises(InvalidActionError):  # a known kind the core action refuses (tool_call needs a tool)
        env.step(DriftCallActionModel(action_type="tool_call"))
    assert env.state.step_count == 2  # neither refusal cost a turn
    obs = env.step(DriftCallActionModel(text='{"action":"submit","message":"done","confidence":0.0}'))
    assert obs.done is True and obs.reward == 0.0
    assert "schedule" not in json.dumps(obs.model_dump(), ensure_ascii=False)


def test_reset_tool_docs_need_no_world_and_equal_a_fresh_worlds() -> None:
    from cells.step_04_datatypes import GOAL_DOMAINS
    from cells.step_05_vendors import new_world, tool_docs
    from cells.step_10_env import reset_tool_docs

    env = DriftCallEnv(3)
    for domain in GOAL_DOMAINS:
        seed = next(s for s in range(200) if env.reset(seed=s) and env.goal.domain == domain)
        obs = env.reset(seed=seed)
        fresh = tool_docs(new_world(env.goal, seed), (domain, "payment"))
        assert reset_tool_docs(domain) == obs.available_tools
        assert all(t in fresh for t in obs.available_tools)
        assert "payment.get_token" in {t.name for t in obs.available_tools}


def test_finished_episodes_leave_nothing_behind():
    """Playing more episodes must not grow the process's heap: process-wide memos of listings and result
    texts once held up to 4,096 entries each, ~14 objects an episode, that every full garbage collection
    scanned (30-110 ms pauses in a server's env worker). The bound leaves room for other threads of a test
    process allocating meanwhile."""
    import gc

    from cells.agent.play import play_many
    from cells.step_10_env import make_env_factory

    factory = make_env_factory(2)
    play_many(factory, ExpertPolicy, range(60))  # warm every bounded cache (tool docs, patterns, ...)
    gc.collect()
    before = len(gc.get_objects())
    play_many(factory, ExpertPolicy, range(60, 360))
    gc.collect()
    grown = len(gc.get_objects()) - before
    assert grown < 1000, f"{grown} more objects after 300 episodes"  # ~4,200 with those memos; ~0-30 now
