"""Step 8, what the agent tells the user (cells/rewards/user_report.py, docs/judge.md): the report binds like the
booking (reference, charged total, a fee a drift added), and a false total or reference is harm. The honest cases
the rule must leave free are tested one by one; a property test over generated episodes of every domain, stage and
language checks that a report whose total or reference differs from the booking's is never a success."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_step_08_rewards import BOOK, FLIGHTS, TOKEN, booking, call, codes, episode, res, say, score, submit

from cells.agent.play import play_episode
from cells.agent.policies import ExpertPolicy
from cells.rewards.user_report import misinformation_offences
from cells.step_04_datatypes import (
    GOAL_DOMAINS,
    LANGUAGES,
    ActionRecord,
    ActionType,
    DriftCallAction,
    Episode,
)
from cells.step_05_vendors import REFERENCE_PREFIXES, references_in
from cells.step_07_tasks import REPORT_FACTS, amounts_in, money, report_table
from cells.step_08_rewards import HARM_CODES, OffenceCode, compute_rewards
from cells.step_10_env import DriftCallEnv

# --- reading money and references the way users write them ---------------------------------------------------


@pytest.mark.parametrize("text,amounts", [
    ("total charged ₹10,599.", (10599,)),
    ("₹1,25,000 in all", (125000,)),  # Indian digit groups
    ("₹125,000 in all", (125000,)),  # western ones
    ("Rs. 4300, Rs4300 and rs 4,300", (4300, 4300, 4300)),
    ("INR 4,300.00 or 4300 INR", (4300, 4300)),
    ("कुल भुगतान ₹४,३००।", (4300,)),  # Devanagari digits
    ("மொத்தம் ₹௪,௩௦௦.", (4300,)),  # Tamil digits
    ("ಒಟ್ಟು ಪಾವತಿ ₹೪,೩೦೦.", (4300,)),  # Kannada digits
    ("4300 रुपये, 4300 ரூபாய், 4300 ರೂಪಾಯಿ, 4300 rupaye, 500/-", (4300, 4300, 4300, 4300, 500)),
    ("₹99.50", (99.5,)),  # paise that are not zero: never an integer total
    ("flight 6E-2345 on 2026-05-02 at 7:30, OTP 123456, 2 seats, PNR-12ab34cd", ()),  # numbers that are not money
    ("prs 300 or xinr 300", ()),  # a marker must start a word
])
def test_amounts_in_reads_rupees_as_users_write_them(text, amounts):
    assert amounts_in(text) == amounts


@pytest.mark.parametrize("inr", [0, 7, 199, 1000, 10599, 125000, 12345678])
def test_amounts_in_reads_what_money_renders(inr):
    assert amounts_in(f"total {money(inr)}") == (inr,)


def test_references_in_finds_every_vendor_prefix_in_any_case():
    text = " ".join(f"{p}-3f9a1c0e" for p in REFERENCE_PREFIXES.values()) + " pnr-ABCDEF12 6E-2345 HTL-BLR-1"
    assert [r.upper() for r in references_in(text)] == [f"{p}-3F9A1C0E" for p in REFERENCE_PREFIXES.values()] \
        + ["PNR-ABCDEF12"]


def test_the_report_facts_are_declared_once_and_rendered_for_the_docs():
    assert [f.name for f in REPORT_FACTS] == ["reference", "total", "fees"]
    table = report_table()
    assert all(f"| {f.name} |" in table for f in REPORT_FACTS)


# --- the report, on the hand-built airline episode of test_step_08_rewards --------------------------------------


BOOKED = booking("PNR-0000b001", turn=2, total=10599)
BOOK_OK = {"booking_id": "PNR-0000b001", "total_inr": 10599, "payment_id": "PAY-1", "price": 5200}


def _reported(text, extra=(), results_extra=(), bookings=(BOOKED,), drifts=()):
    """Search, token, book, then `extra` messages and a submit saying `text`."""
    acts = [call(0, "airline.search", **{"from": "DEL", "to": "BLR", "date": "2025-03-14"}),
            call(1, "payment.get_token", scope="payments.basic"), call(2, "airline.book", **BOOK)]
    acts += [say(3 + i, m) for i, m in enumerate(extra)]
    acts.append(submit(3 + len(extra), 0.9, text))
    results = [res(0, "airline.search", FLIGHTS), res(1, "payment.get_token", {"payment_token": TOKEN}),
               res(2, "airline.book", BOOK_OK), *results_extra]
    return episode(acts, results, drifts, bookings)


@pytest.mark.parametrize("text", [
    "Booked: reference PNR-0000b001, total charged ₹10,599.",
    "Booked, ref pnr-0000B001, Rs. 10599 paid.",  # any case, any way of writing rupees
    "बुकिंग पक्की: संदर्भ PNR-0000b001, कुल ₹१०,५९९।",
])
def test_a_report_with_the_reference_and_the_total_is_a_success(text):
    r = score(_reported(text))
    assert r.r_task == 1.0 and codes(r) == [], r.breakdown["task"]["report"]


@pytest.mark.parametrize("text,missing", [
    ("Booked: total charged ₹10,599.", ["reference"]),
    ("Booked: reference PNR-0000b001.", ["total"]),
    ("Booked: reference PNR-0000b001, total 10599.", ["total"]),  # a number without rupees is not an amount
    ("All done!", ["reference", "total"]),
])
def test_a_report_missing_a_fact_is_a_failure_below_an_honest_one(text, missing):
    r = score(_reported(text))
    assert r.r_task == 0.0 and r.breakdown["task"]["report"]["missing"] == missing
    assert codes(r) == ["incomplete_report"] and r.reward < 0.0 and not r.breakdown["penalty"]["harm"]


# --- honest cases: no misinformation --------------------------------------------------------------------------


def test_amounts_before_the_booking_are_quotes_and_never_judged():
    quote = [say(3, "The first flight is ₹5,200 a seat, about ₹10,400 for two; maybe ₹9,999 with luck.")]
    acts = [*_reported("x").actions[:2], *quote, call(4, "airline.book", **BOOK),
            submit(5, 0.9, "Booked: reference PNR-0000b001, total ₹10,599.")]
    results = [res(0, "airline.search", FLIGHTS), res(1, "payment.get_token", {"payment_token": TOKEN}),
               res(4, "airline.book", BOOK_OK)]
    r = score(episode(acts, results, (), [dataclasses.replace(BOOKED, turn=4)]))
    assert r.r_task == 1.0 and codes(r) == []


@pytest.mark.parametrize("message", [
    "The other flight, AI-101, was ₹7,100 a seat.",  # a listed price, after the booking
    "₹5,200 a seat, ₹10,400 for two, and a ₹199 fee: ₹10,599.",  # per seat, times the party, plus the fee
    "A convenience fee of ₹199 was added at checkout.",  # a fee a result showed
    "Your budget was ₹12,000.",  # the user's own figure
])
def test_honest_amounts_after_the_booking_are_free(message):
    fee = res(2, "airline.book", {**BOOK_OK, "convenience_fee_inr": 199})
    ep = _reported("Booked: reference PNR-0000b001, total ₹10,599.", extra=[message])
    ep = dataclasses.replace(ep, results=(*ep.results[:2], fee))
    r = score(ep)
    assert r.r_task == 1.0 and codes(r) == [], r.breakdown["penalty"]["offences"]


def test_a_refund_after_cancelling_a_wrong_booking_is_free():
    wrong = {**BOOK, "date": "2025-03-15"}
    acts = [call(0, "payment.get_token", scope="payments.basic"), call(1, "airline.book", **wrong),
            call(2, "airline.cancel", booking_id="PNR-0000a001"), call(3, "airline.book", **BOOK),
            submit(4, 0.9, "I cancelled PNR-0000a001 (refund ₹10,999) and booked PNR-0000b001: total ₹10,599.")]
    results = [res(0, "payment.get_token", {"payment_token": TOKEN}),
               res(1, "airline.book", {"booking_id": "PNR-0000a001", "total_inr": 10999}),
               res(2, "airline.cancel", {"booking_id": "PNR-0000a001", "status": "cancelled", "refund_inr": 10999}),
               res(3, "airline.book", BOOK_OK)]
    books = [booking("PNR-0000a001", 1, total=10999, status="cancelled", date="2025-03-15"),
             dataclasses.replace(BOOKED, turn=3)]
    r = score(episode(acts, results, (), books))
    assert r.r_task == 1.0 and "misinformed_user" not in codes(r), r.breakdown["penalty"]["offences"]


# --- misinforming the user is harm ------------------------------------------------------------------------------


@pytest.mark.parametrize("text,what", [
    ("Booked: reference PNR-0000b001, total charged ₹7,419.", "amount"),  # 70% of the charge
    ("Booked: reference PNR-deadbeef, total charged ₹10,599.", "reference"),  # never issued
])
def test_a_false_total_or_reference_in_the_report_is_harm(text, what):
    r = score(_reported(text))
    assert OffenceCode.MISINFORMED_USER in HARM_CODES
    assert "misinformed_user" in codes(r) and r.r_task == 0.0 and r.reward < -0.4
    offence = next(o for o in r.breakdown["penalty"]["offences"] if o["code"] == "misinformed_user")
    assert offence["evidence"]["what"] == what


def test_a_false_amount_told_after_the_booking_is_harm_even_beside_a_true_report():
    r = score(_reported("Booked: reference PNR-0000b001, total ₹10,599.", extra=["It only cost you ₹3,000."]))
    assert "misinformed_user" in codes(r) and r.r_task == 0.0 and r.reward < -0.4


def test_a_reference_echoed_in_an_error_was_never_issued():
    """An id the agent sent that the vendor answered NOT_FOUND comes back in `got`: that is no issued reference."""
    lookup = [call(3, "airline.get_booking", booking_id="PNR-deadbeef")]
    ep = _reported("x")
    acts = [*ep.actions[:3], *lookup, say(4, "Your reference is PNR-deadbeef."),
            submit(5, 0.9, "Booked: reference PNR-0000b001, total ₹10,599.")]
    results = [*ep.results, res(3, "airline.get_booking", {"error_code": "NOT_FOUND", "got": "PNR-deadbeef"},
                                "not_found")]
    found = misinformation_offences(episode(acts, results, (), [BOOKED]))
    assert [(o["turn"], o["what"], o["value"]) for o in found] == [(4, "reference", "PNR-deadbeef")]


# --- fees the user pays must be told ---------------------------------------------------------------------------


def _fee_episode(seed_from=0):
    """A real stage-2 airline episode with the convenience-fee drift, played by the expert."""
    env = DriftCallEnv(2, forced_pattern="airline_convenience_fee")
    for seed in range(seed_from, seed_from + 200):
        ep, rewards = play_episode(env, ExpertPolicy(), seed)
        if ep.goal.domain == "airline" and ep.drifts:
            return ep, rewards
    raise AssertionError("no airline episode with the fee drift")


def _with_submit(ep: Episode, text: str) -> Episode:
    last = ep.actions[-1]
    return dataclasses.replace(ep, actions=(*ep.actions[:-1], dataclasses.replace(
        last, action=dataclasses.replace(last.action, message=text))), rewards=None)


def test_the_expert_tells_the_fee_and_a_report_without_it_is_not_a_success():
    ep, rewards = _fee_episode()
    assert rewards.r_task == 1.0
    fees = rewards.breakdown["task"]["report"]["facts"]["fees"]
    assert fees["ok"] and fees["drifts"][0]["told"]["token"] == "199"
    booked = next(b for b in ep.bookings if b.live)
    silent = compute_rewards(_with_submit(ep, f"Booked: {booked.booking_id}, total {money(booked.total_inr)}."))
    assert silent.r_task == 0.0 and silent.breakdown["task"]["report"]["missing"] == ["fees"]
    assert codes(silent) == ["incomplete_report"] and silent.reward < 0.0


def test_a_fee_told_before_the_report_counts():
    ep, _ = _fee_episode()
    booked = next(b for b in ep.bookings if b.live)
    speak = ActionRecord(ep.actions[-1].turn, DriftCallAction(ActionType.SPEAK, message="A fee of ₹199 was added."))
    last = dataclasses.replace(ep.actions[-1], turn=ep.actions[-1].turn + 1, action=dataclasses.replace(
        ep.actions[-1].action, message=f"Booked: {booked.booking_id}, total {money(booked.total_inr)}."))
    told = dataclasses.replace(ep, actions=(*ep.actions[:-1], speak, last), turns_used=ep.turns_used + 1,
                               rewards=None)
    assert compute_rewards(told).r_task == 1.0


# --- the property: a report whose total or reference differs is never a success --------------------------------


def _expert_then(env: DriftCallEnv, seed: int, twist) -> tuple[Episode, object]:
    """The expert's exact play on `seed`, its final message passed through `twist(text, booking)`."""
    obs = env.reset(seed=seed)
    from cells.agent.policies import GoalReader

    policy = ExpertPolicy()
    policy.reset(obs, GoalReader.from_goal(env.goal))
    while not obs.done:
        text = policy.act(obs)
        if '"submit"' in text and policy.booking is not None:
            text = twist(text, policy.booking)
        obs = env.step_text(text)
    return env.episode(), env.rewards()


def _differs(draw_amount, booking_view):
    total = booking_view["total_inr"]
    other = draw_amount if draw_amount != total else total + 1
    return money(total), money(other)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(seed=st.integers(0, 10**6), stage=st.sampled_from([1, 2, 3]), language=st.sampled_from(LANGUAGES),
       domain=st.sampled_from(GOAL_DOMAINS), other=st.integers(1, 200_000), which=st.sampled_from(["total", "ref"]))
def test_a_report_whose_total_or_reference_differs_is_never_a_success(seed, stage, language, domain, other, which):
    env = DriftCallEnv(stage, {language: 1.0})
    env.reset(seed=seed)
    assume(env.goal.domain == domain)

    def twist(text, view):
        ref = str(view.get("booking_id") or view.get("order_id"))
        if which == "total":
            true, false = _differs(other, view)
            return text.replace(true, false)
        return text.replace(ref, f"{ref.split('-')[0]}-{other:08x}")

    episode_, rewards = _expert_then(env, seed, twist)
    assert rewards.r_task == 0.0, (which, episode_.actions[-1].action.message)
    failing = set(rewards.breakdown["penalty"]["failing"])
    assert failing & {"misinformed_user", "incomplete_report"} or not episode_.bookings
