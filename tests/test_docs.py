"""The README stays a newcomer's five minutes, and the product carries no lab notes.

- README.md is at most 300 lines.
- `cells/`, the notebook (and its builder) and README.md hold no commit id, no "issue N" and no path outside
  the repository; run history with commit ids lives in `docs/experiments/`.
- Every relative link in README.md and in `docs/*.md` resolves, anchors included, and every
  `docs/design.md#...` reference in the code names a section that exists.
- The README's results-at-a-glance block is what `python -m cells results` writes from `docs/results.md`, and its
  split glance what `python -m cells splits --pool --docs` writes from one of `docs/results/splits_pooled_*.json`.
- The README's Python example runs as written, and every `README "Section"` a file points to is a README heading.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MAX_README_LINES = 300

# A commit id: 7-40 hex characters with at least one digit and one letter, as a whole word (so `deadbeef`-like
# English words and plain numbers do not count). Digests the code builds at run time are never literals.
COMMIT = re.compile(r"(?<![\w.-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![\w-])")
ISSUE = re.compile(r"\bissues? #?\d+", re.IGNORECASE)
OUTSIDE = re.compile(r"(?<![\w.])\.\./|/work/|/home/|/tmp/[\w-]+/")
# Literals that look like commit ids but are examples of ids the code makes (a booking id's shape).
ALLOWED = {"3f9a1c0e"}


def product_files() -> list[Path]:
    files = [README, ROOT / "notebooks" / "driftcall.ipynb", ROOT / "notebooks" / "build_notebook.py"]
    files += sorted(p for p in (ROOT / "cells").rglob("*") if p.suffix in {".py", ".yaml", ".md", ".txt"})
    return [p for p in files if p.is_file()]


def offences(text: str) -> list[str]:
    """Commit ids, issue numbers and paths outside the repository found in `text`."""
    found = [m.group(0) for m in COMMIT.finditer(text) if m.group(0) not in ALLOWED]
    found += [m.group(0) for m in ISSUE.finditer(text)]
    found += [m.group(0) for m in OUTSIDE.finditer(text)]
    return found


def test_the_readme_fits_in_300_lines():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; move detail into docs/ (at most {MAX_README_LINES})"


@pytest.mark.parametrize("path", product_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_commit_ids_issue_numbers_or_outside_paths(path):
    found = offences(path.read_text(encoding="utf-8"))
    assert not found, (f"{path.relative_to(ROOT)} holds {sorted(set(found))}: run history goes to a dated file in "
                       "docs/experiments/, references to the design to docs/design.md#<section>")


def test_the_checker_sees_what_it_must_and_nothing_else():
    assert offences("measured at `8d3b4cc` (issue 10) in ../shared/spec/DESIGN.md") == [
        "8d3b4cc", "issue 10", "../"]
    assert offences("decade 1234567 deadbeef BK-3f9a1c0e tok_payments.v2_c4f9 0.45 2026-12-04") == []


def _anchor(heading: str) -> str:
    """GitHub's anchor for a markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    return {_anchor(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.MULTILINE)}


def _links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.DOTALL)
    return [m.group(1) for m in re.finditer(r"\]\(([^)\s]+)\)", text)
            if not re.match(r"[a-z]+:", m.group(1))]


def _resolves(source: Path, link: str) -> str | None:
    """None when `link` (relative to `source`) names a file in the repository and, with `#`, one of its headings."""
    target, _, anchor = link.partition("#")
    path = (source.parent / target).resolve() if target else source
    if ROOT not in path.parents and path != ROOT:
        return f"{link}: outside the repository"
    if not path.exists():
        return f"{link}: no such file"
    if anchor and path.suffix == ".md" and anchor not in _anchors(path):
        return f"{link}: no heading #{anchor} in {path.relative_to(ROOT)}"
    return None


@pytest.mark.parametrize("path", [README, *sorted((ROOT / "docs").rglob("*.md"))], ids=lambda p: p.name)
def test_every_docs_link_resolves(path):
    broken = [why for link in _links(path) if (why := _resolves(path, link))]
    assert not broken, f"{path.relative_to(ROOT)}: {broken}"


def test_every_design_reference_in_the_code_names_a_section():
    sections = _anchors(ROOT / "docs" / "design.md")
    refs = {(p, m.group(1)) for p in product_files() if p != README
            for m in re.finditer(r"docs/design\.md#([\w-]+)", p.read_text(encoding="utf-8"))}
    missing = sorted(f"{p.relative_to(ROOT)}: #{a}" for p, a in refs if a not in sections)
    assert not missing, missing
    bare = [str(p.relative_to(ROOT)) for p in product_files() if "DESIGN §" in p.read_text(encoding="utf-8")]
    assert not bare, f"'DESIGN §N' has no target in the repository; link docs/design.md#<section> instead: {bare}"


def test_the_readme_glance_is_what_the_results_command_writes():
    from cells.commands.results import GLANCE, glance_block
    from cells.evaluation import docblocks

    readme = README.read_text(encoding="utf-8")
    written = docblocks.block_body(readme, GLANCE)
    assert written is not None, "README.md lost its results-at-a-glance markers"
    expected = docblocks.block_body(glance_block((ROOT / "docs" / "results.md").read_text(encoding="utf-8")), GLANCE)
    strip_date = re.compile(r" on \d{4}-\d{2}-\d{2} \(UTC\)")
    assert strip_date.sub("", written) == strip_date.sub("", expected), (
        "the README's glance block is stale: run `python -m cells results` (or `make results`)")
    assert len(docblocks.markers(GLANCE, "x")) == 2 and written.count("\n") + 2 <= 15


def test_the_readme_split_glance_is_what_the_pooled_splits_command_writes():
    import json

    from cells.evaluation import docblocks
    from cells.experiments.drift_split import GLANCE, glance_block, published_pools

    written = docblocks.block_body(README.read_text(encoding="utf-8"), GLANCE)
    assert written is not None, f"README.md lost its {GLANCE} markers"
    strip_date = re.compile(r" on \d{4}-\d{2}-\d{2} \(UTC\)")
    # the glance shows the pool published last, whichever split's
    expected = [strip_date.sub("", docblocks.block_body(glance_block(json.loads(p.read_text(encoding="utf-8"))), GLANCE))
                for p in published_pools(ROOT / "docs" / "results")]
    assert expected, "no published pool under docs/results/"
    assert strip_date.sub("", written) in expected, (
        "the README's split glance is stale: run `python -m cells splits --pool ... --docs`")
    assert written.count("\n") + 2 <= 15


def test_a_bench_with_docs_writes_its_printed_summary_into_its_block(tmp_path, capsys, monkeypatch):
    from cells import bench

    monkeypatch.setattr(bench, "_run", lambda argv, **_: print("all stages: 123 env steps/s") or 0)
    docs = tmp_path / "benchmarks.md"
    docs.write_text("# Benchmarks\n\nkept\n")
    assert bench._split_docs(["env", "--docs", str(docs), "--episodes", "5"]) == (["env", "--episodes", "5"], str(docs))
    assert bench._split_docs(["env", "--docs"]) == (["env"], bench.DOCS)
    assert bench.main(["env", "--episodes", "5", "--docs", str(docs)]) == 0
    text = docs.read_text()
    assert text.startswith("# Benchmarks\n\nkept\n") and "all stages: 123 env steps/s" in text
    assert re.search(r"_Written by `python -m cells bench env --episodes 5` at commit \S+.* on \d{4}-\d{2}-\d{2}", text)
    monkeypatch.setattr(bench, "_run", lambda argv, **_: print("all stages: 456 env steps/s") or 0)
    bench.main(["env", "--docs", str(docs)])
    assert "456" in docs.read_text() and "123" not in docs.read_text()  # the block is replaced, not appended


def test_a_bench_that_misses_a_target_still_writes_its_block_with_the_failure(tmp_path, capsys, monkeypatch):
    """A stale block would go on showing an older commit's PASS; the exit code still says it failed."""
    from cells import bench

    docs = tmp_path / "benchmarks.md"
    docs.write_text("# Benchmarks\n")
    monkeypatch.setattr(bench, "_run", lambda argv, **_: print("  PASS  old") or 0)
    bench.main(["server", "--docs", str(docs)])
    monkeypatch.setattr(bench, "_run", lambda argv, **_: print("  FAIL  driftcall+workers: steps/s") or 1)
    assert bench.main(["server", "--docs", str(docs)]) == 1
    assert "FAIL  driftcall+workers" in docs.read_text() and "PASS  old" not in docs.read_text()
    assert "exit code 1: its block shows what failed" in capsys.readouterr().out


def test_a_missing_block_is_named_with_the_markers_to_add():
    from cells.evaluation import docblocks

    with pytest.raises(docblocks.MissingBlockError, match="bench:env:begin"):
        docblocks.replace_block("# nothing\n", "bench:env", "x")


def _assert_archived(path, kind, result, dirs):
    """A published split result is named for its split and read runs whose records the repository keeps."""
    assert path.name == f"splits_{kind}_{result['split']}.json"
    dirs = [*dirs, *([result["oracle"]["dir"]] if result.get("oracle") else [])]
    missing = [d for d in dirs if not (ROOT / d).is_dir()]
    assert not missing, (f"{path} was computed from run directories the repository lacks ({missing}): rerun its "
                         "`python -m cells splits ... --docs`, which keeps their records in docs/results/splits/")


def test_the_pooled_split_results_recompute_from_the_records_kept_in_the_repository(tmp_path):
    import json

    from cells.experiments.drift_split import pool_splits, published_pools

    pools = published_pools(ROOT / "docs" / "results")
    assert pools, "no published pool under docs/results/"
    for path in pools:
        pooled = json.loads(path.read_text(encoding="utf-8"))
        _assert_archived(path, "pooled", pooled, [r["dir"] for r in pooled["runs"]])
        again_path = tmp_path / path.name
        pool_splits([ROOT / r["dir"] for r in pooled["runs"]],
                    ROOT / pooled["oracle"]["dir"] if pooled.get("oracle") else None, out=again_path)
        again = json.loads(again_path.read_text(encoding="utf-8"))
        assert again["sets"] == pooled["sets"] and again["targets"] == pooled["targets"]


def test_the_generalisation_curves_recompute_from_the_records_kept_in_the_repository(tmp_path):
    import json

    from cells.experiments.drift_split import curve_splits, published

    curves = published("curve", ROOT / "docs" / "results")
    assert curves, "no published generalisation curve under docs/results/"
    for path in curves:
        drawn = json.loads(path.read_text(encoding="utf-8"))
        dirs = [r["dir"] for p in drawn["points"] for r in p["runs"]]
        _assert_archived(path, "curve", drawn, dirs)
        oracle = drawn["oracle"]["dir"] if drawn.get("oracle") else None
        again = curve_splits([ROOT / d for d in dirs], ROOT / oracle if oracle else None, out=tmp_path / path.name)
        assert [(p["instances"], p["sets"]) for p in again["points"]] == [
            (p["instances"], p["sets"]) for p in drawn["points"]]
        assert (again["oracle"] or {}).get("sets") == (drawn["oracle"] or {}).get("sets")


def test_the_readmes_python_example_runs_as_written(capsys):
    """The ten-line `DriftCallEnv` example under "The environment on one screen": reset, step, reward."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## The environment on one screen", 1)[1].split("\n## ", 1)[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(code.strip().splitlines()) <= 12
    namespace: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), namespace)  # the README's own example
    obs, rewards = namespace["obs"], namespace["rewards"]
    assert obs.done and obs.reward == 0.0 and rewards.r_task == 0.0  # an honest failure earns 0, as it says
    printed = capsys.readouterr().out.splitlines()
    assert printed[1].startswith("['") and "payment.get_token" in printed[1]
    assert printed[2].startswith("ok {'payment_token': 'tok_payments.basic_")


README_SECTION = re.compile(r"README(?:'s)? \"([A-Z][^\"\n]*)\"")


def test_every_readme_section_a_file_names_exists():
    """Files say `see README "Versions"`; the section must be there (it once lived only in docs/contributing.md)."""
    headings = {m.group(1).strip() for m in re.finditer(r"^#{2,3} (.+)$", README.read_text(encoding="utf-8"),
                                                          flags=re.MULTILINE)}
    files = [*ROOT.glob("requirements*.txt"), ROOT / "Makefile", *product_files(), *sorted((ROOT / "docs").glob("*.md"))]
    named = {(p.name, m.group(1)) for p in files if p.is_file() for m in README_SECTION.finditer(p.read_text("utf-8"))}
    assert named, "the check found no reference to check: the pattern is stale"
    missing = sorted(f"{name}: README \"{section}\"" for name, section in named if section not in headings)
    assert not missing, f"no such README section: {missing}"
