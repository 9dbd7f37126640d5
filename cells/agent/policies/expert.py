"""`ExpertPolicy`: the ceiling player and the source of the warm-start data.

Flow: (airline) ask every passenger's name -> payment token -> search -> book the cheapest option
meeting every constraint -> submit. It reads every result and adapts to what it observes, never to
which drift fired: renamed fields (the one new field where a documented one is gone), newly required
arguments (the error names them and where the value comes from: another argument, a listing, the user;
`repair.py`), item fields, a changed date format (the error names it), refused departure windows,
vehicle classes, room types or dishes (it picks another fitting option the refusal allows), a raised
minimum order, token scope upgrades (a new token with the scope the error names), MFA (asks the user
for the OTP and resends with `mfa_code`), GST (asks for the GSTIN, "UNREGISTERED" when the user has
none), fees at checkout (a total over budget makes it ask about flexibility), terms notices and timeouts
(identical retry). Whatever it observed is told to the user citing the exact token, in the
user's current language. It submits with a calibrated confidence.

`NaivePolicy` (naive.py) is the same player with adaptation switched off.
"""

from __future__ import annotations

from typing import Any

from cells.step_04_datatypes import (
    GOAL_SEARCH_TOOLS,
    GOAL_WRITE_TOOLS,
    DriftCallObservation,
    ToolResult,
    UserMessage,
    passengers_arg,
)
from cells.step_07_tasks import BINDING_FACTS, UNREGISTERED_GSTIN
from cells.tasks.i18n import money

from . import phrases
from .base import (
    GoalReader,
    Memory,
    PolicyNotResetError,
    clarify,
    default_scope,
    search_args,
    speak,
    submit,
    tool_args,
)
from .observe import evidence_notes, fee_of, gstin_in, max_money_in, names_in, otp_in
from .planning import Option, airline_options, cab_options, choose, hotel_options, restaurant_options
from .repair import fill_items, is_format, item_field, lookup, reformatted

CONFIDENCE_MET = 0.97  # booked, and every stated constraint checked against the charged total
CONFIDENCE_SHORT = 0.9  # booked the right thing, but a constraint (e.g. budget) could not be met
CONFIDENCE_FAILED = 0.05
MAX_SAME_CALL = 3  # identical retries (timeouts); the reward penalises the 4th
MAX_WRITE_FAILURES = 6
MAX_ASKS = 2  # per topic


class ExpertPolicy:
    """Reads every result, adapts to every drift in the catalogue, tells the user, calibrates."""

    name = "expert"
    adaptive = True  # NaivePolicy switches this off
    strict_fields = False  # read only the documented price field (naive)
    trust_filter = False  # trust search filters instead of checking each dish's tag (naive)

    def __init__(self) -> None:
        self.goal: GoalReader | None = None

    # ------------------------------------------------------------------ episode state
    def reset(self, observation: DriftCallObservation, goal: GoalReader | None = None) -> None:
        if goal is None:
            raise PolicyNotResetError(f"{self.name} needs a GoalReader at reset (perfect-NLU assumption)")
        self.goal = goal
        self.mem = Memory(language=goal.language, default_scope=default_scope(observation))
        self.scope = self.mem.default_scope
        self.token: str | None = None
        # the travellers' names bind the booking (step 7's BINDING_FACTS) and only the user knows them: ask first
        self.names: list[str] | None = None if any(f.ask == "names" for f in BINDING_FACTS[goal.domain]) else []
        self.search: dict[str, Any] | None = None
        self.excluded: set[str] = set()
        self.extra: dict[str, Any] = {}
        # list argument -> {required field of each element -> how to fill it} (`repair.item_field`)
        self.item_fields: dict[str, dict[str, str]] = {}
        self.found_in: set[str] = set()  # required arguments a listing shows (read from the chosen item)
        self.format: str | None = None  # the date/time format the write tool now takes
        self.asking: tuple[str, str] | None = None  # (argument, fact) to ask the user for: need == "fact"
        self.banned: set[str] = set()  # dishes the vendor refused
        self.refreshed = False  # searched again for a value the first listing lacked
        self.min_order: int | None = None
        self.fee = 0  # a per-booking fee seen at checkout (per night for hotels)
        self.booking: dict[str, Any] | None = None
        self.budget_max: int | None = None
        self.asked: dict[str, int] = {}
        self.need: str | None = None  # a fact to ask the user: mfa | gstin | budget
        self.notes: list[str] = []
        self.told: set[str] = set()
        self.urgent: set[str] = set()  # notes only a citation can handle: tell them right away
        self.retry: tuple[str, dict[str, Any]] | None = None
        self.calls: dict[str, int] = {}
        self.chosen: Option | None = None
        self.met = True
        self.stuck = False
        self.write_failures = 0
        self.plain_retried = False

    def act(self, observation: DriftCallObservation, history: Any = None) -> str:
        if self.goal is None:
            raise PolicyNotResetError(f"call {self.name}.reset(observation, GoalReader) before act()")
        self.mem.ingest(observation)
        if observation.last_result is not None:
            self._read_result(observation.last_result)
        msg = observation.user_message
        if msg is not None and msg.kind == "reply":
            self._read_reply(msg)
        return self._decide()

    # ------------------------------------------------------------------ reading
    def _note(self, result: ToolResult) -> None:
        if not self.adaptive:
            return
        for note, urgent in evidence_notes(result):
            if note and note not in self.notes:
                self.notes.append(note)
                if urgent:
                    self.urgent.add(note)

    def _read_result(self, r: ToolResult) -> None:
        self._note(r)
        if r.error_code == "TIMEOUT":
            return  # self.retry stays set: the identical call goes again
        self.retry = None
        domain = self.goal.domain
        if r.tool_name == "payment.get_token":
            if r.ok:
                self.token = str(r.response["payment_token"])
            elif self.adaptive and r.response.get("supported_scope"):
                self.scope = str(r.response["supported_scope"])
            else:
                self.stuck = True
        elif r.tool_name == GOAL_SEARCH_TOOLS[domain]:
            if r.ok:
                self.search = dict(r.response)
                self.chosen = None
                floor = next((p.get("min_order_inr") for p in r.response.get("restaurants", [])), None)
                self.min_order = floor if isinstance(floor, int) else self.min_order
            else:
                self.stuck = True
        elif r.tool_name == GOAL_WRITE_TOOLS[domain]:
            if r.ok:
                self.booking = dict(r.response)
                self.fee = fee_of(r.response) if self.adaptive else 0
            elif self.adaptive:
                self._adapt(r.response)
            else:
                self._plain_retry()

    def _plain_retry(self) -> None:
        """Naive: one identical retry of a refused write, then give up."""
        if self.plain_retried:
            self.stuck = True
        self.plain_retried = True

    def _adapt(self, resp: dict[str, Any]) -> None:
        code, field = str(resp.get("error_code")), str(resp.get("field_name", ""))
        self.write_failures += 1
        if self.write_failures > MAX_WRITE_FAILURES:
            self.stuck = True
        elif code == "MISSING_REQUIRED_FIELD":
            self._missing(field, resp)
        elif code in ("INVALID_FIELD_VALUE", "INVALID_FIELD_TYPE") and is_format(resp.get("expected")):
            self.format = str(resp["expected"])
        elif code == "DISH_UNAVAILABLE":
            self.banned.add(str(resp.get("dish_id")))
        elif code in ("MFA_REQUIRED", "MFA_INVALID"):
            self.extra.pop("mfa_code", None)
            self.need = "mfa"
        elif code == "GST_NUMBER_REQUIRED":
            self.need = "gstin"
        elif code in ("AUTH_SCOPE_INSUFFICIENT", "UNSUPPORTED_SCOPE", "AUTH_TOKEN_INVALID"):
            self.scope = str(resp.get("required_scope") or resp.get("supported_scope") or self.scope)
            self.token = None
        elif code in ("BOOKING_WINDOW_CLOSED", "VEHICLE_CLASS_UNAVAILABLE", "ROOM_TYPE_UNAVAILABLE"):
            self._exclude_unavailable(resp)
        elif code == "MIN_ORDER_NOT_MET":
            self.min_order = int(resp.get("min_order_inr") or 0)
        elif code in ("DUPLICATE_BOOKING", "DUPLICATE_ORDER"):
            self.booking = {"booking_id": resp.get("existing_id")}
        elif code == "UNKNOWN_FIELD":
            self.extra.pop(field, None)
        elif code in ("SEATS_UNAVAILABLE", "NOT_FOUND") and self.chosen is not None:
            self.excluded.add(self.chosen.key)
        else:
            self.stuck = True

    def _missing(self, field: str, resp: dict[str, Any]) -> None:
        slots = self.goal.slots
        nested = item_field(resp)
        if nested is not None:
            listed, sub, how = nested
            self.item_fields.setdefault(listed, {})[sub] = how
            self._refresh_if(how == "found_in")
        elif resp.get("ask_user"):
            self._ask_fact(field, str(resp["ask_user"]))
        elif resp.get("same_as"):
            value = lookup(str(resp["same_as"]), self._chosen_item(), self.search_args, slots)
            self.extra[field] = value
            self.stuck = self.stuck or value is None
        elif resp.get("found_in"):
            self.found_in.add(field)
            self._refresh_if(lookup(field, self._chosen_item()) is None)
        elif field == "passenger_count":
            self.extra["passenger_count"] = int(slots.get("passengers", 1))
        elif field == "city":
            self.extra["city"] = slots.get("city") or str(slots.get("pickup", "")).split(":")[0]
        elif field == "mfa_code":
            self.need = "mfa"
        elif field == "gst_number":
            self.need = "gstin"
        elif field == "payment_token":
            self.token = None
        else:
            self.stuck = True

    @property
    def search_args(self) -> dict[str, Any]:
        return search_args(self.goal)

    def _chosen_item(self) -> dict[str, Any] | None:
        return self.chosen.attrs.get("item") if self.chosen is not None else None

    def _refresh_if(self, needed: bool) -> None:
        """Search again (once) when the listing the booking came from does not show a value the vendor asks for:
        a listing fetched before the change."""
        if needed and not self.refreshed:
            self.refreshed, self.search = True, None
        elif needed:
            self.stuck = True

    def _ask_fact(self, field: str, fact: str) -> None:
        """A value only the user knows: their name (already known when they named the passengers) or GSTIN."""
        if fact == "name" and self.names:
            self.extra[field] = self.names[0]
        else:
            self.asking, self.need = (field, fact), "fact"

    def _exclude_unavailable(self, resp: dict[str, Any]) -> None:
        if self.chosen is not None:
            self.excluded.add(self.chosen.key)
        available = resp.get("available")
        if isinstance(available, list):
            for option in self._options():
                ident = option.args.get("flight_id") or option.args.get("vehicle_class") or option.attrs.get("room_type")
                if ident not in available:
                    self.excluded.add(option.key)

    def _read_reply(self, msg: UserMessage) -> None:
        text = msg.text
        if self.names is None:
            found = names_in(text)
            if len(found) >= int(self.goal.slots.get("passengers", 1)):
                self.names = found[: int(self.goal.slots.get("passengers", 1))]
        if self.need == "mfa" and otp_in(text):
            self.extra["mfa_code"] = otp_in(text)
            self.need = None
        elif self.need == "gstin":
            self.extra["gst_number"] = gstin_in(text) or UNREGISTERED_GSTIN
            self.need = None
        elif self.need == "budget":
            self.budget_max = max_money_in(text) or self.goal.budget
            self.need = None
        elif self.need == "fact" and self.asking is not None:
            field, fact = self.asking
            found = names_in(text)[:1] if fact == "name" else [gstin_in(text) or UNREGISTERED_GSTIN]
            if found:
                self.extra[field], self.need, self.asking = found[0], None, None

    # ------------------------------------------------------------------ deciding
    def _options(self) -> list[Option]:
        g, resp = self.goal, self.search or {}
        if g.domain == "airline":
            return airline_options(g, resp, self.strict_fields, self.fee)
        if g.domain == "cab":
            return cab_options(g, resp, self.strict_fields, self.fee)
        if g.domain == "restaurant":
            return restaurant_options(g, resp, self.min_order, self.fee, self.trust_filter, self.strict_fields,
                                      frozenset(self.banned))
        return hotel_options(g, resp, self.fee, self.strict_fields)

    def _call(self, name: str, args: dict[str, Any]) -> str:
        from cells.step_04_datatypes import canonical_json

        key = canonical_json([name, args])
        self.calls[key] = self.calls.get(key, 0) + 1
        if self.calls[key] > MAX_SAME_CALL:
            self.stuck = True
            return self._submit()
        self.retry = (name, args)
        return tool_args(name, args)

    def _ask(self, topic: str, message: str) -> str | None:
        self.asked[topic] = self.asked.get(topic, 0) + 1
        if self.asked[topic] > MAX_ASKS:
            return None
        return clarify(message)

    def _cite_for(self, topic: str) -> str:
        wanted = {"mfa": ("mfa_code", "MFA_REQUIRED"), "gstin": ("gst_number", "GST_NUMBER_REQUIRED")}[topic]
        cite = next((n for n in self.notes if n in wanted), wanted[0])
        self.told.add(cite)
        return cite

    def _decide(self) -> str:
        lang = self.mem.language
        if self.stuck:
            return self._submit()
        if self.retry is not None:  # the last call timed out: send it again unchanged
            return self._call(*self.retry)
        if self.booking is not None:
            return self._after_booking()
        question = self._question(lang)
        if question is not None:
            return question
        # fees, notices and moved fields are told at once (only a citation handles them, within a
        # few turns); an error is handled by the fix itself and told with the next question or submit
        untold = [n for n in self.notes if n not in self.told and n in self.urgent]
        if untold and self.adaptive:
            self.told.update(untold)
            return speak(phrases.report(untold, lang))
        if self.token is None:
            return self._call("payment.get_token", {"scope": self.scope})
        if self.search is None:
            return self._call(GOAL_SEARCH_TOOLS[self.goal.domain], search_args(self.goal))
        return self._write()

    def _question(self, lang: str) -> str | None:
        """A clarify the next step needs (names, OTP, GSTIN, budget), or None."""
        if self.names is None:
            return self._ask("names", phrases.say("ask_names", lang)) or self._give_up()
        if self.need in ("mfa", "gstin"):
            key = "ask_otp" if self.need == "mfa" else "ask_gstin"
            return self._ask(self.need, phrases.say(key, lang, cite=self._cite_for(self.need))) or self._give_up()
        if self.need == "fact" and self.asking is not None:
            field, fact = self.asking
            key = "ask_booker_name" if fact == "name" else "ask_gstin_for"
            self.told.add(field)
            return self._ask(f"fact:{field}", phrases.say(key, lang, cite=field)) or self._give_up()
        return None

    def _give_up(self) -> str:
        self.stuck = True
        return self._submit()

    def _write(self) -> str:
        budget = self.budget_max or self.goal.budget
        option, met = choose(self._options(), budget, self.excluded)
        if option is None:
            return self._give_up()
        if not met and self.adaptive and self.goal.budget is not None and option.fits \
                and self.budget_max is None and self.asked.get("budget", 0) == 0:
            self.need = "budget"
            asked = self._ask("budget", phrases.say("ask_budget", self.mem.language,
                                                    total=money(option.cost), budget=money(self.goal.budget)))
            if asked is not None:
                return asked
        self.chosen, self.met = option, met
        args = dict(option.args)
        if self.goal.domain == "airline":
            args["passengers"] = passengers_arg(list(self.names or []))
        item = option.attrs.get("item") or {}
        for listed, fields in self.item_fields.items():
            if isinstance(args.get(listed), list):
                args[listed] = fill_items(args[listed], fields, item.get("menu", []))
        args.update(self.extra)
        args.update({name: lookup(name, item) for name in self.found_in})
        if self.format is not None:
            args = reformatted(args, self.format)
        args["payment_token"] = self.token
        return self._call(GOAL_WRITE_TOOLS[self.goal.domain], args)

    def _after_booking(self) -> str:
        total = self.booking.get("total_inr") if self.booking else None
        budget = self.goal.budget
        if isinstance(total, int) and budget is not None and total > max(budget, self.budget_max or 0):
            if self.adaptive and self.asked.get("budget", 0) == 0:
                self.need = "budget"
                asked = self._ask("budget", phrases.say("ask_budget", self.mem.language, total=money(total),
                                                        budget=money(budget)))
                if asked is not None:
                    return asked
            self.met = self.met and self.budget_max is not None and total <= self.budget_max
        return self._submit()

    def _submit(self) -> str:
        lang = self.mem.language
        untold = [n for n in self.notes if n not in self.told]
        self.told.update(untold)
        if self.booking is None:
            parts = [phrases.say("failed", lang)]
            confidence = self.failure_confidence()
        else:
            ref = str(self.booking.get("booking_id") or self.booking.get("order_id"))
            total = self.booking.get("total_inr")
            parts = [self._report(ref, total if isinstance(total, int) else None, lang)]
            if not self.met:
                parts.append(phrases.say("short", lang))
            confidence = CONFIDENCE_MET if self.met else CONFIDENCE_SHORT
        if untold:
            parts.append(phrases.report(untold, lang))
        return submit(" ".join(parts), confidence)

    def _report(self, ref: str, total: int | None, lang: str) -> str:
        """What the user hears about the booking: its reference and the total charged (the judge binds both)."""
        return phrases.done(ref, total, lang)

    def failure_confidence(self) -> float:
        return CONFIDENCE_FAILED
