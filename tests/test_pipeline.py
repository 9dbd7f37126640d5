import subprocess
import sys

import pytest

from cells.__main__ import main
from cells.pipeline import STEPS, PipelineError, parse_step_range, step_by_number


def test_registry_numbers_are_unique_and_ordered():
    numbers = [s.number for s in STEPS]
    assert numbers == sorted(set(numbers))
    assert step_by_number(4).module == "step_04_models"
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
    assert "step_04_models" in capsys.readouterr().out
    assert main(["run", "--profile", "nope", "--steps", "1"]) == 2
    assert "valid profiles" in capsys.readouterr().err


def test_cli_runs_foundation_steps(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "cells", "run", "--profile", "cpu-smoke", "--steps", "1-7", "--run-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert out.returncode == 0, out.stderr
    for name in ("runtime.json", "profile.json", "data_manifest.json"):
        assert (tmp_path / name).is_file()


STEP_MODULES = [s.import_path for s in STEPS]


@pytest.mark.parametrize("module", STEP_MODULES)
def test_step_import_is_light(module):
    code = (
        f"import sys, time; t=time.perf_counter(); import importlib; importlib.import_module({module!r}); "
        "dt=time.perf_counter()-t; heavy=[m for m in ('torch','transformers','trl','peft','matplotlib') "
        "if m in sys.modules]; print(dt, heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    dt, heavy = out.stdout.split(" ", 1)
    assert heavy.strip() == "[]", f"{module} imports {heavy}"
    assert float(dt) < 1.0
