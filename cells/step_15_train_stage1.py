"""Step 15 - train stage 1: supervised warm start on expert trajectories, then GRPO without drift.

1. Warm start: the expert policy (step 11) plays `profile.sft_episodes` fresh episodes split evenly
   over `profile.sft_stages` (cpu profiles: 1-3, so drift handling is in the data), goals drawn with
   each stage's `language_weights`, plus `profile.sft_search_drills` search drills per conversation (a further
   fresh episode cut after its search call behind a system prompt of only the caller's time: the slot mapping,
   city or place or spoken date to its canonical value, seen more often per second),
   `profile.sft_booking_drills` booking drills (the same, cut after the first booking or order call: the choice a
   booking carries) and, in stages 2-3,
   `profile.sft_recovery_drills` recovery drills (a further fresh episode whose booking call was refused with the
   options still available, cut after the expert's new choice, behind the same prompt) and
   `profile.sft_year_turn_drills` year-turn drills (search drills on goals dated in the next calendar year, a
   January date asked for in December: `crosses_year`) and `profile.sft_field_drills` field drills (a search or
   booking call refused for a required argument it lacked, then sent with it; no loss on the refused call) and
   `profile.sft_item_field_drills` item-field drills (the same one level down: a field each element of a list
   argument must carry); TRL's `SFTTrainer` trains on them once each,
   batches grouped by length, loss on assistant tokens only (`cells.training.warm_start`, `cells.training.sft_data`).
   CPU profiles (`warm_start_full`) train ALL weights of the never-pretrained tiny model, save it to
   `training/warm_start/model` as the base, then wrap it with a fresh LoRA for GRPO (the KL reference
   is the warm-started model); GPU profiles train the LoRA and save `training/warm_start/adapter`.
   Before that SFT, `profile.copy_pretrain_max_steps` > 0 (cpu-learn) first trains the tiny model on a
   synthetic copy task until it copies (`cells.training.induction`: a never-pretrained model cannot copy the
   payment token or ids out of tool results; SFT alone did not teach it).
   A rerun with the saved warm start present loads it instead of training again. With
   `profile.warm_start_checkpoints` = k > 0 the model also plays the warm-start eval's held-out seeds greedily
   at k evenly spaced SFT steps (`HeldOutCheckpoints`: how success grows with training). Then the warm-started model plays
   `eval_plan(profile.warm_start_eval_per_cell)` held-out seeds greedily; the valid-action share and
   success per stage are printed and stored (`ctx.trainer_state["warm_start_eval"]`, a `WarmStartEval`),
   and `training/warm_start/warm_start.json` records the data size, tokens/s, checkpoints and that eval.
2. GRPO stage 1 (no drift) up to global step `steps_per_stage[0]`, checkpointing adapter-only
   with a `driftcall_meta.json` sidecar under `training/stage1/`, a row per step in
   `training/metrics.csv`. An interrupted stage resumes from its latest checkpoint on rerun. Each GRPO
   stage ends with `[stage N] zero-variance groups: ...` (share of groups whose G episodes all earned the
   same reward, so they trained nothing; `cells.training.signal`).

Reads `ctx.profile`, `ctx.model` (peft model; plain tiny model with `warm_start_full`), `ctx.tokenizer`,
`ctx.env_factory` (step 10's env factory per stage; built from the profile when step 10 has not run).
Writes `ctx.trainer_state["warm_start"|"warm_start_eval"|"stage1"|"stage1_signal"]`, `ctx.artifacts["warm_start_adapter"|
"stage1_checkpoint"|"metrics_csv"]`; `ctx.model` holds the trained adapter afterwards.
Run alone (after steps 1-14): `python -m cells run --profile cpu-smoke --steps 15`.
Time: cpu-smoke about a minute; cpu-learn about half an hour, nearly all of it the warm start (it prints its training
tokens/s; `python -m cells results` writes each phase's measured wall time into docs/results.md); colab-t4 has not been
run on a GPU yet: estimated from the cpu-gemma run, a ~5 min warm start, then 100 GRPO steps at ~15-25 s each
(docs/experiments/2026-12-04-cpu-gemma.md).

GRPO's stage runner and trainer wiring live with GRPO (`cells/training/grpo_stage.py`), shared by steps 15-17.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cells.distributed import is_main_process
from cells.training.sft_data import sft_plan_item, stage_split  # the warm start's data recipe

if TYPE_CHECKING:  # pragma: no cover
    from cells.context import Context
    from cells.training.warm_start import WarmStartEval, WarmStartResult

STAGE = 1


def expert_conversations_for(ctx: Context, n: int, stage: int) -> list[list[dict[str, Any]]]:
    """`n` fresh expert conversations (chat `messages` lists) of `stage` plus their search drills, on the
    stage's own block of training seeds (`sft_plan_item`)."""
    from cells.training.sft_data import generate_conversations

    return generate_conversations([sft_plan_item(ctx.profile, n, stage, stage - 1)], progress=n >= 500)


def warm_start_conversations(ctx: Context) -> list[list[dict[str, Any]]]:
    """`profile.sft_episodes` fresh expert conversations over `profile.sft_stages`, interleaved by stage."""
    per_stage = [expert_conversations_for(ctx, k, s) for s, k in stage_split(ctx.profile.sft_episodes,
                                                                              ctx.profile.sft_stages) if k]
    longest = max((len(c) for c in per_stage), default=0)
    return [convs[i] for i in range(longest) for convs in per_stage if i < len(convs)]


def warm_start(ctx: Context) -> WarmStartResult:
    """SFT on fresh expert conversations, or reuse a saved warm start.

    `profile.warm_start_full` (CPU): every weight of the plain tiny model trains; the result is saved to
    `training/warm_start/model` and `ctx.model` becomes that model wrapped with a fresh GRPO LoRA.
    Otherwise the LoRA adapter of `ctx.model` trains and is saved to `training/warm_start/adapter`.
    """
    from cells.training.checkpoints import load_adapter_weights
    from cells.training.stages import guard_warm_start, training_root
    from cells.training.warm_start import WarmStartResult

    p = ctx.profile
    out = training_root(ctx) / "warm_start"
    adapter = out / ("model" if p.warm_start_full else "adapter")
    guard_warm_start(ctx, adapter)  # --fresh, and refuse an adapter made with other knobs (before loading)
    if p.warm_start_full:
        result = _full_warm_start(ctx, out, adapter)
    elif (adapter / "adapter_model.safetensors").is_file():
        load_adapter_weights(ctx.model, adapter)
        result = WarmStartResult(adapter, 0, 0, 0, 0, ())
    else:
        result = _train(ctx, ctx.model, out)
    ctx.trainer_state["warm_start"] = result
    ctx.artifacts["warm_start_adapter"] = adapter
    return result


def _train(ctx: Context, model: Any, out: Path) -> WarmStartResult:
    """Generate the fresh expert episodes, tokenize them and run `SFTTrainer` (progress bars on each)."""
    import time

    from cells.training.sft_data import tokenization_workers, tokenize_all
    from cells.training.warm_start import sft_warm_start

    p = ctx.profile
    t0 = time.perf_counter()
    conversations = warm_start_conversations(ctx)
    t1 = time.perf_counter()
    dataset = tokenize_all(ctx.tokenizer, conversations, progress=True)
    print(f"[warm start] {len(conversations):,} examples: played in {t1 - t0:.0f}s, tokenized in "
          f"{time.perf_counter() - t1:.0f}s ({tokenization_workers(len(conversations))} processes)")
    steps = -(-len(dataset) // (p.sft_batch_size or p.num_generations)) * p.sft_epochs
    checkpoints = HeldOutCheckpoints(ctx, steps)
    result = sft_warm_start(
        model, ctx.tokenizer, dataset, out,
        learning_rate=p.sft_learning_rate, epochs=p.sft_epochs, batch_size=p.sft_batch_size or p.num_generations,
        max_length=p.max_prompt_tokens + p.max_episode_tokens,  # turn-0 prompt + the whole episode
        seed=p.seed, use_cpu=p.is_cpu, bf16=p.precision == "bf16", fp16=p.precision == "fp16",
        lr_scheduler_type=p.sft_lr_scheduler, warmup_ratio=p.sft_warmup_ratio,
        callbacks=[checkpoints.callback()] if p.warm_start_checkpoints > 0 else (),
    )
    ctx.trainer_state["warm_start_checkpoints"] = checkpoints.rows
    result = dataclasses.replace(result, seconds=result.seconds - checkpoints.eval_seconds,  # training time only
                                 cpu_seconds=result.cpu_seconds - checkpoints.eval_cpu_seconds)
    print(f"[warm start] {result.tokens:,} tokens ({result.trained_tokens:,} trained) in {result.seconds:.0f}s: "
          f"{result.tokens_per_s:,.0f} training tokens/s")
    return result


class HeldOutCheckpoints:
    """Greedy held-out play at `profile.warm_start_checkpoints` evenly spaced SFT steps (the last one excluded:
    step 15 evaluates the finished warm start anyway), so a run shows how success grows with training and
    whether more SFT would still pay. Each point plays the same `eval_plan(profile.warm_start_eval_per_cell)` as
    the final warm-start eval, so the points and the end are comparable."""

    def __init__(self, ctx: Context, total_steps: int) -> None:
        k = max(0, ctx.profile.warm_start_checkpoints)
        self.ctx = ctx
        self.at = {round(total_steps * i / (k + 1)) for i in range(1, k + 1)} - {0, total_steps}
        self.rows: list[dict[str, Any]] = []
        self.eval_seconds = 0.0  # spent inside trainer.train() on these plays, not on training
        self.eval_cpu_seconds = 0.0  # the same in this process's CPU time

    def evaluate(self, model: Any, step: int, seconds: float) -> None:
        """Play the held-out cases at SFT `step`, `seconds` of training (checkpoint plays excluded) in."""
        import time

        t0, c0 = time.perf_counter(), time.process_time()
        was_training = model.training
        model.eval()
        summary = play_held_out(self.ctx, model, max(1, self.ctx.profile.warm_start_eval_per_cell))
        model.train(was_training)
        self.rows.append({"step": step, "seconds": round(seconds, 1), **summary.to_dict()})
        print(f"[warm start] step {step} ({seconds / 60:.1f} min of SFT): {summary.line()}")
        self.eval_seconds += time.perf_counter() - t0
        self.eval_cpu_seconds += time.process_time() - c0

    def callback(self) -> Any:
        import time

        from transformers import TrainerCallback

        outer, t0 = self, time.perf_counter()

        class _Callback(TrainerCallback):
            def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None, **_: Any) -> None:
                # several processes: the main one plays (the others wait for it at the next gradient sync)
                if state.global_step in outer.at and model is not None and state.is_world_process_zero:
                    outer.evaluate(model, state.global_step, time.perf_counter() - t0 - outer.eval_seconds)

        return _Callback()


def save_warm_start_summary(ctx: Context, result: WarmStartResult, summary: WarmStartEval | None) -> Path:
    """`training/warm_start/warm_start.json`: what the warm start trained on and how fast (kept from the run that
    trained it when a later run reuses the saved model), its held-out checkpoints and final held-out play."""
    import json

    from cells.training.stages import training_root

    path = training_root(ctx) / "warm_start" / "warm_start.json"
    ctx.artifacts["warm_start_summary"] = path
    if not is_main_process():  # several processes: one writer
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    if result.steps > 0:
        data["training"] = result.to_dict()
        data["checkpoints"] = ctx.trainer_state.get("warm_start_checkpoints", [])
        data["gate"] = ctx.trainer_state.get("warm_start_gate", [])
        copied = ctx.trainer_state.get("copy_pretrain")
        data["copy_pretrain"] = copied.to_dict() if copied is not None else None
    if summary is not None:
        data["eval"] = summary.to_dict()
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    ctx.artifacts["warm_start_summary"] = path
    return path


def _full_warm_start(ctx: Context, out: Path, model_dir: Path) -> WarmStartResult:
    """Train (or reload) every weight of the tiny base, then put the GRPO LoRA on top of it."""
    from cells.step_12_model import attach_adapter
    from cells.training.warm_start import WarmStartResult, load_full_warm_start

    base = ctx.model.unload() if hasattr(ctx.model, "peft_config") else ctx.model  # rerun in one session
    if (model_dir / "model.safetensors").is_file():
        base = load_full_warm_start(base, ctx.tokenizer, model_dir)
        result = WarmStartResult(model_dir, 0, 0, 0, 0, (), full_model=True)
    else:
        base.requires_grad_(True)
        copy_pretrain_first(ctx, base, out)
        result = _train(ctx, base, out)
        gate_warm_start(ctx, base, out)
    ctx.model = attach_adapter(base, ctx.profile)  # adapter off = the warm-started model = GRPO's KL reference
    return result


def gate_warm_start(ctx: Context, base: Any, out: Path) -> None:
    """With `profile.sft_extend_rounds` > 0, SFT continues while development success is below target and rising
    (`cells.training.warm_start_gate`); the rounds go to `ctx.trainer_state["warm_start_gate"]` and
    `warm_start.json`."""
    if ctx.profile.sft_extend_rounds <= 0:
        return
    from cells.training.warm_start_gate import extend_warm_start, rounds_to_dicts

    ctx.trainer_state["warm_start_gate"] = rounds_to_dicts(extend_warm_start(ctx.profile, base, ctx.tokenizer, out))


def copy_pretrain_first(ctx: Context, base: Any, out: Path) -> None:
    """`profile.copy_pretrain_max_steps` of the copy task on `base` before SFT (see `cells.training.induction`);
    its result goes to `ctx.trainer_state["copy_pretrain"]` and `warm_start.json`. No-op at 0."""
    p = ctx.profile
    if p.copy_pretrain_max_steps <= 0:
        return
    from cells.training.induction import copy_pretrain

    result = copy_pretrain(base, ctx.tokenizer, out / "copy_pretrain", max_steps=p.copy_pretrain_max_steps,
                           stop_loss=p.copy_pretrain_stop_loss, seed=p.seed, use_cpu=p.is_cpu)
    ctx.trainer_state["copy_pretrain"] = result
    print(result.line())


def play_held_out(ctx: Context, model: Any, per_cell: int) -> WarmStartEval:
    """Greedy play of `model` on `eval_plan(per_cell)` with the profile's generation knobs, summarised."""
    from cells.evaluation.runner import eval_plan, make_spec, run_model
    from cells.training.warm_start import summarize_eval

    cases = eval_plan(per_cell)
    spec = make_spec(ctx.profile, cases, sampled_trials=0)
    return summarize_eval(run_model("warm_start", model, ctx.tokenizer, cases, spec, greedy=True, trial=0))


def evaluate_warm_start(ctx: Context) -> WarmStartEval | None:
    """Greedy held-out play of the warm-started model (`profile.warm_start_eval_per_cell` seeds per cell).

    Uses the evaluation runner and the profile's generation knobs; stores the summary in
    `ctx.trainer_state["warm_start_eval"]` and prints the valid-action share. None when disabled (0).
    """
    per_cell = ctx.profile.warm_start_eval_per_cell
    if per_cell <= 0 or ctx.model is None or not is_main_process():  # several processes: the main one plays
        return None
    summary = play_held_out(ctx, ctx.model, per_cell)
    ctx.trainer_state["warm_start_eval"] = summary
    print(summary.line())
    return summary


def run(ctx: Context) -> Context:
    """Warm start, its held-out parse-rate check, then GRPO stage 1."""
    from cells.training.grpo_stage import run_grpo_stage
    from cells.training.stages import note_if_reused

    result = warm_start(ctx)
    first = f"{result.losses[0]:.3f}" if result.losses else "-"
    last = f"{result.losses[-1]:.3f}" if result.losses else "-"
    print(f"[warm start] {result.examples:,} examples, {result.steps:,} steps, loss {first} -> {last}")
    save_warm_start_summary(ctx, result, evaluate_warm_start(ctx))
    stage = run_grpo_stage(ctx, STAGE)
    note_if_reused(ctx, __name__, result.steps, stage.trained_steps)
    return ctx
