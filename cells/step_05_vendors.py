"""Step 5 - vendors: five pure, deterministic mock APIs (16 tools) behind one `dispatch` (DESIGN §3).

The face of `cells/vendors/`: re-exports the public API. An episode's whole vendor state is one
frozen `World` (`new_world(goal, seed)`); `dispatch(world, tool, args, turn)` returns
`(ToolResult, World)` - the same World for reads, a new one for writes. Behaviour is driven by
per-domain feature flags (`DEFAULT_FLAGS`) that drifts change with `with_flags`.

Write tools run commented stages: schema -> policy -> duplicate -> payment -> commit; nothing is
recorded before commit, so any refusal (auth included) leaves every vendor untouched. Errors are
`ToolResult`s whose response is `{"error_code", "hint", ...extras}` from the closed `ErrorCode`.
Listings are built from the goal: its own query always has an option meeting every constraint
with >= ₹700 slack (cab/food: less for budgets under ₹1,400/₹2,100, but always above that
domain's fee drift) and one over budget. ~1% of calls time out (seeded per call and retry).

Reads nothing from the context; `run(ctx)` plays a search + book for a sample goal per domain and
prints the tool table. Run alone: `python -m cells run --profile cpu-smoke --steps 5` (< 1 s).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cells.step_04_models import Constraint, GoalSpec, UserFacts
from cells.vendors.dispatch import TOOL_NAMES, TOOLS, UnknownDomainError, describe_schema, dispatch, tool_docs
from cells.vendors.errors import ERROR_TABLE, ErrorCode, VendorError
from cells.vendors.payment import token_for
from cells.vendors.world import DEFAULT_FLAGS, FlagError, World, new_world, with_flags

if TYPE_CHECKING:  # pragma: no cover
    from cells.pipeline import Context

__all__ = [
    "DEFAULT_FLAGS", "ERROR_TABLE", "TOOLS", "TOOL_NAMES", "ErrorCode", "FlagError", "UnknownDomainError",
    "VendorError", "World", "describe_schema", "dispatch", "new_world", "run", "sample_goal", "token_for",
    "tool_docs", "with_flags",
]

_SAMPLE_SLOTS: dict[str, dict[str, Any]] = {
    "airline": {"from": "HYD", "to": "BLR", "date": "2026-05-02", "passengers": 2},
    "cab": {"city": "BLR", "pickup": "BLR:KORAMANGALA", "drop": "BLR:AIRPORT", "pickup_time": "2026-05-02T08:30"},
    "restaurant": {"city": "BLR", "diet": "veg", "party_size": 2},
    "hotel": {"city": "GOI", "check_in": "2026-05-02", "check_out": "2026-05-04", "rooms": 1},
}
_SAMPLE_BUDGET = {"airline": 14000, "cab": 1500, "restaurant": 1500, "hotel": 12000}


def sample_goal(domain: str, seed: int = 7, budget: int | None = None, slots: dict[str, Any] | None = None,
                constraints: tuple[Constraint, ...] = (), **user: Any) -> GoalSpec:
    """A hand-built GoalSpec for demos and tests (step_07 generates the real ones)."""
    names = ("Asha Rao", "Vikram Rao", "Meera Iyer", "Ravi Kumar")
    base = _SAMPLE_SLOTS[domain]
    merged = {**base, **(slots or {})}
    pax = int(merged.get("passengers", 1))
    facts = UserFacts(**{"passenger_names": names[:pax], "mfa_code": "482913", **user})
    cons = (Constraint("total_inr", "le", budget or _SAMPLE_BUDGET[domain]), *constraints)
    return GoalSpec(goal_id=f"sample-{domain}-{seed}", seed=seed, stage=1, template_id=f"sample_{domain}",
                    domain=domain, intent="book", slots=merged, constraints=cons, language="en",
                    seed_utterance=f"Please book this {domain} for me.", user=facts, now="2026-05-01T10:00:00+05:30")


def run(ctx: Context) -> Context:
    """Self-check: for each goal domain, search then book the cheapest option; print a summary."""
    from cells.vendors.selfcheck import smoke

    for domain, summary in smoke():
        print(f"[vendors] {domain:<10} {summary}")
    print(f"[vendors] {len(TOOL_NAMES)} tools, {len(ErrorCode)} error codes")
    return ctx
