"""Multi-process GRPO (issue 15): two CPU processes (gloo, launched by `accelerate launch`) train the same
first step as one process with the same global batch.

One prompt, G=4: each of the two processes plays half the group. The same seeds must give the same
rows, the same sampled episodes (per-episode sampling seeds), the same rewards, the same advantages
(gathered and normalised per group, each process keeping its slice) and, within float tolerance, the
same LoRA weights after the optimiser step (DDP averages the two halves' gradients).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from finished_run import check_finished_smoke_run

from cells.distributed import launch_command

WORKER = Path(__file__).with_name("mp_grpo_worker.py")
# One xdist worker runs this module and the notebook's test, one after the other (`--dist loadgroup`): the module's
# tests share the two runs its fixture builds, and the two-process runs and the notebook's kernel are each a whole
# pipeline, three busy processes on 2 cores if side by side. (Their 285-300 s side by side, against 28-48 s alone,
# was step 9 changing torch's thread count, since fixed: docs/experiments/2026-12-06-test-time.md.)
pytestmark = pytest.mark.xdist_group("pipelines")


def _env() -> dict[str, str]:
    """This process's environment for a launched run: offline, one thread per process, no WORLD_SIZE of ours."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("WORLD_SIZE", None)
    return env


def _run(cmd: list[str], out: Path) -> dict:
    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ranks = sorted(out.glob("rank*.json"))
    return {"ranks": [json.loads(p.read_text()) for p in ranks], "lora": torch.load(out / "lora.pt")}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    cache = tmp_path_factory.mktemp("tiny")
    one, two = tmp_path_factory.mktemp("one"), tmp_path_factory.mktemp("two")
    single = _run(launch_command(1, str(WORKER), str(one), str(cache)), one)  # also builds the cached tiny model
    double = _run(launch_command(2, str(WORKER), str(two), str(cache)), two)
    return single, double


def test_two_processes_split_the_group_and_agree_on_episodes_and_advantages(runs):
    single, double = runs
    (one,), (first, second) = single["ranks"], double["ranks"]
    assert one["world"] == 1 and first["world"] == second["world"] == 2
    assert first["left_group"] and second["left_group"]  # each process destroyed the group before exiting
    assert one["rows"] == [0, 0, 0, 0] and first["rows"] == second["rows"] == [0, 0]  # half a group each
    assert first["texts"] + second["texts"] == one["texts"]  # episodes sampled per episode, not per batch
    assert len(set(one["texts"])) == 4
    assert first["rewards"] + second["rewards"] == one["rewards"]
    assert torch.allclose(torch.tensor(first["advantages"] + second["advantages"]), torch.tensor(one["advantages"]),
                          atol=1e-6)
    assert max(abs(a) for a in one["advantages"]) > 0.1  # the rewards spread: the step below has a gradient


def test_two_processes_make_the_same_first_update(runs):
    single, double = runs
    before, after, after_two = single["lora"]["before"], single["lora"]["after"], double["lora"]["after"]
    assert all(torch.equal(before[n], double["lora"]["before"][n]) for n in before)
    moved = max((after[n] - before[n]).abs().max().item() for n in before)
    apart = max((after[n] - after_two[n]).abs().max().item() for n in before)
    assert moved > 1e-3, moved
    assert apart < 1e-4, (apart, moved)  # measured: 1.3e-6 apart for a 0.01 move


def _pipeline(run_dir: Path, *args: str) -> str:
    cmd = launch_command(2, "-m", "cells", "run", "--profile", "cpu-smoke", "--run-dir", str(run_dir), *args)
    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=900,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow
def test_pipeline_under_two_processes_writes_once_and_resumes(tmp_path):
    """`accelerate launch ... -m cells run`: both processes run steps 1-17, then leave the process group and
    the main one alone evaluates and reports (18-25); checkpoints, sidecars and metrics.csv are written once
    (one row per optimiser step), the other process prints nothing, and a rerun after losing stage 3 resumes
    from stage 2's checkpoint and trains stage 3 only."""
    from cells.step_02_profiles import get_profile
    from cells.training.metrics import read_metrics_csv

    total = sum(get_profile("cpu-smoke").steps_per_stage)
    out = _pipeline(tmp_path, "--fresh")
    assert out.count("report: ") == 1 and "steps [1, 2, 3" in out and ", 24, 25]" in out
    assert out.count("[setup] device=") == 1 and out.count("done: steps") == 1  # the second process is quiet
    training = tmp_path / "training"
    rows = read_metrics_csv(training / "metrics.csv")
    assert [int(r["step"]) for r in rows] == list(range(1, total + 1))
    final = training / "stage3" / f"checkpoint-{total}"
    assert (final / "driftcall_meta.json").is_file() and (final / "adapter_model.safetensors").is_file()
    assert sorted(p.name for p in final.glob("rng_state_*.pth")) == ["rng_state_0.pth", "rng_state_1.pth"]
    check_finished_smoke_run(tmp_path)  # the CLI's whole pipeline, as `python -m cells run` leaves it
    stage2 = (training / "stage2" / f"checkpoint-{total - get_profile('cpu-smoke').steps_per_stage[2]}").stat()

    import shutil

    shutil.rmtree(training / "stage3")
    again = _pipeline(tmp_path, "--steps", "12-17")
    assert "(0 trained" in again.split("[stage 2]")[1] and "[stage 3] steps" in again
    assert "(0 trained" not in again.split("[stage 3] steps")[1].splitlines()[0]
    assert (final / "driftcall_meta.json").is_file()
    assert [int(r["step"]) for r in read_metrics_csv(training / "metrics.csv")] == list(range(1, total + 1))
    assert (training / "stage2" / f"checkpoint-{total - get_profile('cpu-smoke').steps_per_stage[2]}").stat(
    ).st_mtime == stage2.st_mtime  # stage 2 was reused, not retrained


@pytest.mark.parametrize("rank", ["0", "1"])
def test_only_the_other_processes_end_early_and_skip_finalisation(rank):
    """`end_other_process`: the main process goes on (and finalises as usual); another one exits 0 at once, its
    output flushed, without running what finalisation would (atexit handlers here)."""
    import sys

    code = ("import atexit; atexit.register(print, 'finalised')\n"
            "from cells.distributed import end_other_process\n"
            "print('before', end='; ')\nend_other_process()\nprint('after', end='; ')\n")
    done = subprocess.run([sys.executable, "-c", code], env={**_env(), "RANK": rank}, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ("before; after; finalised\n" if rank == "0" else "before; ")
