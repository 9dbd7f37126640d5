"""Markdown rendering of evaluation reports. Every number printed here is read from a report dict
and formatted by `num`/`est`, so the summary test can check each against the JSON. A table holds the columns a
reader compares (at most `MAX_COLUMNS`); detail goes to a second table, or stays in the JSON beside the report."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

DIGITS = 3
P_DIGITS = 4
MAX_COLUMNS = 8  # the widest table a person compares across; step 22's test holds every table to it
NONE = "—"
REFERENCE_ORDER: tuple[str, ...] = ("random", "naive", "expert")
COMPONENT_ORDER: tuple[str, ...] = ("reward", "r_task", "r_drift", "r_constraints", "r_format", "r_penalty",
                                   "confidence")
ROLES: tuple[tuple[str, str], ...] = (("reference", "reference"), ("untrained", "untrained"), ("baseline", "baseline"),
                                      ("final", "trained"))


def num(x: Any, digits: int = DIGITS) -> str:
    """Format a number: ints as ints, floats with `digits` decimals, None as a dash."""
    if x is None:
        return NONE
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x).replace("|", "\\|")


def est(e: Mapping[str, Any] | None, digits: int = DIGITS) -> str:
    """`value [low, high]` for an Estimate dict."""
    if not e or e.get("value") is None:
        return NONE
    return f"{num(e['value'], digits)} [{num(e.get('low'), digits)}, {num(e.get('high'), digits)}]"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured markdown table (empty string when there are no rows)."""
    if not rows:
        return ""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def policy_rows(reports: Mapping[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(policy, role, policy_report): reference rows (random, naive, expert first), then untrained (CPU full
    warm starts), baseline, final."""
    out: list[tuple[str, str, dict[str, Any]]] = []
    for key, role in ROLES:
        pols = (reports.get(key) or {}).get("policies") or {}
        order = sorted(pols, key=lambda n: (REFERENCE_ORDER.index(n) if n in REFERENCE_ORDER else 99, n))
        out += [(name, role, pols[name]) for name in order]
    return out


def common_k(rows: Sequence[tuple[str, str, dict[str, Any]]]) -> int | None:
    """The largest k for which every policy has a pass^k value."""
    ks = [max((int(k) for k in p.get("pass_k", {})), default=0) for _, _, p in rows]
    return min(ks) if ks and min(ks) > 0 else None


def headline(rows: Sequence[tuple[str, str, dict[str, Any]]]) -> str:
    """Per player: episodes, success, mean reward, drift gap, pass^k at the largest k every player has (every k:
    `pass_k_table`) and the parse-failure rate; calibration has its own table (`calibration_table`)."""
    k = common_k(rows)
    header = ["policy", "role", "episodes", "success [95% CI]", "mean reward [95% CI]", "drift gap [95% CI]",
              *([f"pass^{k}"] if k and k > 1 else []), "parse-failure rate"]
    body = []
    for name, role, p in rows:
        pk = p.get("pass_k", {})
        body.append([
            name, role, num(p.get("n_episodes")), est(p.get("success")), est(p.get("components", {}).get("reward")),
            est(p.get("drift_gap", {}).get("gap")), *([num(pk.get(str(k)))] if k and k > 1 else []),
            num(p.get("parse_failures", {}).get("rate")),
        ])
    return table(header, body)


def calibration_table(rows: Sequence[tuple[str, str, dict[str, Any]]]) -> str:
    """Per player: Brier score and expected calibration error of the submitted confidence."""
    return table(["policy", "Brier", "ECE"], [[n, num(p.get("calibration", {}).get("brier")),
                                              num(p.get("calibration", {}).get("ece"))] for n, _, p in rows])


def pass_k_table(rows: Sequence[tuple[str, str, dict[str, Any]]]) -> str:
    kmax = max((int(k) for _, _, p in rows for k in p.get("pass_k", {})), default=0)
    header = ["policy", *[f"pass^{k}" for k in range(1, kmax + 1)]]
    return table(header, [[n, *[num(p.get("pass_k", {}).get(str(k))) for k in range(1, kmax + 1)]]
                          for n, _, p in rows])


def components_table(rows: Sequence[tuple[str, str, dict[str, Any]]]) -> str:
    comps = sorted({c for _, _, p in rows for c in p.get("components", {})},
                   key=lambda c: (COMPONENT_ORDER.index(c) if c in COMPONENT_ORDER else 99, c))
    return table(["policy", *comps], [[n, *[est(p.get("components", {}).get(c)) for c in comps]]
                                      for n, _, p in rows])


def group_table(rows: Sequence[tuple[str, str, dict[str, Any]]], key: str, metric: str = "success") -> str:
    """Rows = groups (languages, drift kinds, ...), columns = policies; cells `value [CI] (n)`."""
    groups = sorted({g for _, _, p in rows for g in p.get(key, {})})
    body = []
    for g in groups:
        cells = []
        for _, _, p in rows:
            cell = p.get(key, {}).get(g)
            cells.append(f"{est(cell.get(metric))} (n={num(cell.get('n'))})" if cell else NONE)
        body.append([g, *cells])
    return table([key.removeprefix("by_").replace("_", " "), *[n for n, _, _ in rows]], body)


def latency_table(rows: Sequence[tuple[str, str, dict[str, Any]]]) -> str:
    header = ["policy", "drifts fired", "handled", "handled rate", "mean latency (turns)", "median latency (turns)"]
    body = []
    for n, _, p in rows:
        lat = p.get("drift_latency", {})
        body.append([n, num(lat.get("n_fired")), num(lat.get("n_handled")), num(lat.get("handled_rate")),
                     num(lat.get("mean_turns")), num(lat.get("median_turns"))])
    return table(header, body)


PAIRED_GROUPS: tuple[tuple[str, str], ...] = (("by_stage", "stage"), ("by_drift", "scheduled drift"),
                                             ("by_drift_kind", "scheduled drift kind"), ("by_language", "language"))


def paired_section(paired: Mapping[str, Any], title: str = "final − baseline") -> str:
    """Overall paired table, then one table per grouping (stage, language, scheduled drift kind)."""
    header = ["metric", "pairs", "baseline mean", "final mean", "final − baseline [95% CI]", "p-value"]
    body = [[m, num(d.get("n_pairs")), num(d.get("baseline_mean")), num(d.get("final_mean")), est(d.get("diff")),
             num(d.get("p_value"), P_DIGITS)] for m, d in (paired.get("metrics") or {}).items()]
    text = (f"Final policy `{paired.get('final_policy')}` against baseline `{paired.get('baseline_policy')}` "
            f"on identical (seed, stage, language, trial) keys; test: {paired.get('test', NONE)}.\n\n")
    text += table(header, body)
    for key, label in PAIRED_GROUPS:
        groups = paired.get(key) or {}
        if not groups:
            continue
        rows = [[g, num((d.get("success") or {}).get("n_pairs")),
                 *[est((d.get(m) or {}).get("diff")) for m in ("success", "reward")],
                 *[num((d.get(m) or {}).get("p_value"), P_DIGITS) for m in ("success", "reward")]]
                for g, d in groups.items()]
        header = [label, "pairs", "Δ success [95% CI]", "Δ reward [95% CI]", "p (success)", "p (reward)"]
        text += f"\n#### Paired difference by {label}: {title}\n\n" + table(header, rows)
    return text


# The probe's main table: what a reader compares across players (step 20 writes these keys per player).
PROBE_COLUMNS: tuple[tuple[str, str], ...] = (("episodes", "episodes"), ("mean reward", "mean_reward"),
                                              ("success", "success_rate"), ("booked", "booked_share"),
                                              ("harmed share", "harmed_share"), ("verdict", "verdict"))


def _probe_players(probe: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    pols = probe.get("policies") if isinstance(probe.get("policies"), Mapping) else {
        k: v for k, v in probe.items() if isinstance(v, Mapping)}
    return {name: v for name, v in pols.items() if isinstance(v, Mapping)}


def _offences_cell(player: Mapping[str, Any]) -> str:
    """`code share (count)` per offence, most frequent first: the share of episodes with it, and how often it
    happened (a player that only counts them shows the counts)."""
    counts = player.get("offence_counts") or player.get("offences") or {}
    shares = player.get("offence_episode_share") or {}
    ordered = sorted(counts, key=lambda code: (-counts[code], code))
    return ", ".join(f"{code} {num(shares[code])} ({num(counts[code])})" if code in shares
                     else f"{code} ({num(counts[code])})" for code in ordered)


def probe_section(probe: Mapping[str, Any]) -> str:
    """The probe a person reads: per player its episodes, mean reward, success, booked and harmed shares and the
    verdict; then which offences each player committed, in a second table; the probe's own findings as bullets.
    Example episodes and their evidence stay in `probe.json`."""
    players = _probe_players(probe)
    text = table(["policy", *(label for label, _ in PROBE_COLUMNS)],
                 [[name, *(num(p.get(key)) for _, key in PROBE_COLUMNS)] for name, p in players.items()])
    offences = [[name, cell] for name, p in players.items() if (cell := _offences_cell(p))]
    if offences:
        text += ("\nOffences: the share of a player's episodes with each, and (in brackets) how many times it "
                 "happened; example episodes and their evidence: `probe.json`.\n\n"
                 + table(["policy", "offences: share of episodes (count)"], offences))
    extras = {k: v for k, v in probe.items() if k != "policies" and k not in players}
    for k, v in extras.items():
        shown = ", ".join(num(x) for x in v) if isinstance(v, (list, tuple)) else num(v)
        text += f"\n- **{k}**: {shown or NONE}"
    return text + ("\n" if extras else "")


def voice_section(voice: Mapping[str, Any]) -> str:
    """Step 18's voice-boundary evaluation: the scripted players with and without speech in the loop."""
    if "skipped" in voice:
        return f"_Not run here: {voice['skipped']}._\n"
    rows = [[name, num(r["success_text"]), num(r["success_voice"]), num(r["reward_text"]), num(r["reward_voice"])]
            for name, r in voice["policies"].items()]
    out = (f"The same {voice['episodes_per_policy']} held-out episodes per player, as text and with every user line "
           "spoken by espeak-ng and transcribed by Whisper base (step 9).\n\n"
           + table(["player", "success (text)", "success (voice)", "reward (text)", "reward (voice)"], rows))
    cer = [[lang, num(value)] for lang, value in voice.get("cer_by_language", {}).items()]
    return out + "\nCharacter error rate of the opening requests heard:\n\n" + table(["language", "CER"], cer)

