"""Step 1 - setup: detect the runtime, create the run directory, seed every RNG.

Reads `ctx.profile`; writes `ctx.runtime` (a `RuntimeInfo`) and `<run_dir>/runtime.json`.
Run alone: `python -m cells run --profile cpu-smoke --steps 1` (well under a second).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import random
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from cells.context import RuntimeInfo  # re-exported: step 1 fills it
from cells.distributed import is_main_process

if TYPE_CHECKING:  # pragma: no cover
    from cells.context import Context

KEY_PACKAGES: tuple[str, ...] = (
    "torch", "transformers", "trl", "peft", "accelerate", "datasets", "unsloth", "openenv",
)


def package_versions(names: tuple[str, ...] = KEY_PACKAGES) -> tuple[tuple[str, str], ...]:
    """Installed versions of `names` (missing packages are left out); never imports them."""
    found = []
    for name in names:
        try:
            found.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            continue
    return tuple(found)


def git_sha(repo: Path | None = None) -> str | None:
    """The current commit of the repository holding this file, or None outside git."""
    root = repo or Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def detect_runtime() -> RuntimeInfo:
    """Probe the machine. Imports torch only if it is installed (it is the slow part)."""
    on_colab = "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ
    device, gpu_name, gpu_mem, bf16 = "cpu", None, None, False
    versions = package_versions()
    if dict(versions).get("torch"):
        import torch

        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            device, gpu_name = "cuda", props.name
            gpu_mem = round(props.total_memory / 2**30, 1)
            bf16 = bool(torch.cuda.is_bf16_supported())
    return RuntimeInfo(
        on_colab=on_colab,
        device=device,
        gpu_name=gpu_name,
        gpu_memory_gb=gpu_mem,
        bf16_supported=bf16,
        python=sys.version.split()[0],
        versions=versions,
        git_sha=git_sha(),
    )


def default_profile_name(info: RuntimeInfo) -> str:
    """Pick a profile from the hardware: A100-class GPUs, other GPUs (T4), or CPU."""
    if info.device != "cuda":
        return "cpu-smoke"
    if info.bf16_supported and (info.gpu_memory_gb or 0) >= 30:
        return "colab-a100"
    return "colab-t4"


def peak_memory_mb() -> float:
    """Peak resident memory of this process so far, in MiB (`getrusage`; 0.0 where the platform has none).
    The pipeline records it after every step (`memory.json`), evaluations in their `generation` block."""
    try:
        import resource
    except ImportError:  # Windows
        return 0.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def seed_everything(seed: int) -> None:
    """Seed Python's, numpy's and torch's global RNGs (for library code that uses them).

    Our own modules never touch global RNGs; this is for torch/transformers sampling.
    """
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:  # pragma: no cover - numpy is a core requirement
        pass
    if importlib.util.find_spec("torch") is not None:
        import torch

        torch.manual_seed(seed)


def run(ctx: Context) -> Context:
    """Create the run directory, record the runtime, seed RNGs."""
    ctx.run_dir.mkdir(parents=True, exist_ok=True)
    ctx.runtime = detect_runtime()
    seed_everything(ctx.profile.seed)
    path = ctx.run_dir / "runtime.json"
    if is_main_process():  # several processes: one writer (cells.distributed)
        path.write_text(json.dumps(asdict(ctx.runtime), indent=2, ensure_ascii=False), encoding="utf-8")
    ctx.artifacts["runtime"] = path
    print(f"[setup] device={ctx.runtime.device} gpu={ctx.runtime.gpu_name} run_dir={ctx.run_dir}")
    return ctx
