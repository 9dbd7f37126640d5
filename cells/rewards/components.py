"""Reward components r_task, r_constraints, r_format and r_drift (docs/design.md#6-rewards).

Each is a small pure function returning `(value, breakdown)`; the breakdown explains the value
with plain JSON (lists, dicts, str, int, float, bool, None) so `Rewards` round-trips exactly.
"""

from __future__ import annotations

from typing import Any

from cells.step_04_datatypes import Booking, Episode, TerminatedBy
from cells.tasks.i18n import script_counts, script_share

from .adapters import OPS, DriftEvidence, TaskRules
from .text_match import (
    actions_by_turn,
    contains_token,
    keys_in,
    norm_text,
    result_text,
    user_messages_of,
)

DRIFT_HANDLING_WINDOW = 4  # a drift counts as handled only at turns fired_turn .. fired_turn + 4
BUDGET_NAMES = ("total_inr", "max_total_inr")  # plus any constraint name containing "budget"
MIN_SCRIPT_SHARE = 0.5  # a "mixed" message passes when most letters are in the expected script


# --- r_task ----------------------------------------------------------------------------------


def task_booking(episode: Episode, rules: TaskRules) -> tuple[Booking | None, dict[str, Any]]:
    """The one live booking in the goal's domain that carries every binding fact, or None.

    Binding facts (BINDING_FACTS in cells/tasks/catalog.py plus every stated constraint that is not soft) are what the
    user said or only the user knows: route, dates, party size, times, names, GSTIN. Two live bookings
    in the goal's domain leave no task booking: the user asked for one.
    """
    domain = episode.goal.domain
    live = [b for b in episode.bookings if b.domain == domain and b.live]
    candidates: list[dict[str, Any]] = [{"booking_id": b.booking_id, "facts": dict(rules.binding_checks(episode.goal, b))}
                                        for b in live]
    for c in candidates:
        c["matches"] = all(s["ok"] for s in c["facts"].values())
    detail: dict[str, Any] = {"domain": domain, "rules": rules.source, "candidates": candidates, "booking_id": None}
    if not live:
        detail["reason"] = f"no live booking in {domain}"
    elif len(live) > 1:
        detail["reason"] = f"{len(live)} live bookings in {domain}; the user asked for one"
    elif not candidates[0]["matches"]:
        missed = [k for k, s in candidates[0]["facts"].items() if not s["ok"]]
        detail["reason"] = f"live booking {live[0].booking_id} misses binding facts {missed}"
    else:
        detail["booking_id"] = live[0].booking_id
        detail["reason"] = "one live booking carrying every binding fact"
        return live[0], detail
    return None, detail


def r_task(episode: Episode, booking: Booking | None, booking_detail: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """1 when the episode ended with submit and `booking` (from `task_booking`) exists, else 0."""
    submitted = episode.terminated_by is TerminatedBy.SUBMIT and episode.submitted is not None
    value = 1.0 if submitted and booking is not None else 0.0
    return value, {"value": value, "submitted": submitted, "terminated_by": episode.terminated_by.value,
                   **booking_detail}


# --- r_constraints ---------------------------------------------------------------------------


def _is_budget(name: str) -> bool:
    return "budget" in name.casefold() or name in BUDGET_NAMES


def r_constraints(episode: Episode, booking: Booking | None, rules: TaskRules) -> tuple[float, dict[str, Any]]:
    """Share of goal constraints the task booking satisfies; budgets use the final charged total."""
    if booking is None:
        return 0.0, {"value": 0.0, "reason": "no task booking (nothing booked, or not what was asked)",
                     "constraints": []}
    rows = []
    for c in episode.goal.constraints:
        if _is_budget(c.name):  # the reward owns this rule: fees included, whatever the details say
            ok, actual, by = bool(OPS[c.op](booking.total_inr, c.value)), booking.total_inr, "final total_inr"
        else:
            ok, actual = rules.check_constraint(c, booking)
            by = rules.source
        rows.append({"name": c.name, "op": c.op, "expected": c.value, "actual": actual, "ok": bool(ok),
                     "checked_by": by})
    value = sum(r["ok"] for r in rows) / len(rows) if rows else 1.0
    return value, {"value": value, "booking_id": booking.booking_id, "constraints": rows,
                   "reason": "no constraints: vacuously met" if not rows else f"{sum(r['ok'] for r in rows)}/{len(rows)} met"}


# --- r_format --------------------------------------------------------------------------------


def switch_turn(episode: Episode) -> int | None:
    """Turn after which the user's switched language is expected (stage 3), or None."""
    target = episode.goal.user.switch_language_to
    if not target or target == episode.goal.language:
        return None
    replies = [m for m in episode.user_messages if m.kind not in ("goal", "format_hint")]
    switched = [m.turn for m in replies if m.language == target]
    if switched:
        return min(switched)
    return episode.goal.user.switch_after_turn if not episode.user_messages else None


def message_in_language(text: str, language: str, rules: TaskRules) -> tuple[bool, str]:
    """(ok, script found): the script must be the language's; Hinglish/English must be pure Latin."""
    expected = rules.language_script.get(language, "latin")
    found = rules.script_of(text)
    if found == expected == "latin":  # step 7 names a mostly-Latin text "latin"; romanised means no other script
        return set(script_counts(text)) <= {"latin"}, found
    if found == expected:
        return True, found
    ok = found == "mixed" and expected != "latin" and script_share(text, expected) >= MIN_SCRIPT_SHARE
    return ok, found


def r_format(episode: Episode, booking: Booking | None, rules: TaskRules) -> tuple[float, dict[str, Any]]:
    """Parse share x language factor, paid only when a task booking was committed."""
    n = len(episode.actions)
    parsed = sum(r.action is not None for r in episode.actions)
    parse_share = parsed / n if n else 0.0
    switch = switch_turn(episode)
    rows: list[dict[str, Any]] = []
    for turn, action in user_messages_of(episode):
        lang = episode.goal.user.switch_language_to if switch is not None and turn > switch else episode.goal.language
        ok, found = message_in_language(action.message or "", lang or episode.goal.language, rules)
        rows.append({"turn": turn, "expected_language": lang, "script": found, "ok": ok})
    language_factor = sum(r["ok"] for r in rows) / len(rows) if rows else 1.0
    committed = booking is not None
    value = parse_share * language_factor if committed else 0.0
    return value, {"value": value, "parsed_turns": parsed, "turns": n, "parse_share": parse_share,
                   "language_factor": language_factor, "switch_turn": switch, "messages": rows,
                   "committed": committed,
                   "reason": "paid" if committed else "no task booking committed: format alone never pays"}


# --- r_drift ---------------------------------------------------------------------------------


def first_observed_turn(episode: Episode, fired_turn: int, ev: DriftEvidence) -> int | None:
    """Earliest result turn >= fired_turn whose response shows one of the drift's tokens."""
    for result in sorted(episode.results, key=lambda r: r.turn):
        if result.turn >= fired_turn and any(contains_token(result_text(result), t) for t in ev.tokens):
            return result.turn
    return None


def _structural(episode: Episode, fired: int, end: int, ev: DriftEvidence) -> dict[str, Any] | None:
    if ev.adaptation_tool is None:
        return None
    acts = actions_by_turn(episode)
    for result in sorted(episode.results, key=lambda r: r.turn):
        action = acts.get(result.turn)
        if not (fired <= result.turn <= end and result.ok and result.tool_name == ev.adaptation_tool):
            continue
        if action is None or action.tool_name != ev.adaptation_tool:
            continue
        if set(ev.adaptation_args) <= set(keys_in(action.tool_args)):
            return {"turn": result.turn, "tool": result.tool_name, "args_include": list(ev.adaptation_args)}
    return None


def cited(episode: Episode, fired: int, end: int, ev: DriftEvidence) -> dict[str, Any] | None:
    """The first message to the user at turns fired..end citing one of the drift's tokens that a result had shown
    at or after `fired`, before the message (where, which token, seen where), or None."""
    results = sorted(episode.results, key=lambda r: r.turn)
    for turn, action in user_messages_of(episode):
        if not fired <= turn <= end:
            continue
        text = norm_text(action.message or "")
        for token in ev.tokens:
            if not contains_token(text, token):
                continue
            seen = next((r for r in results if fired <= r.turn < turn and contains_token(result_text(r), token)), None)
            if seen is not None:
                return {"turn": turn, "token": token, "seen_in": seen.tool_name, "seen_turn": seen.turn}
    return None


def r_drift(episode: Episode, evidence: dict[str, DriftEvidence],
            booking: Booking | None) -> tuple[float | None, dict[str, Any]]:
    """Share of fired drifts handled within the window (structurally or by citing observed evidence),
    paid only when `booking` (the task booking) exists: handling a drift and then giving up earns 0.

    The breakdown always lists what was handled (evaluation reads latencies from it); `handled_share`
    is the unpaid share, `value` what the reward uses."""
    handled = []
    for event in episode.drifts:
        ev = evidence[event.pattern_id]
        end = event.turn + DRIFT_HANDLING_WINDOW
        options = [(how, found) for how, found in (("structural", _structural(episode, event.turn, end, ev)),
                                                   ("cited", cited(episode, event.turn, end, ev))) if found]
        how, found = min(options, key=lambda o: o[1]["turn"]) if options else (None, None)
        handled.append({"pattern_id": event.pattern_id, "drift_type": event.drift_type, "domain": event.domain,
                        "fired_turn": event.turn, "window_end": end,
                        "handled_turn": found["turn"] if found else None, "how": how, "evidence": found,
                        "tokens": list(ev.tokens), "adaptation_tool": ev.adaptation_tool})
    if not handled:
        return None, {"value": None, "handled": [], "window": DRIFT_HANDLING_WINDOW, "reason": "no drift fired"}
    n_handled = sum(h["handled_turn"] is not None for h in handled)
    share = n_handled / len(handled)
    committed = booking is not None
    value = share if committed else 0.0
    reason = f"{n_handled}/{len(handled)} handled" + ("" if committed else
                                                     "; no task booking committed: drift handling alone never pays")
    return value, {"value": value, "handled_share": share, "committed": committed, "handled": handled,
                   "window": DRIFT_HANDLING_WINDOW, "reason": reason}
