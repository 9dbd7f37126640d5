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

BANNER = (
    "> **Generated file: do not edit.** Built by `python notebooks/build_notebook.py` from the step registry in "
    "`cells/pipeline.py`; each cell calls one `cells/step_NN_*.py` module. Edit those modules, then rebuild."
)

INTRO = """\
Run the cells top to bottom (Colab: *Runtime → Run all*). To change a step, edit its
`cells/step_NN_*.py` module and re-run that step's cell: the edited module (and the project modules
that use it) is re-imported; a cell whose input is missing says which cell to run first.
"""

CONFIG_CODE = """\
# Configuration: the only cell to edit.
# REPO_URL: this project's git URL, for a fresh Colab runtime. Leave it empty when the notebook is opened
# from a checkout (local Jupyter), from a Drive folder holding the repo, or with the repo's zip uploaded
# to /content: the next cell finds the project there first.
REPO_URL = ""
PROFILE = ""  # "" = picked from the hardware: cpu-smoke, colab-t4 or colab-a100 (also cpu-learn, cpu-gemma)
MODEL = ""  # "" = the profile's model; else a Hub id, a local directory or a .gguf file (cpu-gemma, colab-*)
FRESH = False  # True: retrain instead of reusing this run dir's warm start and checkpoints
"""

SETUP_CODE = """\
# Setup: find (or clone) the project, install the pinned stack on Colab, check the kernel, pick the profile.
import importlib.util, os, subprocess, sys, zipfile
from pathlib import Path

if sys.version_info < (3, 10):
    raise RuntimeError(f"DriftCall needs Python >= 3.10; this kernel runs {sys.version.split()[0]}")
IN_COLAB = "google.colab" in sys.modules

def is_project(path):
    return (path / "cells" / "pipeline.py").is_file() and (path / "requirements.txt").is_file()

def find_project():
    \"\"\"A checkout at or above the working directory, a folder under /content or Drive, or an uploaded zip.\"\"\"
    here = Path.cwd().resolve()
    for path in (here, *here.parents):
        if is_project(path):
            return path
    roots = os.environ.get("DRIFTCALL_SEARCH_ROOTS", "/content:/content/drive/MyDrive").split(os.pathsep)
    for root in map(Path, roots):
        if not root.is_dir():
            continue
        for path in sorted([*root.glob("*"), *root.glob("*/*")]):
            if path.is_dir() and is_project(path):
                return path
        for archive in sorted(root.glob("*.zip")):
            with zipfile.ZipFile(archive) as zf:
                top = next((n[: -len("cells/pipeline.py")] for n in zf.namelist() if n.endswith("cells/pipeline.py")), None)
                if top is not None:
                    zf.extractall(root / archive.stem)
                    if is_project(root / archive.stem / top):
                        return root / archive.stem / top
    return None

ROOT = find_project()
if ROOT is None:
    if not REPO_URL:
        raise RuntimeError("DriftCall project not found. Open this notebook from a checkout, put the repo in Drive, "
                           "upload its zip to /content, or set REPO_URL in the configuration cell.")
    ROOT = Path("/content/driftcall" if IN_COLAB else "driftcall").resolve()
    cloned = subprocess.run(["git", "clone", "--depth", "1", REPO_URL, str(ROOT)], capture_output=True, text=True)
    if cloned.returncode != 0:
        raise RuntimeError(f"git clone {REPO_URL} failed:\\n{cloned.stderr[-800:]}")
os.chdir(ROOT)
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

def pip_install(*args):
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"pip install {' '.join(args)} failed:\\n{done.stderr[-1500:]}")

if IN_COLAB:  # Colab's own CUDA torch stays; --no-deps keeps unsloth from downgrading trl/transformers
    pip_install("-r", "requirements.txt")
    pip_install("-r", "requirements-gpu.txt")
    pip_install("--no-deps", "-r", "requirements-unsloth.txt")  # docs/contributing.md "Versions" says why --no-deps
else:
    missing = [m for m in ("torch", "transformers", "trl", "peft", "ipywidgets", "tqdm") if importlib.util.find_spec(m) is None]
    if missing:
        raise RuntimeError(f"missing packages {missing}: run `make setup` in {ROOT} and pick its .venv as this "
                           "notebook's kernel (or pip install torch==2.13.0, then -r requirements.txt)")

from cells.pipeline import check_run_dir, make_context, parse_step_range, run_step
from cells.modeling.sources import is_local_model
from cells.step_01_setup import default_profile_name, detect_runtime
from cells.step_02_profiles import get_profile

# Environment overrides (tests, headless runs): DRIFTCALL_PROFILE, DRIFTCALL_MODEL, DRIFTCALL_STEPS (e.g. "1-7"),
# DRIFTCALL_RUN_DIR (default runs/<profile>), DRIFTCALL_FRESH=1. A run dir's warm start and checkpoints
# are reused only if made with the same knobs; otherwise this cell stops and says which differ.
RUNTIME = detect_runtime()
PROFILE = os.environ.get("DRIFTCALL_PROFILE") or PROFILE or default_profile_name(RUNTIME)
if PROFILE.startswith("colab") and RUNTIME.device != "cuda":
    raise RuntimeError(f"profile {PROFILE} needs a GPU and this runtime has none "
                       "(Colab: Runtime -> Change runtime type -> GPU), or set PROFILE = 'cpu-smoke'")
SELECTED = set(parse_step_range(os.environ.get("DRIFTCALL_STEPS")))
FRESH = FRESH or os.environ.get("DRIFTCALL_FRESH", "0") not in ("", "0")
MODEL = os.environ.get("DRIFTCALL_MODEL") or MODEL or None
if is_local_model(MODEL or get_profile(PROFILE).model_id):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing to download: a hub lookup would take ~50 s to fail
ctx = make_context(PROFILE, os.environ.get("DRIFTCALL_RUN_DIR"), fresh=FRESH, model=MODEL)
check_run_dir(ctx, SELECTED)  # a run dir trained with other knobs is refused here, before any model loads
gpu = f"{RUNTIME.gpu_name} ({RUNTIME.gpu_memory_gb:.0f} GB)" if RUNTIME.gpu_name else "none"
ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30 if hasattr(os, "sysconf") else float("nan")
print(f"project: {ROOT} | python {RUNTIME.python} | GPU: {gpu} | RAM: {ram:.0f} GB")
print(f"profile: {PROFILE} | run dir: {ctx.run_dir} | fresh: {FRESH} | steps: {sorted(SELECTED)}")

def step(ctx, number):
    \"\"\"Run step `number` (re-importing edited modules first) unless deselected with DRIFTCALL_STEPS.\"\"\"
    return run_step(ctx, number, reload_edited=True) if number in SELECTED or number == 1 else ctx
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
        new_markdown_cell("# DriftCall: training a concierge that survives API drift\n\n" + BANNER + "\n\n" + INTRO),
        new_code_cell(CONFIG_CODE),
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
