"""One fact, one home: facts with a declared source are derived from it, never spelled out again.

Each check walks every module under cells/ with `ast` and flags literal collections that copy a
fact owned elsewhere (the language list has its own check in test_layers.py). Each check is
paired with a test that it does catch a copy.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "cells").rglob("*.py"))


def _collections_holding(path: Path, names: set[str], at_least: int) -> list[int]:
    """Lines of tuple/list/set/dict literals holding `at_least` of `names` as string constants
    (dict keys and values both count)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items = node.elts
        elif isinstance(node, ast.Dict):
            items = [k for k in node.keys if k is not None] + node.values
        else:
            continue
        found = {e.value for e in items if isinstance(e, ast.Constant) and isinstance(e.value, str)} & names
        if len(found) >= at_least:
            lines.append(node.lineno)
    return lines


def _rel(path: Path) -> str:
    return f"{path.relative_to(ROOT)}:"


def _copies(names: set[str], at_least: int) -> list[str]:
    return [f"{_rel(p)}{line}" for p in SOURCES for line in _collections_holding(p, names, at_least)]


def test_the_goal_write_tool_map_is_declared_once():
    """step 4 declares `GOAL_WRITE_TOOLS` (the players may not import the vendors, so not the registry);
    step 6, the reward and the players import it. Two booking/order tool names in one literal is a copy."""
    from cells.step_04_datatypes import GOAL_WRITE_TOOLS

    home = ROOT / "cells" / "step_04_datatypes.py"
    spelled = [c for c in _copies(set(GOAL_WRITE_TOOLS.values()), at_least=2) if not c.startswith(_rel(home))]
    assert spelled == [], f"import step_04_datatypes.GOAL_WRITE_TOOLS instead of spelling it out: {spelled}"


def test_the_goal_search_tool_map_is_declared_once():
    """`GOAL_SEARCH_TOOLS` sits next to `GOAL_WRITE_TOOLS` for the same reason; two search tool names in one
    literal elsewhere is a copy."""
    from cells.step_04_datatypes import GOAL_SEARCH_TOOLS

    home = ROOT / "cells" / "step_04_datatypes.py"
    spelled = [c for c in _copies(set(GOAL_SEARCH_TOOLS.values()), at_least=2) if not c.startswith(_rel(home))]
    assert spelled == [], f"import step_04_datatypes.GOAL_SEARCH_TOOLS instead of spelling it out: {spelled}"


def test_the_copy_check_catches_a_copy(tmp_path):
    copy = tmp_path / "copy.py"
    copy.write_text('W = {"airline": "airline.book", "hotel": "hotel.book"}\nT = ("cab.book", "x")\n'
                    'L = ["restaurant.order", "cab.book"]\n', encoding="utf-8")
    names = {"airline.book", "cab.book", "restaurant.order", "hotel.book"}
    assert _collections_holding(copy, names, at_least=2) == [1, 3]


def test_the_tool_list_is_declared_once():
    """The registry (`step_05_vendors.TOOL_NAMES`) is the tool list; half of it in one literal is a copy."""
    from cells.step_05_vendors import TOOL_NAMES

    spelled = _copies(set(TOOL_NAMES), at_least=len(TOOL_NAMES) // 2)
    assert spelled == [], f"import step_05_vendors.TOOL_NAMES instead of spelling it out: {spelled}"


def test_the_pinned_system_prompt_is_declared_once():
    from cells.agent.prompt import PINNED_SYSTEM_PROMPT

    first_sentence = PINNED_SYSTEM_PROMPT.split(".")[0]
    home = ROOT / "cells" / "agent" / "prompt.py"
    spelled = [f"{_rel(p)}{n.lineno}" for p in SOURCES if p != home
               for n in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
               if isinstance(n, ast.Constant) and isinstance(n.value, str) and first_sentence in n.value]
    assert spelled == [], f"import agent.prompt.PINNED_SYSTEM_PROMPT instead: {spelled}"


def test_tokenizer_samples_use_real_error_codes_and_tools():
    """The tiny tokenizer's built-in samples are produced by the code that writes such text for real."""
    import json

    from cells.actions import parse_action
    from cells.modeling.tiny import builtin_texts
    from cells.step_05_vendors import DEFAULT_FLAGS, TOOL_NAMES, TOOLS, ErrorCode
    from cells.vendors.registry import check_schema

    texts = builtin_texts()
    results = [json.loads(t.removeprefix("[tool_result] ")) for t in texts if t.startswith("[tool_result] ")]
    assert results and all(ErrorCode(r["error_code"]) and r["tool"] in TOOL_NAMES for r in results)
    actions = [parse_action(t) for t in texts if t.startswith('{"action"')]
    assert {a.action_type.value for a in actions} >= {"tool_call", "speak", "clarify", "submit", "abort"}
    for call in (a for a in actions if a.action_type.value == "tool_call"):
        tool = TOOLS[call.tool_name]
        check_schema(tool, DEFAULT_FLAGS[tool.domain], call.tool_args)  # raises on a made-up argument


def _int_literals(path: Path, values: set[int]) -> list[int]:
    return [n.lineno for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(n, ast.Constant) and type(n.value) is int and n.value in values]


def test_seed_range_bounds_are_declared_once():
    """Only the seeding module spells out where the train/probe/eval seed ranges start and stop (`SEED_RANGES`)."""
    from cells.seeding import SEED_RANGES

    bounds = {b for r in SEED_RANGES for b in (r.start, r.stop)} - {0}
    home = ROOT / "cells" / "seeding.py"
    spelled = [f"{_rel(p)}{line}" for p in SOURCES if p != home for line in _int_literals(p, bounds)]
    assert spelled == [], f"derive these from cells.seeding.SEED_RANGES (e.g. EVAL_SEEDS.start): {spelled}"


def test_the_seed_check_catches_a_copy(tmp_path):
    copy = tmp_path / "copy.py"
    copy.write_text("def f(base_seed: int = 900_000_000):\n    return base_seed + 10\n", encoding="utf-8")
    assert _int_literals(copy, {800_000_000, 900_000_000}) == [1]


def test_drift_predicates_copy_no_vendor_price_or_time():
    """step 6's `requires` predicates read the prices and departure windows the vendors plant (and the
    pattern's own thresholds); none of those numbers or times is spelled out in step 6 again."""
    from cells.step_06_drift import load_catalogue
    from cells.vendors import airline, hotel, restaurant

    prices = {airline.FARE_FLOOR_INR, restaurant.DISH_PRICE_CAP_INR, hotel.SLACK_INR, hotel.RESORT_FEE_ALLOWANCE_INR,
              *hotel.RATE_JITTER_INR, hotel.SLACK_INR + hotel.RATE_JITTER_INR[1]}
    prices |= {v for p in load_catalogue() for v in p.mutation.values() if type(v) is int}
    times = {*airline.DEFAULT_DEPARTURE_WINDOW, *airline.EARLY_FIT_DEPARTURES, *airline.LATER_FIT_DEPARTURES}
    step_06 = ROOT / "cells" / "step_06_drift.py"
    copied = _int_literals(step_06, prices) + [n.lineno for n in ast.walk(ast.parse(step_06.read_text(encoding="utf-8")))
                                               if isinstance(n, ast.Constant) and n.value in times]
    assert copied == [], f"step_06_drift.py lines {copied} copy a vendor price/time or a pattern threshold"
