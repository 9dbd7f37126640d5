"""Adapter-only checkpoints with a `driftcall_meta.json` sidecar.

A checkpoint is what HF `Trainer` writes to `<stage_dir>/checkpoint-<global_step>` for a PEFT
model: the LoRA adapter (`adapter_model.safetensors`, plus TRL's frozen `ref/` adapter when KL is
on), `optimizer.pt`, `scheduler.pt`, `rng_state.pth`, `trainer_state.json`, `training_args.bin`,
the tokenizer files, and our sidecar naming the profile, stage, step, library versions and git
sha. Never full-model weights: `assert_adapter_only` enforces it at every save.

Only the standard library at module level (torch/safetensors/peft are imported where used).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

META_NAME = "driftcall_meta.json"
TRAINER_STATE_NAME = "trainer_state.json"
ADAPTER_FILES = ("adapter_model.safetensors", "adapter_model.bin")
# What a full-model save looks like; none of these may appear in a DriftCall checkpoint.
FULL_MODEL_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
META_PACKAGES = ("torch", "transformers", "trl", "peft")
_CKPT_RE = re.compile(r"^checkpoint-(\d+)$")


class CheckpointError(RuntimeError):
    """A checkpoint is missing, incomplete, or holds something it must not (full weights)."""


@dataclass(frozen=True)
class CheckpointMeta:
    """The sidecar written next to every checkpoint."""

    profile: str
    stage: int
    step: int
    versions: tuple[tuple[str, str], ...]
    git_sha: str | None
    created_at: str  # ISO-8601 UTC; metadata only, never read back into training

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "stage": self.stage,
            "step": self.step,
            "versions": dict(self.versions),
            "git_sha": self.git_sha,
            "created_at": self.created_at,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CheckpointMeta:
        return cls(
            profile=str(data["profile"]),
            stage=int(data["stage"]),
            step=int(data["step"]),
            versions=tuple(sorted((str(k), str(v)) for k, v in data["versions"].items())),
            git_sha=data.get("git_sha"),
            created_at=str(data["created_at"]),
        )


def checkpoint_step(path: str | Path) -> int:
    """The global step encoded in a `checkpoint-<N>` directory name."""
    match = _CKPT_RE.match(Path(path).name)
    if match is None:
        raise CheckpointError(f"{path} is not a checkpoint directory (expected a name like 'checkpoint-12')")
    return int(match.group(1))


def is_complete(path: Path) -> bool:
    """True when HF finished writing the checkpoint (adapter + trainer state present)."""
    return (path / TRAINER_STATE_NAME).is_file() and any((path / f).is_file() for f in ADAPTER_FILES)


def list_checkpoints(stage_dir: str | Path) -> list[Path]:
    """Complete checkpoints under `stage_dir`, oldest (lowest step) first."""
    root = Path(stage_dir)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and _CKPT_RE.match(p.name) and is_complete(p)]
    return sorted(found, key=checkpoint_step)


def latest_checkpoint(stage_dir: str | Path) -> Path | None:
    """The highest-step complete checkpoint under `stage_dir`, or None. Half-written ones are skipped."""
    found = list_checkpoints(stage_dir)
    return found[-1] if found else None


def read_trainer_state(ckpt: str | Path) -> dict[str, Any]:
    """HF's `trainer_state.json` of a checkpoint (global_step, max_steps, log_history, ...)."""
    path = Path(ckpt) / TRAINER_STATE_NAME
    if not path.is_file():
        raise CheckpointError(f"{ckpt} has no {TRAINER_STATE_NAME}; it is incomplete: delete it and resume")
    return json.loads(path.read_text(encoding="utf-8"))


def assert_adapter_only(ckpt: str | Path) -> None:
    """Raise unless `ckpt` holds adapter weights and no full-model weights file."""
    root = Path(ckpt)
    full = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.name in FULL_MODEL_FILES)
    if full:
        raise CheckpointError(
            f"checkpoint {root} contains full-model weights {full}; pass a peft model to the trainer "
            "so only the adapter is saved"
        )
    if not any((root / f).is_file() for f in ADAPTER_FILES):
        raise CheckpointError(f"checkpoint {root} has no adapter weights ({' or '.join(ADAPTER_FILES)})")


def build_meta(profile: str, stage: int, step: int) -> CheckpointMeta:
    """Collect versions and git sha for a sidecar."""
    from cells.step_01_setup import git_sha, package_versions

    return CheckpointMeta(
        profile=profile,
        stage=stage,
        step=step,
        versions=tuple(sorted(package_versions(META_PACKAGES))),
        git_sha=git_sha(),
        created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )


def write_meta(ckpt: str | Path, meta: CheckpointMeta) -> Path:
    """Write the sidecar into `ckpt` (atomically: temp file then rename)."""
    path = Path(ckpt) / META_NAME
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(meta.to_dict(), indent=2, sort_keys=True), encoding="utf-8")
    tmp.replace(path)
    return path


def read_meta(ckpt: str | Path) -> CheckpointMeta:
    """Read a checkpoint's sidecar."""
    path = Path(ckpt) / META_NAME
    if not path.is_file():
        raise CheckpointError(f"{ckpt} has no {META_NAME}; it was not written by the DriftCall stage runner")
    return CheckpointMeta.from_dict(json.loads(path.read_text(encoding="utf-8")))


def load_adapter_weights(model: Any, ckpt: str | Path, adapter_name: str = "default") -> None:
    """Load a checkpoint's (or adapter dir's) LoRA weights into `model`'s adapter, in place."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    path = Path(ckpt) / ADAPTER_FILES[0]
    if not path.is_file():
        raise CheckpointError(f"{ckpt} has no {ADAPTER_FILES[0]} to load")
    result = set_peft_model_state_dict(model, load_file(str(path)), adapter_name=adapter_name)
    unexpected = getattr(result, "unexpected_keys", None) or []
    if unexpected:
        raise CheckpointError(f"adapter in {ckpt} does not match the model: unexpected keys {unexpected[:3]}")


def adapter_state(model: Any, adapter_name: str = "default") -> dict[str, Any]:
    """A detached CPU copy of the model's adapter weights (for comparisons and tests)."""
    from peft import get_peft_model_state_dict

    state = get_peft_model_state_dict(model, adapter_name=adapter_name)
    return {k: v.detach().cpu().clone() for k, v in state.items()}
