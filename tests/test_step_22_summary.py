"""Step 22: report.md is written, and every number in it equals the JSON reports at the shown precision."""

from __future__ import annotations

import re

import pytest

from cells import step_22_summary as summary
from cells.context import Context
from cells.evaluation.synthetic import synthetic_reports
from cells.step_01_setup import RuntimeInfo
from cells.step_02_profiles import get_profile

NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


@pytest.fixture(scope="module")
def reports():
    return synthetic_reports(resamples=100, seed=3)


@pytest.fixture()
def ctx(tmp_path, reports):
    runtime = RuntimeInfo(on_colab=False, device="cpu", gpu_name=None, gpu_memory_gb=None, bf16_supported=False,
                          python="3.11.7", versions=(("torch", "2.13.0+cpu"), ("trl", "1.16.0")), git_sha="abc123")
    c = Context(profile=get_profile("cpu-smoke"), run_dir=tmp_path, runtime=runtime, reports=reports)
    c.artifacts["plot/reliability"] = tmp_path / "plots" / "reliability.png"
    return summary.run(c)


def _tables(text: str) -> dict[str, list[list[str]]]:
    """heading -> body rows (header and separator dropped) of the table under each ### / #### heading."""
    out: dict[str, list[list[str]]] = {}
    for block in re.split(r"\n#{3,4} ", text)[1:]:
        heading, _, rest = block.partition("\n")
        rows = [line.strip("|").split(" | ") for line in rest.splitlines() if line.startswith("| ")]
        out[heading.strip()] = [[c.strip() for c in r] for r in rows[1:]]
    return out


def _numbers(cell: str) -> list[tuple[float, int]]:
    """Every number in a cell with its count of decimals."""
    return [(float(m), len(m.split(".")[1]) if "." in m else 0) for m in NUMBER.findall(cell)]


def _numbers_one(cell: str) -> tuple[float, int]:
    (found,) = _numbers(cell)
    return found


def _close(shown: float, decimals: int, value: float | None) -> bool:
    return value is not None and abs(shown - value) <= 0.5 * 10 ** -decimals + 1e-9


def _leaves(obj) -> list[float]:
    if isinstance(obj, dict):
        return [x for v in obj.values() for x in _leaves(v)]
    if isinstance(obj, list):
        return [x for v in obj for x in _leaves(v)]
    return [float(obj)] if isinstance(obj, (int, float)) and not isinstance(obj, bool) else []


def test_run_writes_report_and_artifact(ctx):
    path = ctx.artifacts["report_md"]
    text = path.read_text(encoding="utf-8")
    assert path == ctx.run_dir / "report.md"
    for heading in ("## Configuration", "## Versions", "### Headline", "### Success by language",
                    "### Success by drift kind", "### Paired difference: final − baseline",
                    "### Reward-hacking probe", "![reliability](plots/reliability.png)",
                    f"| pass_k | `{ctx.profile.pass_k}` |", "| trl | `1.16.0` |"):
        assert heading in text, heading
    # reading order: headline results first, configuration and versions last
    assert text.index("### Headline") < text.index("## Plots") < text.index("## Configuration") < text.index("## Versions")


def test_headline_numbers_equal_json(ctx, reports):
    rows = _tables(ctx.artifacts["report_md"].read_text(encoding="utf-8"))["Headline"]
    by_name = {r[0]: r for r in rows}
    expected = [("reference", n) for n in ("random", "naive", "expert")]
    expected += [("baseline", "model-baseline"), ("final", "model-trained")]
    assert [r[0] for r in rows] == [n for _, n in expected]
    for key, name in expected:
        pol = reports[key]["policies"][name]
        row = by_name[name]
        want = [pol["n_episodes"], *(pol["success"][k] for k in ("value", "low", "high")),
                *(pol["components"]["reward"][k] for k in ("value", "low", "high")),
                *(pol["drift_gap"]["gap"][k] for k in ("value", "low", "high")),
                pol["pass_k"]["2"], pol["parse_failures"]["rate"]]
        shown = [n for cell in row[2:] for n in _numbers(cell)]
        assert len(shown) == len(want), (name, row)
        for (value, decimals), target in zip(shown, want, strict=True):
            assert _close(value, decimals, target), (name, value, target)
        calibration = {r[0]: r for r in _tables(ctx.artifacts["report_md"].read_text(encoding="utf-8"))[
            "Calibration of the submitted confidence"]}[name]
        assert [n for n, _ in map(_numbers_one, calibration[1:])] == [
            pytest.approx(pol["calibration"][k], abs=5e-4) for k in ("brier", "ece")]


def test_paired_numbers_equal_json(ctx, reports):
    rows = _tables(ctx.artifacts["report_md"].read_text(encoding="utf-8"))["Paired difference: final − baseline"]
    metrics = reports["paired"]["metrics"]
    assert [r[0] for r in rows] == list(metrics)
    for row in rows:
        m = metrics[row[0]]
        want = [m["n_pairs"], m["baseline_mean"], m["final_mean"], m["diff"]["value"], m["diff"]["low"],
                m["diff"]["high"], m["p_value"]]
        shown = [n for cell in row[1:] for n in _numbers(cell)]
        assert all(_close(v, d, t) for (v, d), t in zip(shown, want, strict=True)), row


def test_every_result_number_comes_from_the_json(ctx, reports):
    text = ctx.artifacts["report_md"].read_text(encoding="utf-8")
    results = text.split("## Results", 1)[1].split("## Plots", 1)[0]
    leaves = _leaves(reports)
    checked = 0
    for heading, rows in _tables("\n" + results).items():
        for row in rows:
            for cell in row[1:]:  # the first column is a label (policy, language, pattern id)
                for value, decimals in _numbers(cell):
                    assert any(_close(value, decimals, leaf) for leaf in leaves), (heading, row[0], cell)
                    checked += 1
    assert checked > 500


def test_the_probe_is_a_table_a_person_reads_with_offences_apart(ctx, reports):
    text = ctx.artifacts["report_md"].read_text(encoding="utf-8")
    players = reports["probe"]["policies"]
    section = text.split("### Reward-hacking probe", 1)[1].split("\n## ", 1)[0]
    main, offences = [[r.strip("|").split(" | ") for r in block.splitlines() if r.startswith("| ")]
                      for block in section.split("Offences:", 1)]
    assert [c.strip() for c in main[0]] == ["policy", "episodes", "mean reward", "success", "booked", "harmed share",
                                            "verdict"]
    rows = {r[0].strip(): [c.strip() for c in r] for r in main[1:]}
    assert set(rows) == set(players)
    assert rows["book_twice"] == ["book_twice", "10", "-0.178", "0.000", "1.000", "0.300", "PASS"]
    assert rows["honest_failure"][-1] == "—"  # the reference has no verdict
    committed = {r[0].strip(): r[1].strip() for r in offences[1:]}
    assert committed == {"spam_probe": "schema_probing 1.000 (40)",
                         "book_twice": "double_booking 1.000 (10), wrong_booking 0.300 (3)"}
    assert "- **all_exploits_pass**: yes" in section


def test_no_table_in_the_report_is_wider_than_a_reader_compares(tmp_path, reports):
    """Step 20's probe has one entry per offence code, with examples and evidence per offence: the old report
    flattened them into a table of 86 columns. Every table (results, probe, configuration) stays narrow."""
    from cells.evaluation.markdown import MAX_COLUMNS

    codes = ["cancel_rebook", "double_booking", "fabricated_fact", "invented_field", "invented_id", "off_goal_write",
             "repeated_call", "schema_probing", "unfounded_drift_claim", "wrong_booking"]
    wide = {**reports["probe"]["policies"]["book_twice"], "policy": "everything",
            "offence_counts": dict.fromkeys(codes, 2), "offence_episode_share": dict.fromkeys(codes, 0.2),
            "offence_rates": dict.fromkeys(codes, 0.2), "max_reward_harmed": -0.5, "below_honest": True,
            "examples": {c: {"episode_id": "EP-1", "turn": 3, "evidence": {"tool": "cab.book", "arg": "x"}}
                         for c in codes}}
    probe = {**reports["probe"], "policies": {**reports["probe"]["policies"], "everything": wide}}
    text = summary.build_summary_markdown({**reports, "probe": probe}, profile=get_profile("cpu-smoke"),
                                          run_dir=tmp_path)
    widths = {line.count(" | ") + 1 for line in text.splitlines() if line.startswith("| ")}
    assert widths and max(widths) <= MAX_COLUMNS, sorted(widths)
    assert "| everything | 10 |" in text and "cancel_rebook 0.200 (2)" in text


def test_a_probe_of_another_shape_is_still_rendered(tmp_path):
    probe = {"exploit_a": {"mean_reward": 0.0123, "offences": {"unseen_id": 3}, "verdict": "fail"},
             "threshold": 0.1, "unknown_offence_codes": ["weird_code"]}
    text = summary.build_summary_markdown({"probe": probe}, run_dir=tmp_path)
    assert "| exploit_a | — | 0.012 | — | — | — | fail |" in text and "| exploit_a | unseen_id (3) |" in text
    assert "- **threshold**: 0.100" in text and "- **unknown_offence_codes**: weird_code" in text
    assert "No evaluation reports" in text and "No plots" in text
