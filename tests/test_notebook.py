import os
import re
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "notebooks"))

import build_notebook  # noqa: E402
from finished_run import check_finished_smoke_run  # noqa: E402

from cells.pipeline import STEPS  # noqa: E402


def test_committed_notebook_is_current_and_deterministic():
    first, second = build_notebook.build(), build_notebook.build()
    assert first == second
    assert build_notebook.NOTEBOOK.read_text(encoding="utf-8") == first, "run python notebooks/build_notebook.py"


def test_notebook_has_one_cell_per_step_and_banner():
    nb = nbformat.reads(build_notebook.build(), as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    assert "do not edit" in nb.cells[0].source.lower()
    for info in STEPS:
        assert any(f"step(ctx, {info.number})" in src for src in code)


# Every step cell's summary line (what its `run` prints); 15 also reports stage 1.
SUMMARY = {
    1: "[setup]", 2: "[profiles]", 3: "[data]", 4: "[models]", 5: "[vendors]", 6: "[drift]", 7: "[tasks]",
    8: "[rewards]", 9: "[voice]", 10: "[env]", 11: "[agent]", 12: "[model]", 13: "[grpo-config]", 14: "[trainer]",
    15: "[warm start]", 16: "[stage 2]", 17: "[stage 3]", 18: "[eval]", 19: "[eval] trained", 20: "[probe]",
    21: "[plots]", 22: "[summary]", 23: "[demo]", 24: "[export]", 25: "[conclusion]",
}
PROGRESS = re.compile(r"(GRPO stage \d)?\s*<progress value='(\d+)' max='(\d+)'")


def execute_notebook(run_dir):
    """The committed notebook run top to bottom in a real Jupyter kernel on cpu-smoke, as a user runs it."""
    from nbclient import NotebookClient

    nb = nbformat.read(build_notebook.NOTEBOOK, as_version=4)
    env = {"DRIFTCALL_PROFILE": "cpu-smoke", "DRIFTCALL_RUN_DIR": str(run_dir), "DRIFTCALL_STEPS": "",
           "DRIFTCALL_FRESH": "", "PYTHONHASHSEED": "0"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the kernel inherits this process's environment
    try:
        NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    return nb, run_dir


def _step_cells(nb):
    """{step number: its code cell} (cells read `ctx = step(ctx, N)  # module`)."""
    found = {}
    for cell in nb.cells:
        match = re.match(r"ctx = step\(ctx, (\d+)\)", cell.source) if cell.cell_type == "code" else None
        if match:
            found[int(match.group(1))] = cell
    return found


def _stdout(cell):
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("name") == "stdout")


def _bars(cell):
    """(prefix, value, max) of every HTML progress bar the cell shows (final state after updates)."""
    html = [o["data"]["text/html"] for o in cell.get("outputs", []) if "text/html" in o.get("data", {})]
    return [(m.group(1) or "", int(m.group(2)), int(m.group(3))) for h in html for m in PROGRESS.finditer(h)]


@pytest.mark.slow
@pytest.mark.xdist_group("pipelines")  # never beside the two-process runs: see test_step_14_multiprocess.py
def test_whole_notebook_executes_on_cpu_smoke(tmp_path):
    """Every cell, one kernel (about half a minute on 2 cores): no errors, every step's summary line, a progress
    bar per training phase, the plots as images and the report rendered, and a finished run directory
    (`finished_run.py`: the suite's one single-process run of the whole pipeline through the real TRL trainers).
    One test, so that pytest-xdist never runs the notebook twice."""
    nb, run_dir = execute_notebook(tmp_path)
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert errors == []
    cells = _step_cells(nb)
    assert sorted(cells) == sorted(s.number for s in STEPS)
    for number, cell in cells.items():
        assert any(line.startswith(SUMMARY[number]) for line in _stdout(cell).splitlines()), (number, _stdout(cell))
    assert "[stage 1] steps 0->2 (2 trained" in _stdout(cells[15])
    assert (run_dir / "profile.json").is_file() and (run_dir / "report.md").is_file()

    # a finished bar for the warm start and for each GRPO stage (sized to the stage, not the curriculum)
    # exactly three: copy pretraining's (cpu-smoke caps it at 25 steps), the warm start's SFT bar, stage 1's
    (_, copied, cap), (_, done, total), stage1 = _bars(cells[15])
    assert copied == cap == 25 and done == total > 2 and stage1 == ("GRPO stage 1", 2, 2)
    assert _bars(cells[16])[-1] == ("GRPO stage 2", 2, 2) and _bars(cells[17])[-1] == ("GRPO stage 3", 2, 2)
    # the plot cell displays every figure it wrote as a PNG
    figures = int(re.search(r"\[plots\] (\d+) figures", _stdout(cells[21])).group(1))
    pngs = [o for o in cells[21].get("outputs", []) if "image/png" in o.get("data", {})]
    assert figures > 0 and len(pngs) == figures == len(list((run_dir / "plots").glob("*.png")))
    # the report cell renders report.md itself
    shown = [o["data"]["text/markdown"] for o in cells[22].get("outputs", []) if "text/markdown" in o.get("data", {})]
    assert shown == [(run_dir / "report.md").read_text(encoding="utf-8")]
    # the demo cell shows the live widget panel
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in cells[23].get("outputs", []))
    # and the run directory holds what a finished cpu-smoke run must (the suite's single-process end-to-end run)
    check_finished_smoke_run(run_dir)


# ---------------------------------------------------------------------------------------------- setup cell
def _setup_script(repo_url: str = "") -> str:
    """The notebook's configuration and setup cells as one script (what a fresh kernel runs first)."""
    config = build_notebook.CONFIG_CODE.replace('REPO_URL = ""', f"REPO_URL = {repo_url!r}")
    return config + "\n" + build_notebook.SETUP_CODE + "\nprint('ROOT=' + str(ROOT))\n"


def _run_setup(cwd, repo_url="", search_roots=None):
    import subprocess

    env = {**os.environ, "DRIFTCALL_PROFILE": "cpu-smoke", "DRIFTCALL_STEPS": "1-4",
           "DRIFTCALL_SEARCH_ROOTS": str(search_roots or cwd / "nowhere")}
    env.pop("PYTHONPATH", None)
    return subprocess.run([sys.executable, "-c", _setup_script(repo_url)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def _project_copy(dest):
    import shutil

    for name in ("cells", "notebooks"):
        shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(ROOT / "requirements.txt", dest / "requirements.txt")
    return dest


def test_setup_cell_without_a_project_or_url_says_how_to_get_one(tmp_path):
    done = _run_setup(tmp_path)
    assert done.returncode != 0 and "DriftCall project not found" in done.stderr and "REPO_URL" in done.stderr


def test_setup_cell_finds_an_uploaded_zip(tmp_path):
    import shutil

    uploads = tmp_path / "content"
    uploads.mkdir()
    shutil.make_archive(str(uploads / "driftcall"), "zip", root_dir=_project_copy(tmp_path / "src").parent, base_dir="src")
    done = _run_setup(tmp_path, search_roots=uploads)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"ROOT={uploads / 'driftcall' / 'src'}" in done.stdout and "profile: cpu-smoke" in done.stdout


def test_setup_cell_clones_from_repo_url(tmp_path):
    import subprocess

    if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True).returncode != 0:
        pytest.skip("the project is not a git checkout here")
    done = _run_setup(tmp_path, repo_url=f"file://{ROOT}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"ROOT={tmp_path / 'driftcall'}" in done.stdout and (tmp_path / "driftcall" / "cells" / "pipeline.py").is_file()
    failed = _run_setup(tmp_path / "driftcall" / "cells", repo_url="file:///no/such/repo")
    assert failed.returncode == 0  # found the project above the working directory: no clone needed


# ---------------------------------------------------------------------------------------------- edit, re-run
def test_edited_step_module_takes_effect_when_its_cell_reruns(tmp_path):
    """A user edits cells/step_08_rewards.py and re-runs its cell in the same kernel: the new code runs.
    A cell whose input is missing names the cell to run first. (Runs in a copy of the project.)"""
    from nbclient import NotebookClient

    project = _project_copy(tmp_path / "project")
    nb = nbformat.read(project / "notebooks" / "driftcall.ipynb", as_version=4)
    cells = _step_cells(nb)
    setup = [c for c in nb.cells if c.cell_type == "code"][:2]
    env = {"DRIFTCALL_PROFILE": "cpu-smoke", "DRIFTCALL_RUN_DIR": str(tmp_path / "run"), "DRIFTCALL_STEPS": "",
           "DRIFTCALL_SEARCH_ROOTS": str(tmp_path / "nowhere")}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        client = NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                                resources={"metadata": {"path": str(project / "notebooks")}})
        with client.setup_kernel():
            for i, cell in enumerate(setup):
                client.execute_cell(cell, i)
            client.execute_cell(cells[8], 0)
            assert "[rewards]" in _stdout(cells[8]) and "EDITED" not in _stdout(cells[8])
            module = project / "cells" / "step_08_rewards.py"
            module.write_text(module.read_text(encoding="utf-8").replace(
                'print("[rewards]\\n" + penalty_table())', 'print("[rewards] EDITED " + str(WEIGHTS["task"]))'),
                encoding="utf-8")
            components = project / "cells" / "rewards" / "components.py"  # a dependency, imported by name
            components.write_text(components.read_text(encoding="utf-8").replace(
                "DRIFT_HANDLING_WINDOW = 4", "DRIFT_HANDLING_WINDOW = 9"), encoding="utf-8")
            client.execute_cell(cells[8], 0)
            assert "[rewards] EDITED 0.45" in _stdout(cells[8]) and "[reload]" in _stdout(cells[8])
            probe = nbformat.v4.new_code_cell("import cells.step_08_rewards as s8; print('window', s8.DRIFT_HANDLING_WINDOW)")
            client.execute_cell(probe, 0)
            assert "window 9" in _stdout(probe)
            client.execute_cell(cells[19], 0)  # steps 12 and 18 never ran in this kernel
            error = [o for o in cells[19].outputs if o.get("output_type") == "error"]
            assert error and error[0]["ename"] == "MissingInputError"
            assert "step 12" in error[0]["evalue"] and "run that cell first" in error[0]["evalue"]
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
