"""`RandomPolicy`: random valid-or-invalid actions from its own seeded generator.

Roughly: a quarter garbage text (not JSON, broken JSON, a wrong object), the rest random actions
of every type with arguments drawn from the goal's slots, values seen in results, or nonsense.
Deterministic: a private `random.Random` (never the global one) re-seeded at each reset from
(seed, the turn-0 utterance), so one instance plays every episode differently yet reproducibly.
"""

from __future__ import annotations

import json
import random
from typing import Any

from cells.step_04_datatypes import DOMAINS, DriftCallObservation, stable_int

from . import base
from .base import GoalReader

GARBAGE = ("", "ok", "{", "}{", "I will book it now.", '{"action": "fly"}', '{"tool": "airline.search"}',
           '```json\n{"action": "speak"}\n```', "[1, 2, 3]", '{"action":"submit","confidence":2}',
           '{"action":"speak","message":"a"}{"action":"speak","message":"b"}', "\u0000\ud7ff", "नमस्ते {")


class RandomPolicy:
    """Uniformly random behaviour; ends only by chance, the budget or three invalid outputs."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.goal: GoalReader | None = None
        self.seen: list[Any] = []
        self.tools: list[str] = []

    def reset(self, observation: DriftCallObservation, goal: GoalReader | None = None) -> None:
        self.goal = goal
        self.rng = random.Random(stable_int(self.seed, "random_policy", observation.goal_utterance or ""))
        self.seen = list(goal.slots.values()) if goal is not None else []
        self.tools = [t.name for t in observation.available_tools]

    def act(self, observation: DriftCallObservation, history: Any = None) -> str:
        if observation.last_result is not None:
            self._remember(observation.last_result.response)
        rng = self.rng
        roll = rng.random()
        if roll < 0.25:
            return rng.choice(GARBAGE)
        if roll < 0.65:
            return self._tool_call()
        if roll < 0.75:
            return base.speak(rng.choice(("hello", "नमस्ते", "done soon", "வணக்கம்", str(rng.random()))))
        if roll < 0.83:
            return base.clarify(rng.choice(("What is the OTP?", "GST number?", "budget?", "names please", "?")))
        if roll < 0.88:
            return base.probe(rng.choice(DOMAINS))
        if roll < 0.97:
            return base.submit(rng.choice(("done", "booked", "")) or "x", round(rng.random(), 3))
        return base.abort(rng.choice((None, "bye")))

    def _remember(self, response: dict[str, Any]) -> None:
        for value in response.values():
            if isinstance(value, (str, int)) and not isinstance(value, bool):
                self.seen.append(value)
            elif isinstance(value, list) and value and isinstance(value[0], dict):
                self.seen.extend(v for v in value[0].values() if isinstance(v, (str, int)))
        self.seen = self.seen[-64:]

    def _tool_call(self) -> str:
        rng = self.rng
        name = rng.choice(self.tools or ["airline.search"]) if rng.random() < 0.9 else \
            rng.choice(("hotel.teleport", "payment.charge", "cab.book", "airline.cancel"))
        keys = ("from", "to", "date", "city", "pickup", "drop", "flight_id", "hotel_id", "room_type", "items",
                "payment_token", "scope", "passengers", "rooms", "check_in", "check_out", "vehicle_class", "x")
        args: dict[str, Any] = {}
        for key in rng.sample(keys, rng.randint(0, 5)):
            args[key] = self._value(key)
        return json.dumps({"action": "tool_call", "tool": name, "args": args}, ensure_ascii=False)

    def _value(self, key: str) -> Any:
        rng = self.rng
        if key == "passengers":
            return [rng.choice(({"name": "Asha Rao"}, {"name": ""}, "X"))]
        if key == "items":
            return [{"dish_id": rng.choice(("D01", "D02", "zz")), "qty": rng.randint(0, 3)}]
        if key == "rooms":
            return rng.randint(0, 3)
        if self.seen and rng.random() < 0.6:
            return rng.choice(self.seen)
        return rng.choice(("", "BLR", "2026-05-02", "payments.basic", 7, None, "standard", "mini"))
