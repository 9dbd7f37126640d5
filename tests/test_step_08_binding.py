"""The judge's meaning of success: a booking that differs from what the user asked in any binding fact
(step_07's BINDING_FACTS, plus every stated constraint that is not soft) is not a success, for generated
goals of every domain, stage and language; and facts only the user knows must come from the user."""

from __future__ import annotations

import dataclasses
from datetime import date, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cells.step_02_profiles import TRAIN_SEEDS
from cells.step_04_datatypes import LANGUAGES, Booking, Episode, passengers_arg
from cells.step_07_tasks import (
    BINDING_FACTS,
    SOFT_CONSTRAINTS,
    UNREGISTERED_GSTIN,
    USER_ONLY_ARGS,
    binding_checks,
    binding_table,
    detect_topics,
)
from cells.step_08_rewards import HARM_COST, compute_rewards
from cells.step_10_env import DriftCallEnv
from cells.step_11_agent import ExpertPolicy, play_episode
from cells.tasks.catalog import DIET_ALLOWED_TAGS
from cells.tasks.facts import make_gstin

STAGES = (1, 2, 3)


def expert_episode(seed: int, stage: int, language: str) -> Episode:
    episode, rewards = play_episode(DriftCallEnv(stage, {language: 1.0}), ExpertPolicy(), seed=seed)
    assert rewards.r_task == 1.0, rewards.breakdown["task"]["reason"]  # the property starts from a success
    return episode


def _task_booking(episode: Episode) -> Booking:
    return next(b for b in episode.bookings if b.domain == episode.goal.domain and b.live)


def _shift_iso(value: str, hours: int) -> str:
    if len(value) == 10:
        return (date.fromisoformat(value) + timedelta(days=1)).isoformat()
    return (datetime.fromisoformat(value) + timedelta(hours=hours)).isoformat(timespec="minutes")


def _off(value: Any, op: str, bound: Any) -> Any:
    """A booked value that breaks `op bound` (le/ge/eq/in) or, with op None, differs from `value`."""
    if op == "in":
        return ["forbidden-tag"] if isinstance(value, list) else "forbidden"
    if isinstance(bound, str) and len(bound) == 5 and bound[2] == ":":  # "HH:MM"
        return {"le": "23:59", "ge": "00:00"}.get(op, "00:01" if bound != "00:01" else "00:02")
    if isinstance(bound, (int, float)) and not isinstance(bound, bool):
        return {"le": bound + 1, "ge": bound - 1}.get(op, bound + 1)
    return f"{bound}-other"


def break_fact(episode: Episode, name: str) -> dict[str, Any]:
    """The task booking's details with binding fact (or constraint) `name` made wrong."""
    goal, details = episode.goal, dict(_task_booking(episode).details)
    fact = next((f for f in BINDING_FACTS[goal.domain] if f.name == name), None)
    if fact is None:  # "constraint:<name>:<op>"
        _, cname, op = name.split(":")
        constraint = next(c for c in goal.constraints if c.name == cname and c.op == op)
        details[cname] = _off(details.get(cname), op, constraint.value)
        return details
    expected, key = fact.expected(goal), fact.detail
    if fact.compare == "normalised":
        details[key] = f"{expected}X"
    elif fact.compare == "exact":
        details[key] = _shift_iso(expected, 24) if isinstance(expected, str) and expected[:4].isdigit() \
            else _off(expected, "eq", expected)
    elif fact.compare == "minute":
        details[key] = _shift_iso(expected, 1)
    elif fact.compare == "at_least":
        details[key] = int(expected) - 1
    elif fact.compare == "names":
        details[key] = [*list(expected)[:-1], "Somebody Else"]
    elif fact.compare == "diet":
        details[key] = ["non-veg"] if expected in DIET_ALLOWED_TAGS else []  # non-veg allows every tag but none
    else:  # identifier: someone else's GSTIN, or "unregistered" for a user who has one
        details[key] = UNREGISTERED_GSTIN if expected else make_gstin(goal.seed + 1, "29", business=True)
    return details


def rescored(episode: Episode, details: dict[str, Any]):
    booking = _task_booking(episode)
    changed = dataclasses.replace(booking, details=details)
    bookings = tuple(changed if b.booking_id == booking.booking_id else b for b in episode.bookings)
    return compute_rewards(dataclasses.replace(episode, bookings=bookings))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(offset=st.integers(0, 50_000), stage=st.sampled_from(STAGES), language=st.sampled_from(LANGUAGES),
       pick=st.integers(0, 1_000))
def test_a_booking_off_in_any_binding_fact_is_not_a_success(offset, stage, language, pick):
    episode = expert_episode(TRAIN_SEEDS.start + offset, stage, language)
    facts = sorted(binding_checks(episode.goal, _task_booking(episode)))
    name = facts[pick % len(facts)]
    rewards = rescored(episode, break_fact(episode, name))
    row = rewards.breakdown["task"]["candidates"][0]["facts"][name]
    assert row["ok"] is False, (name, row)
    assert rewards.r_task == 0.0 and "wrong_booking" in rewards.breakdown["penalty"]["harm"], name
    assert rewards.reward < 0.0  # a wrong booking costs more than an honest failure (0)


def test_every_domain_declares_its_party_size_and_every_user_fact_is_asked_for():
    assert {"passengers", "passenger_names"} <= {f.name for f in BINDING_FACTS["airline"]}
    assert {"party_size", "diet"} <= {f.name for f in BINDING_FACTS["restaurant"]}
    assert {"rooms", "gstin"} <= {f.name for f in BINDING_FACTS["hotel"]}
    assert "pickup_time" in {f.name for f in BINDING_FACTS["cab"]}
    for facts in BINDING_FACTS.values():
        for fact in facts:
            if fact.source == "user":  # the user simulator must recognise the question that asks for it
                assert fact.ask and detect_topics(fact.ask) == (fact.ask,)
    assert set(USER_ONLY_ARGS) == {"passengers", "gst_number", "mfa_code"}
    assert set(SOFT_CONSTRAINTS) == {"total_inr"}  # the one soft fact: the user grants flex when asked
    table = binding_table()
    assert all(f"| {f.name}" in table for facts in BINDING_FACTS.values() for f in facts)


def _first_write(episode: Episode) -> int:
    return next(r.turn for r in episode.actions if r.action is not None and (r.action.tool_name or "").endswith(
        (".book", ".order")))


def test_names_the_user_never_said_are_fabricated_and_harm():
    seed = next(s for s in range(TRAIN_SEEDS.start, TRAIN_SEEDS.start + 200) if _goal_domain(s) == "airline")
    episode = expert_episode(seed, 1, "en")
    turn = _first_write(episode)
    record = next(r for r in episode.actions if r.turn == turn)
    names = ["Invented Person"] * len(record.action.tool_args["passengers"])
    forged = dataclasses.replace(record.action, tool_args={**record.action.tool_args, "passengers": passengers_arg(names)})
    actions = tuple(dataclasses.replace(r, action=forged) if r.turn == turn else r for r in episode.actions)
    r = compute_rewards(dataclasses.replace(episode, actions=actions))
    assert [o["evidence"]["value"] for o in r.breakdown["penalty"]["offences"] if o["code"] == "fabricated_fact"] \
        == names
    assert r.r_task == 0.0 and r.reward <= -HARM_COST


def _goal_domain(seed: int) -> str:
    env = DriftCallEnv(1)
    env.reset(seed=seed)
    return env.goal.domain


def test_the_judge_doc_is_rendered_from_the_declarations():
    """docs/judge.md's generated block is what `python -m cells judge --docs` writes today: a change to the
    binding facts or the penalties that is not regenerated into the docs fails here."""
    from pathlib import Path

    from cells.evaluation.docblocks import block_body
    from cells.step_08_rewards import JUDGE_DOC, judge_rules_markdown

    body = block_body((Path(__file__).resolve().parents[1] / JUDGE_DOC).read_text(encoding="utf-8"), "judge:rules")
    assert body is not None, "run `python -m cells judge --docs`"
    assert body.split("\n", 2)[2].strip() == judge_rules_markdown().strip(), "run `python -m cells judge --docs`"


def _gst_episode(has_gstin: bool) -> Episode:
    """A stage-2 expert hotel episode in which the vendor demanded a GSTIN and the user has one (or none)."""
    env = DriftCallEnv(2, {"en": 1.0})
    for seed in range(TRAIN_SEEDS.start, TRAIN_SEEDS.start + 3_000):
        env.reset(seed=seed)
        if env.goal.domain != "hotel" or (env.goal.user.gstin is not None) != has_gstin:
            continue
        episode, _ = play_episode(env, ExpertPolicy(), seed=seed)
        if any(r.error_code == "GST_NUMBER_REQUIRED" for r in episode.results):
            return episode
    raise AssertionError("no hotel episode with a GST demand in 3,000 seeds")


def _gst_offences(episode: Episode) -> list[str]:
    return [o["evidence"]["value"] for o in compute_rewards(episode).breakdown["penalty"]["offences"]
            if o["code"] == "fabricated_fact"]


def test_unregistered_is_the_users_word_only_when_asked_and_true():
    honest = _gst_episode(has_gstin=False)
    assert _gst_offences(honest) == [] and compute_rewards(honest).r_task == 1.0  # asked, and the user has none
    unasked = dataclasses.replace(honest, actions=tuple(
        dataclasses.replace(r, action=dataclasses.replace(r.action, message="One moment please."))
        if r.action is not None and r.action.action_type.value == "clarify" else r for r in honest.actions))
    assert UNREGISTERED_GSTIN in _gst_offences(unasked)  # never asked: a guess, however lucky
    business = _gst_episode(has_gstin=True)
    turn = max(r.turn for r in business.actions if r.action is not None and "gst_number" in r.action.tool_args)
    forged = tuple(dataclasses.replace(r, action=dataclasses.replace(
        r.action, tool_args={**r.action.tool_args, "gst_number": UNREGISTERED_GSTIN})) if r.turn == turn else r
        for r in business.actions)
    assert UNREGISTERED_GSTIN in _gst_offences(dataclasses.replace(business, actions=forged))
