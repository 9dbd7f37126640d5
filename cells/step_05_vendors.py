"""Step 5 - vendors: five pure, deterministic mock APIs (16 tools) behind one `dispatch` (docs/design.md#3-vendors).

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

Reads nothing from the context; `run(ctx)` plays a search + book for a sample goal per domain, prints the tool
table and records the tools' signatures in `<run_dir>/vendor_api.json` (`VENDOR_API_FILE`, `api_signature`): a
run's models learnt that API, and the commands that read them back refuse another (`api_changes`). Run alone:
`python -m cells run --profile cpu-smoke --steps 5` (< 1 s).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from cells.vendors.dispatch import (
    TOOL_NAMES,
    TOOLS,
    DrillArgumentError,
    UnknownDomainError,
    api_changes,
    api_signature,
    default_tool_docs,
    describe_schema,
    dispatch,
    require_argument,
    tool_docs,
)
from cells.vendors.error_codes import ERROR_TABLE, ErrorCode, VendorError
from cells.vendors.payment import token_for
from cells.vendors.registry import REFERENCE_PREFIXES, Effect, references_in
from cells.vendors.world import DEFAULT_FLAGS, FlagError, World, new_world, with_flags

if TYPE_CHECKING:  # pragma: no cover
    from cells.context import Context

VENDOR_API_FILE = "vendor_api.json"  # in a run directory: the `api_signature` its models were trained against

__all__ = [
    "DEFAULT_FLAGS", "ERROR_TABLE", "REFERENCE_PREFIXES", "TOOLS", "TOOL_NAMES", "VENDOR_API_FILE", "DrillArgumentError",
    "Effect", "ErrorCode", "FlagError", "UnknownDomainError", "VendorError", "World", "api_changes", "api_signature",
    "default_tool_docs", "describe_schema", "dispatch", "new_world", "references_in", "require_argument", "run",
    "token_for", "tool_docs", "with_flags",
]

def run(ctx: Context) -> Context:
    """Self-check: for each goal domain, search then book the cheapest option; print a summary."""
    from cells.vendors.selfcheck import smoke

    for domain, summary in smoke():
        print(f"[vendors] {domain:<10} {summary}")
    print(f"[vendors] {len(TOOL_NAMES)} tools, {len(ErrorCode)} error codes")
    path = ctx.run_dir / VENDOR_API_FILE
    path.write_text(json.dumps(api_signature(), indent=1) + "\n", encoding="utf-8")
    ctx.artifacts["vendor_api"] = path
    return ctx
