"""`python -m cells bench voice`: the voice boundary's round trip on held-out goal utterances, per language.

    python -m cells bench voice [--per-language 8 --stage 2]
    python -m cells bench voice --run-dir runs/cpu-learn [--per-cell 1]   # + a run's trained model, both ways

Each utterance is a held-out goal's opening request (the first `--per-language` evaluation seeds of the
stage, one language at a time), spoken by espeak-ng and transcribed by Whisper base (step 9). Printed per
language: the character error rate (edits per reference character, punctuation and spaces dropped), and
for each kind of slot the share of its spoken mentions (the city, date, time and count forms the
utterance renders from the goal's slots) found verbatim in the transcript; then seconds of audio and of
transcription per utterance. Offline; ~1 min on 2 CPU cores.

With `--run-dir`: step 18's voice evaluation (`evaluate_voice`) for the run's exported, trained model
(`<run dir>/export`, step 24) and the scripted players: the same held-out cases (`--per-cell` per stage and
language) greedy, as text and through the boundary; written to `<run dir>/eval_voice.json` and printed.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# render_values key -> the kind of slot it speaks (tests check every key `render_values` can produce has one)
SLOT_KINDS: dict[str, str] = {
    "from_city": "city", "to_city": "city", "city": "city", "city_in": "city", "city_to": "city",
    "pickup": "place", "drop": "place", "date": "date", "checkin": "date", "checkout": "date", "time": "time",
    "n": "count", "tickets": "count", "party": "count", "rooms": "count", "nights": "count",
    "vehicle": "option", "diet": "option", "room": "option",
}
KINDS = ("city", "place", "date", "time", "count")  # the canonical slots the table reports


@dataclass(frozen=True)
class RoundTrip:
    language: str
    text: str
    transcript: str
    cer: float
    mentions: tuple[tuple[str, bool], ...]  # (slot kind, survived) per spoken slot found in the utterance
    audio_seconds: float
    asr_seconds: float


def slot_mentions(goal: Any, text: str, transcript: str) -> tuple[tuple[str, bool], ...]:
    """(kind, survived) for each spoken slot value of `goal` that `text` contains."""
    from cells.step_09_audio import normalise_speech
    from cells.tasks.generator import render_values

    said, heard = normalise_speech(text), normalise_speech(transcript)
    out = []
    for key, spoken in render_values(goal.domain, goal.slots, goal.language).items():
        form = normalise_speech(spoken)
        if form and form in said and SLOT_KINDS.get(key) in KINDS:
            out.append((SLOT_KINDS[key], form in heard))
    return tuple(out)


def round_trips(per_language: int, stage: int = 2) -> list[RoundTrip]:
    """Held-out goal utterances of every language through `default_boundary()`."""
    from cells.step_02_profiles import EVAL_SEEDS, LANGUAGES
    from cells.step_07_tasks import generate
    from cells.step_09_audio import character_error_rate, default_boundary

    boundary = default_boundary()
    out = []
    for language in LANGUAGES:
        for i in range(per_language):
            goal = generate(EVAL_SEEDS.seed(i), stage, {language: 1.0})
            trace = boundary.hear(goal.seed_utterance, language)
            out.append(RoundTrip(language, goal.seed_utterance, trace.transcript,
                                 character_error_rate(goal.seed_utterance, trace.transcript),
                                 slot_mentions(goal, goal.seed_utterance, trace.transcript),
                                 trace.audio_seconds, trace.asr_seconds))
            print(f"  {language:<8} CER {out[-1].cer:.2f}  {trace.transcript[:70]}", flush=True)
    return out


def table(rows: list[RoundTrip]) -> list[str]:
    """The markdown table: CER and slot survival per language."""
    by_lang: dict[str, list[RoundTrip]] = defaultdict(list)
    for row in rows:
        by_lang[row.language].append(row)
    head = ["language", "utterances", "CER", *(f"{k} kept" for k in KINDS), "audio s", "ASR s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for language, group in by_lang.items():
        cells = [language, str(len(group)), f"{sum(r.cer for r in group) / len(group):.2f}"]
        for kind in KINDS:
            hits = [ok for r in group for k, ok in r.mentions if k == kind]
            cells.append(f"{sum(hits)}/{len(hits)}" if hits else "-")
        cells += [f"{sum(r.audio_seconds for r in group) / len(group):.1f}",
                  f"{sum(r.asr_seconds for r in group) / len(group):.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def evaluate_run(run_dir: Path, per_cell: int) -> int:
    """`evaluate_voice` with the run's exported model; writes `eval_voice.json` there and prints the section."""
    import types

    from cells.evaluation.markdown import voice_section
    from cells.evaluation.report import save_report_json
    from cells.step_02_profiles import load_run_profile
    from cells.step_18_eval_baseline import evaluate_voice
    from cells.step_24_export import load_export

    profile = load_run_profile(run_dir)
    model, tokenizer = load_export(run_dir / "export")
    tokenizer.padding_side = "left"
    t0 = time.perf_counter()
    voice = evaluate_voice(types.SimpleNamespace(profile=profile), per_cell, model, tokenizer)
    path = save_report_json(voice, run_dir / "eval_voice.json")
    print(voice_section(voice))
    print(f"({time.perf_counter() - t0:.0f} s; written to {path})")
    return 0


def main(argv: list[str]) -> int:
    from cells.step_09_audio import voice_support

    parser = argparse.ArgumentParser(prog="python -m cells bench voice", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-language", type=int, default=8, help="held-out goal utterances per language")
    parser.add_argument("--stage", type=int, choices=(1, 2, 3), default=2)
    parser.add_argument("--run-dir", default=None, help="also evaluate this run's exported model with and without voice")
    parser.add_argument("--per-cell", type=int, default=1, help="--run-dir: held-out cases per stage and language")
    args = parser.parse_args(argv)
    problems = {k: v for k, v in voice_support().items() if v}
    if problems:
        for name, problem in problems.items():
            print(f"{name}: {problem}")
        return 1
    t0 = time.perf_counter()
    if args.run_dir is not None:
        return evaluate_run(Path(args.run_dir), args.per_cell)
    rows = round_trips(args.per_language, args.stage)
    print(f"\nespeak-ng -> Whisper base (int8, CPU), stage {args.stage} held-out goal utterances "
          f"({time.perf_counter() - t0:.0f} s):")
    print("\n".join(table(rows)))
    return 0
