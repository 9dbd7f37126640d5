"""Write `notebooks/driftcall.ipynb` from the step registry (`cells.pipeline.STEPS`) with nbformat.

    python notebooks/build_notebook.py          # rewrite the notebook
    python notebooks/build_notebook.py --check  # exit 1 if the committed notebook is stale

The output is byte-identical for the same registry and docstrings (no timestamps, fixed cell
ids), and a test checks the committed notebook is current. Edit the step modules, not the notebook.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "driftcall.ipynb"
REPO_URL = "https://github.com/DGXAI/driftcall"

BANNER = (
    "> **Generated file: do not edit.** Built by `python notebooks/build_notebook.py` from the step registry in "
    "`cells/pipeline.py`; each cell calls one `cells/step_NN_*.py` module. Edit those modules, then rebuild."
)

SETUP_CODE = f"""\
# Setup: on Colab, fetch the repo and install the pinned stack (+ GPU extras); elsewhere, check the env.
import os, subprocess, sys
from pathlib import Path
IN_COLAB = "google.colab" in sys.modules
if IN_COLAB:
    if not Path("driftcall").exists():
        subprocess.run(["git", "clone", "--depth", "1", "{REPO_URL}", "driftcall"], check=True)
    os.chdir("driftcall")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-r", "requirements.txt"], check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-r", "requirements-gpu.txt"], check=True)
    # --no-deps: unsloth pins trl<=1.15 / transformers<=5.17; we keep the versions our tests run.
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "unsloth==2026.10.9", "unsloth_zoo==2026.10.9"], check=True)
else:
    # Running from a checkout: make `cells` importable from notebooks/ too.
    root = Path.cwd() if Path("cells").is_dir() else Path.cwd().parent
    sys.path.insert(0, str(root))
    os.chdir(root)

from cells.pipeline import check_run_dir, make_context, run_step, parse_step_range
from cells.step_01_setup import default_profile_name, detect_runtime

# Override with env vars: DRIFTCALL_PROFILE (cpu-smoke, cpu-learn, colab-t4, colab-a100),
# DRIFTCALL_STEPS (e.g. "1-7") to run only some steps, DRIFTCALL_RUN_DIR (default runs/<profile>).
# A run dir's warm start and checkpoints are reused only if made with the same knobs; otherwise
# step 15 stops and says which differ. FRESH = True (or DRIFTCALL_FRESH=1) retrains them instead
# (deletes <run dir>/training/ at step 15); or set `ctx.fresh = True` and re-run the step 15 cell.
PROFILE = os.environ.get("DRIFTCALL_PROFILE") or default_profile_name(detect_runtime())
SELECTED = set(parse_step_range(os.environ.get("DRIFTCALL_STEPS")))
RUN_DIR = os.environ.get("DRIFTCALL_RUN_DIR")
FRESH = os.environ.get("DRIFTCALL_FRESH", "0") not in ("", "0")
if PROFILE.startswith("cpu"):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
ctx = make_context(PROFILE, RUN_DIR, fresh=FRESH)
check_run_dir(ctx, SELECTED)  # a run dir trained with other knobs is refused here, before any model loads
print("profile:", PROFILE, "| run dir:", ctx.run_dir, "| fresh:", FRESH, "| steps:", sorted(SELECTED))

def step(ctx, number):
    \"\"\"Run step `number` unless it was deselected with DRIFTCALL_STEPS.\"\"\"
    return run_step(ctx, number) if number in SELECTED or number == 1 else ctx
"""


def module_doc(module: str) -> tuple[str, str]:
    """(title line, rest) of a step module's docstring, read without importing it."""
    path = ROOT / "cells" / f"{module}.py"
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or module
    title, _, rest = doc.partition("\n")
    return title.strip(), rest.strip()


def build() -> str:
    import nbformat
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    sys.path.insert(0, str(ROOT))
    from cells.pipeline import STEPS

    cells = [
        new_markdown_cell("# DriftCall: training a concierge that survives API drift\n\n" + BANNER),
        new_code_cell(SETUP_CODE),
    ]
    for info in STEPS:
        title, rest = module_doc(info.module)
        cells.append(new_markdown_cell(f"## {title}\n\n{rest}"))
        cells.append(new_code_cell(f"ctx = step(ctx, {info.number})  # {info.module}"))
    nb = new_notebook(cells=cells, metadata={
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
        "accelerator": "GPU",
        "colab": {"provenance": []},
    })
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i:02d}"  # fixed ids: rebuilding gives identical bytes
    nbformat.validate(nb)
    return nbformat.writes(nb) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed notebook is stale")
    args = parser.parse_args(argv)
    text = build()
    if args.check:
        current = NOTEBOOK.read_text(encoding="utf-8") if NOTEBOOK.exists() else ""
        if current != text:
            print(f"{NOTEBOOK} is stale: run python notebooks/build_notebook.py", file=sys.stderr)
            return 1
        return 0
    NOTEBOOK.write_text(text, encoding="utf-8")
    print(f"wrote {NOTEBOOK} ({len(text)} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
