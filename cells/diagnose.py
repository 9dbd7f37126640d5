"""`python -m cells diagnose --run-dir runs/cpu-learn`: where a warm-started model's bookings fail.

Plays the run's saved warm start (`training/warm_start/model`, CPU full warm starts) greedily on the
warm-start evaluation plan and counts what a booking needs the model to copy correctly: the payment
token the gateway issued in that episode (every write call carries it) and the goal's slots in the
search call (cities, dates). Writes `diagnose.json` in the run directory (read by `python -m cells
results`) and prints it. ~1 min for cpu-learn on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def copy_diagnostics(episodes: Iterable[Any]) -> dict[str, int]:
    """Counts over finished `Episode`s: write calls, those whose `payment_token` was issued in the same episode,
    searches, those whose arguments equal every goal slot they name, and how the episodes ended."""
    from cells.step_04_models import GOAL_SEARCH_TOOLS

    searches = frozenset(GOAL_SEARCH_TOOLS.values())
    counts: Counter[str] = Counter()
    for episode in episodes:
        issued = {r.response.get("payment_token") for r in episode.results
                  if r.tool_name == "payment.get_token" and r.status.value == "ok"}
        for record in episode.actions:
            action = record.action
            if action is None or action.action_type.value != "tool_call":
                continue
            if "payment_token" in action.tool_args:
                counts["write_calls"] += 1
                counts["write_calls_with_issued_token"] += action.tool_args["payment_token"] in issued
            if action.tool_name in searches:
                slots = episode.goal.slots
                counts["searches"] += 1
                counts["searches_with_goal_slots_right"] += all(
                    str(v) == str(slots[k]) for k, v in action.tool_args.items() if k in slots)
        counts["episodes"] += 1
        counts["episodes_with_token"] += bool(issued)
        counts["episodes_with_booking"] += bool(episode.bookings)
        counts[f"ended_by_{episode.terminated_by.value}"] += 1
    return dict(sorted(counts.items()))


def diagnose_run(run_dir: Path) -> dict[str, int]:
    """Play the run's warm start on the warm-start eval plan; write and return `diagnose.json`'s counts."""
    from cells.control import load_run_warm_start
    from cells.evaluation.runner import eval_plan, play_greedy

    run_dir = Path(run_dir)
    profile, model, tokenizer = load_run_warm_start(run_dir)
    model.eval()
    cases = eval_plan(max(1, profile.warm_start_eval_per_cell))
    counts = copy_diagnostics(play_greedy(model, tokenizer, cases, profile).episodes)
    (run_dir / "diagnose.json").write_text(json.dumps(counts, indent=1) + "\n", encoding="utf-8")
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cells diagnose", description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", default="runs/cpu-learn")
    args = parser.parse_args(argv)
    print(json.dumps(diagnose_run(Path(args.run_dir)), indent=1))
    return 0
