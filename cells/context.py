"""What a run hands from step to step: the `Context` every step's `run(ctx)` reads and writes, and `RuntimeInfo`, the
record of where it runs (step 1 fills it).

It sits at the bottom of the package: it imports no step and nothing above the profile, so every step can take it
and the runner (`cells.pipeline`: the step registry and `run`) can import every step without a circle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from cells.profiles.profile import Profile


@dataclass(frozen=True)
class RuntimeInfo:
    """Where we are running: Colab or not, which accelerator, and key package versions."""

    on_colab: bool
    device: str  # "cuda" or "cpu"
    gpu_name: str | None
    gpu_memory_gb: float | None
    bf16_supported: bool
    python: str
    versions: tuple[tuple[str, str], ...]
    git_sha: str | None

    def version_of(self, package: str) -> str | None:
        return dict(self.versions).get(package)


@dataclass
class Context:
    """State handed from step to step.

    The profile and run directory are fixed at creation; every other slot is filled by the
    step named in its comment. `artifacts` maps a short name to a file a step wrote.
    `model` and `tokenizer` stay `Any`: a plain transformers model, a peft model or an Unsloth one, and a
    transformers or tiny local tokenizer, depending on the profile (step 12's `boot_path`).
    """

    profile: Profile
    run_dir: Path
    runtime: RuntimeInfo | None = None  # step_01
    # step_10: per stage, a callable returning a fresh `DriftCallEnv` (typed loosely: the env sits above this module)
    env_factory: dict[int, Callable[[], Any]] | None = None
    model: Any = None  # step_12
    tokenizer: Any = None  # step_12
    # Steps 15-17: "warm_start" (WarmStartResult), "warm_start_eval" (WarmStartEval), "stage<N>" (stage result),
    # "stage<N>_signal" (zero-variance shares), "copy_pretrain", "warm_start_checkpoints".
    trainer_state: dict[str, Any] = field(default_factory=dict)
    reports: dict[str, Any] = field(default_factory=dict)  # steps 18-22: eval specs, records, reports
    artifacts: dict[str, Path] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    # Step modules that only reloaded finished training this session (steps 15-17 found it on disk): their
    # timings.json entries keep the time of the invocation that did the work.
    reused_steps: set[str] = field(default_factory=set)
    peak_memory_mb: dict[str, float] = field(default_factory=dict)  # process peak RSS at the end of each step
    completed: list[int] = field(default_factory=list)
    # --fresh: the first training step (15-17) deletes run_dir/training/ and resets this to False;
    # otherwise a run dir's warm start and checkpoints are reused only if made with the same knobs.
    fresh: bool = False
