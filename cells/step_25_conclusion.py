"""Step 25 - conclusion: the run in one table, at the end of the notebook.

One row per player evaluated on the same frozen held-out seeds (the scripted references, the model
before GRPO with its adapter off (step 18), the warm-started model where step 15 evaluated it, the
trained model): held-out success with its 95% CI and mean reward; then the paired trained − before
differences with CIs
and p-values, the probe's verdict, and where the report and the export are. Every number is read
from the reports the earlier steps wrote (nothing is recomputed here).

Reads `ctx.reports` ("reference", "baseline", "final", "paired", "probe", "export"; each optional),
`ctx.trainer_state["warm_start_eval"]` (optional), `ctx.artifacts`. Writes `ctx.reports["conclusion"]`
(the table as markdown) and shows it (rendered under IPython, printed otherwise).
Run alone (after the evaluation steps of the same run): `python -m cells run --profile cpu-smoke --steps 25`.
Time: instant.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from cells.context import Context


def _num(value: Any, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _ci(est: dict[str, Any] | None) -> str:
    if not est:
        return "n/a"
    return f"{_num(est.get('value'))} [{_num(est.get('low'))}, {_num(est.get('high'))}]"


def player_rows(reports: dict[str, Any], warm_start: Any = None) -> list[tuple[str, str, str, str]]:
    """(player, episodes, success [CI], mean reward [CI]) for every evaluated player, in reading order."""
    rows = []
    for source in ("reference", "baseline"):
        for name, block in reports.get(source, {}).get("policies", {}).items():
            label = "model before GRPO (adapter off)" if source == "baseline" else f"{name} (scripted)"
            rows.append((label, str(block["n_episodes"]), _ci(block["success"]),
                         _ci(block["components"].get("reward"))))
    if warm_start is not None:
        rows.append(("warm-started model", str(warm_start.episodes), _num(warm_start.success_rate),
                     _num(warm_start.mean_reward)))
    for name, block in reports.get("final", {}).get("policies", {}).items():
        rows.append((f"{name} model", str(block["n_episodes"]), _ci(block["success"]),
                     _ci(block["components"].get("reward"))))
    return rows


def conclusion_markdown(ctx: Context) -> str:
    """The whole conclusion as markdown."""
    reports = ctx.reports
    lines = ["### DriftCall run: conclusion", "",
             f"Profile `{ctx.profile.name}`; every row played the same frozen held-out seeds.", "",
             "| player | episodes | success [95% CI] | mean reward [95% CI] |", "|---|---|---|---|"]
    lines += [f"| {p} | {n} | {s} | {r} |" for p, n, s, r in player_rows(reports, ctx.trainer_state.get("warm_start_eval"))]
    paired = reports.get("paired", {})
    if paired:
        lines += ["", f"Paired trained − before-GRPO over {paired['n_pairs']} episodes ({paired.get('test', '')}):", "",
                  "| metric | difference [95% CI] | p-value |", "|---|---|---|"]
        lines += [f"| {m} | {_ci(v.get('diff'))} | {_num(v.get('p_value'))} |" for m, v in paired["metrics"].items()]
    probe = reports.get("probe")
    if probe:
        failing = [n for n, row in probe["policies"].items() if row.get("verdict") == "FAIL"]
        lines += ["", f"Reward-hacking probe: {'every exploit PASSES' if not failing else 'FAIL: ' + ', '.join(failing)} "
                      f"(honest policy mean reward {_num(probe.get('honest_mean_reward'))})."]
    where = {k: ctx.artifacts[k] for k in ("report_md", "export") if k in ctx.artifacts}
    if where:
        lines += ["", "Files: " + "; ".join(f"{k} `{v}`" for k, v in where.items())]
    return "\n".join(lines) + "\n"


def run(ctx: Context) -> Context:
    """Build the table, keep it in `ctx.reports["conclusion"]`, and show it."""
    text = conclusion_markdown(ctx)
    ctx.reports["conclusion"] = text
    n_rows = len(player_rows(ctx.reports, ctx.trainer_state.get("warm_start_eval")))
    print(f"[conclusion] {n_rows} players compared on the same held-out seeds")
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display
    except ImportError:  # pragma: no cover - IPython ships with ipykernel in requirements
        get_ipython = None  # type: ignore[assignment]
    if get_ipython is not None and get_ipython() is not None:
        display(Markdown(text))
    else:
        print(text)
    return ctx
