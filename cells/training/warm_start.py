"""Supervised warm start: TRL `SFTTrainer` on expert conversations, loss on assistant tokens only.

Conversations are chat `messages` lists (system / user / assistant-or-model). We tokenize them
ourselves, the way the GRPO rollout sees an episode: by incremental chat-template rendering.
For the assistant message at index i,

    before = render(messages[:i], add_generation_prompt=True)   # ends with "<start_of_turn>model\n"
    after  = render(messages[:i + 1])                           # ... "{content}<end_of_turn>\n"

the text between the previous render and `before` is environment/user text (label -100), and
`after[len(before):]` is the assistant turn: its tokens are trained up to and including the
first stop token (`<end_of_turn>` / eos), which is where generation stops in a rollout; template
glue after it (the newline) is not. Each segment is tokenized separately, as the rollout does.
A template that is not prefix-preserving (a later render rewrites earlier text) raises.

`sft_warm_start` trains a peft adapter (GPU profiles) or every weight of a plain model (the CPU
full warm start, whose result becomes the GRPO base and KL reference); data and batching live in
`cells.training.sft_data`.

Loss on labelled positions only (`LabelledPositionsSFTTrainer`, full-weight warm starts): TRL 1.16's
`SFTTrainer` computes the loss through its chunked fused LM head, which projects every position through the
vocabulary in fp32 tiles. On 2 CPU cores that head took ~65% of each step for the cpu-learn model
(cProfile: forward 9.6 s + backward 16.6 s of a 40 s run). Projecting only the positions that carry a label
(~14% of an expert conversation) trains the same loss 3.2x faster (15,351 vs 4,804 training tokens/s, same
30 batches, one process); everything else (data, optimiser, schedule, logging, callbacks) stays TRL's.
Gradient checkpointing (TRL's default) is off for these sub-1M-parameter models: memory is not the limit, and
recomputing activations cost a further 1.18x. Adapter (GPU) warm starts keep TRL's own loss path.

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

from cells.errors import DriftCallError

ASSISTANT_ROLES = ("assistant", "model")
IGNORE_INDEX = -100


class WarmStartError(DriftCallError, ValueError):
    """Bad conversations or a chat template that cannot be rendered incrementally."""


@dataclass(frozen=True)
class TokenizedConversation:
    """One conversation as the model trains on it: labels are -100 on non-assistant tokens."""

    input_ids: tuple[int, ...]
    labels: tuple[int, ...]

    @property
    def n_trained(self) -> int:
        return sum(1 for t in self.labels if t != IGNORE_INDEX)


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

    @property
    def adapter_dir(self) -> Path:
        """Alias kept for callers written before full-model warm starts."""
        return self.saved_dir

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

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


def _render(tokenizer: Any, messages: Sequence[dict[str, Any]], generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=generation_prompt)


def render_segments(tokenizer: Any, messages: Sequence[dict[str, Any]]) -> list[tuple[str, bool]]:
    """Split a conversation into (text, is_assistant) segments by incremental rendering.

    Trailing non-assistant messages are dropped (they carry no loss).
    """
    if not messages or messages[0].get("role") in ASSISTANT_ROLES:
        raise WarmStartError("a conversation must start with a system or user message")
    segments: list[tuple[str, bool]] = []
    done = ""
    for i, message in enumerate(messages):
        if message.get("role") not in ASSISTANT_ROLES:
            continue
        before = _render(tokenizer, messages[:i], True)
        after = _render(tokenizer, messages[: i + 1], False)
        if not before.startswith(done) or not after.startswith(before):
            raise WarmStartError(
                f"chat template is not prefix-preserving at message {i}: rendering more messages changed "
                "earlier text, so rollout tokens and training tokens would differ; fix the template"
            )
        segments.append((before[len(done):], False))
        segments.append((after[len(before):], True))
        done = after
    if not any(is_asst for _, is_asst in segments):
        raise WarmStartError("conversation has no assistant message to learn from")
    return segments


def stop_token_ids(tokenizer: Any) -> frozenset[int]:
    """Token ids that end an assistant turn: eos plus `<end_of_turn>` when the vocab has it."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    eot = tokenizer.convert_tokens_to_ids("<end_of_turn>")
    if isinstance(eot, int) and eot != tokenizer.unk_token_id:
        ids.add(eot)
    return frozenset(ids)


def tokenize_conversation(tokenizer: Any, messages: Sequence[dict[str, Any]]) -> TokenizedConversation:
    """Token ids and assistant-only labels for one conversation (see module docstring)."""
    stops = stop_token_ids(tokenizer)
    input_ids: list[int] = []
    labels: list[int] = []
    for text, is_assistant in render_segments(tokenizer, messages):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if is_assistant:
            cut = next((j + 1 for j, t in enumerate(ids) if t in stops), len(ids))
            labels.extend(ids[:cut] + [IGNORE_INDEX] * (len(ids) - cut))
        else:
            labels.extend([IGNORE_INDEX] * len(ids))
        input_ids.extend(ids)
    return TokenizedConversation(tuple(input_ids), tuple(labels))


def build_sft_dataset(tokenizer: Any, conversations: Sequence[Sequence[dict[str, Any]]], progress: bool = False) -> Any:
    """A `datasets.Dataset` with `input_ids`, `labels` and `length` columns."""
    from cells.training.sft_data import tokenize_all

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

    from cells.training.sft_data import RightPadCollator

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
    if labelled_loss:
        kwargs["gradient_checkpointing"] = False
    kwargs.update(overrides)
    collator = collator if collator is not None else RightPadCollator(tokenizer.pad_token_id)
    trainer_cls = labelled_positions_trainer_cls() if labelled_loss else SFTTrainer
    trainer = trainer_cls(model=model, args=SFTConfig(**kwargs), train_dataset=dataset, processing_class=tokenizer,
                         data_collator=collator, callbacks=list(callbacks) or None)
    t0 = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - t0
    saved = output_dir / ("model" if full else "adapter")
    if trainer.is_world_process_zero():  # several processes hold the same weights: one writes them
        trainer.model.save_pretrained(str(saved))
    trainer.accelerator.wait_for_everyone()
    losses = tuple(float(h["loss"]) for h in trainer.state.log_history if "loss" in h)
    return WarmStartResult(saved, len(dataset), collator.tokens, collator.labelled, trainer.state.global_step, losses,
                           seconds, full)
