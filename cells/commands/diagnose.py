"""`python -m cells diagnose --run-dir runs/cpu-learn`: where a warm-started model's bookings fail.

Plays the run's saved warm start (`training/warm_start/model`, CPU full warm starts) greedily on the
warm-start evaluation plan and counts what a booking needs the model to copy correctly: the payment
token the gateway issued in that episode (every write call carries it) and the goal's slots in the
search call (cities, dates; the dates also counted apart by one- and two-digit day, since a day 1-9 needs a
zero the spoken date never shows, and again when dated in the next calendar year, whose year the user never
says). Writes `diagnose.json` in the run directory (read by `python -m cells results`) and prints it. ~1 min
for cpu-learn on 2 CPU cores.

`--failures`: replays the trained model (the run's `export/`, step 24) greedily on every held-out case it
failed in step 19 (`records_final.jsonl`) and says, per episode, what went wrong: the goal's domain and
template, how the episode ended, why the task reward is 0 (from its breakdown: nothing booked, booked with a
wrong slot, booked but never submitted), the tool errors it met and its offences. Writes
`diagnose_failures.json` (per episode, plus counts by domain, template, end and failure), which `python -m
cells results` summarises. Seconds for cpu-learn.

`--probe`: replays the trained model greedily on the probe's cases (step 20) and keeps every episode with an
offence: each offence's evidence, the tool errors met, why its task failed with the booking's wrong slots
(expected against written: a `wrong_booking` is a required slot such as a date or a city written wrong), and
each invented id next to the string a tool result showed that is most like it (a miscopy, or an id unlike any
shown). `probe.json` keeps one example per class; this says what all of them were. Writes
`diagnose_probe.json`, which `python -m cells results` summarises. ~40 s for cpu-learn.

`--refusals [--episodes 300]`: plays the trained model greedily on drifted cases (stages 2 and 3 in turn) of the
probe range, after the probe's own, and reads what it did after the first booking or order call a vendor refused
in each episode (timeouts aside: their fix is the identical call): per error code, how often it sent the same call
to that tool again unchanged, and how often the episode still booked. The probe's `repeated_call` offences were
such repeats; this counts them over many more refusals. Writes `diagnose_refusals.json`, which `python -m cells
results` summarises. ~2 min for cpu-learn. With `--warm-start` it plays the run's warm start instead
(`diagnose_refusals_warm_start.json`, also summarised): whether GRPO caused a repeat or inherited it.

`--dev [--episodes 300] [--warm-start]`: plays the trained model (or the warm start) greedily on development cases,
probe-range seeds from `DEVELOPMENT_CASES_FROM` (clear of the probe's and `--refusals`' cases), stages 1-3 in
turn, and counts success per stage and every failure by why and by the binding fact it got wrong
(`domain.fact`). This is where training data is tuned: the held-out seeds (step 7's `eval_seeds`) only report,
and tuning on them would inflate every figure. Writes `diagnose_dev.json` (or `diagnose_dev_warm_start.json`).
~2 min for 300 cpu-learn episodes.

`--signal [--docs]`: where a finished run's GRPO gradient and seconds went (`cells.training.signal.signal_markdown`):
per stage the share of groups, episodes and model tokens with a success contrast (a success and a failure in the
group), the model tokens the update saw, and seconds per episode in the rollout, the log-prob passes and the update;
RAFT's seconds per episode when its control ran; per drift pattern (the stages' `groups.jsonl`) how many groups
sampled a success and what advantage successes and failures got. Writes `diagnose_signal.md`; `--docs` also its
block in docs/results.md. Seconds: it reads files only.

`--reach [--split latin] [--episodes 60] [--samples G] [--warm-start | --control sft|raft|raft-lora]`: how much
of a drift split's withheld sets sampling reaches before GRPO (`cells.evaluation.splits.reachability`): on
`--episodes` development cases of each of
the split's reinforced and unseen sets, and of its demonstrated set for comparison (`split_cases` from
`REACH_CASES_FROM` of the probe range), greedy success, mean sampled success and pass@G at the profile's GRPO
temperature (G: `--samples`, default the profile's `num_generations`), in all and per pattern of each set (a set's
few patterns can range from reachable to never solved); a generated split adds its held-out instances of each kind
(`gen-unseen-a`, `-b`, `-c`, `--episodes` cases each, in all only). The split defaults to the run's `drift_split`.
`--pattern P` plays only cases whose schedule holds pattern P (a rare one is missed by a small plan); a generated
instance id (`gen/...`) plays cases whose goal admits it with only that drift, under the set the split places it in
(`gen-unseen-c` for a held-out value): whether a repair shown at one name reaches another. Each set also counts,
over its greedy episodes, the first refusal naming a missing field and whether the next call to that tool carries
the name exactly (`named_field_summary`: `refused`, `unparsable` next actions, `resent`, `copied`, the keys
`written_instead`): a wrong name tells a copy that failed from an error ignored. Writes
`diagnose_reach.json` (or `diagnose_reach_warm_start.json`, `diagnose_reach_raft_control.json`, ...; `_t<T>` with
`--temperature`, `_<P>` with `--pattern`, a generated id's slashes as dashes). With `--control`, the run's SFT-only
or RAFT control plays (`raft-lora`: RAFT on GRPO's LoRA): a recipe change to GRPO is compared with the controls on
the same development cases, never on the held-out ones.

`--field-names NAME... [--episodes 16] [--warm-start | --control ...]`: whether the model copies a nested field
name out of the vendor's error or only writes names it was trained on (unseen schema drift needs the copy). On
`--episodes` undrifted development airline bookings (`field_name_cases`, from `FIELD_NAME_CASES_FROM` of the probe
range), each passenger must carry NAME (the env's drill control, so no doc names it); per name, greedy play's
`named_field_summary` and success. Names the warm start's item-field drills used against names of new words
separate copying from memorising. Writes `diagnose_field_names.json` (`_warm_start`, `_<control>`).
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from cells.errors import DriftCallError

# A goal slot holding a date (`date`, `check_in`, the day of a cab's `pickup_time`): the model writes it in ISO
# form from a spoken "2 May". Days 1-9 need a zero the utterance never shows, and whether the spoken day has one
# digit or two is where warm starts have got dates wrong (`2026-08-01` written `2026-08-11`, and the reverse), so
# the counts are kept per kind of day.
ISO_DATE_CHARS = 10  # "2026-05-02": a datetime slot's date part
DAY_KINDS: dict[str, str] = {"one_digit_day": "one-digit days", "two_digit_day": "two-digit days"}  # -> words
# every date slot has one day kind; those dated in the next calendar year (`crosses_year`) are counted again
DATE_KINDS: dict[str, str] = {**DAY_KINDS, "year_turn": "at the year's turn"}


def date_slot_kind(value: Any) -> str | None:
    """The `DAY_KINDS` key of a slot value that starts with an ISO date, else None."""
    from cells.tasks.generator import ISO_DATE

    match = ISO_DATE.match(str(value))
    if match is None:
        return None
    return "one_digit_day" if match.group(3).startswith("0") else "two_digit_day"


def copy_diagnostics(episodes: Iterable[Any]) -> dict[str, int]:
    """Counts over finished `Episode`s: write calls, those whose `payment_token` was issued in the same episode,
    searches, those whose arguments equal every goal slot they name, the date slots among those arguments and
    those whose date part is right (by one- and two-digit day, and again for dates in the next calendar year:
    `<kind>_slots`, `<kind>_slots_right` for each `DATE_KINDS` key), and how the episodes ended."""
    from cells.step_04_datatypes import GOAL_SEARCH_TOOLS
    from cells.step_07_tasks import in_later_year

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
                for key, value in action.tool_args.items():
                    kind = date_slot_kind(slots[key]) if key in slots else None
                    if kind is not None:
                        written, wanted = str(value)[:ISO_DATE_CHARS], str(slots[key])[:ISO_DATE_CHARS]
                        year_turn = in_later_year(slots[key], episode.goal.now)
                        for counted in (kind, "year_turn") if year_turn else (kind,):
                            counts[f"{counted}_slots"] += 1
                            counts[f"{counted}_slots_right"] += written == wanted
        counts["episodes"] += 1
        counts["episodes_with_token"] += bool(issued)
        counts["episodes_with_booking"] += bool(episode.bookings)
        counts[f"ended_by_{episode.terminated_by.value}"] += 1
    return dict(sorted(counts.items()))


def diagnose_run(run_dir: Path) -> dict[str, int]:
    """Play the run's warm start on the warm-start eval plan; write and return `diagnose.json`'s counts."""
    from cells.evaluation.runner import eval_plan, play_greedy
    from cells.training.warm_start import load_run_warm_start

    run_dir = Path(run_dir)
    profile, model, tokenizer = load_run_warm_start(run_dir)
    model.eval()
    cases = eval_plan(max(1, profile.warm_start_eval_per_cell))
    counts = copy_diagnostics(play_greedy(model, tokenizer, cases, profile).episodes)
    (run_dir / "diagnose.json").write_text(json.dumps(counts, indent=1) + "\n", encoding="utf-8")
    return counts


MISCOPY_SIMILARITY = 0.8  # difflib ratio: `IX-8980` against `IX-898` is 0.92, `HTL-BOM-1` against `HTL-DEL-1` 0.67


class DiagnoseError(DriftCallError, RuntimeError):
    """The run directory lacks what a diagnosis replays (the export, the final evaluation's records, the probe's
    report), or a replay disagrees with what the run recorded."""


def task_failure(task: dict[str, Any]) -> str:
    """Why the task reward is 0, from its breakdown (`cells.rewards.components.task_booking` / `r_task`), in words
    without ids, so episodes count together."""
    candidates = task.get("candidates") or []
    if not candidates:
        return "nothing booked"
    if len(candidates) > 1:
        return "several live bookings"
    missed = list(wrong_slots(task))
    if missed:
        return f"booked, wrong {', '.join(missed)}"
    if task.get("harm"):
        return f"booked right, but harmed: {', '.join(task['harm'])}"
    return f"booked right, ended by {task.get('terminated_by', '?')} without submitting"


def wrong_slots(task: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """{fact: {"expected", "actual"}} for each binding fact the single live booking got wrong, from the task
    breakdown ({} when there is not exactly one booking; run files from before binding facts say "slots")."""
    candidates = task.get("candidates") or []
    if len(candidates) != 1:
        return {}
    return {k: {"expected": v.get("expected"), "actual": v.get("actual")}
            for k, v in (candidates[0].get("facts") or candidates[0].get("slots") or {}).items() if not v.get("ok")}


def episode_row(episode: Any, rewards: Any) -> dict[str, Any]:
    """One played `Episode` in brief: its identity, how it ended, the tool errors met (`tool: CODE`, in order)
    and its offence codes."""
    offences = rewards.breakdown.get("penalty", {}).get("offences", [])
    return {"seed": episode.seed, "stage": episode.stage, "language": episode.goal.language,
            "domain": episode.goal.domain, "template": episode.goal.template_id,
            "terminated_by": episode.terminated_by.value, "turns_used": episode.turns_used,
            "parse_failures": episode.parse_failures,
            "tool_errors": [f"{r.tool_name}: {r.error_code}" for r in episode.results if not r.ok],
            "offences": sorted(str(o.get("code")) for o in offences)}


def failure_row(episode: Any, rewards: Any) -> dict[str, Any]:
    """What went wrong in one failed `Episode`: `episode_row` plus why the task reward is 0."""
    return {**episode_row(episode, rewards), "failure": task_failure(rewards.breakdown.get("task", {}))}


def failure_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts of failed episodes by domain, template, how they ended and why; the rows themselves."""
    def count(key: Any) -> dict[str, int]:
        return dict(Counter(key(r) for r in rows).most_common())

    return {"failures": len(rows), "by_domain": count(lambda r: r["domain"]), "by_template": count(lambda r: r["template"]),
            "by_end": count(lambda r: r["terminated_by"]), "by_failure": count(lambda r: r["failure"]),
            "episodes": rows}


def load_trained(run_dir: Path, needs: str) -> tuple[Any, Any, Any]:
    """The run's profile and its exported trained model (step 24) with its tokenizer, ready for greedy play;
    `needs` is the run file the caller reads besides them."""
    from cells.step_02_profiles import load_run_profile
    from cells.step_24_export import MISSING_EXPORT_HINT, load_export
    from cells.training.warm_start import check_run_vendor_api

    for need in (needs, "export", "profile.json"):
        if not (run_dir / need).exists():
            raise DiagnoseError(f"{run_dir / need} is missing: {MISSING_EXPORT_HINT}")
    check_run_vendor_api(run_dir)
    profile = load_run_profile(run_dir)
    model, tokenizer = load_export(run_dir / "export")
    tokenizer.padding_side = "left"
    model.eval()
    return profile, model, tokenizer


def diagnose_failures(run_dir: Path) -> dict[str, Any]:
    """Replay the exported trained model on the held-out cases it failed; write and return
    `diagnose_failures.json`. Refuses when a replay does not fail as recorded (the export is not the model
    step 19 evaluated)."""
    from cells.evaluation.records import load_records_jsonl
    from cells.evaluation.runner import EvalCase, play_greedy
    from cells.step_08_rewards import rewards_of

    run_dir = Path(run_dir)
    profile, model, tokenizer = load_trained(run_dir, "records_final.jsonl")
    failed = [r for r in load_records_jsonl(run_dir / "records_final.jsonl") if not r.success]
    cases = tuple(EvalCase(r.seed, r.stage, r.language) for r in failed)
    rows = []
    for episode in play_greedy(model, tokenizer, cases, profile).episodes if cases else ():
        rewards = rewards_of(episode)
        if rewards.r_task >= 1:
            raise DiagnoseError(f"seed {episode.seed} (stage {episode.stage}) succeeds on replay but failed in "
                                "step 19: the export is not the model step 19 evaluated; rerun steps 19 and 24")
        rows.append(failure_row(episode, rewards))
    summary = failure_summary(rows)
    (run_dir / "diagnose_failures.json").write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n",
                                                     encoding="utf-8")
    return summary


def nearest_shown(episode: Any, turn: int, value: str) -> tuple[str | None, float]:
    """The string a tool result showed before `turn` most like `value`, and their `difflib` similarity (0-1)."""
    from difflib import SequenceMatcher

    from cells.rewards.text_match import scalars

    best, similarity = None, 0.0
    for shown in sorted({v for r in episode.results if r.turn < turn for v in scalars(r.response)}):
        ratio = SequenceMatcher(None, value, shown).ratio()
        if ratio > similarity:
            best, similarity = shown, ratio
    return best, round(similarity, 3)


def invented_id_reading(episode: Any, offence: dict[str, Any]) -> dict[str, Any]:
    """An `invented_id` offence read against what the episode showed: a miscopy of a shown string (similarity
    >= MISCOPY_SIMILARITY: a character dropped, doubled or changed) or an id unlike any shown."""
    value = str(offence.get("evidence", {}).get("value", ""))
    shown, similarity = nearest_shown(episode, int(offence.get("turn") or 0), value)
    reading = "miscopy" if similarity >= MISCOPY_SIMILARITY else "unlike any shown"
    return {"value": value, "tool": offence.get("evidence", {}).get("tool"), "turn": offence.get("turn"),
            "nearest_shown": shown, "similarity": similarity, "reading": reading}


def offence_row(episode: Any, rewards: Any) -> dict[str, Any] | None:
    """One played `Episode` with its offences spelt out (`episode_row`, why its task failed if it did and the
    booking's wrong slots, each offence's evidence, each distinct invented id read against what was shown
    before its first use); None when it committed none."""
    offences = rewards.breakdown.get("penalty", {}).get("offences", [])
    if not offences:
        return None
    task = rewards.breakdown.get("task", {})
    failure = task_failure(task) if rewards.r_task < 1 else None
    return {**episode_row(episode, rewards), "r_task": rewards.r_task, "failure": failure,
            "wrong_slots": wrong_slots(task), "reward": round(rewards.reward, 4),
            "evidence": [{"code": o.get("code"), "turn": o.get("turn"), **o.get("evidence", {})} for o in offences],
            "invented_ids": [invented_id_reading(episode, o) for o in _first_per_value(offences, "invented_id")]}


def _first_per_value(offences: list[dict[str, Any]], code: str) -> list[dict[str, Any]]:
    """The offences of `code`, the first one for each distinct evidence value (a model repeats a miscopy)."""
    first: dict[str, dict[str, Any]] = {}
    for offence in offences:
        if offence.get("code") == code:
            first.setdefault(str(offence.get("evidence", {}).get("value")), offence)
    return list(first.values())


def probe_offence_summary(rows: list[dict[str, Any] | None], episodes: int) -> dict[str, Any]:
    """Episodes with an offence out of `episodes` played, per class (an episode counts once per class), those
    whose task failed by why (`task_failure`: a wrong booking's wrong slot), every invented id, and the rows
    themselves (`offence_row`; None for a clean episode)."""
    kept = [r for r in rows if r is not None]
    by_code = Counter(code for r in kept for code in set(r["offences"]))
    by_failure = Counter(r["failure"] for r in kept if r.get("failure"))
    return {"episodes": episodes, "offending_episodes": len(kept), "by_code": dict(by_code.most_common()),
            "by_failure": dict(by_failure.most_common()),
            "invented_ids": [i for r in kept for i in r["invented_ids"]], "rows": kept}


def diagnose_probe(run_dir: Path) -> dict[str, Any]:
    """Replay the exported trained model on the probe's cases (step 20) and keep every episode with an offence:
    its row, each offence with its evidence, and each invented id next to the shown string most like it. Writes
    and returns `diagnose_probe.json`. Refuses when the replay's offences differ from `probe.json`'s (the export
    is not the model step 20 probed)."""
    from cells.evaluation.runner import play_greedy, probe_cases
    from cells.step_08_rewards import rewards_of
    from cells.step_20_probe import known_offence_codes, summarise

    run_dir = Path(run_dir)
    profile, model, tokenizer = load_trained(run_dir, "probe.json")
    probe = json.loads((run_dir / "probe.json").read_text(encoding="utf-8"))
    trained = probe.get("policies", {}).get("trained")
    if trained is None:
        raise DiagnoseError(f"{run_dir / 'probe.json'} has no trained-model row: step 20 ran without a model")
    n = int(probe["n_episodes"])
    played = [(ep, rewards_of(ep)) for ep in play_greedy(model, tokenizer, probe_cases(n, generated=True), profile).episodes]
    # step 20's own summary of the replay, so the check compares like with like
    replayed = summarise("trained", played, known_offence_codes())["offence_episode_share"]
    recorded = trained.get("offence_episode_share", {})
    if replayed != recorded:
        raise DiagnoseError(f"the replay's share of episodes per offence class {replayed} differs from probe.json's "
                            f"{recorded}: the export is not the model step 20 probed; rerun steps 20 and 24")
    summary = probe_offence_summary([offence_row(ep, rewards) for ep, rewards in played], n)
    (run_dir / "diagnose_probe.json").write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n",
                                                 encoding="utf-8")
    return summary


REFUSAL_CASES_FROM = 10_000  # probe-range index of the first `--refusals` case, clear of the probe's own cases


def refusal_cases(n: int) -> tuple[Any, ...]:
    """`n` drifted cases from the probe range (from `REFUSAL_CASES_FROM`), stages 2 and 3 in turn."""
    from cells.evaluation.runner import probe_cases

    return probe_cases(n, start=REFUSAL_CASES_FROM, stages=(2, 3))


def first_refusal(episode: Any) -> dict[str, Any] | None:
    """The episode's first booking or order call a vendor refused (a timeout is no refusal): its error code,
    whether the next call to that tool sent the same arguments again, and whether the episode booked."""
    from cells.rewards.text_match import actions_by_turn, next_call_to
    from cells.step_04_datatypes import GOAL_WRITE_TOOLS, ToolStatus, canonical_json

    writes = set(GOAL_WRITE_TOOLS.values())
    refusal = next((r for r in episode.results
                    if r.tool_name in writes and r.status not in (ToolStatus.OK, ToolStatus.TIMEOUT)), None)
    if refusal is None:
        return None
    refused = actions_by_turn(episode)[refusal.turn]
    after = next_call_to(episode, refusal.tool_name, refusal.turn)
    repeated = after is not None and canonical_json(after[1].tool_args) == canonical_json(refused.tool_args)
    return {"code": refusal.error_code, "repeated": repeated, "booked": bool(episode.bookings)}


def refusal_summary(episodes: Iterable[Any]) -> dict[str, Any]:
    """`first_refusal` over finished `Episode`s: episodes, refusals, repeats and bookings in all and per error code
    (most refused first)."""
    played, rows = 0, []
    for episode in episodes:
        played += 1
        if (row := first_refusal(episode)) is not None:
            rows.append(row)
    by_code: dict[str, dict[str, int]] = {}
    for code, _ in Counter(r["code"] for r in rows).most_common():
        mine = [r for r in rows if r["code"] == code]
        by_code[code] = {"refused": len(mine), "repeated": sum(r["repeated"] for r in mine),
                         "booked": sum(r["booked"] for r in mine)}
    return {"episodes": played, "refused": len(rows), "repeated": sum(r["repeated"] for r in rows),
            "booked": sum(r["booked"] for r in rows), "by_code": by_code}


def named_field_repair(episode: Any) -> dict[str, Any] | None:
    """The episode's first refusal naming a missing field (`MISSING_REQUIRED_FIELD`, top level or nested
    `list[].field`): the name; whether the next action failed to parse (`unparsable`, and whether its text holds
    the name all the same); whether the refused tool was called again, whether that call carries the name exactly
    (nested: in every element of the list), and the keys it added instead when it does not. None when no vendor
    named a missing field. Why: a wrong repair tells copying the name from acting on the error apart."""
    from cells.rewards.text_match import actions_by_turn, next_call_to
    from cells.vendors.error_codes import ErrorCode
    from cells.vendors.generic import ITEM_SEP

    refusal = next((r for r in episode.results
                    if r.response.get("error_code") == ErrorCode.MISSING_REQUIRED_FIELD.value), None)
    if refusal is None:
        return None
    named = str(refusal.response.get("field_name", ""))
    listed, nested, field = named.partition(ITEM_SEP)
    field = field if nested else named
    following = next((a for a in episode.actions if a.turn > refusal.turn), None)
    unparsable = following is not None and following.action is None
    row = {"field": named, "unparsable": unparsable,
           "unparsable_naming_it": unparsable and f'"{field}"' in (following.raw_text or ""),
           "resent": False, "copied": False, "instead": []}
    after = next_call_to(episode, refusal.tool_name, refusal.turn)
    if after is None:
        return row

    def keys(args: dict[str, Any]) -> list[set[str]]:  # the key sets the named field belongs in
        if not nested:
            return [set(args)]
        items = args.get(listed)
        return [set(e) if isinstance(e, dict) else set() for e in items] if isinstance(items, list) else []

    refused = actions_by_turn(episode).get(refusal.turn)
    resent = keys(after[1].tool_args)
    before = set().union(*keys(refused.tool_args)) if refused is not None else set()
    copied = bool(resent) and all(field in k for k in resent)
    return {**row, "resent": True, "copied": copied, "instead": [] if copied else sorted(set().union(*resent) - before)}


def named_field_summary(episodes: Iterable[Any]) -> dict[str, Any]:
    """`named_field_repair` over finished `Episode`s: refusals naming a field, those whose next action did not parse
    (and of those, how many wrote the name), those resent, those whose resent call carries the name exactly, and
    the keys most often written instead."""
    rows = [row for episode in episodes if (row := named_field_repair(episode)) is not None]
    instead = Counter(key for row in rows for key in row["instead"])
    return {"refused": len(rows), "unparsable": sum(r["unparsable"] for r in rows),
            "unparsable_naming_it": sum(r["unparsable_naming_it"] for r in rows),
            "resent": sum(r["resent"] for r in rows), "copied": sum(r["copied"] for r in rows),
            "written_instead": dict(instead.most_common(5))}


REFUSALS_FILES = {False: "diagnose_refusals.json", True: "diagnose_refusals_warm_start.json"}  # by `warm_start`


def diagnose_refusals(run_dir: Path, episodes: int = 300, warm_start: bool = False) -> dict[str, Any]:
    """Play the exported trained model (or with `warm_start` the run's saved warm start, to tell what GRPO changed
    from what it inherited) on `refusal_cases(episodes)`; write and return `REFUSALS_FILES[warm_start]`."""
    from cells.evaluation.runner import play_greedy

    if episodes < 1:
        raise DiagnoseError(f"--episodes must be >= 1, got {episodes}")
    run_dir = Path(run_dir)
    profile, model, tokenizer = model_to_play(run_dir, warm_start)
    summary = refusal_summary(play_greedy(model, tokenizer, refusal_cases(episodes), profile).episodes)
    summary["model"] = "warm start" if warm_start else "trained"
    (run_dir / REFUSALS_FILES[warm_start]).write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return summary


DEVELOPMENT_CASES_FROM = 20_000  # probe-range index of the first `--dev` case, after `--refusals`' cases
DEV_FILES = {False: "diagnose_dev.json", True: "diagnose_dev_warm_start.json"}  # by `warm_start`


def wrong_fact_counts(rows: Iterable[tuple[Any, Any]]) -> dict[str, int]:
    """Over failed `(episode, rewards)` pairs with one live booking: how often each binding fact was wrong, keyed
    `domain.fact` (most often first)."""
    counts: Counter[str] = Counter()
    for episode, rewards in rows:
        for fact in wrong_slots(rewards.breakdown.get("task", {})):
            counts[f"{episode.goal.domain}.{fact}"] += 1
    return dict(counts.most_common())


def development_summary(played: list[tuple[Any, Any]]) -> dict[str, Any]:
    """Success per stage over `(episode, rewards)` pairs, and their failures (`failure_summary`) with
    `wrong_fact_counts`."""
    stages = sorted({ep.stage for ep, _ in played})
    success = {str(s): round(sum(r.r_task >= 1 for ep, r in played if ep.stage == s)
                             / max(1, sum(ep.stage == s for ep, _ in played)), 4) for s in stages}
    failed = [(ep, r) for ep, r in played if r.r_task < 1]
    failures = failure_summary([failure_row(ep, r) for ep, r in failed])
    return {"played": len(played), "success": round(sum(r.r_task >= 1 for _, r in played) / max(1, len(played)), 4),
            "success_by_stage": success, "wrong_facts": wrong_fact_counts(failed), **failures}


def diagnose_development(run_dir: Path, episodes: int = 300, warm_start: bool = False) -> dict[str, Any]:
    """Play the trained model (or the run's warm start) on `episodes` development cases; write and return
    `DEV_FILES[warm_start]`."""
    from cells.evaluation.runner import play_greedy, probe_cases
    from cells.step_08_rewards import rewards_of

    if episodes < 1:
        raise DiagnoseError(f"--episodes must be >= 1, got {episodes}")
    run_dir = Path(run_dir)
    profile, model, tokenizer = model_to_play(run_dir, warm_start)
    cases = probe_cases(episodes, start=DEVELOPMENT_CASES_FROM)
    summary = development_summary([(ep, rewards_of(ep))
                                   for ep in play_greedy(model, tokenizer, cases, profile).episodes])
    summary["model"] = "warm start" if warm_start else "trained"
    (run_dir / DEV_FILES[warm_start]).write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n",
                                                 encoding="utf-8")
    return summary


# `--control` -> (the control's name in the run dir, the `python -m cells control` flags that train it)
CONTROLS = {"sft": ("sft_control", ""), "raft": ("raft_control", " --raft"),
            "raft-lora": ("raft_lora_control", " --raft --lora")}


def control_model_path(run_dir: Path, control: str) -> Path:
    """Where `python -m cells control` (`sft_control`), `control --raft` (`raft_control`) or `control --raft --lora`
    (`raft_lora_control`) saved its model."""
    return Path(run_dir) / "training" / control / "model"


def load_control_model(run_dir: Path, control: str) -> Any:
    """A control's model (full weights, from the run's warm start), ready for greedy play."""
    import torch
    from transformers import AutoModelForCausalLM

    path = control_model_path(run_dir, control)
    if not (path / "model.safetensors").is_file():
        flag = next((flags for name, flags in CONTROLS.values() if name == control), "")
        raise DiagnoseError(f"{path} is missing: run `python -m cells control{flag} --run-dir {run_dir}` first")
    return AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()


def model_to_play(run_dir: Path, warm_start: bool, control: str | None = None) -> tuple[Any, Any, Any]:
    """`(profile, model, tokenizer)`: the run's saved warm start, one of its controls (`CONTROLS`' values: they
    share the warm start's tokenizer), or its exported trained model."""
    from cells.training.warm_start import load_run_warm_start

    if not warm_start and control is None:
        return load_trained(run_dir, "profile.json")
    profile, model, tokenizer = load_run_warm_start(run_dir)
    if control is not None:
        model = load_control_model(run_dir, control)
    model.eval()
    return profile, model, tokenizer


REACH_CASES_FROM = 40_000  # probe-range index where `--reach` starts scanning, after `--dev`'s cases
REACH_FILES = {False: "diagnose_reach.json", True: "diagnose_reach_warm_start.json"}  # by `warm_start`


def diagnose_reach(run_dir: Path, split_name: str | None = None, episodes: int = 60, samples: int | None = None,
                   warm_start: bool = False, temperature: float | None = None,
                   pattern: str | None = None, control: str | None = None) -> dict[str, Any]:
    """`reachability` per pattern set of a drift split on development cases, and per pattern of each set; write
    and return `REACH_FILES[warm_start]` (`diagnose_reach_<control>.json` for a `control`, e.g. `raft_control`;
    with `_t<temperature>` before `.json` when a sampling temperature other than the profile's is tried,
    `_<pattern>` when only cases scheduling `pattern` are played)."""
    import dataclasses

    from cells.drift.families import is_generated
    from cells.evaluation.splits import (
        GENERATED_SETS,
        generated_plan,
        reach_by_pattern,
        reachability,
        split_cases,
    )
    from cells.step_02_profiles import PROBE_SEEDS
    from cells.step_06_drift import drift_split, pattern_by_id

    if episodes < 1:
        raise DiagnoseError(f"--episodes must be >= 1, got {episodes}")
    if pattern is not None:
        try:
            pattern_by_id(pattern)
        except KeyError as err:
            raise DiagnoseError(f"--pattern {pattern!r} is neither in the drift catalogue (cells/data/drifts.yaml) "
                                f"nor a generated instance (`python -m cells families`): {err}") from err
    run_dir = Path(run_dir)
    if warm_start and control is not None:
        raise DiagnoseError("play the warm start or a control, not both")
    profile, model, tokenizer = model_to_play(run_dir, warm_start, control)
    if temperature is not None:
        if temperature <= 0:
            raise DiagnoseError(f"--temperature must be > 0, got {temperature}")
        profile = dataclasses.replace(profile, temperature=temperature)
    name = split_name or profile.drift_split
    if not name:
        raise DiagnoseError(f"{run_dir} was trained without a drift_split: name one with --split (e.g. latin)")
    split = drift_split(name)
    g = samples or profile.num_generations
    cases = split_cases(split, episodes, PROBE_SEEDS, start=REACH_CASES_FROM, pattern=pattern)
    if pattern is None:  # a generated split's held-out instances too: what transfer has to start from
        cases |= generated_plan(split, episodes, PROBE_SEEDS, start=REACH_CASES_FROM)
    summary: dict[str, Any] = {"model": control or ("warm start" if warm_start else "trained"), "split": name,
                               "pattern": pattern}
    for which, planned in cases.items():
        summary[which] = reachability(model, tokenizer, planned, profile, g, greedy_counts=named_field_summary)
        # a generated set's hundreds of instances (or one instance): its rows would be one case each, or the set
        if which not in GENERATED_SETS and not (pattern and is_generated(pattern)):
            summary[which]["by_pattern"] = reach_by_pattern(split, which, planned, summary[which]["successes_per_case"],
                                                            g)
    out = REACH_FILES[warm_start] if control is None else f"diagnose_reach_{control}.json"
    if temperature is not None:
        out = out.replace(".json", f"_t{temperature:g}.json")
    if pattern is not None:  # a generated id's slashes would name folders
        out = out.replace(".json", f"_{pattern.replace('/', '-')}.json")
    (run_dir / out).write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return summary


FIELD_NAME_CASES_FROM = 5_000_000  # probe-range index where `--field-names` scans for airline goals, clear of the rest
FIELD_NAME_SCAN = 40  # probe cases scanned per airline goal wanted at most (about one goal in four is an airline's)
FIELD_NAME_LIST = ("airline.book", "passengers")  # the list argument whose every element must carry the name
FIELD_NAMES_FILES = {False: "diagnose_field_names.json", True: "diagnose_field_names_warm_start.json"}
FIELD_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")  # a field name the vendors could require


def field_name_cases(n: int) -> tuple[Any, ...]:
    """The first `n` stage-1 (undrifted) development cases from `FIELD_NAME_CASES_FROM` whose goal books a flight."""
    from cells.evaluation.runner import probe_cases
    from cells.step_07_tasks import generate

    found = [c for c in probe_cases(n * FIELD_NAME_SCAN, start=FIELD_NAME_CASES_FROM, stages=(1,))
             if generate(seed=c.seed, stage=1, language_weights={c.language: 1.0}).domain == "airline"]
    if len(found) < n:
        raise DiagnoseError(f"only {len(found)} airline goals in {n * FIELD_NAME_SCAN} development cases: ask fewer")
    return tuple(found[:n])


def field_name_copies(model: Any, tokenizer: Any, profile: Any, cases: Sequence[Any], name: str) -> dict[str, Any]:
    """Greedy play of `cases` with every `FIELD_NAME_LIST` element required to carry `name` (the env's drill
    control, no drift, no doc naming it): `named_field_summary` of the episodes, and their success."""
    from cells.agent.rollout import GenerationSpec, rollout_batch
    from cells.evaluation.runner import env_for_case
    from cells.step_08_rewards import rewards_of
    from cells.vendors.generic import ITEM_SEP

    tool, listed = FIELD_NAME_LIST
    episodes = rollout_batch([env_for_case(c, profile.turn_budgets) for c in cases], [c.seed for c in cases],
                             model=model, tokenizer=tokenizer, generation=GenerationSpec.for_profile(profile, greedy=True),
                             after_reset=lambda env: env.require_argument(tool, f"{listed}{ITEM_SEP}{name}",
                                                                          "list[str]")).episodes
    success = sum(rewards_of(ep).r_task >= 1 for ep in episodes) / max(1, len(episodes))
    return {**named_field_summary(episodes), "success": round(success, 4)}


def diagnose_field_names(run_dir: Path, names: Sequence[str], episodes: int = 16, warm_start: bool = False,
                         control: str | None = None) -> dict[str, Any]:
    """Whether the run's model copies a nested field name out of the vendor's error: per name in `names`,
    `field_name_copies` on the same `field_name_cases(episodes)`; write and return `FIELD_NAMES_FILES[warm_start]`
    (`diagnose_field_names_<control>.json` for a control). Names the warm start's drills used against new ones
    tell copying from a memorised name."""
    if episodes < 1:
        raise DiagnoseError(f"--episodes must be >= 1, got {episodes}")
    bad = [n for n in names if not FIELD_NAME.fullmatch(n)]
    if not names or bad:
        raise DiagnoseError(f"--field-names takes field names such as loyalty_ids (lower case, digits, _): got {bad}")
    run_dir = Path(run_dir)
    profile, model, tokenizer = model_to_play(run_dir, warm_start, control)
    cases = field_name_cases(episodes)
    summary: dict[str, Any] = {"model": control or ("warm start" if warm_start else "trained"), "cases": len(cases),
                               "list": ".".join(FIELD_NAME_LIST), "names": {}}
    for name in names:
        summary["names"][name] = field_name_copies(model, tokenizer, profile, cases, name)
    out = FIELD_NAMES_FILES[warm_start] if control is None else f"diagnose_field_names_{control}.json"
    (run_dir / out).write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    return summary


SIGNAL_FILE = "diagnose_signal.md"


def diagnose_signal(run_dir: Path, docs: bool = False) -> str:
    """`training.signal.signal_markdown` of the run, into `SIGNAL_FILE` (and with `docs`, its block of
    docs/results.md, `signal:<run dir name>`); returns the markdown."""
    from cells.evaluation import docblocks
    from cells.training.signal import signal_markdown

    text = signal_markdown(run_dir)
    (run_dir / SIGNAL_FILE).write_text(text, encoding="utf-8")
    if docs:
        name = f"signal:{run_dir.name}"
        command = f"python -m cells diagnose --signal --run-dir {run_dir}"
        block = docblocks.render(name, "python -m cells diagnose --signal --docs", text, run_command=command)
        print(f"wrote {docblocks.write_block(Path('docs/results.md'), name, block)}")
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cells diagnose", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", default="runs/cpu-learn")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--failures", action="store_true",
                       help="replay the trained model's failed held-out episodes instead (diagnose_failures.json)")
    which.add_argument("--probe", action="store_true",
                       help="replay the trained model's probe episodes with an offence instead (diagnose_probe.json)")
    which.add_argument("--refusals", action="store_true",
                       help="what the trained model does after a refused booking call, on drifted probe-range cases "
                            "(diagnose_refusals.json)")
    which.add_argument("--dev", action="store_true",
                       help="success and failures (by wrong binding fact) on development cases of the probe range, "
                            "where training data is tuned (diagnose_dev.json)")
    which.add_argument("--signal", action="store_true",
                       help="where GRPO's gradient and seconds went, per stage, and per drift pattern the successes "
                            "its groups sampled and their advantage (diagnose_signal.md; with --docs also into "
                            "docs/results.md)")
    which.add_argument("--field-names", nargs="+", metavar="NAME", default=None,
                       help="whether the model copies each nested field NAME out of the vendor's error: development "
                            "airline bookings whose passengers must each carry it (diagnose_field_names.json)")
    which.add_argument("--reach", action="store_true",
                       help="greedy success, sampled success and pass@G per pattern set of a drift split, on "
                            "development cases (diagnose_reach.json)")
    parser.add_argument("--episodes", type=int, default=None,
                        help="cases --refusals or --dev plays (default 300), or --reach per pattern set (default 60)")
    parser.add_argument("--warm-start", action="store_true",
                        help="with --refusals, --dev or --reach: play the run's warm start instead of the trained "
                             "model (diagnose_refusals_warm_start.json, diagnose_dev_warm_start.json, ...)")
    parser.add_argument("--control", choices=sorted(CONTROLS), default=None,
                        help="with --reach or --field-names: play the run's SFT-only or RAFT control (raft-lora: "
                             "RAFT on GRPO's LoRA) instead of the trained model (diagnose_reach_sft_control.json, "
                             "diagnose_reach_raft_control.json, ...)")
    parser.add_argument("--split", default=None, help="with --reach: the drift split (default: the run's)")
    parser.add_argument("--samples", type=int, default=None,
                        help="with --reach: G, samples per case (default: the run's num_generations)")
    parser.add_argument("--temperature", type=float, default=None,
                        help="with --reach: the sampling temperature to try (default: the run's GRPO temperature)")
    parser.add_argument("--docs", action="store_true", help="with --signal: also write its block into "
                                                                "docs/results.md (`signal:<run>`)")
    parser.add_argument("--pattern", default=None,
                        help="with --reach: only development cases whose schedule holds this drift pattern id; "
                             "a generated instance id (gen/...): cases whose goal admits it, played with only it")
    args = parser.parse_args(argv)
    if args.warm_start and not (args.refusals or args.dev or args.reach or args.field_names):
        parser.error("--warm-start goes with --refusals, --dev, --reach or --field-names (the default diagnosis "
                     "already plays the warm start)")
    if (args.split or args.samples or args.temperature or args.pattern) and not args.reach:
        parser.error("--split, --samples, --temperature and --pattern go with --reach")
    if args.control and not (args.reach or args.field_names):
        parser.error("--control goes with --reach or --field-names")
    if args.control and args.warm_start:
        parser.error("--control and --warm-start each name the model to play: give one")
    if args.docs and not args.signal:
        parser.error("--docs goes with --signal")
    if args.signal:
        print(diagnose_signal(Path(args.run_dir), args.docs))
    elif args.reach:
        reach = diagnose_reach(Path(args.run_dir), args.split, args.episodes or 60, args.samples, args.warm_start,
                               args.temperature, args.pattern, CONTROLS[args.control][0] if args.control else None)
        print(json.dumps({k: ({m: n for m, n in v.items() if m != "successes_per_case"} if isinstance(v, dict) else v)
                          for k, v in reach.items()}, indent=1))
    elif args.field_names:
        print(json.dumps(diagnose_field_names(Path(args.run_dir), args.field_names, args.episodes or 16,
                                              args.warm_start, CONTROLS[args.control][0] if args.control else None),
                         indent=1))
    elif args.dev:
        summary = diagnose_development(Path(args.run_dir), args.episodes or 300, args.warm_start)
        print(json.dumps({k: v for k, v in summary.items() if k != "episodes"}, indent=1, ensure_ascii=False))
    elif args.refusals:
        print(json.dumps(diagnose_refusals(Path(args.run_dir), args.episodes or 300, args.warm_start), indent=1))
    elif args.probe:
        summary = diagnose_probe(Path(args.run_dir))
        print(json.dumps({k: v for k, v in summary.items() if k != "rows"}, indent=1, ensure_ascii=False))
    elif args.failures:
        summary = diagnose_failures(Path(args.run_dir))
        print(json.dumps({k: v for k, v in summary.items() if k != "episodes"}, indent=1, ensure_ascii=False))
    else:
        print(json.dumps(diagnose_run(Path(args.run_dir)), indent=1))
    return 0
