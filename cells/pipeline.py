"""The runner: the ordered step registry (`STEPS`) and `run(profile, steps)`, above every step.

The notebook builder, the CLI (`python -m cells run`) and the end-to-end tests all iterate
`STEPS`, so adding a step means adding one line here. The `Context` the steps hand on lives below
them, in `cells.context` (re-exported here); the runner imports the steps by name (`importlib`), so no
step imports the runner.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cells.context import Context  # re-exported: `from cells.pipeline import Context` keeps working
from cells.distributed import is_main_process, leave_process_group
from cells.errors import DriftCallError

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Collection

    from cells.profiles.profile import Profile


class PipelineError(DriftCallError, RuntimeError):
    """A step was asked for that does not exist, or ran out of order."""


class MissingInputError(PipelineError):
    """A step needs a Context slot that an earlier step fills, and that step has not run (yet)."""


class NoGpuError(PipelineError):
    """A GPU profile was asked for on a machine without CUDA; the message names the CPU profiles."""


@dataclass(frozen=True)
class StepInfo:
    """One registry entry: its number, module name, a one-line summary, and what it needs.

    `needs` lists `(slot, step)`: a Context slot (`"model"`, or `"reports.eval_spec"` for a key
    of a dict slot) that must be filled before this step runs, and the step that fills it.
    """

    number: int
    module: str
    summary: str
    needs: tuple[tuple[str, int], ...] = ()

    @property
    def import_path(self) -> str:
        return f"cells.{self.module}"


_MODEL = (("model", 12), ("tokenizer", 12))

STEPS: tuple[StepInfo, ...] = (
    StepInfo(1, "step_01_setup", "Detect the runtime, create the run directory, seed RNGs"),
    StepInfo(2, "step_02_profiles", "Resolve the profile (every knob the later steps need)"),
    StepInfo(3, "step_03_data", "Load and validate fixtures under cells/data with a sha256 manifest"),
    StepInfo(4, "step_04_datatypes", "Frozen data model shared by everything"),
    StepInfo(5, "step_05_vendors", "Five mock vendor APIs (16 tools)"),
    StepInfo(6, "step_06_drift", "Drift catalogue, schedules and mutations"),
    StepInfo(7, "step_07_tasks", "Seeded multilingual goal generator and simulated user facts"),
    StepInfo(8, "step_08_rewards", "Deterministic, hack-resistant reward with an explained breakdown"),
    StepInfo(9, "step_09_audio", "Voice boundary: espeak-ng TTS + Whisper ASR, offline (evaluation and demo only)"),
    StepInfo(10, "step_10_env", "DriftCallEnv: reset/step/step_text, notices, budgets, OpenEnv types"),
    StepInfo(11, "step_11_agent", "Prompt, action parser, scripted policies, rollout driver"),
    StepInfo(12, "step_12_model", "Model + tokenizer boot (Unsloth / transformers+peft / tiny local)"),
    StepInfo(13, "step_13_grpo_config", "GRPOConfig per profile and stage, BETA_KL, reward_fn"),
    StepInfo(14, "step_14_trainer", "Multi-turn GRPO trainer, dataset adapter, adaptive KL"),
    StepInfo(15, "step_15_train_stage1", "Warm start (SFT on expert trajectories) + GRPO without drift", _MODEL),
    StepInfo(16, "step_16_train_stage2", "GRPO with one drift per episode", _MODEL),
    StepInfo(17, "step_17_train_stage3", "GRPO with compound drift", _MODEL),
    StepInfo(18, "step_18_eval_baseline", "Reference policies + the model before GRPO on frozen held-out seeds"),
    StepInfo(19, "step_19_eval_final", "Trained model on the same seeds; paired statistics",
             (*_MODEL, ("reports.eval_spec", 18), ("reports.baseline_records", 18))),
    StepInfo(20, "step_20_probe", "Reward-hacking probe on disjoint seeds"),
    StepInfo(21, "step_21_plots", "Training curves, before/after bars, reliability diagram"),
    StepInfo(22, "step_22_summary", "Markdown report with every table"),
    StepInfo(23, "step_23_demo", "Interactive demo: play an episode turn by turn, inject a drift"),
    StepInfo(24, "step_24_export", "Export adapter (+ CPU base), tokenizer and metadata; reload check; Hub push",
             (*_MODEL, ("trainer_state.stage3", 17))),
    StepInfo(25, "step_25_conclusion", "The run in one table: every player on the same held-out seeds"),
)


def step_by_number(number: int) -> StepInfo:
    for step in STEPS:
        if step.number == number:
            return step
    valid = ", ".join(str(s.number) for s in STEPS)
    raise PipelineError(f"no step {number}; registered steps are {valid}")


def parse_step_range(spec: str | None) -> tuple[int, ...]:
    """Parse `"4-7"`, `"1,3,5"` or `"2"` into step numbers; None means every step."""
    if spec is None or spec.strip() == "":
        return tuple(s.number for s in STEPS)
    numbers: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                numbers.extend(range(lo, hi + 1))
            else:
                numbers.append(int(part))
        except ValueError as exc:
            raise PipelineError(f"bad step spec {spec!r}: use forms like '4-7', '1,3' or '2'") from exc
    for n in numbers:
        step_by_number(n)
    return tuple(dict.fromkeys(numbers))


def make_context(profile_name: str, run_dir: str | Path | None = None, fresh: bool = False,
                 model: str | None = None, seed: int | None = None, knobs: Sequence[str] = ()) -> Context:
    """Build a new Context for `profile_name` (run_dir defaults to the profile's).

    `fresh=True` makes the training steps start over instead of reusing `run_dir/training/`. `model` replaces
    the profile's `model_id` (a Hub id, directory, .gguf file or packaged model) for profiles that load one.
    `seed` replaces the profile's `seed` (RNGs, data order, the tiny model's build, bootstrap resamples; the
    held-out and probe seeds stay the frozen ones), e.g. to measure how far a result moves between seeds.
    `knobs` (`KNOB=VALUE` strings, `step_02_profiles.with_knobs`) change single knobs for an experiment.
    """
    from cells.step_02_profiles import ProfileError, get_profile, with_knobs

    profile = with_knobs(get_profile(profile_name), knobs)
    if model is not None:
        if profile.model_id is None:
            raise ProfileError(f"profile {profile_name!r} builds the tiny local model; --model needs a profile that "
                               "loads a pretrained one (cpu-gemma, colab-t4, colab-a100)")
        profile = dataclasses.replace(profile, model_id=model)
    if seed is not None:
        profile = dataclasses.replace(profile, seed=seed)
    path = Path(run_dir) if run_dir is not None else Path(profile.run_root) / profile.name
    return Context(profile=profile, run_dir=path, fresh=fresh)


def check_device(profile: Profile) -> None:
    """Before any step runs: refuse a GPU profile on a machine without CUDA (it would otherwise run the steps
    before step 12 and then fail loading its model), naming the CPU profiles to use instead."""
    if profile.is_cpu:
        return
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        import torch

        if torch.cuda.is_available():
            return
    from cells.step_02_profiles import PROFILES

    cpu = ", ".join(name for name, preset in PROFILES.items() if preset.is_cpu)
    raise NoGpuError(f"profile {profile.name!r} needs a CUDA GPU and this machine has none; "
                     f"use a CPU profile: {cpu}")


TRAINING_STEPS = frozenset({15, 16, 17})  # the steps that reuse or write run_dir/training/


def check_run_dir(ctx: Context, numbers: tuple[int, ...] | set[int]) -> None:
    """Before any step runs: refuse a run dir whose training output was made with other knobs.

    Only when a training step is selected; raises what steps 15-17 would raise later
    (`RunDirMismatchError`), but before step 12 loads a model. No-op with `ctx.fresh`.
    """
    if TRAINING_STEPS & set(numbers):
        from cells.training.stages import check_training_reusable

        check_training_reusable(ctx)


def _slot_filled(ctx: Context, slot: str) -> bool:
    name, _, key = slot.partition(".")
    value = getattr(ctx, name, None)
    return value is not None and (not key or (isinstance(value, dict) and key in value))


def check_needs(ctx: Context, info: StepInfo) -> None:
    """Raise `MissingInputError` naming the cell to run first when a needed slot is empty."""
    for slot, producer in info.needs:
        if not _slot_filled(ctx, slot):
            name, _, key = slot.partition(".")
            shown = f"ctx.{name}[{key!r}]" if key else f"ctx.{name}"
            source = step_by_number(producer)
            raise MissingInputError(f"step {info.number} ({info.module}) needs {shown}, which step {producer} "
                                    f"({source.module}) fills: run that cell first (`ctx = step(ctx, {producer})`)")


def run_step(ctx: Context, number: int, *, reload_edited: bool = False) -> Context:
    """Import step `number` and call its `run(ctx)`, recording the wall time.

    `reload_edited=True` (the notebook's cells) first re-imports project modules edited since they
    were loaded; command-line runs leave it off, so editing files during a long run changes nothing.
    """
    from cells.reloading import reload_edited_modules, remember_loaded_modules
    from cells.step_01_setup import peak_memory_mb

    info = step_by_number(number)
    if reload_edited:
        reload_edited_modules()
    check_needs(ctx, info)
    module = importlib.import_module(info.import_path)
    t0 = time.perf_counter()
    try:
        ctx = module.run(ctx)
    finally:
        if reload_edited:  # only notebook cells watch for edits; a CLI run never hashes sources
            remember_loaded_modules()  # what this step imported is now watched for edits
    ctx.timings[info.module] = time.perf_counter() - t0
    ctx.peak_memory_mb[info.module] = peak_memory_mb()
    ctx.completed.append(number)
    if is_main_process():
        save_timings(ctx)
    return ctx


LAST_TRAINING_STEP = 17  # under several processes, every process runs the steps up to it (cells.distributed)
TIMINGS_FILE = "timings.json"
MEMORY_FILE = "memory.json"


def save_timings(ctx: Context) -> None:
    """Merge this session's step wall times into `<run_dir>/timings.json` (seconds per step module) and the
    process's peak memory at the end of each step into `memory.json` (MiB; a rerun of a step overwrites its
    entry, except the time of a step that only reloaded finished training: `ctx.reused_steps`), so reports and
    the README can say how long each phase took and what it needed."""
    _merge_json(Path(ctx.run_dir) / TIMINGS_FILE, {k: round(v, 3) for k, v in ctx.timings.items()},
                keep_saved=ctx.reused_steps)
    _merge_json(Path(ctx.run_dir) / MEMORY_FILE, {k: round(v, 1) for k, v in ctx.peak_memory_mb.items()})


def _merge_json(path: Path, values: dict[str, float], keep_saved: Collection[str] = ()) -> None:
    """Update the JSON object in `path` with `values`; keys in `keep_saved` that it already has keep their value."""
    import json

    if not path.parent.is_dir():
        return
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        saved = {}
    saved.update({k: v for k, v in values.items() if k not in keep_saved or k not in saved})
    path.write_text(json.dumps(saved, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def run(profile: str, steps: str | None = None, run_dir: str | Path | None = None, fresh: bool = False,
        model: str | None = None, seed: int | None = None, knobs: Sequence[str] = ()) -> Context:
    """Run the registered steps (all by default) for `profile` (its model replaced by `model`, its seed by
    `seed`, single knobs by `knobs`: `KNOB=VALUE`) and return the final Context."""
    numbers = parse_step_range(steps)
    ctx = make_context(profile, run_dir, fresh=fresh, model=model, seed=seed, knobs=knobs)
    check_device(ctx.profile)
    check_run_dir(ctx, numbers)
    # Several processes (`cells.distributed`): the others print nothing (the main one prints the same lines;
    # errors still reach stderr) and stop after training, when all leave the process group; evaluation and
    # reports are the main process's.
    with contextlib.ExitStack() as quiet:
        if not is_main_process():
            quiet.enter_context(contextlib.redirect_stdout(quiet.enter_context(open(os.devnull, "w"))))
        # Step 1 always runs first: it creates the run directory and seeds RNGs every step relies on.
        if numbers[0] != 1:
            ctx = run_step(ctx, 1)
        for n in numbers:
            if n > LAST_TRAINING_STEP:
                leave_process_group()
                if not is_main_process():
                    break
            ctx = run_step(ctx, n)
        leave_process_group()
    return ctx
