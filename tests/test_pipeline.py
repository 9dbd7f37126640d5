import json
import subprocess
import sys

import pytest

from cells.__main__ import main
from cells.pipeline import STEPS, PipelineError, parse_step_range, step_by_number


def test_registry_numbers_are_unique_and_ordered():
    numbers = [s.number for s in STEPS]
    assert numbers == sorted(set(numbers))
    assert step_by_number(4).module == "step_04_datatypes"
    with pytest.raises(PipelineError, match="registered steps"):
        step_by_number(99)


def test_parse_step_range():
    assert parse_step_range("4-7") == (4, 5, 6, 7)
    assert parse_step_range("1,3") == (1, 3)
    assert parse_step_range(None) == tuple(s.number for s in STEPS)
    with pytest.raises(PipelineError):
        parse_step_range("a-b")


def test_cli_list_and_unknown_profile(capsys):
    assert main(["list"]) == 0
    assert "step_04_datatypes" in capsys.readouterr().out
    assert main(["run", "--profile", "nope", "--steps", "1"]) == 2
    assert "valid profiles" in capsys.readouterr().err


def test_cli_runs_foundation_steps(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "cells", "run", "--profile", "cpu-smoke", "--steps", "1-7", "--run-dir", str(tmp_path),
         "--seed", "7"],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads((tmp_path / "profile.json").read_text())["seed"] == 7  # --seed replaced the preset's 1234
    for name in ("runtime.json", "profile.json", "data_manifest.json"):
        assert (tmp_path / name).is_file()
    timings = json.loads((tmp_path / "timings.json").read_text())
    memory = json.loads((tmp_path / "memory.json").read_text())
    assert set(timings) == set(memory) == {s.module for s in STEPS if s.number <= 7}
    assert all(v > 0 for v in memory.values())  # MiB of peak RSS: a Python process with torch imported is >> 0


STEP_MODULES = [s.import_path for s in STEPS]


@pytest.mark.parametrize("module", STEP_MODULES)
def test_step_import_is_light(module):
    # What makes a step slow to import is a heavy library at module level; that is asserted, not a wall time
    # (timed assertions flake on a loaded 2-core machine).
    code = (
        f"import sys, importlib; importlib.import_module({module!r}); "
        "print([m for m in ('torch','transformers','trl','peft','matplotlib') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", f"{module} imports {out.stdout.strip()}"


def test_a_step_whose_input_is_missing_names_the_cell_to_run_first(tmp_path):
    from cells.pipeline import MissingInputError, make_context, run_step

    ctx = make_context("cpu-smoke", tmp_path)
    with pytest.raises(MissingInputError, match=r"ctx\.model, which step 12 \(step_12_model\) fills: run that cell"):
        run_step(ctx, 15)
    ctx.model, ctx.tokenizer = object(), object()
    with pytest.raises(MissingInputError, match=r"ctx\.reports\['eval_spec'\], which step 18"):
        run_step(ctx, 19, reload_edited=True)
    assert ctx.completed == []


def test_reload_picks_up_edits_and_dependents(tmp_path, monkeypatch):
    """An edited module and every loaded module that imported from it are re-imported, dependencies first."""
    from cells import reloading

    pkg = tmp_path / "cells"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "base.py").write_text("VALUE = 1\n")
    (pkg / "step_99_x.py").write_text("from cells.sub.base import VALUE\ndef run():\n    return VALUE\n")
    (pkg / "other.py").write_text("X = 0\n")
    saved = {k: v for k, v in sys.modules.items() if k == "cells" or k.startswith("cells.")}
    for k in saved:
        del sys.modules[k]
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(reloading, "_seen", {})
    try:
        import cells.other  # noqa: F401
        import cells.step_99_x as step

        reloading.remember_loaded_modules()
        assert step.run() == 1 and reloading.reload_edited_modules() == []
        (pkg / "sub" / "base.py").write_text("VALUE = 2\n")
        order = reloading.reload_edited_modules()
        assert order.index("cells.sub.base") < order.index("cells.step_99_x") and "cells.other" not in order
        assert sys.modules["cells.step_99_x"].run() == 2
    finally:
        for k in [k for k in sys.modules if k == "cells" or k.startswith("cells.")]:
            del sys.modules[k]
        sys.modules.update(saved)


def test_every_project_error_has_one_base_class():
    """Each `*Error` class defined under cells/ derives from DriftCallError (the CLI prints those as one line)."""
    import importlib
    import inspect
    from pathlib import Path

    from cells.errors import DriftCallError

    root = Path(__file__).resolve().parents[1]
    found = []
    for path in sorted((root / "cells").rglob("*.py")):
        if path.name == "__main__.py":
            continue
        name = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        module = importlib.import_module(name)
        found += [cls for _, cls in inspect.getmembers(module, inspect.isclass)
                  if cls.__module__ == name and issubclass(cls, BaseException) and not issubclass(cls, Warning)]
    assert len(found) > 30
    assert [c.__qualname__ for c in found if not issubclass(c, DriftCallError)] == []


def test_cli_prints_project_errors_as_one_line_and_lets_other_errors_show_a_traceback(tmp_path):
    bad = subprocess.run([sys.executable, "-m", "cells", "run", "--profile", "cpu-smoke", "--steps", "99"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0
    assert bad.stderr.startswith("error: PipelineError: no step 99") and "Traceback" not in bad.stderr
    crash = subprocess.run([sys.executable, "-c", "import sys; from cells.__main__ import main; "
                            "import cells.__main__ as m; m._cmd_list = lambda a: int('x'); sys.exit(main(['list']))"],
                           capture_output=True, text=True, timeout=120)
    assert crash.returncode == 1 and "Traceback" in crash.stderr and "ValueError" in crash.stderr


def test_cli_refuses_a_gpu_profile_without_cuda_before_any_step(tmp_path, capsys, monkeypatch):
    import torch

    from cells.step_02_profiles import PROFILES

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    run_dir = tmp_path / "run"
    assert main(["run", "--profile", "colab-t4", "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: NoGpuError: profile 'colab-t4' needs a CUDA GPU")
    named = err.split("use a CPU profile: ")[1].strip().split(", ")
    assert named == [name for name, profile in PROFILES.items() if profile.is_cpu] and "cpu-smoke" in named
    assert not run_dir.exists()  # step 1, which creates it, never ran
