"""Several training processes (`accelerate launch --multi_gpu --num_processes N -m cells run ...`).

Every process runs steps 1-17 (each needs the model, the env and the trainer; `build_grpo_config` splits
the global batch, `DriftCallGRPOTrainer` splits the groups); files are written by the main process only,
the tiny model's cache is built by it first, and steps after the last training step run on it alone.
One process (a notebook, `python -m cells run`) is the case everything reduces to: every helper here is
then a no-op. The process group itself is accelerate's (`PartialState`), the one TRL's trainer joins;
every launched process leaves it (`leave_process_group`) once its collectives are done, before it exits.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
from collections.abc import Iterator
from typing import Any


def launched_processes() -> int:
    """Processes of this run: WORLD_SIZE, which `accelerate launch` and torchrun set; 1 otherwise."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def process_rank() -> int:
    """This process's rank (RANK, set by the launcher); 0 for a single process."""
    return int(os.environ.get("RANK", "0") or 0)


def is_main_process() -> bool:
    """True on the process that writes files and runs evaluation (rank 0; always, for one process)."""
    return process_rank() == 0


def _state() -> Any:
    """accelerate's process state (it joins the process group on first use). Without a GPU it must be told
    to stay on CPU, or it sees no distributed setup at all; with one, the trainer's Accelerator later
    finds this same state (accelerate keeps one per process)."""
    import torch
    from accelerate import PartialState

    return PartialState(cpu=not torch.cuda.is_available())


_left_group = threading.Event()  # set once this process has left the group: the helpers below are then no-ops


def _in_group() -> bool:
    return launched_processes() > 1 and not _left_group.is_set()


def wait_for_everyone() -> None:
    """A barrier across the launched processes (nothing to wait for with one, or after leaving the group)."""
    if _in_group():
        _state().wait_for_everyone()


@contextlib.contextmanager
def main_process_first() -> Iterator[None]:
    """Run the block on the main process, then on the others (e.g. build a cache once, then load it)."""
    if not _in_group():
        yield
        return
    with _state().main_process_first():
        yield


def leave_process_group() -> None:
    """Wait for the other processes, then destroy the process group; call it in every launched process once
    no collective is due (a no-op for one process, or the second time). Why: a process that exits with the
    group alive can die with SIGABRT ("terminate called without an active exception") while the interpreter
    finalises, as gloo's worker threads still hold tensors (pytorch/pytorch#190489); seen in CI, exit 1 after
    every step had passed."""
    if not _in_group():
        return
    import torch

    if torch.distributed.is_available() and torch.distributed.is_initialized():
        state = _state()
        state.wait_for_everyone()
        state.destroy_process_group()
    _left_group.set()


def end_other_process() -> None:
    """On a process other than the main one: end it now with status 0, skipping the interpreter's finalisation
    (its streams flushed first); on the main process (or with one process) return. Call it in every launched
    process after `leave_process_group`. Why: even with the group destroyed, a native thread still alive at
    exit (gloo's, or another native pool's) can abort the process during finalisation (SIGABRT, "terminate
    called without an active exception"), failing a launch whose every step passed; seen in CI. The other
    processes write no file (the main one writes them all), so flushing is all finalisation did for them."""
    if is_main_process():
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on `host` now (the launcher's rendezvous port; loopback servers in benches and tests)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def launch_command(processes: int, *args: str) -> list[str]:
    """The command line running `python *args` as `processes` training processes: plain python for one,
    `accelerate launch --multi_gpu` (torchrun underneath; gloo processes where there is no GPU) for several."""
    if processes == 1:
        return [sys.executable, *args]
    return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
            "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
            "--main_process_port", str(free_port()), *args]
