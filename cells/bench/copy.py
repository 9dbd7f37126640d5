"""`python -m cells bench copy [--profile cpu-learn]`: what copy pretraining teaches the tiny model to copy.

It builds the profile's never-trained tiny model (the recipe and seed step 12 uses, in a temporary cache), runs
copy pretraining exactly as step 15 does (`copy_pretrain` with the profile's cap, stop loss and seed, on
`TRAIN_KINDS`), and prints `copy_accuracy` per kind of `COPY_KINDS`. Then it goes on with every kind mixed,
`--mixed-steps` more steps in chunks, printing the accuracy after each: whether a longer copy phase would teach
the repeat-heavy strings the agent actually copies (ids one token a character, family name lists).
`--from-scratch` trains every kind mixed from the start instead (~6 min for cpu-learn: it does not reach the
stop loss and runs to the cap). `--tiny FIELD=N` (repeatable) changes the model's shape, e.g.
`--tiny num_attention_heads=4 --tiny num_key_value_heads=2 --tiny head_dim=24`: does another shape copy better?
~4 min for cpu-learn to the stop loss, then ~30 s per 250 mixed steps, on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path
from typing import Any


def bench_copy(profile_name: str, mixed_steps: int, chunk: int, progress: bool = True,
               from_scratch: bool = False, tiny: dict[str, int] | None = None) -> list[dict[str, object]]:
    """Rows of (phase, steps so far, seconds, loss, accuracy per kind); printed as they come. `from_scratch`:
    train every kind mixed from the start instead of step 15's uniform strings (same cap, stop loss and seed).
    `tiny`: fields of the profile's `TinyModelRecipe` to change (the model's shape)."""
    from cells.modeling.tiny import build_or_load_tiny
    from cells.step_02_profiles import get_profile
    from cells.training.induction import COPY_KINDS, TRAIN_KINDS, CopyPretrainError, copy_pretrain

    profile = get_profile(profile_name)
    if profile.tiny is None or profile.copy_pretrain_max_steps <= 0:
        raise CopyPretrainError(f"profile {profile_name!r} has no tiny model or no copy pretraining "
                                "(copy_pretrain_max_steps=0): nothing to measure")
    if mixed_steps < 0 or chunk <= 0:
        raise CopyPretrainError(f"--mixed-steps must be >= 0 and --chunk > 0 (got {mixed_steps}, {chunk})")
    recipe = reshaped(profile.tiny, tiny or {})
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="driftcall-bench-copy-") as tmp:
        model, tokenizer, _ = build_or_load_tiny(recipe, Path(tmp) / "tiny", profile.seed)
        params = sum(p.numel() for p in model.parameters())
        print(f"model: {params:,} parameters; {recipe}", flush=True)
        with _trainer_logs_to_stderr():
            result = copy_pretrain(model, tokenizer, Path(tmp) / "run", max_steps=profile.copy_pretrain_max_steps,
                                   stop_loss=profile.copy_pretrain_stop_loss, seed=profile.seed, progress=progress,
                                   kinds=COPY_KINDS if from_scratch else TRAIN_KINDS)
        first = "every kind mixed from the start" if from_scratch else "as step 15 (uniform, to the stop loss)"
        rows.append(_row(first, result.steps, result.seconds, result.final_loss, result.copy_accuracy))
        steps, seconds = result.steps, result.seconds
        # Each chunk is a fresh `copy_pretrain` (a new AdamW state, same constant learning rate), so the
        # accuracy can be read between chunks with the function step 15 calls.
        for i in range(-(-mixed_steps // chunk)):  # ceil: the last chunk may be shorter
            n = min(chunk, mixed_steps - i * chunk)
            with _trainer_logs_to_stderr():
                more = copy_pretrain(model, tokenizer, Path(tmp) / "run", max_steps=n, stop_loss=1e-9,
                                     seed=profile.seed + 1 + i, progress=progress, kinds=COPY_KINDS)
            steps, seconds = steps + more.steps, seconds + more.seconds
            rows.append(_row("then every kind mixed", steps, seconds, more.final_loss, more.copy_accuracy))
    return rows


def _trainer_logs_to_stderr() -> Any:
    """The trainer's log lines are progress, not the bench's result (`--docs` writes what reaches stdout)."""
    import contextlib
    import sys

    return contextlib.redirect_stdout(sys.stderr)


def reshaped(recipe: Any, changes: dict[str, int]) -> Any:
    """`recipe` with `changes` applied; unknown fields or values below 1 raise `CopyPretrainError`."""
    from cells.training.induction import CopyPretrainError

    known = {f.name for f in dataclasses.fields(recipe)}
    bad = sorted(set(changes) - known)
    if bad:
        raise CopyPretrainError(f"--tiny: no field {', '.join(bad)} in TinyModelRecipe (fields: {', '.join(sorted(known))})")
    if any(v < 1 for v in changes.values()):
        raise CopyPretrainError(f"--tiny values must be >= 1, got {changes}")
    return dataclasses.replace(recipe, **changes)


def _tiny_override(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    if not sep or not value.strip().lstrip("-").isdigit():
        raise argparse.ArgumentTypeError(f"expected FIELD=INTEGER, got {text!r}")
    return name.strip(), int(value)


def _row(phase: str, steps: int, seconds: float, loss: float, accuracy: dict[str, float]) -> dict[str, object]:
    row = {"phase": phase, "steps": steps, "seconds": round(seconds, 1), "loss": round(loss, 3), **accuracy}
    kinds = "  ".join(f"{k} {v:6.1%}" for k, v in accuracy.items())
    print(f"{phase:<40} {steps:>6,} steps {seconds:>6.0f}s  loss {loss:6.3f}  copied exactly: {kinds}", flush=True)
    return row


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m cells bench copy", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="cpu-learn")
    parser.add_argument("--mixed-steps", type=int, default=1000, help="steps on every kind mixed, after step 15's")
    parser.add_argument("--chunk", type=int, default=250, help="measure after every this many mixed steps")
    parser.add_argument("--from-scratch", action="store_true",
                        help="the first phase trains every kind mixed instead of step 15's uniform strings")
    parser.add_argument("--tiny", type=_tiny_override, action="append", default=[], metavar="FIELD=N",
                        help="change one field of the profile's tiny model shape (repeatable)")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    bench_copy(args.profile, args.mixed_steps, args.chunk, from_scratch=args.from_scratch, tiny=dict(args.tiny))
    print(f"\n{time.perf_counter() - t0:.0f}s in all; 200 held-out strings a kind (cells.training.induction.copy_accuracy)")
    return 0
