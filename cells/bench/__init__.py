"""Every benchmark (speed, throughput, the scripted players' contract), one `python -m cells bench <what>` each;
`--docs` also writes its output into its block of `docs/benchmarks.md` (the command, commit and date on the
block's first line), also when a check fails: the block then shows the FAIL lines, never an older pass.

    python -m cells bench env [--episodes 300]       expert episodes/s, env steps/s, reward-time share
    python -m cells bench policies [--seeds 500]     the scripted players per stage x language; PASS/FAIL checks
    python -m cells bench drift [--per-instance 1]   every generated drift instance: expert and naive, per family
    python -m cells bench server                     steps/s and latency against OpenEnv's own floor
    python -m cells bench train --profile cpu-learn  SFT tokens/s, GRPO s/step, rollout tokens/s vs plain TRL
    python -m cells bench copy --profile cpu-learn   what copy pretraining teaches the tiny model to copy
    python -m cells bench scale --processes 2        GRPO s/step of 1 process against N, same global batch
    python -m cells bench voice                      the voice boundary's round trip per language
    python -m cells bench trl --run-dir runs/cpu-learn  stock TRL + DriftCallToolEnv: s/step vs ours, learning

Each bench lives in its own module here, imported only when asked for. Experiments that train or evaluate models
(the controls, the drift-split evaluation, the learning curve) live in `cells/experiments/`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

# The benches that live in their own module (its `main(argv)` runs them).
_MODULE_BENCHES = {
    "server": "cells.bench.serving",  # steps/s and latency against OpenEnv's own floor
    "train": "cells.bench.training_speed",  # SFT tokens/s, GRPO s/step, rollout tokens/s, plain-TRL floor
    "voice": "cells.bench.voice",  # the voice boundary's round trip: CER and slot survival per language
    "copy": "cells.bench.copy",  # what copy pretraining teaches the tiny model to copy, per kind of string
    "scale": "cells.bench.scale",  # GRPO s/step of 1 process against N, same global batch
    "drift": "cells.bench.drift_instances",  # every generated drift instance bites and is solvable, per family
    "trl": "cells.bench.stock_trl",  # TRL's stock GRPOTrainer on DriftCallToolEnv: s/step vs ours, held-out gain
}
# Every `python -m cells bench <what>`; the CLI's parser offers these (cells/__main__.py).
BENCHES = ("env", "policies", *_MODULE_BENCHES)


DOCS = "docs/benchmarks.md"  # where `--docs` writes each bench's block (`bench:<what>`)


class _Tee:
    """A stdout that also keeps what it was given (the bench's printed summary, for `--docs`)."""

    def __init__(self, out: Any) -> None:
        self.out, self.parts = out, []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return self.out.write(text)

    def flush(self) -> None:
        self.out.flush()


def _split_docs(argv: list[str]) -> tuple[list[str], str | None]:
    """`argv` without `--docs [FILE]`, and the file to write (None when the flag is absent)."""
    if "--docs" not in argv:
        return argv, None
    i = argv.index("--docs")
    rest = argv[i + 1:]
    if rest and not rest[0].startswith("-"):
        return argv[:i] + rest[1:], rest[0]
    return argv[:i] + rest, DOCS


def write_docs(what: str, argv: list[str], printed: str, path: str = DOCS) -> str:
    """Write what `python -m cells bench <what> <argv>` printed into its block of `path` (`bench:<what>`), with
    the command, commit and date on the block's first line; returns the path."""
    from cells.evaluation import docblocks

    command = " ".join(["python -m cells bench", what, *argv])
    block = docblocks.render(f"bench:{what}", f"python -m cells bench {what} --docs", f"```text\n{printed.strip()}\n```",
                             run_command=command)
    return str(docblocks.write_block(Path(path), f"bench:{what}", block))


def main(argv: list[str]) -> int:
    """`bench env [--episodes N]` | `bench policies [--seeds N]` (env_policies.py) | `bench drift`
    (drift_instances.py) | `bench server [...]` (serving.py) | `bench train [--profile cpu-learn]`
    (training_speed.py) | `bench scale [--processes 2]` (scale.py) | `bench voice` (voice.py) | `bench copy
    [--profile cpu-learn]` (copy.py) | `bench trl [--run-dir R]` (stock_trl.py).

    Any of them with `--docs [FILE]` also writes what it printed into its block of `docs/benchmarks.md`."""
    import contextlib
    import sys

    argv, docs = _split_docs(list(argv))
    if docs is None:
        return _run(argv)
    tee = _Tee(sys.stdout)
    with contextlib.redirect_stdout(tee):
        # bench policies' exploit table goes to docs/judge.md beside the rules; with another FILE, into that FILE
        code = _run(argv, judge_doc=_judge_doc() if docs == DOCS else docs)
    # Written whatever the exit code: a bench that misses a target prints which (PASS/FAIL lines), and a block
    # left as it was would go on showing an older commit's pass
    path = write_docs(argv[0], argv[1:], ''.join(tee.parts), docs)
    print(f"[bench] wrote {path}" + ("" if code == 0 else f" (exit code {code}: its block shows what failed)"))
    return code


def _judge_doc() -> str:
    from cells.step_08_rewards import JUDGE_DOC

    return JUDGE_DOC


def _run(argv: list[str], judge_doc: str | None = None) -> int:
    """Run one bench; `judge_doc`: where `bench policies` also writes its exploit table (`judge:exploits`)."""
    import argparse
    import importlib

    if argv[:1] and argv[0] in _MODULE_BENCHES:
        return importlib.import_module(_MODULE_BENCHES[argv[0]]).main(argv[1:])

    from cells.bench.env_policies import bench_env, play_table, print_env, print_policies

    parser = argparse.ArgumentParser(prog="python -m cells bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("env", "policies"))
    parser.add_argument("--episodes", type=int, default=300, help="bench env: expert episodes per stage")
    parser.add_argument("--seeds", type=int, default=500, help="bench policies: held-out seeds per stage")
    args = parser.parse_args(argv)
    if args.what == "env":
        print_env(bench_env(args.episodes))
        return 0
    t0 = time.perf_counter()
    rows = play_table(args.seeds)
    ok = print_policies(rows)
    print(f"\n{len(rows)} episodes in {time.perf_counter() - t0:.1f}s")
    if ok and judge_doc is not None:  # unlike the benchmarks block, this table carries no FAIL lines to show
        from cells.bench.env_policies import write_exploit_table

        print(f"[bench] wrote {write_exploit_table(rows, ' '.join(['python -m cells bench', *argv]), judge_doc)}")
    return 0 if ok else 1
