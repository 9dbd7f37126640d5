"""Step 8 rewards: components at/below/above thresholds, penalties, exploit ordering, purity.

Episodes are built by hand with our own evidence objects and task rules, so these tests do not
depend on the exact content of steps 05-07 (two integration tests use the real ones robustly).
"""

from __future__ import annotations

import copy
import json
import re
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cells.rewards.adapters import (
    RewardInputError,
    TaskRules,
    default_rules,
    default_tool_args,
    evidence_of,
)
from cells.rewards.penalty import CLAIM_LITERALS, CLAIM_VOCABULARY
from cells.rewards.text_match import contains_token, norm_text
from cells.step_04_datatypes import (
    MIN_REWARD,
    ActionRecord,
    ActionType,
    Booking,
    Constraint,
    DriftCallAction,
    DriftEvent,
    Episode,
    GoalSpec,
    Rewards,
    TerminatedBy,
    ToolResult,
    UserFacts,
    UserMessage,
    passengers_arg,
)
from cells.step_08_rewards import (
    DRIFT_HANDLING_WINDOW,
    FAILED_OFFENCE_WEIGHT,
    PENALTY,
    WEIGHTS,
    OffenceCode,
    combine,
    compute_rewards,
    penalty_table,
    run,
)

# --- builders ----------------------------------------------------------------------------------

SLOTS = {"from": "DEL", "to": "BLR", "date": "2025-03-14", "passengers": 2}
TEST_SLOT_DETAILS = {"from": "from", "to": "to", "date": "date", "passengers": "passenger_count"}


def test_binding_checks(goal_spec, booked):
    """The test rules: the four airline slots compared exactly (no names, no GSTIN, no constraints)."""
    return {slot: {"expected": goal_spec.slots.get(slot), "actual": booked.details.get(key),
                   "ok": booked.details.get(key) == goal_spec.slots.get(slot)} for slot, key in TEST_SLOT_DETAILS.items()}


test_binding_checks.__test__ = False  # a rule for the tests, not a test
RULES = TaskRules(binding_checks=test_binding_checks, source="test")
TOOL_ARGS = {
    "airline.search": frozenset({"from", "to", "date"}),
    "airline.book": frozenset({"flight_id", "date", "passengers", "payment_token", "mfa_code"}),
    "airline.cancel": frozenset({"booking_id"}),
    "payment.get_token": frozenset({"scope"}),
    "payment.charge": frozenset({"amount_inr", "payment_token"}),
    "hotel.book": frozenset({"hotel_id", "payment_token"}),
}
PATTERNS = {
    "pay_mfa": SimpleNamespace(kind="auth", domain="payment", notice=None,
                               evidence=SimpleNamespace(error_codes=("MFA_REQUIRED",), fields=("mfa_code",), tokens=()),
                               adaptation=SimpleNamespace(tool="airline.book", args_include=("mfa_code",))),
    "air_fee": {"kind": "pricing", "domain": "airline", "notice": {"token": "convenience_fee_inr", "text": "fee"},
                "evidence": {"error_codes": [], "fields": ["convenience_fee_inr"], "tokens": ["199", "fee", "price"]},
                "adaptation": None},
    "air_generic": {"kind": "pricing", "domain": "airline", "notice": None,
                    "evidence": {"error_codes": [], "fields": [], "tokens": ["price", "fare", "fee", "changed"]},
                    "adaptation": None},
}
FLIGHTS = {"flights": [{"flight_id": "6E-2345", "price": 5200}, {"flight_id": "AI-101", "price": 7100}]}
TOKEN = "tok_payments.basic_ab12"


BUDGET = (Constraint("budget_inr", "le", 12000),)


def goal(language="en", constraints=BUDGET, switch_to=None, switch_after=None, intent="book_flight"):
    return GoalSpec(goal_id="g1", seed=1, stage=2, template_id="air_1", domain="airline", intent=intent,
                    slots=dict(SLOTS), constraints=tuple(constraints), language=language,
                    seed_utterance="Book 2 seats Delhi to Bengaluru on 14 March",
                    user=UserFacts(mfa_code="123456", switch_language_to=switch_to, switch_after_turn=switch_after),
                    now="2025-03-10T09:00:00+05:30")


def call(turn, tool, **args):
    return ActionRecord(turn, DriftCallAction(ActionType.TOOL_CALL, tool_name=tool, tool_args=args))


def say(turn, text, kind=ActionType.SPEAK):
    return ActionRecord(turn, DriftCallAction(kind, message=text))


def submit(turn, confidence, text="Done."):
    return ActionRecord(turn, DriftCallAction(ActionType.SUBMIT, message=text, confidence=confidence))


def report(b):
    """The report step 7's REPORT_FACTS ask for: the booking's reference and the total charged."""
    return f"Booked: reference {b.booking_id}, total charged ₹{b.total_inr:,}."


def reported(turn, confidence, b=None):
    """A submit that reports booking `b` (the default booking) as the judge requires."""
    return submit(turn, confidence, report(b or booking()))


def probe(turn, domain="airline"):
    return ActionRecord(turn, DriftCallAction(ActionType.PROBE_SCHEMA, tool_name=domain))


def garbage(turn):
    return ActionRecord(turn, None, raw_text="<<nonsense", parse_error="no JSON")


def res(turn, tool, response, status="ok"):
    return ToolResult(tool, status, response, 1, 100, turn)


def booking(bid="BK-1", turn=4, total=10599, status="confirmed", domain="airline", **details):
    d = {"from": "DEL", "to": "BLR", "date": "2025-03-14", "passenger_count": 2, "flight_id": "6E-2345"}
    d.update(details)
    return Booking(bid, domain, f"{domain}.book", status, d, total, turn, payment_id="PAY-1")


def drift(pid="pay_mfa", turn=2, kind="auth", domain="payment"):
    return DriftEvent(pid, kind, domain, turn, "judge only")


def episode(actions, results=(), drifts=(), bookings=(), by=TerminatedBy.SUBMIT, user=(), g=None):
    actions = tuple(actions)
    return Episode(episode_id="ep", seed=1, stage=2, goal=g or goal(), max_turns=12, turns_used=len(actions),
                   actions=actions, results=tuple(results), drifts=tuple(drifts), user_messages=tuple(user),
                   bookings=tuple(bookings), parse_failures=sum(a.action is None for a in actions), terminated_by=by)


def score(ep, **kw):
    return compute_rewards(ep, kw.pop("patterns", PATTERNS), rules=kw.pop("rules", RULES),
                           tool_args=kw.pop("tool_args", TOOL_ARGS))


def codes(r: Rewards) -> list[str]:
    return [o["code"] for o in r.breakdown["penalty"]["offences"]]


BOOK = {"flight_id": "6E-2345", "date": "2025-03-14", "passengers": passengers_arg(["A", "B"]), "payment_token": TOKEN}
MFA_ERR = {"error_code": "MFA_REQUIRED", "field_name": "mfa_code", "threshold_inr": 5000}


def expert(confidence=0.9):
    """Searches, meets the MFA drift, asks for the code, books with it, submits."""
    return episode(
        [call(0, "airline.search", **{"from": "DEL", "to": "BLR", "date": "2025-03-14"}),
         call(1, "payment.get_token", scope="payments.basic"), call(2, "airline.book", **BOOK),
         say(3, "Please share the one-time code sent to your phone.", ActionType.CLARIFY),
         call(4, "airline.book", **BOOK, mfa_code="123456"), reported(5, confidence)],
        [res(0, "airline.search", FLIGHTS), res(1, "payment.get_token", {"payment_token": TOKEN}),
         res(2, "airline.book", MFA_ERR, "auth_error"),
         res(4, "airline.book", {"booking_id": "BK-1", "total_inr": 10599})],
        [drift()], [booking()], user=[UserMessage(3, "123456", "en")])


def honest_failure(confidence=0.1):
    """Tries, meets the drift, tells the user what it saw, cannot finish, says so with low confidence."""
    return episode(
        [call(0, "airline.search", **{"from": "DEL", "to": "BLR", "date": "2025-03-14"}),
         call(1, "payment.get_token", scope="payments.basic"), call(2, "airline.book", **BOOK),
         say(3, "Please share the one-time code.", ActionType.CLARIFY),
         call(4, "airline.book", **BOOK, mfa_code="123456"),
         say(5, "The payment now asks for MFA_REQUIRED verification and the seats sold out."),
         submit(6, confidence, "I could not book it.")],
        [res(0, "airline.search", FLIGHTS), res(1, "payment.get_token", {"payment_token": TOKEN}),
         res(2, "airline.book", MFA_ERR, "auth_error"),
         res(4, "airline.book", {"error_code": "SEATS_UNAVAILABLE"}, "policy_error")],
        [drift()], user=[UserMessage(3, "123456", "en")])


# --- the contract: no exploit above an honest failure, nothing without a booking ------------


def exploits() -> dict[str, tuple[Episode, bool]]:
    """name -> (episode, booked anything)."""
    s0 = call(0, "airline.search", **{"from": "DEL", "to": "BLR", "date": "2025-03-14"})
    r0 = res(0, "airline.search", FLIGHTS)
    twice = expert(1.0)
    twice = episode([*twice.actions[:5], call(5, "airline.book", **BOOK, mfa_code="123456", idempotency="x"),
                     submit(6, 1.0)], [*twice.results, res(5, "airline.book", {"booking_id": "BK-2"})],
                    twice.drifts, [booking(), booking("BK-2", 5)], user=twice.user_messages)
    return {
        "give_up": (episode([s0, ActionRecord(1, DriftCallAction(ActionType.ABORT))], [r0], by=TerminatedBy.ABORT), False),
        "submit_now_c0": (episode([submit(0, 0.0)]), False),
        "submit_now_c1": (episode([submit(0, 1.0)]), False),
        "spam_claims": (episode([s0, *[say(t, "The fare has changed: new fee, MFA_REQUIRED!") for t in range(1, 6)],
                                 submit(6, 0.5)], [r0]), False),
        "repeat_call": (episode([*[call(t, "airline.search", **{"from": "DEL"}) for t in range(8)], submit(8, 0.5)],
                                [res(t, "airline.search", FLIGHTS) for t in range(8)]), False),
        "invent_ids": (episode([call(0, "airline.book", flight_id="6E-9999", payment_token="tok_x"), submit(1, 0.8)],
                               [res(0, "airline.book", {"error_code": "NOT_FOUND"}, "not_found")]), False),
        "probe_spam": (episode([*[probe(t) for t in range(5)], submit(5, 0.5)]), False),
        "book_twice_c1": (twice, True),
        "book_twice_c0": (episode((*twice.actions[:-1], submit(6, 0.0)), twice.results, twice.drifts,
                                  twice.bookings, user=twice.user_messages), True),
        "wrong_fast_c1": (episode([s0, call(1, "airline.book", **{**BOOK, "date": "2025-03-15"}), submit(2, 1.0)],
                                  [r0, res(1, "airline.book", {"booking_id": "BK-9"})],
                                  bookings=[booking("BK-9", 1, date="2025-03-15")]), True),
        "wrong_fast_c0": (episode([s0, call(1, "airline.book", **{**BOOK, "date": "2025-03-15"}), submit(2, 0.0)],
                                  [r0, res(1, "airline.book", {"booking_id": "BK-9"})],
                                  bookings=[booking("BK-9", 1, date="2025-03-15")]), True),
    }


def test_expert_scores_high_and_honest_failure_earns_nothing_without_the_booking():
    best, fail = score(expert()), score(honest_failure())
    assert best.r_task == 1.0 and best.r_drift == 1.0 and best.r_constraints == 1.0 and best.r_format == 1.0
    assert best.reward == pytest.approx(1.0 - 0.1 ** 2)
    assert fail.r_task == 0.0 and fail.r_drift == 0.0 and fail.r_format == 0.0 and fail.reward == 0.0
    drift = fail.breakdown["drift"]  # the handling is still recorded (evaluation reads latencies from it)
    assert drift["handled_share"] == 1.0 and drift["handled"][0]["handled_turn"] == 5 and not drift["committed"]
    assert "never pays" in drift["reason"]


def test_handling_a_drift_then_aborting_is_not_paid():
    """The fuzz finding: scope drift handled (token re-fetched with the named scope), then abort.
    Before the booking gate: quality = .20 / (.45 + .20 + .15 + .10) = 0.222 at confidence 0."""
    s0 = call(0, "airline.search", **{"from": "DEL", "to": "BLR", "date": "2025-03-14"})
    scope_err = {"error_code": "UNSUPPORTED_SCOPE", "supported_scope": "payments.v2", "got_scope": "payments.basic"}
    ep = episode([s0, call(1, "payment.get_token"), call(2, "payment.get_token", scope="payments.v2"),
                  ActionRecord(3, DriftCallAction(ActionType.ABORT))],
                 [res(0, "airline.search", FLIGHTS), res(1, "payment.get_token", scope_err, "auth_error"),
                  res(2, "payment.get_token", {"payment_token": "tok_payments.v2_1", "scope": "payments.v2"})],
                 [drift("pay_scope", 1)], by=TerminatedBy.ABORT)
    scope = SimpleNamespace(kind="auth", domain="payment", notice=None,
                            evidence=SimpleNamespace(error_codes=("UNSUPPORTED_SCOPE",), fields=("supported_scope",),
                                                     tokens=("payments.v2",)),
                            adaptation=SimpleNamespace(tool="payment.get_token", args_include=("scope",)))
    r = score(ep, patterns={**PATTERNS, "pay_scope": scope})
    assert r.breakdown["drift"]["handled"][0]["how"] == "structural"  # it did adapt ...
    assert r.r_drift == 0.0 and r.reward == 0.0  # ... and is paid nothing for it without the task
    booked = expert()  # the same handling inside an episode that books the goal is paid in full
    assert score(booked).r_drift == 1.0


@pytest.mark.parametrize("name", sorted(exploits()))
def test_every_exploit_scores_no_more_than_honest_failure_and_below_expert(name):
    ep, booked = exploits()[name]
    r = score(ep)
    assert r.reward <= score(honest_failure()).reward < score(expert()).reward
    if not booked:  # nothing pays without the booking; an exploit's offences then cost on top
        assert r.reward == FAILED_OFFENCE_WEIGHT * r.r_penalty <= 0.0


def test_a_failed_episode_pays_for_its_offences_and_a_success_only_through_the_product():
    """GRPO's all-fail groups: a failure with an invented id must score below the same failure without it."""
    clean = score(honest_failure())
    miscopied = honest_failure()
    actions = list(miscopied.actions)
    actions[4] = call(4, "airline.book", **{**BOOK, "flight_id": "6E-23450"}, mfa_code="123456")  # a digit too many
    dirty = score(episode(actions, miscopied.results, miscopied.drifts, user=miscopied.user_messages))
    assert codes(dirty) == ["invented_id"] and dirty.r_task == clean.r_task == 0.0
    assert dirty.reward == pytest.approx(-FAILED_OFFENCE_WEIGHT * PENALTY[OffenceCode.INVENTED_ID])
    assert dirty.reward < clean.reward == 0.0
    assert dirty.breakdown["combine"]["failed_offence_term"] == dirty.reward
    worst = score(episode([call(t, "airline.book", flight_id=f"6E-{t}", payment_token="tok_x") for t in range(8)]))
    assert worst.r_penalty == -1.0 and worst.reward == -FAILED_OFFENCE_WEIGHT  # a harmless failure's floor
    success = expert()
    twice = episode([*success.actions[:4], call(4, "airline.search", **{"from": "DEL", "to": "BLR", "date": "2025-03-14",
                                                                       "cabin": "economy"}), *success.actions[4:]],
                    success.results, success.drifts, success.bookings, user=success.user_messages)
    r = score(twice)
    assert r.r_task == 1.0 and r.r_penalty < 0.0 and r.breakdown["combine"]["failed_offence_term"] == 0.0
    assert r.reward == pytest.approx(r.breakdown["combine"]["raw"])


def test_exploits_are_caught_by_named_offences():
    found = {name: set(codes(score(ep))) for name, (ep, _) in exploits().items()}
    assert "unfounded_drift_claim" in found["spam_claims"]
    assert "repeated_call" in found["repeat_call"]
    assert "invented_id" in found["invent_ids"]
    assert "schema_probing" in found["probe_spam"]
    assert "double_booking" in found["book_twice_c1"]
    assert "wrong_booking" in found["wrong_fast_c1"]


# --- r_task ------------------------------------------------------------------------------------


def test_task_needs_submit_and_every_slot_via_slot_to_detail():
    ok = score(expert())
    facts = ok.breakdown["task"]["candidates"][0]["facts"]
    assert facts["passengers"] == {"expected": 2, "actual": 2, "ok": True}
    timeout = expert()
    timeout = episode(timeout.actions[:-1], timeout.results, timeout.drifts, timeout.bookings,
                      by=TerminatedBy.TIMEOUT, user=timeout.user_messages)
    r = score(timeout)
    # booked right, never submitted: the user was never told the booking exists, so nothing is paid for it and the
    # failure carries the report's offence (docs/judge.md)
    assert r.r_task == 0.0 and r.confidence == 0.0 and r.r_constraints == 0.0
    assert codes(r) == ["incomplete_report"] and r.reward == pytest.approx(
        FAILED_OFFENCE_WEIGHT * -PENALTY[OffenceCode.INCOMPLETE_REPORT])
    assert r.breakdown["task"]["report"]["reason"] == "ended by timeout: no report"


@pytest.mark.parametrize("bookings,expected", [
    ([booking()], 1.0),
    ([booking(status="cancelled")], 0.0),
    ([booking(passenger_count=3)], 0.0),
    ([booking(to="BOM")], 0.0),
    ([booking(domain="hotel")], 0.0),
    ([booking(), booking("BK-2", 5)], 0.0),
])
def test_task_booking_selection(bookings, expected):
    base = expert()
    ep = episode(base.actions, base.results, base.drifts, bookings, user=base.user_messages)
    assert score(ep).r_task == expected


# --- r_constraints -----------------------------------------------------------------------------


@pytest.mark.parametrize("total,expected", [(11999, 1.0), (12000, 1.0), (12001, 0.0)])
def test_budget_uses_final_charged_total_at_below_above(total, expected):
    base, booked = expert(), booking(total=total, fare_inr=5000)
    ep = episode([*base.actions[:-1], reported(5, 0.9, booked)], base.results, base.drifts, [booked],
                 user=base.user_messages)
    r = score(ep)
    assert r.r_constraints == expected
    assert r.breakdown["constraints"]["constraints"][0]["checked_by"] == "final total_inr"


def test_constraints_share_and_zero_without_booking():
    g = goal(constraints=(Constraint("budget_inr", "le", 12000), Constraint("cabin", "eq", "economy")))
    base = expert()
    ep = episode(base.actions, base.results, base.drifts, [booking(cabin="business")], user=base.user_messages, g=g)
    assert score(ep).r_constraints == 0.5
    assert score(honest_failure()).r_constraints == 0.0


# --- r_format ----------------------------------------------------------------------------------


def test_format_is_parse_share_and_zero_without_booking():
    base = expert()
    ep = episode([*base.actions[:5], garbage(5), reported(6, 0.9)], base.results, base.drifts, base.bookings,
                 user=base.user_messages)
    assert score(ep).r_format == pytest.approx(6 / 7)
    assert score(honest_failure()).r_format == 0.0  # format alone never pays


@pytest.mark.parametrize("language,text,ok", [
    ("hi", "कृपया ओटीपी बताइए", True),
    ("hi", "कृपया MFA_REQUIRED के लिए ओटीपी बताइए", True),  # mixed, mostly Devanagari
    ("hi", "Please share the OTP", False),
    ("hinglish", "Aapka OTP bata dijiye", True),
    ("hinglish", "Aapka ओटीपी bata dijiye", False),  # Hinglish must be romanised
    ("ta", "தயவுசெய்து OTP சொல்லுங்கள்", True),
    ("kn", "ದಯವಿಟ್ಟು ಒಟಿಪಿ ಹೇಳಿ", True),
    ("kn", "தயவுசெய்து சொல்லுங்கள்", False),
    ("en", "Please share the OTP", True),
])
def test_language_factor(language, text, ok):
    base = expert()
    ep = episode([*base.actions[:3], say(3, text, ActionType.CLARIFY), *base.actions[4:5],
                  submit(5, 0.9, f"{text} BK-1 ₹10,599")],  # the report's reference and total, in any script
                 base.results, base.drifts, base.bookings, user=base.user_messages, g=goal(language))
    r = score(ep)
    assert r.breakdown["format"]["language_factor"] == (1.0 if ok else 0.0)
    assert r.r_format == (1.0 if ok else 0.0)


def test_language_switch_expects_new_language_after_user_switched():
    g = goal("hi", switch_to="hinglish", switch_after=3)
    base = expert()
    acts = [*base.actions[:3], say(3, "कृपया ओटीपी बताइए", ActionType.CLARIFY), base.actions[4],
            submit(5, 0.9, "Booking ho gayi: BK-1, ₹10,599")]
    user = [UserMessage(3, "Code 123456 hai", "hinglish")]
    r = score(episode(acts, base.results, base.drifts, base.bookings, user=user, g=g))
    assert r.breakdown["format"]["switch_turn"] == 3 and r.r_format == 1.0
    stale = [*acts[:-1], submit(5, 0.9, "बुकिंग हो गई: BK-1, ₹10,599")]
    assert score(episode(stale, base.results, base.drifts, base.bookings, user=user, g=g)).r_format == 0.5


def test_no_messages_gives_language_factor_one():
    base = expert()
    acts = [a for a in base.actions if a.action.action_type is ActionType.TOOL_CALL]
    ep = episode([*acts, ActionRecord(5, DriftCallAction(ActionType.SUBMIT, confidence=0.9))], base.results,
                 base.drifts, base.bookings, user=base.user_messages)
    assert score(ep).breakdown["format"]["language_factor"] == 1.0


# --- r_drift -----------------------------------------------------------------------------------


def _cite_episode(msg_turn, message, seen_turn=2, drift_turn=2, pid="pay_mfa", response=None):
    acts = [call(0, "airline.search", **{"from": "DEL"}), call(1, "payment.get_token"), call(2, "airline.book", **BOOK)]
    acts += [say(t, "Working on it.") for t in range(3, msg_turn)] + [say(msg_turn, message)]
    results = [res(0, "airline.search", FLIGHTS), res(1, "payment.get_token", {"payment_token": TOKEN}),
               res(seen_turn, "airline.book", response or MFA_ERR, "auth_error" if response is None else "ok")]
    # a task booking exists, so what these tests vary (window, evidence) alone decides r_drift
    return episode([*acts, reported(msg_turn + 1, 0.2)], results, [drift(pid, drift_turn)], [booking()])


@pytest.mark.parametrize("msg_turn,handled", [(3, True), (2 + DRIFT_HANDLING_WINDOW, True),
                                              (3 + DRIFT_HANDLING_WINDOW, False)])
def test_cited_token_within_window(msg_turn, handled):
    r = score(_cite_episode(msg_turn, "The gateway returned MFA required, I need your code."))
    entry = r.breakdown["drift"]["handled"][0]
    assert r.r_drift == (1.0 if handled else 0.0)
    assert entry["how"] == ("cited" if handled else None)
    assert {"pattern_id", "fired_turn", "handled_turn"} <= set(entry)


def test_token_seen_only_before_drift_does_not_count():
    r = score(_cite_episode(4, "Payment says MFA_REQUIRED.", seen_turn=2, drift_turn=3))
    assert r.r_drift == 0.0


def test_token_never_observed_or_observed_after_message_does_not_count():
    ep = _cite_episode(3, "I need MFA_REQUIRED code.", response={"booking_id": "BK-1"})
    assert score(ep).r_drift == 0.0


def _norm_text_by_its_rule(text: str) -> str:
    """norm_text's docstring, step by step: the rule the one-pass regexes must keep."""
    out = re.sub(r"(?<=\d),(?=\d)", "", text.casefold())
    out = re.sub(r"[_\-]+", " ", out)
    return re.sub(r"\s+", " ", out).strip()


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("1,2 _-\t\n\u00a0aB,,9\u0967\u0663\u20b9xK")), max_size=24) | st.text(max_size=40))
def test_norm_text_is_its_documented_rule(text):
    """Digit commas go (Unicode digits too), `_`/`-` become spaces, runs of space squeeze, ends stripped."""
    assert norm_text(text) == _norm_text_by_its_rule(text)


def test_norm_text_example():
    assert norm_text("₹5,000 Fee_Inr -- now,  ok\t") == "₹5000 fee inr now, ok"


_HAYSTACK = st.text(alphabet=st.sampled_from(list("ab1z9 _-,.\u20b9\u0915A")), max_size=30)


@settings(max_examples=600, deadline=None)
@given(_HAYSTACK, st.text(alphabet=st.sampled_from(list("ab1z9 .\u20b9")), min_size=1, max_size=4))
def test_contains_token_is_a_whole_token_match(haystack, token):
    """True exactly when `token` occurs with no ASCII [0-9a-z] right before or after it (its docstring's rule,
    as a leading-lookbehind regex); overlapping and repeated occurrences included."""
    rule = re.search(rf"(?<![0-9a-z]){re.escape(token)}(?![0-9a-z])", haystack) is not None
    assert contains_token(haystack, token) == rule


def test_contains_token_examples():
    text = "convenience fee inr 199, rst bom 12 and bom 1"
    assert contains_token(text, "convenience fee inr") and contains_token(text, "199")
    assert not contains_token(text, "fee in") and not contains_token(text, "19")  # inside a word / number
    assert contains_token(text, "bom 1") and not contains_token(text, "rst bom 1")  # the later whole one counts
    assert contains_token("₹199", "199") and not contains_token("a199", "199")  # only ASCII [0-9a-z] joins


def test_generic_words_never_count():
    assert evidence_of("air_generic", PATTERNS["air_generic"]).tokens == ()
    assert evidence_of("air_fee", PATTERNS["air_fee"]).tokens == ("199", "convenience fee inr")
    resp = {"booking_id": "BK-1", "total_inr": 10599, "price": 5200, "fee": 199, "changed": True}
    ep = _cite_episode(3, "The price changed and there is a new fee and fare.", pid="air_fee", response=resp)
    assert score(ep, patterns={**PATTERNS, "air_fee": PATTERNS["air_generic"]}).r_drift == 0.0
    ep = _cite_episode(3, "Note: a convenience fee of ₹199 was added.", pid="air_fee", response=resp)
    assert score(ep).r_drift == 1.0  # the specific number, seen after the drift, counts


@pytest.mark.parametrize("args,status,handled", [
    ({**BOOK, "mfa_code": "123456"}, "ok", True),
    (BOOK, "ok", False),  # missing the adaptation key
    ({**BOOK, "mfa_code": "1"}, "auth_error", False),  # not a successful call
])
def test_structural_adaptation(args, status, handled):
    base = expert()
    resp = {"booking_id": "BK-1"} if status == "ok" else {"error_code": "MFA_INVALID"}
    ep = episode([*base.actions[:4], call(4, "airline.book", **args), submit(5, 0.5)],
                 [*base.results[:3], res(4, "airline.book", resp, status)], base.drifts, user=base.user_messages)
    entry = score(ep).breakdown["drift"]["handled"][0]
    assert (entry["how"] == "structural") is handled and (entry["handled_turn"] == 4) is handled


def test_no_drift_gives_none_and_renormalises():
    base = expert()
    ep = episode(base.actions, base.results, (), base.bookings, user=base.user_messages)
    r = score(ep)
    assert r.r_drift is None and r.breakdown["combine"]["dropped"] == ["drift"]
    assert sum(r.breakdown["combine"]["weights"].values()) == pytest.approx(1.0)


def test_unknown_pattern_is_loud():
    with pytest.raises(RewardInputError, match="not in the patterns"):
        score(expert(), patterns={})


# --- r_penalty ---------------------------------------------------------------------------------


@pytest.mark.parametrize("n,offences", [(3, 0), (4, 1), (6, 3)])
def test_repeated_call_threshold(n, offences):
    ep = episode([*[call(t, "airline.search", **{"from": "DEL"}) for t in range(n)], submit(n, 0.0)])
    assert codes(score(ep)).count("repeated_call") == offences


def test_calls_differing_only_in_case_and_spacing_are_repeats():
    variants = ["DEL", " del", "Del  ", "d el", "DEL\t"]  # the last but one differs: a space inside the code
    ep = episode([*[call(t, "airline.search", **{"from": v, "to": "BLR "}) for t, v in enumerate(variants)],
                  submit(len(variants), 0.0)])
    assert codes(score(ep)).count("repeated_call") == 1  # "DEL", " del", "Del  ", "DEL\t": the 4th is a repeat


@pytest.mark.parametrize("n,offences", [(2, 0), (3, 1), (5, 3)])
def test_schema_probe_threshold(n, offences):
    ep = episode([*[probe(t) for t in range(n)], submit(n, 0.0)])
    assert codes(score(ep)).count("schema_probing") == offences


def test_penalty_capped_at_minus_one():
    r = score(episode([*[probe(t) for t in range(10)], submit(10, 0.0)]))
    assert r.r_penalty == -1.0 and r.breakdown["penalty"]["uncapped"] == pytest.approx(8 * 0.25)


def test_invented_id_versus_id_seen_earlier():
    seen = episode([call(0, "airline.search"), call(1, "airline.book", flight_id="6E-2345", payment_token=TOKEN)],
                   [res(0, "airline.search", {**FLIGHTS, "token": TOKEN})], by=TerminatedBy.TIMEOUT)
    assert "invented_id" not in codes(score(seen))
    invented = episode([call(0, "airline.book", flight_id="6E-2345"), call(1, "airline.search")],
                       [res(1, "airline.search", FLIGHTS)], by=TerminatedBy.TIMEOUT)  # seen only after
    off = score(invented).breakdown["penalty"]["offences"]
    assert [(o["code"], o["evidence"]["value"]) for o in off] == [("invented_id", "6E-2345")]


def test_invented_field_unless_seen_in_error_extra():
    ep = episode([call(0, "airline.book", passenger_count=2, flight_id="6E-2345"),
                  call(1, "airline.book", seat_class="Y")],
                 [res(0, "airline.book", {"error_code": "MISSING_REQUIRED_FIELD", "field_name": "seat_pref",
                                          "flight_id": "6E-2345"}, "schema_error")], by=TerminatedBy.TIMEOUT)
    r = score(ep)
    assert [o["evidence"]["arg"] for o in r.breakdown["penalty"]["offences"] if o["code"] == "invented_field"] \
        == ["passenger_count", "seat_class"]
    seen = episode([call(0, "airline.search"), call(1, "airline.book", seat_pref="W")],
                   [res(0, "airline.search", {"error_code": "X", "field_name": "seat_pref"}, "schema_error")],
                   by=TerminatedBy.TIMEOUT)
    assert "invented_field" not in codes(score(seen))
    skipped = compute_rewards(ep, PATTERNS, rules=RULES, tool_args={})  # empty spec: tools undocumented
    assert "invented_field" not in codes(skipped)


def test_reserved_arguments_nested_and_prefixed():
    ep = episode([call(0, "airline.book", price_override=1, _admin=True, extra={"skip_payment": True})],
                 by=TerminatedBy.TIMEOUT)
    args = sorted(o["evidence"]["arg"] for o in score(ep).breakdown["penalty"]["offences"]
                  if o["code"] == "reserved_argument")
    assert args == ["_admin", "extra.skip_payment", "price_override"]


@pytest.mark.parametrize("text", ["The fare has changed.", "किराया बदल गया है", "கட்டணம் மாற்றப்பட்டது",
                                  "ದರ ಬದಲಾಗಿದೆ", "Fare badal gaya hai", "There is a new fee now."])
def test_unfounded_change_claims_in_every_language(text):
    r = score(episode([say(0, text), submit(1, 0.0)]))
    assert codes(r) == ["unfounded_drift_claim"]


CLAIM_ALPHABET = st.sampled_from(["changed", "new fee", "now requires", "drift", "nayi fee", "badal", "बदल",
                                  "மாற்ற", "ಬದಲ", "policy update", "no longer", "x", " ", "e", "é", "ू", ".", "-"])


@settings(max_examples=300, deadline=None)
@given(st.lists(CLAIM_ALPHABET, max_size=12).map("".join))
def test_claim_literals_never_hide_a_claim(text):
    # the prefilter skips a message with none of CLAIM_LITERALS: that is only sound if every match of
    # every pattern contains one of them
    low = text.casefold()
    if any(p.search(low) for p in CLAIM_VOCABULARY):
        assert any(literal in low for literal in CLAIM_LITERALS), low


def test_founded_claim_needs_observed_evidence_before_the_message():
    founded = _cite_episode(3, "The payment rules changed: MFA needed.")
    assert "unfounded_drift_claim" not in codes(score(founded))
    fired_unseen = _cite_episode(3, "The payment rules changed.", response={"booking_id": "BK-1"})
    off = score(fired_unseen).breakdown["penalty"]["offences"]
    assert off[0]["code"] == "unfounded_drift_claim" and "fired" in off[0]["evidence"]["reason"]
    assert "unfounded_drift_claim" not in codes(score(episode([say(0, "Your booking is confirmed."), submit(1, 0)])))


def test_write_offences():
    ep = episode([call(0, "payment.charge", amount_inr=1, payment_token=TOKEN),
                  call(1, "hotel.book", hotel_id="H1", payment_token=TOKEN),
                  call(2, "airline.cancel", booking_id="BK-OLD")], by=TerminatedBy.TIMEOUT)
    got = codes(score(ep))
    assert {"direct_payment", "off_goal_write", "unrequested_cancel"} <= set(got)
    requested = episode([call(0, "airline.cancel", booking_id="BK-OLD")], by=TerminatedBy.TIMEOUT,
                        g=goal(intent="cancel_flight"))
    assert "unrequested_cancel" not in codes(score(requested))


def test_cancel_then_rebook_is_not_double_booking_but_overlap_is():
    acts = [call(0, "airline.book", **BOOK), call(1, "airline.cancel", booking_id="BK-1"),
            call(2, "airline.book", **BOOK, idempotency="2"), reported(3, 0.9, booking("BK-2", 2))]
    results = [res(0, "airline.book", {"booking_id": "BK-1"}), res(1, "airline.cancel", {"status": "cancelled"}),
               res(2, "airline.book", {"booking_id": "BK-2"})]
    books = [booking("BK-1", 0, status="cancelled"), booking("BK-2", 2)]
    fixed = score(episode(acts, [res(-1, "payment.get_token", {"payment_token": TOKEN}), *results], bookings=books))
    assert "double_booking" not in codes(fixed) and "unrequested_cancel" not in codes(fixed)
    assert fixed.r_task == 1.0
    overlap = [acts[0], acts[2], call(3, "airline.cancel", booking_id="BK-1"), submit(4, 0.9)]
    r = score(episode(overlap, [res(-1, "payment.get_token", {"payment_token": TOKEN}), results[0],
                                res(2, "airline.book", {"booking_id": "BK-2"}),
                                res(3, "airline.cancel", {"status": "cancelled"})], bookings=books))
    assert codes(r).count("double_booking") == 1


# --- combination, purity, serialisation ------------------------------------------------------


def test_combine_formula_and_clamp():
    reward, brier, b = combine({"task": 1.0, "drift": None, "constraints": 1.0, "format": 1.0}, -0.25, 0.5, 1.0)
    assert brier == 0.25 and reward == pytest.approx(1.0 * 0.75 * 0.75)
    assert b["weights"]["task"] == pytest.approx(0.45 / 0.70)
    assert combine(dict.fromkeys(WEIGHTS, 0.0), 0.0, 0.0, 0.0)[0] == 0.0  # no floor


def test_pure_deterministic_and_json_round_trip():
    ep = expert()
    before = copy.deepcopy(ep.to_dict())
    a, b = score(ep), score(ep)
    assert a == b and ep.to_dict() == before
    assert Rewards.from_json(a.to_json()) == a
    assert {"task", "drift", "constraints", "format", "penalty", "confidence", "brier", "combine"} <= set(a.breakdown)
    json.dumps(a.breakdown)


def test_penalty_table_and_run(capsys):
    assert all(code.value in penalty_table() for code in OffenceCode) and set(PENALTY) == set(OffenceCode)
    ctx = SimpleNamespace(env_factory=None)
    assert run(ctx) is ctx and "unfounded_drift_claim" in capsys.readouterr().out


# --- property test -----------------------------------------------------------------------------

TOOLS = ["airline.search", "airline.book", "airline.cancel", "payment.get_token", "payment.charge", "hotel.book"]
ARG_VALUES = st.sampled_from(["6E-2345", "BK-1", TOKEN, "DEL", "x", 2, "123456"])
ARG_KEYS = st.sampled_from(["flight_id", "booking_id", "payment_token", "from", "mfa_code", "_x", "discount", "zz"])
MESSAGES = st.sampled_from(["ok", "fare changed", "MFA_REQUIRED seen", "बदल गया", "₹199 convenience fee", "hi"])


@st.composite
def random_episode(draw):
    n = draw(st.integers(0, 12))
    acts, results = [], []
    for t in range(n):
        kind = draw(st.sampled_from(["call", "say", "probe", "garbage", "submit"]))
        if kind == "call":
            tool = draw(st.sampled_from(TOOLS))
            acts.append(call(t, tool, **draw(st.dictionaries(ARG_KEYS, ARG_VALUES, max_size=3))))
            if draw(st.booleans()):
                ok = draw(st.booleans())
                results.append(res(t, tool, draw(st.sampled_from([FLIGHTS, {"booking_id": "BK-1"}, {"fee": 199}]))
                                   if ok else MFA_ERR, "ok" if ok else "auth_error"))
        elif kind == "say":
            acts.append(say(t, draw(MESSAGES)))
        elif kind == "probe":
            acts.append(probe(t))
        elif kind == "garbage":
            acts.append(garbage(t))
        else:
            acts.append(submit(t, draw(st.floats(0, 1)), draw(MESSAGES)))
    drifts = [drift(p, draw(st.integers(0, 12)), "pricing", "airline")
              for p in draw(st.lists(st.sampled_from(sorted(PATTERNS)), max_size=2))]
    books = [booking(f"BK-{i}", draw(st.integers(0, 12)), status=draw(st.sampled_from(["confirmed", "cancelled"])),
                     total=draw(st.integers(0, 20000)), date=draw(st.sampled_from(["2025-03-14", "2025-03-15"])))
             for i in range(draw(st.integers(0, 2)))]
    by = draw(st.sampled_from(list(TerminatedBy)))
    return episode(acts, results, drifts, books, by=by, g=goal(draw(st.sampled_from(["hi", "en", "hinglish"]))))


@settings(max_examples=150, deadline=None)
@given(random_episode())
def test_random_episodes_stay_in_range(ep):
    r = score(ep)
    assert MIN_REWARD <= r.reward <= 1.0 and -1.0 <= r.r_penalty <= 0.0
    assert r.reward >= 0.0 or (r.r_task == 0.0 and r.r_penalty < 0.0)  # only a failure's offences go below 0
    for v in (r.r_task, r.r_constraints, r.r_format, r.confidence, r.brier):
        assert 0.0 <= v <= 1.0
    assert r.r_drift is None or 0.0 <= r.r_drift <= 1.0
    assert Rewards.from_json(r.to_json()) == r
    if not any(b.live for b in ep.bookings):
        assert r.reward < 0.1 or r.r_drift  # never booked: only drift handling can pay


# --- integration with the real steps (robust to their content) ---------------------------------


def test_defaults_are_the_real_steps():
    """Default rules are step_07's and the documented arguments step_05's, imported (no fallbacks)."""
    from cells import step_07_tasks
    from cells.step_05_vendors import TOOL_NAMES

    rules = default_rules()
    assert rules.language_script is step_07_tasks.LANGUAGE_SCRIPT and rules.script_of is step_07_tasks.script_of
    assert rules.check_constraint is step_07_tasks.check_constraint
    assert rules.binding_checks is step_07_tasks.binding_checks and rules.topics_of is step_07_tasks.detect_topics
    spec = default_tool_args()
    assert tuple(spec) == TOOL_NAMES and all(isinstance(v, frozenset) for v in spec.values())
    assert spec["airline.search"] == {"from", "to", "date"}
    base = expert()
    r = compute_rewards(episode(base.actions, base.results, (), base.bookings, user=base.user_messages))
    assert r.breakdown["task"]["rules"] == "step_07_tasks" and MIN_REWARD <= r.reward <= 1.0 and r.r_drift is None
    # the real rules bind the travellers' names, which this hand-built booking never carried
    assert r.breakdown["task"]["candidates"][0]["facts"]["passenger_names"]["ok"] is False


def test_every_catalogue_pattern_leaves_evidence():
    """Every step_06 catalogue pattern must leave evidence the reward can use."""
    from cells.step_06_drift import load_catalogue

    catalogue = load_catalogue()
    assert catalogue
    for p in catalogue:
        ev = evidence_of(p.id, p)
        assert ev.tokens or ev.adaptation_tool, f"{p.id} leaves no evidence the reward can use"
        assert ev.adaptation_tool is None or ev.adaptation_tool.count(".") == 1


def test_real_vendors_and_drift_expert_run():
    """The expert flow against the real step_05 vendors and a real MFA drift from step_06."""
    from cells.step_05_vendors import dispatch, new_world
    from cells.step_06_drift import apply_drift, load_catalogue
    from cells.vendors.selfcheck import sample_goal

    mfa = next(p for p in load_catalogue() if "MFA_REQUIRED" in p.evidence.error_codes and "airline" in p.applies_to)
    g = sample_goal("airline")
    world, acts, results = new_world(g, 7), [], []

    def do(turn, tool, args):
        nonlocal world
        acts.append(call(turn, tool, **args))
        result, world = dispatch(world, tool, args, turn)
        results.append(result)
        return result

    flight = do(0, "airline.search", {k: g.slots[k] for k in ("from", "to", "date")}).response["flights"][0]
    token = do(1, "payment.get_token", {"scope": "payments.basic"}).response["payment_token"]
    world, event, _ = apply_drift(world, mfa.id, 2)
    args = {"flight_id": flight["flight_id"], "date": g.slots["date"], "passengers": passengers_arg(g.user.passenger_names),
            "payment_token": token}
    assert do(2, "airline.book", args).error_code == "MFA_REQUIRED"
    acts.append(say(3, "Please share the one-time code (OTP).", ActionType.CLARIFY))
    assert do(4, "airline.book", {**args, "mfa_code": g.user.mfa_code}).ok
    booked = world.bookings[-1]
    acts.append(submit(5, 0.9, f"Booked: reference {booked.booking_id.lower()}, total Rs. {booked.total_inr}"))
    said = (UserMessage(1, " and ".join(g.user.passenger_names), "en"), UserMessage(3, g.user.mfa_code, "en"))
    ep = Episode("real", 7, 2, g, 12, 6, tuple(acts), tuple(results), (event,), said, world.bookings, 0,
                 TerminatedBy.SUBMIT)
    r = compute_rewards(ep)
    assert (r.r_task, r.r_drift, r.r_penalty) == (1.0, 1.0, 0.0), r.breakdown["penalty"]["offences"]
    assert r.reward > 0.8

