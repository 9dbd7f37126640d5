"""Adapter-only checkpoints with a `driftcall_meta.json` sidecar.

A checkpoint is what HF `Trainer` writes to `<stage_dir>/checkpoint-<global_step>` for a PEFT
model: the LoRA adapter (`adapter_model.safetensors`, plus TRL's frozen `ref/` adapter when KL is
on), `optimizer.pt`, `scheduler.pt`, `rng_state.pth`, `trainer_state.json`, `training_args.bin`,
the tokenizer files, and our sidecar naming the profile, stage, step, library versions and git
sha. Never full-model weights: `assert_adapter_only` enforces it at every save.

Provenance: the sidecar also holds the resolved profile and the knobs the output depends on
(`stage_knobs`: stage 0 is the warm start, 1-3 the GRPO stages) with their digest (sha256 of
canonical JSON). Before a run directory's warm start or checkpoint is reused, `check_reusable`
compares the recorded digest with the current one and raises `RunDirMismatchError` naming the
knobs that differ, before any weights are loaded. The warm-start adapter carries the same sidecar.

Only the standard library at module level (torch/safetensors/peft are imported where used).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cells.errors import DriftCallError
from cells.profiles.profile import knob_differences
from cells.step_02_profiles import knobs_in_scope

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


# From each knob's declared scope (`step_02_profiles.knob`): the fields that never change what training produces
# (evaluation sizes, bookkeeping), and those only the GRPO stages read (the warm start, stage 0, ignores them).
# A knob of scope "training" counts for every stage, and "training" is `knob`'s default scope, so a newly added
# knob is compared rather than silently ignored.
NOT_TRAINING_KNOBS = knobs_in_scope("evaluation", "run")
GRPO_ONLY_KNOBS = knobs_in_scope("grpo")
ADAPTER_KNOBS = knobs_in_scope("adapter")  # the warm start reads them only when it trains the LoRA
WAYS_ON = (
    "Two ways on: train into a new run directory (`python -m cells run --run-dir NEW_DIR`; notebook: "
    "DRIFTCALL_RUN_DIR=NEW_DIR), or start the training stages over in this one (`--fresh`; notebook: "
    "DRIFTCALL_FRESH=1, or `ctx.fresh = True` and re-run from the step 15 cell), which deletes its "
    "training/ folder (warm start, checkpoints, metrics.csv) first."
)


class CheckpointError(DriftCallError, RuntimeError):
    """A checkpoint is missing, incomplete, or holds something it must not (full weights)."""


class RunDirMismatchError(CheckpointError, ValueError):
    """A run directory holds a warm start or checkpoint produced under other knobs or another profile.

    A user-input problem (hence also a ValueError: the CLI prints it without a traceback).
    `differences` maps each differing knob to (recorded, current); `reason` replaces the list
    when there is nothing to compare (no sidecar).
    """

    def __init__(self, path: Path, what: str, differences: dict[str, tuple[Any, Any]], reason: str = "") -> None:
        self.path, self.what, self.differences = Path(path), what, dict(differences)
        shown = "; ".join(f"{k}: {_show(old)} -> {_show(new)}" for k, (old, new) in sorted(self.differences.items()))
        detail = reason or f"it was produced with different settings ({shown})"
        super().__init__(f"{self.path} ({what}) is not reused: {detail}. {WAYS_ON}")


_MISSING = object()


def _show(value: Any) -> str:
    return "(absent)" if value is _MISSING else json.dumps(value, sort_keys=True)


@dataclass(frozen=True)
class CheckpointMeta:
    """The sidecar written next to every checkpoint."""

    profile: str
    stage: int
    step: int
    versions: tuple[tuple[str, str], ...]
    git_sha: str | None
    created_at: str  # ISO-8601 UTC; metadata only, never read back into training
    knobs: dict[str, Any] | None = None  # `stage_knobs` of the run that wrote it (None: written before provenance)
    knobs_digest: str | None = None  # `knobs_digest(knobs)`
    resolved_profile: dict[str, Any] | None = None  # the whole profile, for the record

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "stage": self.stage,
            "step": self.step,
            "versions": dict(self.versions),
            "git_sha": self.git_sha,
            "created_at": self.created_at,
            "knobs": self.knobs,
            "knobs_digest": self.knobs_digest,
            "resolved_profile": self.resolved_profile,
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
            knobs=data.get("knobs"),
            knobs_digest=data.get("knobs_digest"),
            resolved_profile=data.get("resolved_profile"),
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


def build_meta(profile: str, stage: int, step: int, knobs: dict[str, Any] | None = None,
               resolved_profile: dict[str, Any] | None = None) -> CheckpointMeta:
    """Collect versions, git sha and (when given) the knobs and their digest for a sidecar."""
    from cells.step_01_setup import git_sha, package_versions

    return CheckpointMeta(
        profile=profile,
        stage=stage,
        step=step,
        versions=tuple(sorted(package_versions(META_PACKAGES))),
        git_sha=git_sha(),
        created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        knobs=None if knobs is None else dict(knobs),
        knobs_digest=None if knobs is None else knobs_digest(knobs),
        resolved_profile=resolved_profile,
    )


# ---------------------------------------------------------------- provenance: which knobs made a run dir


def _flatten(value: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, item in value.items():
        if isinstance(item, dict):
            out.update(_flatten(item, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = item
    return out


def stage_knobs(profile: Any, stage: int) -> dict[str, Any]:
    """The profile knobs the warm start (`stage` 0) or GRPO stage 1-3's output depends on.

    Flat (`tiny.hidden_size`), JSON values (tuples become lists), keyed `profile` for the name.
    A GRPO stage continues the warm start and the earlier stages, so it depends on every training
    knob (a stage's own `steps_per_stage` entry and the total both shape its cosine schedule).
    """
    from cells.step_04_datatypes import canonical_json

    data = json.loads(canonical_json(profile.to_dict()))
    data["profile"] = data.pop("name")
    return _flatten({k: v for k, v in data.items() if k not in knobs_not_read(profile, stage)})


def knobs_not_read(profile: Any, stage: int) -> frozenset[str]:
    """The knobs stage `stage`'s output never depends on: evaluation and bookkeeping always; at the warm start
    (stage 0) the GRPO-only ones, and the LoRA's shape too when the warm start trains every weight instead."""
    if stage != 0:
        return NOT_TRAINING_KNOBS
    return NOT_TRAINING_KNOBS | GRPO_ONLY_KNOBS | (ADAPTER_KNOBS if profile.warm_start_full else frozenset())


def knobs_digest(knobs: dict[str, Any]) -> str:
    """sha256 hex of the knobs' canonical JSON (never Python's per-process `hash()`)."""
    import hashlib

    from cells.step_04_datatypes import canonical_json

    return hashlib.sha256(canonical_json(knobs).encode("utf-8")).hexdigest()


def default_knobs() -> dict[str, Any]:
    """Every knob at `Profile`'s default, flat as `stage_knobs` writes them."""
    from cells.step_02_profiles import Profile

    return stage_knobs(Profile(), 1)


def no_longer_read(differences: dict[str, tuple[Any, Any]], defaults: dict[str, Any]) -> set[str]:
    """Knobs the sidecar recorded that this run's stage no longer depends on (a `Profile` knob absent from its
    knobs, e.g. the LoRA's shape at a full warm start, recorded before the stage dropped it): they change nothing.
    `defaults`: `default_knobs()`."""
    return {k for k, (_, new) in differences.items() if new is _MISSING and k in defaults}


def added_at_default(differences: dict[str, tuple[Any, Any]], defaults: dict[str, Any]) -> set[str]:
    """Knobs the sidecar never recorded (added to `Profile` after it was written) that this run leaves at their
    default: the default is what the code did before the knob existed, so they change nothing. `defaults`:
    `default_knobs()`."""
    from cells.step_04_datatypes import canonical_json

    return {k for k, (old, new) in differences.items()
            if old is _MISSING and k in defaults and canonical_json(defaults[k]) == canonical_json(new)}


def check_reusable(path: str | Path, knobs: dict[str, Any], what: str) -> CheckpointMeta:
    """Return `path`'s sidecar if it was produced with exactly `knobs`; else raise `RunDirMismatchError`.

    Reads only the small JSON sidecar, never weights, so a run dir of another profile (other
    tensor shapes) is refused before peft could fail on it. A sidecar without recorded knobs
    (written before provenance existed) or no sidecar at all is refused the same way. A knob added to
    `Profile` after the sidecar was written counts as unchanged while this run leaves it at its default, and so
    does one the sidecar recorded that this stage no longer reads (`no_longer_read`).
    """
    meta_path = Path(path) / META_NAME
    if not meta_path.is_file():
        raise RunDirMismatchError(Path(path), what, {},
                                  reason=f"it has no {META_NAME}, so the settings that produced it are unknown")
    meta = read_meta(path)
    if meta.knobs_digest == knobs_digest(knobs):
        return meta
    if meta.knobs is None:
        raise RunDirMismatchError(Path(path), what, {}, reason=f"its {META_NAME} predates recorded settings "
                                  f"(profile {meta.profile!r}), so they cannot be compared")
    differences = knob_differences(meta.knobs, knobs, absent=_MISSING)
    defaults = default_knobs()
    unchanged = added_at_default(differences, defaults) | no_longer_read(differences, defaults)
    if differences and set(differences) == unchanged:
        return meta
    differences = {k: v for k, v in differences.items() if k not in unchanged}
    if not differences:  # same values, stale digest algorithm: still not provably the same run
        differences = {"knobs_digest": (meta.knobs_digest, knobs_digest(knobs))}
    raise RunDirMismatchError(Path(path), what, differences)


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
