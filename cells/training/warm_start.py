"""Supervised warm start: TRL `SFTTrainer` on expert conversations, loss on assistant tokens only.

Conversations are chat `messages` lists (system / user / assistant-or-model), tokenized the way the GRPO
rollout sees an episode (`cells.training.sft_data.tokenize_conversation`: loss on assistant tokens only).

`sft_warm_start` trains a peft adapter (GPU profiles) or every weight of a plain model (the CPU
full warm start, whose result becomes the GRPO base and KL reference); data, tokenization and batching
live in `cells.training.sft_data`.

Loss on labelled positions only (`LabelledPositionsSFTTrainer`, full-weight warm starts): TRL 1.16's
`SFTTrainer` computes the loss through its chunked fused LM head, which projects every position through the
vocabulary in fp32 tiles. On a CPU that head is most of a step for the tiny models, while only the positions
that carry a label (a small share of an expert conversation) enter the loss: projecting only those trains the
same loss several times faster (`python -m cells bench train` measures it against TRL's path); everything else
(data, optimiser, schedule, logging, callbacks) stays TRL's. Gradient checkpointing (TRL's default) is off for
these sub-1M-parameter models: memory is not the limit, and recomputing activations only costs time. Adapter
(GPU) warm starts keep TRL's own loss path.

This avoids TRL's `assistant_only_loss`, which needs `{% generation %}` markers in the template
(Gemma's has none, and our project tokenizer's template should render exactly like Gemma's).
The pre-tokenized dataset (`input_ids` + `labels`) is used by TRL 1.16 as is.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cells.training.sft_data import IGNORE_INDEX, RightPadCollator, WarmStartError, tokenize_all

# SFT continued from a finished cosine warm start (the SFT-only control, the development gate's rounds) restarts
# its own cosine schedule at this share of the profile's SFT learning rate: the warm start's schedule decayed to ~0,
# and restarting at the full peak would first undo part of what it learned.
CONTINUED_SFT_LR_SHARE = 0.3


@dataclass(frozen=True)
class WarmStartResult:
    """What the warm start did. `saved_dir` holds the adapter, or the whole model when `full_model`."""

    saved_dir: Path
    examples: int
    tokens: int  # real (unpadded) tokens the trainer saw, epochs included
    trained_tokens: int  # of those, tokens carrying a label (assistant turns)
    steps: int
    losses: tuple[float, ...]  # training loss per logged step
    seconds: float = 0.0  # wall time of `trainer.train()` (0 when a saved warm start was reused)
    full_model: bool = False
    cpu_seconds: float = 0.0  # this process's CPU time in `trainer.train()`: the controls' compute measure

    @property
    def adapter_dir(self) -> Path:
        """Alias kept for callers written before full-model warm starts."""
        return self.saved_dir

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def tokens_per_cpu_s(self) -> float:
        return self.tokens / self.cpu_seconds if self.cpu_seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "saved_dir": str(self.saved_dir),
            "full_model": self.full_model,
            "examples": self.examples,
            "tokens": self.tokens,
            "trained_tokens": self.trained_tokens,
            "steps": self.steps,
            "seconds": round(self.seconds, 3),
            "tokens_per_s": round(self.tokens_per_s, 1),
            "cpu_seconds": round(self.cpu_seconds, 3),
            "tokens_per_cpu_s": round(self.tokens_per_cpu_s, 1),
            "losses": list(self.losses),
        }


@dataclass(frozen=True)
class WarmStartEval:
    """Greedy play of the warm-started model on held-out seeds: is it emitting parsable actions yet?"""

    episodes: int
    turns: int
    invalid_turns: int
    success_rate: float
    mean_reward: float
    success_by_stage: tuple[tuple[int, float, int], ...] = ()  # (stage, success rate, episodes)

    @property
    def valid_share(self) -> float:
        """Share of turns whose text parsed as an action (0.0 when no turn was played)."""
        return (self.turns - self.invalid_turns) / self.turns if self.turns else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"episodes": self.episodes, "turns": self.turns, "invalid_turns": self.invalid_turns,
                "valid_share": self.valid_share, "success_rate": self.success_rate, "mean_reward": self.mean_reward,
                "success_by_stage": {str(st): {"success_rate": r, "episodes": n} for st, r, n in self.success_by_stage}}

    def line(self) -> str:
        return (f"[warm start] valid-action share on {self.turns} held-out turns: {100 * self.valid_share:.1f}% "
                f"(episodes: {self.episodes}, success: {100 * self.success_rate:.1f}%, "
                f"mean reward: {self.mean_reward:.3f})" + self._by_stage())

    def _by_stage(self) -> str:
        if not self.success_by_stage:
            return ""
        return "; success by stage: " + ", ".join(f"{st}: {100 * r:.0f}% of {n}" for st, r, n in self.success_by_stage)


def summarize_eval(records: Sequence[Any]) -> WarmStartEval:
    """Fold evaluation records (`turns_used`, `parse_failures`, `success`, `reward`, optional `stage`) into a
    `WarmStartEval` (success per stage when the records carry one)."""
    n = len(records)
    stages = sorted({r.stage for r in records if getattr(r, "stage", None) is not None})
    by_stage = []
    for stage in stages:
        sel = [r for r in records if getattr(r, "stage", None) == stage]
        by_stage.append((stage, sum(1 for r in sel if r.success) / len(sel), len(sel)))
    return WarmStartEval(
        episodes=n,
        turns=sum(int(r.turns_used) for r in records),
        invalid_turns=sum(int(r.parse_failures) for r in records),
        success_rate=sum(1 for r in records if r.success) / n if n else 0.0,
        mean_reward=sum(float(r.reward) for r in records) / n if n else 0.0,
        success_by_stage=tuple(by_stage),
    )


def build_sft_dataset(tokenizer: Any, conversations: Sequence[Sequence[dict[str, Any]]], progress: bool = False) -> Any:
    """A `datasets.Dataset` with `input_ids`, `labels` and `length` columns."""
    return tokenize_all(tokenizer, conversations, progress=progress)


def is_peft_model(model: Any) -> bool:
    return hasattr(model, "peft_config")


def labelled_positions_loss(model: Any, input_ids: Any, labels: Any, attention_mask: Any = None) -> Any:
    """Mean next-token cross-entropy over positions whose label is not -100, projecting only those positions
    through the LM head. Same value as `model(input_ids, labels=labels).loss` for a causal LM (final-logit
    softcapping applied when the config has it)."""
    import torch

    hidden = model.get_decoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, T, H)
    targets = labels[:, 1:]  # (B, T-1): position t predicts token t+1
    keep = targets != IGNORE_INDEX
    if not bool(keep.any()):
        return hidden.sum() * 0.0  # a batch without labels: zero loss that still touches the graph
    logits = model.get_output_embeddings()(hidden[:, :-1][keep]).float()  # (N, V), N = labelled positions
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return torch.nn.functional.cross_entropy(logits, targets[keep])


def labelled_positions_trainer_cls(base: type | None = None) -> type:
    """`base` (default TRL's `SFTTrainer`; copy pretraining passes `transformers.Trainer`) whose loss projects
    only labelled positions (see the module docstring for the measurement)."""
    if base is None:
        from trl import SFTTrainer as base

    def compute_loss(self: Any, model: Any, inputs: dict[str, Any], return_outputs: bool = False,
                     num_items_in_batch: Any = None) -> Any:
        if model is not self.model:  # wrapped (DDP, several processes): gradients sync only through its forward
            loss = model(input_ids=inputs["input_ids"], attention_mask=inputs.get("attention_mask"),
                         labels=inputs["labels"]).loss  # the same mean cross-entropy, with full logits
        else:
            loss = labelled_positions_loss(model, inputs["input_ids"], inputs["labels"], inputs.get("attention_mask"))
        return (loss, None) if return_outputs else loss

    return type(f"LabelledPositions{base.__name__}", (base,), {"compute_loss": compute_loss})


def sft_warm_start(
    model: Any,
    tokenizer: Any,
    conversations: Sequence[Sequence[dict[str, Any]]] | Any,
    output_dir: str | Path,
    *,
    learning_rate: float = 1e-4,
    epochs: int = 1,
    batch_size: int = 4,
    max_length: int | None = None,
    seed: int = 0,
    use_cpu: bool = True,
    bf16: bool = False,
    lr_scheduler_type: str = "constant",
    warmup_ratio: float = 0.0,
    collator: Any = None,
    callbacks: Sequence[Any] = (),
    labelled_loss: bool | None = None,
    **overrides: Any,
) -> WarmStartResult:
    """Train `model` in place with TRL's `SFTTrainer` on expert conversations, then save it.

    `conversations` is a list of chat `messages` lists, or a dataset from `build_sft_dataset`. `collator`
    (default `RightPadCollator`) must count `tokens` and `labelled` like it does (`bench train` swaps in TRL's).
    `callbacks` are `transformers.TrainerCallback`s (step 15's held-out checkpoints use one).
    A peft model trains its adapter (saved to `<output_dir>/adapter`); a plain model trains every
    weight (the CPU full warm start; saved to `<output_dir>/model`, it becomes the GRPO base).
    Batches are grouped by length and right-padded without a padding mask (`sft_data.RightPadCollator`);
    A full-weight warm start trains with `LabelledPositionsSFTTrainer` (no gradient checkpointing); an adapter
    with TRL's stock loss. `labelled_loss` forces either (`bench train` times the stock path as its reference).
    """
    from trl import SFTConfig, SFTTrainer

    output_dir = Path(output_dir)
    dataset = conversations if hasattr(conversations, "column_names") else build_sft_dataset(tokenizer, conversations)
    steps_per_epoch = -(-len(dataset) // batch_size)
    kwargs: dict[str, Any] = {
        "output_dir": str(output_dir),
        "learning_rate": learning_rate,
        "num_train_epochs": epochs,
        "per_device_train_batch_size": batch_size,
        "max_length": max_length,
        "seed": seed,
        "use_cpu": use_cpu,
        "bf16": bf16,
        "report_to": "none",
        "logging_steps": max(1, steps_per_epoch * epochs // 20),  # ~20 loss points per run
        "save_strategy": "no",  # saved once below; GRPO stages checkpoint themselves
        "lr_scheduler_type": lr_scheduler_type,
        "warmup_steps": int(warmup_ratio * steps_per_epoch * epochs),
        "train_sampling_strategy": "group_by_length",  # similar lengths per batch: little padding
        "length_column_name": "length",
    }
    full = not is_peft_model(model)
    labelled_loss = full if labelled_loss is None else labelled_loss
    # off for the labelled-positions loss (see the module docstring); on otherwise, TRL's default, under the name
    # transformers 5 reads (TRL's own `gradient_checkpointing=True` is a deprecated alias that warns)
    kwargs["activation_checkpointing"] = not labelled_loss
    kwargs.update(overrides)
    collator = collator if collator is not None else RightPadCollator(tokenizer.pad_token_id)
    trainer_cls = labelled_positions_trainer_cls() if labelled_loss else SFTTrainer
    trainer = trainer_cls(model=model, args=SFTConfig(**kwargs), train_dataset=dataset, processing_class=tokenizer,
                         data_collator=collator, callbacks=list(callbacks) or None)
    t0, c0 = time.perf_counter(), time.process_time()
    trainer.train()
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    saved = output_dir / ("model" if full else "adapter")
    if trainer.is_world_process_zero():  # several processes hold the same weights: one writes them
        trainer.model.save_pretrained(str(saved))
        tokenizer.save_pretrained(str(saved))  # the ids it was trained on: `load_run_warm_start` reads them back
    trainer.accelerator.wait_for_everyone()
    losses = tuple(float(h["loss"]) for h in trainer.state.log_history if "loss" in h)
    return WarmStartResult(saved, len(dataset), collator.tokens, collator.labelled, trainer.state.global_step, losses,
                           seconds, full, cpu_seconds)


class VendorApiMismatchError(WarmStartError):
    """A run's models were trained against another vendor API than this checkout's (step 5's `vendor_api.json`)."""


def check_run_vendor_api(run_dir: Path) -> None:
    """Refuse a run whose recorded vendor API (`VENDOR_API_FILE`, written by step 5) differs from this checkout's:
    its models learnt other tool signatures, so played here they meet a different env and every figure drawn from
    them is off. A run from before the record passes unchecked."""
    import json

    from cells.step_05_vendors import VENDOR_API_FILE, api_changes

    path = Path(run_dir) / VENDOR_API_FILE
    if not path.is_file():
        return
    changes = api_changes(json.loads(path.read_text(encoding="utf-8")))
    if changes:
        runtime = Path(run_dir) / "runtime.json"
        sha = json.loads(runtime.read_text(encoding="utf-8")).get("git_sha") if runtime.is_file() else None
        raise VendorApiMismatchError(
            f"{run_dir} was trained against another vendor API than this checkout's ({len(changes)} change(s): "
            f"{'; '.join(changes[:3])}{' ...' if len(changes) > 3 else ''}): its models would play a different "
            f"env. Read it from the commit that made it ({sha or 'see git log'}), or train it again")


def load_run_warm_start(run_dir: Path) -> tuple[Any, Any, Any]:
    """`(profile, model, tokenizer)`: the profile a finished CPU run used, its saved full warm start
    (`training/warm_start/model`) and its tokenizer (left padding, as rollouts need): the one saved with the
    model, else the export's (step 24), else the tiny cache's. Why in that order: the tiny tokenizer is trained on
    the project's own text and cached by its digest, so a fixture edited after the run (a drift, a phrase) builds
    a different tokenizer, and a warm start fed other ids plays as a broken model. A run trained against another
    vendor API is refused (`check_run_vendor_api`)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from cells.modeling.tiny import build_or_load_tiny
    from cells.step_02_profiles import load_run_profile

    check_run_vendor_api(run_dir)
    profile = load_run_profile(run_dir)
    model_dir = Path(run_dir) / "training" / "warm_start" / "model"
    if not profile.warm_start_full or not (model_dir / "model.safetensors").is_file():
        raise WarmStartError(f"{run_dir} has no full warm start (CPU profiles only; run the pipeline first)")
    saved = next((d for d in (model_dir, Path(run_dir) / "export" / "tokenizer") if (d / "tokenizer.json").is_file()),
                 None)
    if saved is not None:
        tokenizer = AutoTokenizer.from_pretrained(str(saved))
    else:  # a run from before warm starts kept their tokenizer, without an export
        _, tokenizer, _ = build_or_load_tiny(profile.tiny, Path(run_dir) / "tiny_model", profile.seed)
    tokenizer.padding_side = "left"
    return profile, AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32), tokenizer


def load_full_warm_start(model: Any, tokenizer: Any, model_dir: Path) -> Any:
    """The whole warm-started model saved in `model_dir` (fp32, the class of `model`), refused if it was trained on
    other token ids than `tokenizer` gives (`refuse_other_tokenizer`)."""
    import torch

    base = type(model).from_pretrained(str(model_dir), dtype=torch.float32)
    refuse_other_tokenizer(tokenizer, model_dir)
    return base


def refuse_other_tokenizer(tokenizer: Any, model_dir: Path) -> None:
    """Raise when the saved warm start was trained on other token ids than `tokenizer` gives: the tiny tokenizer is
    trained on the project's own text, so a fixture edited since the warm start changes it."""
    if not (model_dir / "tokenizer.json").is_file():
        return  # saved before warm starts kept their tokenizer: nothing to compare
    from transformers import AutoTokenizer

    if AutoTokenizer.from_pretrained(str(model_dir)).get_vocab() != tokenizer.get_vocab():
        raise RuntimeError(f"the warm start in {model_dir} was trained with another tokenizer than this checkout "
                           "builds (a fixture the tokenizer learns from changed since): rerun with --fresh")
