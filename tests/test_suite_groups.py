"""The suite's own scheduling: `make test` runs `pytest -n 2 --dist loadgroup`, and the tests that must not run side
by side (the notebook and the two-process runs, `xdist_group("pipelines")`) or that share one expensive boot per
worker (real Gemma, Whisper, two servers) rely on pytest-xdist keeping each `xdist_group` on one worker.

pytest 9.2 changed how node ids are stored, and pytest-xdist 3.8 then drops every group without a word
(pytest-xdist#1386): the suite still passes, only with the whole-pipeline tests side by side and each group's boot
repeated, so a pin guards it (requirements-dev.txt) and this test fails the day an upgrade breaks grouping again.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_GROUPED = '''
import os
import pytest

pytestmark = pytest.mark.xdist_group("together")

@pytest.mark.parametrize("i", range(3))
def test_grouped(i):
    with open(os.environ["WORKERS_LOG"], "a") as log:
        log.write(f"{__name__} {i} {os.environ['PYTEST_XDIST_WORKER']}\\n")
'''

_UNGROUPED = '''
import pytest

@pytest.mark.parametrize("i", range(8))
def test_free(i):
    pass
'''


def test_an_xdist_group_spanning_two_modules_runs_on_one_worker(tmp_path: Path) -> None:
    """Two modules of one group and ungrouped tests, under `make test`'s own flags: every grouped test reports the
    same worker. Without grouping, xdist's load scheduling hands the first items out two at a time to alternate
    workers, so the six grouped tests (collected first) land on both."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_a.py").write_text(_GROUPED)
    (suite / "test_b.py").write_text(_GROUPED)
    (suite / "test_c.py").write_text(_UNGROUPED)
    log = tmp_path / "workers.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}  # not this worker's own xdist ids
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup", "-p",
                           "no:cacheprovider", str(suite)], cwd=suite, env={**env, "WORKERS_LOG": str(log)},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = log.read_text().splitlines()
    assert len(lines) == 6, lines
    workers = {line.split()[-1] for line in lines}
    assert len(workers) == 1, f"one xdist_group ran on {sorted(workers)}: is pytest >= 9.2 installed? {lines}"
