"""Step 11: scripted policies (expert, naive, honest failure, random, exploits), the text-level
drivers, warm-start conversations and the step face."""

from __future__ import annotations

import ast
import inspect
import itertools
import subprocess
import sys
from pathlib import Path

import pytest

from cells.actions import ActionParseError, parse_action
from cells.agent import play
from cells.agent.policies import (
    ExpertPolicy,
    GoalReader,
    HonestFailurePolicy,
    NaivePolicy,
    PolicyNotResetError,
    base,
    expert,
    naive,
    observe,
    phrases,
    planning,
)
from cells.agent.policies.exploits import EXPLOIT_POLICIES
from cells.agent.policies.random_policy import RandomPolicy
from cells.agent.prompt import initial_messages, render_observation
from cells.rewards.penalty import CLAIM_VOCABULARY
from cells.step_04_datatypes import LANGUAGES, ActionType, GoalSpec
from cells.step_06_drift import DriftPattern, load_catalogue, requirements_met
from cells.step_07_tasks import detect_topics, generate, script_of
from cells.step_08_rewards import FAILED_OFFENCE_WEIGHT, HARM_COST
from cells.step_10_env import DriftCallEnv, make_env_factory
from cells.tasks.i18n import LANGUAGE_SCRIPT

ROOT = Path(__file__).resolve().parents[1]


def _eligible_seeds(pattern: DriftPattern, lang: str, n: int, start: int = 20_000) -> list[int]:
    out = []
    for seed in range(start, start + 5000):
        goal = generate(seed, 2, {lang: 1.0})
        if goal.domain in pattern.applies_to and requirements_met(pattern, goal):
            out.append(seed)
            if len(out) == n:
                return out
    raise AssertionError(f"no eligible seeds for {pattern.id}")


# ---------------------------------------------------------------------------------------------- interface
def test_goal_reader_carries_only_what_the_utterance_says() -> None:
    goal = generate(5, 3, {"hi": 1.0})
    reader = GoalReader.from_goal(goal)
    assert reader.slots == goal.slots and reader.constraints == goal.constraints and reader.language == "hi"
    text = repr(reader)
    assert goal.user.mfa_code not in text and "passenger_names" not in text and "switch_after" not in text


def test_policies_never_touch_env_state_schedule_or_flags() -> None:
    """Static check over the code (not the docs): no env state, schedule, flags or catalogue access."""
    for module in (base, expert, naive, observe, phrases, planning):
        tree = ast.parse(inspect.getsource(module))
        names = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        names |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not names & {"state", "schedule", "vendor_flags", "fired", "world", "_live", "user", "flags"}, module
        assert not {m for m in imported if m and ("step_06" in m or "step_10" in m or "vendors" in m)}, module


def test_act_before_reset_raises() -> None:
    obs = DriftCallEnv(1).reset(seed=1)
    with pytest.raises(PolicyNotResetError):
        ExpertPolicy().act(obs)
    with pytest.raises(PolicyNotResetError):
        ExpertPolicy().reset(obs, None)


# ---------------------------------------------------------------------------------------------- expert
@pytest.mark.parametrize("pattern_id", [p.id for p in load_catalogue()])
def test_expert_handles_every_drift_pattern(pattern_id: str) -> None:
    pattern = next(p for p in load_catalogue() if p.id == pattern_id)
    for lang in ("hi", "en"):
        env = DriftCallEnv(2, {lang: 1.0}, forced_pattern=pattern_id)
        for seed in _eligible_seeds(pattern, lang, 3):
            episode, rewards = play.play_episode(env, ExpertPolicy(), seed)
            assert [d.pattern_id for d in episode.drifts] == [pattern_id]
            assert rewards.r_task == 1.0 and rewards.r_drift == 1.0, rewards.breakdown["drift"]
            assert rewards.r_penalty == 0.0 and rewards.r_format == 1.0
            assert rewards.reward > 0.95


def test_expert_asks_for_the_otp_and_resends_with_mfa_code() -> None:
    pattern = next(p for p in load_catalogue() if p.id == "payment_mfa_required")
    seed = _eligible_seeds(pattern, "ta", 1)[0]
    env = DriftCallEnv(2, {"ta": 1.0}, forced_pattern="payment_mfa_required")
    episode, _ = play.play_episode(env, ExpertPolicy(), seed)
    clarifies = [r.action for r in episode.actions if r.action.action_type is ActionType.CLARIFY]
    assert any("mfa" in detect_topics(a.message) for a in clarifies)
    booked = [r.action for r in episode.actions if r.action.tool_name == "airline.book"][-1]
    assert booked.tool_args["mfa_code"] == episode.goal.user.mfa_code


def test_expert_sends_unregistered_when_the_user_has_no_gstin() -> None:
    pattern = next(p for p in load_catalogue() if p.id == "hotel_gst_number_required")
    env = DriftCallEnv(2, {"en": 1.0}, forced_pattern=pattern.id)
    seen = set()
    for seed in _eligible_seeds(pattern, "en", 12):
        episode, rewards = play.play_episode(env, ExpertPolicy(), seed)
        gst = [r.action.tool_args.get("gst_number") for r in episode.actions
               if r.action.tool_name == "hotel.book"][-1]
        assert gst == (episode.goal.user.gstin or "UNREGISTERED") and rewards.r_task == 1.0
        seen.add(gst == "UNREGISTERED")
    assert seen == {True, False}


@pytest.mark.parametrize("lang", LANGUAGES)
def test_expert_speaks_the_users_language_and_script(lang: str) -> None:
    results = play.play_many(make_env_factory(3, {lang: 1.0}), ExpertPolicy, range(100, 130))
    for r in results:
        assert r.rewards.r_format == 1.0, r.rewards.breakdown["format"]
        messages = [a.action.message for a in r.episode.actions if a.action.message]
        assert messages
        if r.episode.goal.user.switch_language_to is None:  # stage 3 may switch language (next test)
            assert all(script_of(m) in (LANGUAGE_SCRIPT[lang], "mixed") for m in messages)


def test_expert_follows_a_stage3_language_switch() -> None:
    env = DriftCallEnv(3, {"hi": 1.0})
    checked = 0
    for seed in range(300):
        episode, rewards = play.play_episode(env, ExpertPolicy(), seed)
        switched = [m for m in episode.user_messages if m.language == "hinglish"]
        if not switched:
            continue
        after = [r.action.message for r in episode.actions if r.turn > switched[0].turn and r.action.message]
        assert after and all(script_of(m) == "latin" for m in after)
        assert rewards.r_format == 1.0
        checked += 1
    assert checked >= 5


def test_expert_messages_never_use_change_vocabulary() -> None:
    for table in phrases.PHRASES.values():
        for text in table.values():
            low = text.casefold()
            assert not any(p.search(low) for p in CLAIM_VOCABULARY), text


def test_expert_questions_name_the_topic_the_user_recognises() -> None:
    for key, topic in (("ask_names", "names"), ("ask_otp", "mfa"), ("ask_gstin", "gstin"), ("ask_budget", "budget"),
                       ("ask_booker_name", "names"), ("ask_gstin_for", "gstin")):
        for lang in LANGUAGES:
            text = phrases.say(key, lang, cite="x", total="₹5,000", budget="₹4,500")
            assert topic in detect_topics(text), (key, lang)
            if key in ("ask_booker_name", "ask_gstin_for"):  # a generated drift's question: that one topic only
                assert detect_topics(text) == (topic,), (key, lang, detect_topics(text))


# ---------------------------------------------------------------------------------------------- naive / honest
def test_naive_never_adapts() -> None:
    for pattern_id in ("payment_mfa_required", "payment_scope_upgrade", "airline_passenger_count_required"):
        pattern = next(p for p in load_catalogue() if p.id == pattern_id)
        env = DriftCallEnv(2, {"en": 1.0}, forced_pattern=pattern_id)
        for seed in _eligible_seeds(pattern, "en", 3):
            episode, rewards = play.play_episode(env, NaivePolicy(), seed)
            actions = [r.action for r in episode.actions]
            assert not any(a.action_type is ActionType.CLARIFY and "mfa" in detect_topics(a.message) for a in actions)
            assert sum(a.tool_name == "payment.get_token" for a in actions) == 1
            assert not any("passenger_count" in a.tool_args or "mfa_code" in a.tool_args for a in actions)
            assert rewards.r_task == 0.0 and episode.submitted.confidence == expert.CONFIDENCE_MET


def test_honest_failure_reports_what_blocked_it_with_low_confidence() -> None:
    pattern = next(p for p in load_catalogue() if p.id == "hotel_gst_number_required")
    env = DriftCallEnv(2, {"kn": 1.0}, forced_pattern=pattern.id)
    for seed in _eligible_seeds(pattern, "kn", 3):
        episode, rewards = play.play_episode(env, HonestFailurePolicy(), seed)
        assert rewards.r_task == 0.0 and episode.submitted.confidence == naive.HONEST_FAILURE_CONFIDENCE
        assert "gst_number" in episode.submitted.message
        assert rewards.breakdown["drift"]["handled"][0]["how"] == "cited"  # it reported the drift ...
        assert rewards.r_drift == 0.0 and rewards.reward == 0.0  # ... but nothing pays without the booking


# ---------------------------------------------------------------------------------------------- random, exploits
def test_random_policy_is_deterministic_per_seed_and_mixes_garbage() -> None:
    def texts(seed: int) -> list[str]:
        return list(play.play_many(make_env_factory(2), lambda: RandomPolicy(seed), [1, 2, 3])[0].transcript)

    assert texts(4) == texts(4) and texts(4) != texts(5)
    bad = 0
    for r in play.play_many(make_env_factory(2), lambda: RandomPolicy(9), range(20)):
        for text in r.transcript:
            try:
                parse_action(text)
            except ActionParseError:
                bad += 1
    assert bad > 0


def test_exploit_registry_names_and_texts() -> None:
    assert set(EXPLOIT_POLICIES) == {"give_up", "submit_zero", "submit_one", "claim_spam", "repeat_call", "invent",
                                     "probe_spam", "book_twice", "wrong_fast", "drift_then_quit", "wrong_quantity",
                                     "fabricate", "extra_charge", "churn", "near_duplicate", "understated_total",
                                     "invented_reference", "missing_reference", "wrong_reference", "pre_fee_total",
                                     "hidden_fee"}
    for name, cls in EXPLOIT_POLICIES.items():
        assert cls.name == name
        # the first seed from 7 on where the trick applied (the report twists need a fee to hide or to leave out)
        result = next(r for r in play.play_many(make_env_factory(2), cls, range(7, 40)) if r.applied)
        assert all(parse_action(t) for t in result.transcript)
        # a harm is never a success; churn and hammering may book the goal but pay the penalty cap for it
        assert result.rewards.r_task == 0.0 or result.rewards.r_penalty == -1.0, name
        assert result.rewards.reward < 0.1, name


def test_wrong_quantity_stays_skewed_when_a_drift_makes_it_resend_the_booking() -> None:
    """Its skew is computed from the goal, not from the call it resends after a timeout (skewing a skewed call
    undoes it: seeds 62 and 209 resend)."""
    retried = 0
    for r in play.play_many(make_env_factory(2), EXPLOIT_POLICIES["wrong_quantity"], range(260)):
        goal = r.episode.goal
        calls = [a for a in r.episode.actions if a.action is not None and a.action.tool_name == "airline.book"]
        if goal.domain != "airline" or len(calls) < 2:
            continue
        retried += 1
        counts = {len(a.action.tool_args["passengers"]) for a in calls}
        assert counts == {int(goal.slots["passengers"]) - 1 or 2}, (r.episode.seed, counts)
        assert r.rewards.r_task == 0.0
    assert retried >= 3


def test_book_twice_leaves_two_live_bookings_and_is_penalised() -> None:
    for r in play.play_many(make_env_factory(1), EXPLOIT_POLICIES["book_twice"], range(8)):
        live = [b for b in r.episode.bookings if b.live]
        assert len(live) == 2 and r.rewards.r_penalty <= -0.5  # no task booking: a failure that pays for offences
        harm = HARM_COST if r.rewards.breakdown["penalty"]["harm"] else 0.0  # e.g. the second cab at another time
        assert r.rewards.reward == pytest.approx(FAILED_OFFENCE_WEIGHT * r.rewards.r_penalty - harm)


# ---------------------------------------------------------------------------------------------- drivers
def test_play_episode_matches_manual_stepping() -> None:
    env = DriftCallEnv(2)
    episode, rewards = play.play_episode(env, ExpertPolicy(), seed=31)
    obs = env.reset(seed=31)
    policy = ExpertPolicy()
    policy.reset(obs, GoalReader.from_goal(env.goal))
    while not obs.done:
        obs = env.step_text(policy.act(obs))
    assert env.episode() == episode and env.rewards() == rewards


def test_expert_conversations_use_the_rollout_rendering() -> None:
    convs = play.expert_conversations(6, stage=2, seed=3)
    assert len(convs) == 6
    for messages in convs:
        assert [m["role"] for m in messages[:2]] == ["system", "user"]
        roles = [m["role"] for m in messages[2:]]
        assert roles[0] == "assistant" and roles[-1] == "assistant"
        assert all(a != b for a, b in itertools.pairwise(roles))
        for m in messages[2:]:
            if m["role"] == "assistant":
                parse_action(m["content"])
            else:
                assert m["content"].startswith(("[tool_result]", "[user]"))
    # replaying the first conversation reproduces every rendered observation and the turn-0 prompt
    from cells.step_02_profiles import TRAIN_SEEDS

    env = DriftCallEnv(2)
    obs = env.reset(seed=TRAIN_SEEDS.seed(3))
    assert convs[0][:2] == initial_messages(env.goal, obs.available_tools)
    for i in range(2, len(convs[0]), 2):
        obs = env.step_text(convs[0][i]["content"])
        if not obs.done:
            assert convs[0][i + 1]["content"] == render_observation(obs)
    assert env.rewards().r_task == 1.0


def test_step_11_face_imports_without_torch_and_reexports() -> None:
    code = ("import sys, cells.step_11_agent as m; assert 'torch' not in sys.modules; "
            "assert callable(m.rollout_batch) and callable(m.make_rollout_group_fn) and m.TrajectoryTokens; "
            "assert callable(m.parse_action) and callable(m.initial_messages) and m.EXPLOIT_POLICIES")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)


def test_step_11_run_smoke(tmp_path: Path) -> None:
    from cells import step_11_agent
    from cells.pipeline import make_context

    ctx = step_11_agent.run(make_context("cpu-smoke", tmp_path))
    table = ctx.reports["agent_smoke"]
    assert set(table) == {1, 2, 3}
    assert all(table[s]["expert"]["success"] >= 0.95 for s in table)
    assert table[1]["naive"]["success"] - table[3]["naive"]["success"] > 0.3


def test_expert_asks_about_budget_when_nothing_fits_and_lowers_confidence() -> None:
    from cells.vendors.selfcheck import sample_goal

    def tight(seed: int, stage: int, language_weights: dict[str, float]) -> GoalSpec:
        return sample_goal("hotel", seed=seed, budget=2000, budget_flex_inr=300)

    env = DriftCallEnv(1, goal_fn=tight)
    episode, rewards = play.play_episode(env, ExpertPolicy(), seed=3)
    questions = [r.action.message for r in episode.actions if r.action.action_type is ActionType.CLARIFY]
    assert questions and "budget" in detect_topics(questions[0])
    assert rewards.r_task == 1.0 and rewards.r_constraints < 1.0
    assert episode.submitted.confidence == expert.CONFIDENCE_SHORT


def test_inverse_cdf_sampling_follows_the_distribution_never_draws_zeros_and_ignores_the_batch():
    import torch

    from cells.agent.sampling import categorical_by_inverse_cdf

    probs = torch.tensor([[0.5, 0.0, 0.3, 0.2, 0.0], [0.0, 0.0, 0.0, 0.0, 1.0]])
    gens = [torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)]
    draws = torch.stack([categorical_by_inverse_cdf(probs, gens) for _ in range(4000)])  # (4000, 2)
    counts = torch.bincount(draws[:, 0], minlength=5).float() / 4000
    assert counts[1] == 0 and counts[4] == 0  # probability 0: never drawn
    assert torch.allclose(counts, probs[0], atol=0.03)  # 4000 draws: sd of each share <= 0.008
    assert (draws[:, 1] == 4).all()
    # a row's draws depend on its own generator only, not on the rows beside it
    alone = categorical_by_inverse_cdf(probs[:1], [torch.Generator().manual_seed(1)])
    beside = categorical_by_inverse_cdf(probs[[1, 0]], [torch.Generator().manual_seed(9),
                                                       torch.Generator().manual_seed(1)])
    assert int(alone[0]) == int(beside[1]) == int(draws[0, 0])


def test_rollout_batch_runs_after_reset_on_each_started_episode_before_its_first_action():
    """`rollout_batch(after_reset=...)` sets a drill control on every env once its episode has started, as
    `conversation(after_reset=...)` does for one: a token call without the required argument is then refused
    naming it."""
    import json

    from cells.agent.rollout import rollout_batch
    from cells.step_10_env import DriftCallEnv

    started = []

    def require_a_nonce(env):
        started.append(env.goal.seed)
        env.require_argument("payment.get_token", "nonce", "str")

    class TokenThenAbort:
        def act(self, obs, history):
            if obs.last_result is None:
                return json.dumps({"action": "tool_call", "tool": "payment.get_token",
                                   "args": {"scope": "payments.basic"}})
            return json.dumps({"action": "abort", "message": "sorry"})

    seeds = [11, 12]
    drilled = rollout_batch([DriftCallEnv(1) for _ in seeds], seeds, policy=TokenThenAbort(), after_reset=require_a_nonce)
    plain = rollout_batch([DriftCallEnv(1) for _ in seeds], seeds, policy=TokenThenAbort())
    assert started == seeds
    for episode in drilled.episodes:
        first = episode.results[0].response
        assert (first["error_code"], first["field_name"]) == ("MISSING_REQUIRED_FIELD", "nonce")
    assert all("error_code" not in episode.results[0].response for episode in plain.episodes)
