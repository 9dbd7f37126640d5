"""The pooled split evaluation (`cells.evaluation.split_pool.pool`) as markdown and one plot.

- `plot_pooled(pooled, path, words)`: success per pattern set (x) for every model and the oracle, grouped bars
  with 95% whiskers, pooled over seeds (matplotlib on an Agg canvas; no pyplot state).
- `pooled_markdown(pooled, words, image)`: the tables of the docs block `splits:pooled:<split>`: success pooled,
  paired differences pooled and per seed, calibration on the withheld sets, success per drift kind and per
  language, what each model's training cost and bought per seed, and the experiment's targets. Every number comes
  from `pooled`.
- `compute_markdown(rows, words, run)`: the table of what each model's training bought (also a single run's).
`words` names models in prose (`cells.experiments.drift_split.MODEL_WORDS`); a model it lacks keeps its key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cells.evaluation.split_pool import GRPO_GAIN, ORACLE_MODEL
from cells.evaluation.splits import GENERATED_SETS


def _pct(estimate: Mapping[str, Any] | None, signed: bool = False) -> str:
    if estimate is None or estimate.get("value") is None:
        return "n/a"
    sign = "+" if signed else ""
    value, low, high = (100 * estimate[k] for k in ("value", "low", "high"))
    return f"{value:{sign}.1f}% [{low:{sign}.1f}, {high:{sign}.1f}]"


def _paired_diff(block: Mapping[str, Any], pair: str, run: str | None = None) -> Mapping[str, Any] | None:
    """The paired difference `pair` of one pattern set's pooled block: pooled over seeds, or at training run `run`;
    None where the pair was not measured."""
    entry = block["paired"].get(pair, {})
    return (entry.get("pooled", {}) if run is None else entry.get("per_run", {}).get(run, {})).get("diff")


def _pair_words(pair: str, words: Mapping[str, str]) -> str:
    final, _, base = pair.partition(" - ")
    final = "GRPO" if final == "trained" else words.get(final, final)
    return f"{final} − {words.get(base, base)}"


def _bars(pooled: dict[str, Any], words: Mapping[str, str]) -> list[tuple[str, list[Mapping[str, Any] | None]]]:
    """(label, pooled success per set) for each model, then the oracle's model."""
    sets = pooled["sets"]
    out: list[tuple[str, list[Mapping[str, Any] | None]]] = [
        (words.get(m, m), [b["success"].get(m, {}).get("pooled") for b in sets.values()]) for m in pooled["models"]]
    if pooled.get("oracle"):
        out.append((f"oracle ({pooled['oracle']['run']}, {words.get(ORACLE_MODEL, ORACLE_MODEL)})",
                    [b.get("oracle", {}).get(ORACLE_MODEL) for b in sets.values()]))
    return out


def plot_pooled(pooled: dict[str, Any], path: Path, words: Mapping[str, str]) -> Path:
    """Grouped bars of success per pattern set with 95% whiskers; written as PNG at `path`."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    sets, bars = list(pooled["sets"]), _bars(pooled, words)
    fig = Figure(figsize=(8, 4.2))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    width, x = 0.8 / len(bars), np.arange(len(sets))
    for i, (label, ests) in enumerate(bars):
        value = np.array([100 * e["value"] if e and e.get("value") is not None else np.nan for e in ests])
        low = np.array([100 * e["low"] if e and e.get("low") is not None else np.nan for e in ests])
        high = np.array([100 * e["high"] if e and e.get("high") is not None else np.nan for e in ests])
        ax.bar(x + (i - (len(bars) - 1) / 2) * width, value, width, label=label,
               yerr=np.vstack([value - low, high - value]), capsize=3)
    ax.set_xticks(x, sets)
    ax.set(ylim=(0, 105), ylabel="success (%)", xlabel="pattern set of the episode's drifts",
           title=f"Drift split `{pooled['split']}`: held-out success, pooled over {len(pooled['runs'])} seed(s), 95% CI")
    # below the axes: bars near 100% on one set and near 0% on another leave no free corner inside
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=min(3, len(bars)), frameon=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


def _group_rows(pooled: dict[str, Any], key: str, models: list[str], oracle_key: str | None = None
                ) -> list[list[str]]:
    """Rows `set · group`, episodes, success per model (with its own count where a model played fewer seeds), and
    with `oracle_key` the oracle's success per group (its own episodes, one seed) where the blocks hold it."""
    rows = []
    for which, block in pooled["sets"].items():
        for g in sorted({g for m in models for g in block.get(key, {}).get(m, {})}):
            cells = [block[key].get(m, {}).get(g) for m in models]
            n = next((c["n"] for c in cells if c), 0)
            row = [f"{which} · {g}", str(n)] + ["n/a" if c is None else f"{100 * c['rate']:.0f}%"
                                                + ("" if c["n"] == n else f" of {c['n']}") for c in cells]
            if oracle_key:
                c = block.get(oracle_key, {}).get(g)
                row.append("n/a" if c is None else f"{100 * c['rate']:.0f}% of {c['n']}")
            rows.append(row)
    return rows


def _intro(pooled: dict[str, Any], words: Mapping[str, str], image: str | None) -> list[str]:
    runs = ", ".join(r["run"] + (f" (seed {r['seed']})" if r.get("seed") is not None else "") for r in pooled["runs"])
    lines = [f"Drift split `{pooled['split']}`, {pooled['per_set']} held-out drifted episodes per pattern set and "
             f"model in each of {len(pooled['runs'])} training seed(s): {runs}; greedy. Success intervals: Wilson "
             "95% over the pooled episodes; paired differences: percentile bootstrap "
             f"({pooled['bootstrap']['resamples']} resamples) of the pairs within each seed.", ""]
    oracle = pooled.get("oracle")
    if oracle:
        how = "the same cases, so paired with GRPO per seed" if oracle["paired"] else "other cases: unpaired"
        lines += [f"Oracle: `{oracle['run']}` (every pattern demonstrated), its "
                  f"{words.get(ORACLE_MODEL, ORACLE_MODEL)} model; {how}. {_oracle_recipe(oracle)}", ""]
    return lines + ([f"![success per pattern set, pooled over seeds]({image})", ""] if image else [])


def _oracle_recipe(oracle: Mapping[str, Any]) -> str:
    """Whether "oracle − GRPO" measures the split alone: the knobs the oracle's recipe changes beyond it."""
    differences = oracle.get("recipe_differences")
    if differences is None:
        return ("Its recipe is not recorded (evaluated before `splits` recorded recipes), so whether it differs "
                "from the seeds' beyond the split is not checked.")
    if not differences:
        return "Its recipe is the seeds' but for the split."
    return ("Its recipe also differs from the seeds' in " + ", ".join(
        f"`{k}` ({a!r} in the seeds', {b!r})" for k, (a, b) in differences.items())
        + ": oracle − GRPO mixes the split with these.")


def _success_cells(pooled: dict[str, Any], block: Mapping[str, Any]) -> list[str]:
    """One pattern set's pooled success per model, then the oracle's when the pool has one."""
    return ([_pct(block["success"][m]["pooled"]) for m in pooled["models"]]
            + ([_pct(block.get("oracle", {}).get(ORACLE_MODEL))] if pooled.get("oracle") else []))


def _success_lines(pooled: dict[str, Any], words: Mapping[str, str]) -> list[str]:
    models, sets, oracle = pooled["models"], pooled["sets"], pooled.get("oracle")
    head = ["pattern set"] + [words.get(m, m) for m in models] + ([f"oracle ({oracle['run']})"] if oracle else [])
    rows = [[w, *_success_cells(pooled, b)] for w, b in sets.items()]
    return ["Success, pooled over seeds:", "", *_table(head, rows), ""]


def _paired_lines(pooled: dict[str, Any], words: Mapping[str, str]) -> list[str]:
    sets = pooled["sets"]
    pairs = list(dict.fromkeys(p for b in sets.values() for p in b["paired"]))
    oracle_pairs = list(dict.fromkeys(p for b in sets.values() for p in b.get("oracle_paired", {})))
    names = [_pair_words(p, words) for p in pairs]
    rows = [[w] + [_pct(_paired_diff(b, p), signed=True) for p in pairs]
            + [_pct(b.get("oracle_paired", {}).get(p, {}).get("diff"), signed=True) for p in oracle_pairs]
            for w, b in sets.items()]
    per_seed = [[w, r["run"]] + [_pct(_paired_diff(b, p, r["run"]), True) for p in pairs]
                for w, b in sets.items() for r in pooled["runs"]]
    return ["Paired differences in success, pooled over seeds (bootstrap 95% interval):", "",
            *_table(["pattern set", *names] + ["oracle − GRPO"] * len(oracle_pairs), rows), "",
            "Paired differences per seed:", "", *_table(["pattern set", "run", *names], per_seed), ""]


def _calibration_lines(pooled: dict[str, Any], words: Mapping[str, str]) -> list[str]:
    models, sets, cal = pooled["models"], pooled["sets"], pooled["calibration_withheld"]
    rows = [[words.get(m, m), _f(cal["pooled"][m]["ece"]), _f(cal["pooled"][m]["brier"]),
             ", ".join(_f(v.get(m, {}).get("ece")) for v in cal["per_run"].values()),
             " / ".join(_f(sets[w].get("calibration", {}).get(m, {}).get("ece")) for w in sets),
             " / ".join(_f(sets[w]["turns"][m]["turns_per_success"], 1) for w in sets)] for m in models]
    rows += [[f"oracle {words.get(m, m)}", _f(c["ece"]), _f(c["brier"]), "", "", ""]
             for m, c in (cal.get("oracle") or {}).items()]
    return [f"Calibration of the submitted confidence on {' + '.join(cal['sets'])} episodes (10 bins); ECE pooled "
            f"over seeds on each set, and turns per success ({' / '.join(sets)}):", "",
            *_table(["model", "ECE pooled", "Brier pooled", "ECE per seed", "ECE per set", "turns per success"],
                    rows), ""]


def _count(value: int | None) -> str:
    return "—" if value is None else f"{value:,}"


def compute_markdown(rows: Sequence[Mapping[str, Any]], words: Mapping[str, str],
                     run: str | None = None) -> list[str]:
    """A markdown table of what each model's training cost and bought (`experiments.compute.MethodCompute`
    rows as dicts), prefixed by a `run` column when given."""
    head = (["run"] if run is not None else []) + ["model", "seconds", "episodes played", "sequences trained",
                                                   "tokens trained"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = ([run] if run is not None else []) + [
            words.get(r["model"], r["model"]), f"{r['seconds']:,.0f} ({r['measure']})", _count(r["episodes"]),
            _count(r["examples"]), _count(r["tokens_trained"])]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _compute_lines(pooled: dict[str, Any], words: Mapping[str, str]) -> list[str]:
    """Per seed, what each model's training cost and bought (runs evaluated before `splits` recorded it: none)."""
    tables = [compute_markdown(r["compute"], words, run=r["run"]) for r in pooled["runs"] if r.get("compute")]
    if not tables:
        return []
    rows = [line for i, table in enumerate(tables) for line in (table if i == 0 else table[2:])]
    return ["What each model's training after the warm start cost and bought, per seed (equal compute: the "
            "controls get GRPO's seconds):", "", *rows, ""]


def pooled_markdown(pooled: dict[str, Any], words: Mapping[str, str], image: str | None = None) -> str:
    """The body of the docs block `splits:pooled:<split>`; `image` is the plot's path relative to the docs file."""
    names = [words.get(m, m) for m in pooled["models"]]
    lines = _intro(pooled, words, image) + _success_lines(pooled, words) + _paired_lines(pooled, words)
    lines += _calibration_lines(pooled, words) + _compute_lines(pooled, words)
    oracle = any("oracle_by_pattern" in block for block in pooled["sets"].values())
    for key, what in (("by_kind", "drift kind (an episode counts once per fired kind)"), ("by_language", "language"),
                      ("by_pattern", "withheld pattern (an episode counts once per fired pattern of its set)")):
        extra = "oracle_by_pattern" if key == "by_pattern" and oracle else None
        rows = _group_rows(pooled, key, pooled["models"], extra)
        if rows:
            head = ["set · group", "episodes", *names] + (["oracle after GRPO"] if extra else [])
            lines += [f"Success per {what}, pooled over seeds:", "", *_table(head, rows), ""]
    rows = [[t["target"], t["measured"], t["status"] + (f" ({t['note']})" if t["note"] else "")]
            for t in pooled["targets"]]
    return "\n".join([*lines, "Targets of the experiment (points):", "", *_table(["target", "measured", "status"], rows)])


def _f(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def pooled_block(split: str) -> str:
    """The name of the docs block of `split`'s pool (one per split)."""
    return f"splits:pooled:{split}"


def glance_markdown(pooled: dict[str, Any], words: Mapping[str, str]) -> str:
    """The body of the README's block `splits:glance`: pooled success per pattern set for every model and the
    oracle, GRPO's paired gain over the warm start, and how many of the experiment's targets pass."""
    models, sets, oracle = pooled["models"], pooled["sets"], pooled.get("oracle")
    head = ["pattern set"] + [words.get(m, m) for m in models] + (["oracle"] if oracle else [])
    head.append("GRPO − warm start (paired, 95% CI)")
    table_sets = {w: b for w, b in sets.items() if w not in GENERATED_SETS}  # those get one line below
    rows = [[w, *_success_cells(pooled, b),
             _pct(_paired_diff(b, GRPO_GAIN), signed=True)]
            for w, b in table_sets.items()]
    passed = sum(t["status"] == "PASS" for t in pooled["targets"])
    seeds = len(pooled["runs"])
    preset = f"`{pooled['profile']}`, " if pooled.get("profile") else ""
    intro = (f"What GRPO adds where demonstrations stop ({preset}drift split `{pooled['split']}`): "
             f"{pooled['per_set']} held-out drifted episodes per pattern set and model, pooled over {seeds} training "
             f"seed{'s' if seeds != 1 else ''}, greedy.")
    generated = [f"{w} {_pct(b['success']['trained']['pooled'])}" for w, b in sets.items()
                 if w not in table_sets and "trained" in b["success"]]
    held_out = [f"Generated hold-outs after GRPO: {'; '.join(generated)}."] if generated else []
    return "\n".join([intro, "", *_table(head, rows), "", _per_seed_gain_sentence(pooled, "reinforced"), *held_out,
                      _verdict_sentence(pooled, "reinforced", words) + " "  # one line: the glance stays short
                      f"{passed} of {len(pooled['targets'])} of the experiment's targets pass. Per seed, per pattern, "
                      f"calibration, the controls: block `{pooled_block(pooled['split'])}` of "
                      "[docs/results.md](docs/results.md)."])


def _verdict_sentence(pooled: dict[str, Any], which: str, words: Mapping[str, str]) -> str:
    """What the pooled paired differences on one pattern set say, in words: GRPO beats a model where the 95%
    interval of GRPO − that model lies above 0, the model beats GRPO where it lies below, else neither."""
    block = pooled["sets"].get(which) or {}
    beats, beaten, even = [], [], []
    for pair in block.get("paired", {}):
        diff = _paired_diff(block, pair)
        if not pair.startswith("trained - ") or diff is None or diff.get("value") is None:
            continue
        name = words.get(pair.partition(" - ")[2], pair.partition(" - ")[2])
        (beats if diff["low"] > 0 else beaten if diff["high"] < 0 else even).append(name)
    parts = ([f"GRPO beats the {' and the '.join(beats)}"] if beats else []) + \
            ([f"the {' and the '.join(beaten)} {'beat' if len(beaten) > 1 else 'beats'} GRPO"] if beaten else []) + \
            ([f"GRPO and the {' and the '.join(even)} are within noise"] if even else [])
    return f"On {which} episodes, pooled: {'; '.join(parts)} (paired 95% intervals)." if parts else ""


def _per_seed_gain_sentence(pooled: dict[str, Any], which: str) -> str:
    """GRPO − warm start on one pattern set at each training seed, with its interval: a pooled gain can hide a seed
    where GRPO adds nothing, and the glance is all many readers see."""
    block = pooled["sets"].get(which)
    parts = [f"seed {r['seed'] if r.get('seed') is not None else r['run']} "
             f"{_pct(_paired_diff(block, GRPO_GAIN, r['run']), signed=True)}"
             for r in pooled["runs"] if block and _paired_diff(block, GRPO_GAIN, r["run"])]
    return f"GRPO − warm start on {which} episodes per training seed: {'; '.join(parts)}." if parts else ""
