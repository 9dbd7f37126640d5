"""Command line: `python -m cells list | run --profile NAME [--steps 4-7] | bench env | results | control | splits
| curve | diagnose | serve | judge | profiles | families`."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any


def _cmd_list(_: argparse.Namespace) -> int:
    from cells.pipeline import STEPS

    for step in STEPS:
        print(f"{step.number:>2}  {step.module:<24} {step.summary}")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    from cells.modeling.sources import is_local_model
    from cells.pipeline import run
    from cells.step_02_profiles import get_profile

    profile = get_profile(args.profile)
    if is_local_model(args.model or profile.model_id):
        # A local model never needs the network; without this a hub lookup takes ~50 s to fail.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from cells.distributed import end_other_process

    ctx = run(args.profile, steps=args.steps, run_dir=args.run_dir, fresh=args.fresh, model=args.model,
              seed=args.seed, knobs=args.set or ())
    end_other_process()  # several processes: the main one reports (cells.distributed)
    total = sum(ctx.timings.values())
    print(f"done: steps {ctx.completed} in {total:.1f}s; run dir {ctx.run_dir}")
    if "report_md" in ctx.artifacts:
        print(f"report: {ctx.artifacts['report_md']}")
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    from cells.bench import main as bench_main

    return bench_main([args.what, *args.rest])


def _cmd_results(args: argparse.Namespace) -> int:
    from cells.commands.results import main as results_main

    return results_main(["--run-dir", args.run_dir, "--readme", args.readme, "--glance", args.glance,
                         "--assets", args.assets]
                        + (["--print"] if args.print else []))


def _cmd_control(args: argparse.Namespace) -> int:
    only = ["--train-only"] if args.train_only else []
    if args.lora and not args.raft:
        raise SystemExit("control: --lora goes with --raft (the SFT-only control trains every weight)")
    if args.raft:  # control (b), built on control (a)'s module
        from cells.experiments.raft import main as raft_main

        return raft_main(["--run-dir", args.run_dir, *only, *(["--lora"] if args.lora else [])])
    from cells.experiments.control import main as control_main

    return control_main(["--run-dir", args.run_dir, *only])


def _cmd_splits(args: argparse.Namespace) -> int:
    from cells.experiments.drift_split import main as splits_main

    return splits_main(args.extra)  # its flags live in its own parser: `python -m cells splits --help`


def _cmd_curve(args: argparse.Namespace) -> int:
    from cells.experiments.curve import main as curve_main

    return curve_main(args.extra)  # its flags live in its own parser: `python -m cells curve --help`


def _cmd_diagnose(args: argparse.Namespace) -> int:
    from cells.commands.diagnose import main as diagnose_main

    return diagnose_main(args.extra)  # its flags live in its own parser: `python -m cells diagnose --help`


def _cmd_judge(args: argparse.Namespace) -> int:
    from pathlib import Path

    from cells.evaluation import reward_docs
    from cells.evaluation.docblocks import render, write_block
    from cells.step_08_rewards import JUDGE_DOC, judge_rules_markdown

    text, formula = judge_rules_markdown(), reward_docs.reward_formula_markdown()
    if not args.docs:
        print(text + "\n" + formula)
        return 0
    command = "python -m cells judge --docs"
    path = write_block(Path(JUDGE_DOC), "judge:rules", render("judge:rules", command, text), append=False)
    print(f"wrote the judge's rules into {path}")
    for doc, commit in reward_docs.REWARD_DOCS:
        block = render(reward_docs.BLOCK, command, formula, commit=commit)
        print(f"wrote the reward formula into {write_block(Path(doc), reward_docs.BLOCK, block, append=False)}")
    return 0


def _cmd_profiles(args: argparse.Namespace) -> int:
    from pathlib import Path

    from cells.evaluation.docblocks import render, write_block
    from cells.step_02_profiles import PROFILE_DOCS, knobs_markdown, presets_markdown

    bodies = {"profiles:presets": presets_markdown(), "profiles:knobs": knobs_markdown()}
    if not args.docs:
        print("\n".join(bodies.values()))
        return 0
    command = "python -m cells profiles --docs"
    for path, name, commit in PROFILE_DOCS:
        write_block(Path(path), name, render(name, command, bodies[name], commit=commit), append=False)
        print(f"wrote {name} into {path}")
    return 0


def _cmd_families(args: argparse.Namespace) -> int:
    from pathlib import Path

    from cells.drift.families import FAMILIES_DOC
    from cells.evaluation.docblocks import render, write_block
    from cells.step_06_drift import families_doc_markdown

    text = families_doc_markdown()
    if not args.docs:
        print(text)
        return 0
    command = "python -m cells families --docs"
    path = write_block(Path(FAMILIES_DOC), "drift:families", render("drift:families", command, text, commit=""),
                       append=False)
    print(f"wrote the drift families into {path}")
    return 0


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _cmd_serve(args: argparse.Namespace) -> int:
    from cells.openenv_env import DRIFT_ENV
    from cells.server.app import serve
    from cells.server.middleware import Limits

    if args.drift:  # every session and env worker reads it (cells/openenv_env.py)
        os.environ[DRIFT_ENV] = args.drift
    limits = Limits(max_sessions=args.max_sessions, session_ttl_s=args.session_ttl, send_timeout_s=args.send_timeout)
    serve(args.host, args.port, args.stage, limits=limits, insecure_local=args.insecure_local,
          env_workers=args.env_workers)
    return 0


def _command(sub: Any, name: str, help: str, **kwargs: Any) -> argparse.ArgumentParser:
    """Subcommand `name`: `help` is its line in `python -m cells --help` and the description of its own `--help`."""
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help, description=help, **kwargs)
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The CLI's parser: every subcommand with its one-line help (tests/test_cli.py checks them against the README's
    command table and against each command's own `--help`)."""
    from cells.bench import BENCHES
    from cells.step_02_profiles import DRIFT_SOURCES, PROFILES

    parser = argparse.ArgumentParser(prog="python -m cells", description="DriftCall: the pipeline and its tools.")
    sub = parser.add_subparsers(dest="command", required=True)
    _command(sub, "list", "List the pipeline steps.").set_defaults(func=_cmd_list)
    p_run = _command(sub, "run", "Run pipeline steps for a profile.")
    p_run.add_argument("--profile", default="cpu-smoke", help=", ".join(PROFILES))
    p_run.add_argument("--model", default=None,
                       help="replace the profile's pretrained model: a Hub id, a local directory, a .gguf file or a "
                            "packaged model (cpu-gemma, colab-*)")
    p_run.add_argument("--set", action="append", metavar="KNOB=VALUE",
                       help="replace one knob of the profile for an experiment (repeatable; the value as JSON, e.g. "
                            "--set learning_rate=0.003 --set grpo_resample_on=success); use its own --run-dir")
    p_run.add_argument("--seed", type=int, default=None,
                       help="replace the profile's seed (RNGs, data order, the tiny model's build; held-out seeds stay "
                            "frozen), e.g. a second run with --run-dir runs/cpu-learn-seed2 to see how far results move")
    p_run.add_argument("--steps", default=None, help="e.g. 4-7 or 1,3,5 (default: all)")
    p_run.add_argument("--run-dir", default=None, help="default: runs/<profile>")
    p_run.add_argument("--fresh", action="store_true",
                       help="delete <run-dir>/training/ at the first training step and retrain (default: reuse the "
                            "warm start and checkpoints there, only if made with the same knobs)")
    p_run.set_defaults(func=_cmd_run)
    p_bench = _command(sub, "bench", f"Benchmarks: {', '.join(BENCHES)} (`python -m cells bench <what> --help`).")
    p_bench.add_argument("what", choices=BENCHES)
    p_bench.add_argument("rest", nargs=argparse.REMAINDER, help="the bench's own arguments, and --docs")
    p_bench.set_defaults(func=_cmd_bench)
    p_results = _command(sub, "results", "Write a finished run's results into docs/results.md and the README's "
                                         "glance block (cells/commands/results.py).")
    p_results.add_argument("--run-dir", default="runs/cpu-learn")
    p_results.add_argument("--readme", default="docs/results.md", help="the file holding the results sections")
    p_results.add_argument("--glance", default="README.md", help="the file whose results-at-a-glance block is rewritten")
    p_results.add_argument("--assets", default="docs/results", help="where the plot is written")
    p_results.add_argument("--print", action="store_true", help="print the section instead of writing the file")
    p_results.set_defaults(func=_cmd_results)
    p_control = _command(sub, "control", "SFT-only control for a finished CPU run's GRPO (cells/experiments/control.py); "
                                         "--raft: the rejection-sampling control (cells/experiments/raft.py).")
    p_control.add_argument("--run-dir", default="runs/cpu-learn")
    p_control.add_argument("--raft", action="store_true", help="control (b) instead: rejection-sampling SFT on the "
                           "model's own successful rollouts (cells/experiments/raft.py)")
    p_control.add_argument("--train-only", action="store_true", help="train and save the control, no evaluation: "
                           "for development comparisons with `diagnose --reach --control`")
    p_control.add_argument("--lora", action="store_true", help="with --raft: train GRPO's LoRA at GRPO's learning rate "
                           "instead of every weight (training/raft_lora_control)")
    p_control.set_defaults(func=_cmd_control)
    p_splits = _command(sub, "splits", "A finished CPU run's models on held-out episodes stratified by drift split: "
                                       "demonstrated, reinforced, unseen; pools, curves and model sizes from saved "
                                       "records (cells/experiments/drift_split.py; --help there).", add_help=False)
    p_splits.set_defaults(func=_cmd_splits)
    p_curve = _command(sub, "curve", "A finished CPU run's GRPO checkpoints on held-out episodes of its drift split's "
                                     "pattern sets: the learning curve (cells/experiments/curve.py; --help there).",
                       add_help=False)
    p_curve.set_defaults(func=_cmd_curve)
    p_judge = _command(sub, "judge", "What success means, what each offence costs and how the reward combines, from "
                                     "the declarations (BINDING_FACTS in cells/tasks/catalog.py, step 8's PENALTY and "
                                     "weights).")
    p_judge.add_argument("--docs", action="store_true", help="write them into docs/judge.md and the reward formula "
                                                             "into the README, docs/design.md and docs/contributing.md "
                                                             "instead of printing")
    p_judge.set_defaults(func=_cmd_judge)
    p_profiles = _command(sub, "profiles", "The presets and every profile knob: default, scope, what it sets "
                                           "(declared in cells/profiles/).")
    p_profiles.add_argument("--docs", action="store_true",
                            help="write them into README.md and docs/profiles.md instead of printing")
    p_profiles.set_defaults(func=_cmd_profiles)
    p_families = _command(sub, "families", "The drift families and how each generated split places their instances "
                                           "(declared in cells/data/drift_families.yaml).")
    p_families.add_argument("--docs", action="store_true", help="write them into docs/design.md instead of printing")
    p_families.set_defaults(func=_cmd_families)
    p_diag = _command(sub, "diagnose", "Where a CPU run's models fail: its warm start's bookings, or --failures, "
                                       "--probe, --refusals, --dev, --reach (cells/commands/diagnose.py; --help "
                                       "there).", add_help=False)
    p_diag.set_defaults(func=_cmd_diagnose)
    p_serve = _command(sub, "serve", "Serve the env over OpenEnv (token from DRIFTCALL_TOKEN; see README).")
    p_serve.add_argument("--host", default="127.0.0.1")
    p_serve.add_argument("--port", type=int, default=8000)
    p_serve.add_argument("--stage", type=int, choices=(1, 2, 3), default=1)
    p_serve.add_argument("--max-sessions", type=int, default=64, help="concurrent WebSocket sessions (429 above)")
    p_serve.add_argument("--session-ttl", type=float, default=300.0, help="idle seconds before a session expires")
    p_serve.add_argument("--send-timeout", type=float, default=30.0,
                         help="seconds a client may leave a reply unread before its session is reset and freed")
    p_serve.add_argument("--insecure-local", action="store_true", help="no agent token; loopback hosts only")
    p_serve.add_argument("--drift", choices=DRIFT_SOURCES, default=None,
                         help="which drifts sessions meet: the hand-written catalogue (default), the generated "
                              "families' instances, or both (sets DRIFTCALL_DRIFT)")
    p_serve.add_argument("--env-workers", type=_non_negative, default=None,
                         help="run the sessions' envs in N worker processes (0: on the event loop); default 1 on a "
                              "host with 2+ CPU cores, 0 on one (docs/serving.md)")
    p_serve.set_defaults(func=_cmd_serve)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and getattr(args, "func", None) not in (_cmd_diagnose, _cmd_curve, _cmd_splits):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra  # diagnose's, curve's and splits' own arguments, parsed by their modules' `main`
    from cells.errors import DriftCallError

    try:
        return int(args.func(args))
    except DriftCallError as exc:  # the project's own errors say what to do: one line, no traceback
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
