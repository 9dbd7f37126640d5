import os
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "notebooks"))

import build_notebook  # noqa: E402

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


def test_notebook_executes_foundation_steps(tmp_path):
    from nbclient import NotebookClient

    nb = nbformat.read(build_notebook.NOTEBOOK, as_version=4)
    env = {"DRIFTCALL_PROFILE": "cpu-smoke", "DRIFTCALL_STEPS": "1-4", "DRIFTCALL_RUN_DIR": str(tmp_path)}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    assert (tmp_path / "profile.json").is_file()
    outputs = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "[models]" in outputs and "[data]" in outputs
