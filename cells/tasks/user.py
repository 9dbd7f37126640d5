"""The simulated user: answers `clarify` questions from the goal's hidden facts, acknowledges `speak`.

Deterministic: the wording variant is drawn from `rng_for(goal.seed, "user.reply", turn, topic)`.
Questions are recognised by keywords in any of the five languages (plus English keywords such as
OTP, GSTIN, budget); replies come in the goal's language, or in the switched language after
`goal.user.switch_after_turn` (stage 3).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from cells.step_04_datatypes import GoalSpec, UserMessage, rng_for
from cells.tasks.generator import render_values
from cells.tasks.i18n import finish, join_names, money, nfc, phrases, vocab

TOPICS: tuple[str, ...] = ("mfa", "gstin", "names", "count", "budget", "time", "vehicle", "diet", "room")
TOPIC_DOMAINS: dict[str, tuple[str, ...]] = {
    "count": ("airline", "restaurant"), "vehicle": ("cab",), "diet": ("restaurant",), "room": ("hotel",),
}
MAX_ANSWERS = 3  # a user answers at most this many things in one breath


@cache
def _matchers() -> tuple[tuple[str, tuple[str, ...], re.Pattern[str], tuple[str, ...]], ...]:
    """Per topic: its Latin keywords, one regex matching any of them as a whole word, and its Indic
    keywords (matched as substrings)."""
    table = phrases()["keywords"]
    out = []
    for topic in TOPICS:
        words = [nfc(str(w)).casefold() for w in table[topic]]
        latin = tuple(w for w in words if w.isascii())
        whole = re.compile("|".join(rf"(?<![a-z0-9]){re.escape(w)}(?![a-z0-9])" for w in latin) or r"(?!)")
        out.append((topic, latin, whole, tuple(w for w in words if not w.isascii())))
    return tuple(out)


def detect_topics(text: str) -> tuple[str, ...]:
    """Topics asked about in `text`, in `TOPICS` order (e.g. ("mfa", "budget"))."""
    low = nfc(text).casefold()
    found = []
    for topic, latin, whole, indic in _matchers():
        # a whole-word match is also a substring: the cheap `in` test decides most topics alone
        if (any(w in low for w in latin) and whole.search(low) is not None) or any(w in low for w in indic):
            found.append(topic)
    return tuple(found)


def language_at(goal: GoalSpec, turn: int) -> str:
    """The user's language at `turn`: the goal's, or the switched one after the switch turn."""
    facts = goal.user
    if facts.switch_language_to and facts.switch_after_turn is not None and turn > facts.switch_after_turn:
        return facts.switch_language_to
    return goal.language


def _pick(goal: GoalSpec, key: str, lang: str, turn: int, **values: object) -> str:
    options = phrases()["replies"][key][lang]
    return options[rng_for(goal.seed, "user.reply", turn, key).randrange(len(options))].format(**values)


def _budget_answer(goal: GoalSpec, lang: str, turn: int) -> str:
    budget = next((c.value for c in goal.constraints if c.name == "total_inr"), None)
    if budget is None:
        return _pick(goal, "budget_none", lang, turn)
    if goal.user.budget_flex_inr > 0:
        return _pick(goal, "budget_flex", lang, turn, budget=money(budget),
                     max=money(budget + goal.user.budget_flex_inr))
    return _pick(goal, "budget_strict", lang, turn, budget=money(budget))


def answer(goal: GoalSpec, topic: str, lang: str, turn: int) -> str | None:
    """The user's answer to one topic, or None when the topic does not apply to this goal."""
    if goal.domain not in TOPIC_DOMAINS.get(topic, (goal.domain,)):
        return None
    facts, slots = goal.user, goal.slots
    if topic == "mfa":
        return _pick(goal, "mfa", lang, turn, code=facts.mfa_code)
    if topic == "gstin":
        return _pick(goal, "gstin_yes", lang, turn, gstin=facts.gstin) if facts.gstin else _pick(
            goal, "gstin_no", lang, turn)
    if topic == "names":
        if goal.domain != "airline":
            return _pick(goal, "booker", lang, turn, name=facts.passenger_names[0])
        return _pick(goal, "names", lang, turn, names=join_names(facts.passenger_names, lang))
    if topic == "count":
        n = slots.get("passengers", slots.get("party_size"))
        return _pick(goal, "count_one", lang, turn) if n == 1 else _pick(goal, "count", lang, turn, n=n)
    if topic == "budget":
        return _budget_answer(goal, lang, turn)
    if topic == "time":
        return _pick(goal, "time_flex" if facts.time_flexible else "time_strict", lang, turn)
    if topic == "vehicle":
        vc = slots.get("vehicle_class") or facts.preferences["vehicle_class"]
        return _pick(goal, "vehicle", lang, turn, vehicle=vocab("vehicles", vc, lang))
    if topic == "diet":
        return str(phrases()["replies"]["diet"][facts.preferences["diet"]][lang])
    room = slots.get("room_type") or facts.preferences["room_type"]
    return _pick(goal, "room", lang, turn, room=vocab("room_types", room, lang))


def restate(goal: GoalSpec, lang: str, turn: int) -> str:
    """A polite short reply restating the request (for questions the user does not understand)."""
    summary = phrases()["summaries"][goal.domain][lang].format(**render_values(goal.domain, goal.slots, lang))
    return _pick(goal, "unknown", lang, turn, summary=summary)


def reply(goal: GoalSpec, question_text: str, turn: int) -> UserMessage:
    """Answer a `clarify` question from the hidden facts, in the user's current language."""
    lang = language_at(goal, turn)
    answers = [a for t in detect_topics(question_text) if (a := answer(goal, t, lang, turn)) is not None]
    text = " ".join(answers[:MAX_ANSWERS]) if answers else restate(goal, lang, turn)
    return UserMessage(turn=turn, text=finish(text, lang), language=lang, kind="reply")


def acknowledge(goal: GoalSpec, text: str, turn: int) -> UserMessage:
    """A short acknowledgement of something the agent said (`speak`)."""
    lang = language_at(goal, turn)
    options = phrases()["replies"]["ack"][lang]
    choice = options[rng_for(goal.seed, "user.ack", turn).randrange(len(options))]
    return UserMessage(turn=turn, text=finish(choice, lang), language=lang, kind="ack")


def opening(goal: GoalSpec) -> UserMessage:
    """The goal utterance as the user's first message (turn 0)."""
    return UserMessage(turn=0, text=goal.seed_utterance, language=goal.language, kind="goal")


@dataclass(frozen=True)
class SimulatedUser:
    """The user behind one goal; a thin object face over the pure functions above."""

    goal: GoalSpec

    def reply(self, question_text: str, turn: int) -> UserMessage:
        return reply(self.goal, question_text, turn)

    def acknowledge(self, text: str, turn: int) -> UserMessage:
        return acknowledge(self.goal, text, turn)

    def language_at(self, turn: int) -> str:
        return language_at(self.goal, turn)

    def opening(self) -> UserMessage:
        return opening(self.goal)
