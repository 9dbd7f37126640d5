"""Copy pretraining: teach a never-pretrained tiny model to copy before it sees a single expert conversation.

Why: every DriftCall booking carries strings the model must copy exactly from earlier in the episode (the
issued `payment_token`, a `flight_id`, a `room_id`), and copying needs induction heads, which a pretrained
Gemma has and the CPU profiles' randomly initialised tiny model does not: SFT alone left that model's
booking calls without the token the episode issued. The task here is a random token string, random filler, the
string again, with the loss on the repeat only. Its loss shows the classic induction phase change (flat near
ln(vocab) for a long time, then a sudden drop), whose onset varies from seed to seed, so the phase stops itself
once the repeat is copied (`stop_loss`) instead of running a guessed number of steps.

The data is a seeded `torch.utils.data.IterableDataset`; training is a `transformers.Trainer` (the ecosystem's
loop, schedule, clipping and progress bar) with the warm start's labelled-positions loss (only the repeat is
projected through the LM head) and a callback that stops at `stop_loss`. Afterwards `copy_accuracy` measures
how many held-out strings of each kind (`COPY_KINDS`: uniform, the short repeat-heavy strings ids are made of,
family name lists) greedy decoding would copy exactly; step 15 records it in `warm_start.json`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cells.errors import DriftCallError

IGNORE_INDEX = -100
SEQUENCE_TOKENS = 128  # every example is this long: [string | filler | string], so the default collator batches them
MIN_COPY, MAX_COPY = 4, 24  # copied string length in tokens; an expert turn copies ids of ~4-20 tokens
LOGGING_STEPS = 25  # the stop rule reads the loss averaged over this many steps


class CopyPretrainError(DriftCallError, ValueError):
    """Copy pretraining was asked for with settings it cannot run."""


@dataclass(frozen=True)
class CopyPretrainResult:
    """What copy pretraining did: optimiser steps, wall time, the last logged loss and whether it hit `stop_loss`."""

    steps: int
    seconds: float
    final_loss: float
    converged: bool
    losses: tuple[float, ...] = ()
    copy_accuracy: dict[str, float] = field(default_factory=dict)  # `copy_accuracy` after training, per kind

    def to_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "seconds": round(self.seconds, 1), "final_loss": round(self.final_loss, 4),
                "converged": self.converged, "losses": [round(x, 4) for x in self.losses],
                "copy_accuracy": {k: round(v, 3) for k, v in self.copy_accuracy.items()}}

    def line(self) -> str:
        state = "copies" if self.converged else "did NOT reach the stop loss"
        return (f"[copy pretraining] {self.steps} steps in {self.seconds:.0f}s, loss {self.final_loss:.3f}: "
                f"the model {state}" + copied_exactly_text(self.copy_accuracy))


def copied_exactly_text(accuracy: dict[str, float] | None) -> str:
    """"; held-out strings copied exactly: uniform 60.5%, ..." from a `copy_accuracy` dict (also as read back
    from `warm_start.json`), or "" when there is none (runs from before it was measured)."""
    if not accuracy:
        return ""
    return "; held-out strings copied exactly: " + ", ".join(f"{kind} {100 * v:.1f}%" for kind, v in accuracy.items())


SMALL_ALPHABET = (4, 16)  # distinct tokens in a `small_alphabet` string, inclusive: digits and hex run over 10-16
SMALL_LENGTH = (4, 12)  # its tokens: an id such as IX-898 or a token suffix such as 4bbf is 4-10
ALPHABET_IN_FILLER = 0.2  # share of filler drawn from the string's alphabet: digits also fill prices and dates
LIST_ITEMS, LIST_HEAD, LIST_SUFFIX = (2, 5), (1, 3), (1, 2)  # a `name_list`: items, first-name and surname tokens


def _randint(generator: Any, low: int, high: int) -> int:
    """One int in [low, high] (inclusive) from `generator`."""
    import torch

    return int(torch.randint(low, high + 1, (1,), generator=generator))


def _uniform_string(generator: Any, low: int, high: int) -> tuple[Any, Any, Any]:
    """A random string over the whole vocabulary (repeats rare), random filler; the repeat is the string."""
    import torch

    n = _randint(generator, MIN_COPY, MAX_COPY)
    string = torch.randint(low, high, (n,), generator=generator)
    filler = torch.randint(low, high, (SEQUENCE_TOKENS - 2 * n,), generator=generator)
    return string, filler, string


def _small_alphabet_string(generator: Any, low: int, high: int) -> tuple[Any, Any, Any]:
    """A short string over 4-16 tokens, so tokens repeat (`IX-898`, `..._4bbf` tokenize to one token a character), with
    some of those tokens in the filler too; the repeat is the string."""
    import torch

    n = _randint(generator, *SMALL_LENGTH)
    alphabet = low + torch.randperm(high - low, generator=generator)[:_randint(generator, *SMALL_ALPHABET)]
    string = alphabet[torch.randint(0, len(alphabet), (n,), generator=generator)]
    filler = torch.randint(low, high, (SEQUENCE_TOKENS - 2 * n,), generator=generator)
    from_alphabet = torch.rand(len(filler), generator=generator) < ALPHABET_IN_FILLER
    filler[from_alphabet] = alphabet[torch.randint(0, len(alphabet), (int(from_alphabet.sum()),), generator=generator)]
    return string, filler, string


def _name_list(generator: Any, low: int, high: int) -> tuple[Any, Any, Any]:
    """Items sharing a suffix (a family: first names, one surname) joined by two separators picked per gap (", ",
    " aur "), repeated joined by a third (`","`): the next item is found only by where the last one stood."""
    import torch

    items = _randint(generator, *LIST_ITEMS)
    surname = torch.randint(low, high, (_randint(generator, *LIST_SUFFIX),), generator=generator)
    said_a, said_b, written = (low + torch.randperm(high - low, generator=generator)[:3]).tolist()
    heads = [torch.randint(low, high, (_randint(generator, *LIST_HEAD),), generator=generator) for _ in range(items)]
    gaps = [said_a if float(torch.rand(1, generator=generator)) < 0.5 else said_b for _ in range(items - 1)]
    source, repeat = [heads[0], surname], [heads[0], surname]
    for gap, head in zip(gaps, heads[1:], strict=True):
        source += [torch.tensor([gap]), head, surname]
        repeat += [torch.tensor([written]), head, surname]
    source, repeat = torch.cat(source), torch.cat(repeat)
    filler = torch.randint(low, high, (SEQUENCE_TOKENS - 2 * len(source),), generator=generator)
    return source, filler, repeat


_MAKERS = {"uniform": _uniform_string, "small_alphabet": _small_alphabet_string, "name_list": _name_list}
COPY_KINDS = tuple(_MAKERS)  # ("uniform", "small_alphabet", "name_list")
# What copy pretraining trains on: uniform strings only, though the agent's ids are not like them (`copy_example`).
# The tiny model learns to copy the other kinds far too slowly for the run's budget (`python -m cells bench copy`
# measures it), so they are measured after every copy pretraining (`copy_accuracy`), not trained.
TRAIN_KINDS = ("uniform",)


def copy_example(generator: Any, low: int, high: int, kind: str = "uniform") -> dict[str, Any]:
    """One `SEQUENCE_TOKENS`-long example, `[source | filler | repeat]` with ids in [low, high); `kind` (one of
    `COPY_KINDS`) says what is copied. Labels sit on the repeat only, except where nothing earlier predicts the
    token: the repeat's first token, and in a `name_list` the first separator of the repeat (later ones copy it).

    Why more than uniform strings: every id the agent copies tokenizes to one token a character (`IX-898` is
    I X - 8 9 8), and a family's passengers share a surname. A copy head that looks up "the token after the last
    occurrence of this token" is ambiguous there, and uniform strings (repeats rare) never show it: the cpu-learn
    model wrote `IX-8988888...`, dropped the doubled `b` of `..._4bbf` and repeated `"Rohan Gupta"` until
    the turn cap (8 of its 12 held-out failures; `python -m cells diagnose --failures`)."""
    import torch

    if kind not in _MAKERS:
        raise CopyPretrainError(f"unknown copy kind {kind!r}; one of {COPY_KINDS}")
    source, filler, repeat = _MAKERS[kind](generator, low, high)
    input_ids = torch.cat([source, filler, repeat])
    labels = torch.full_like(input_ids, IGNORE_INDEX)
    n = len(repeat)
    labels[-(n - 1):] = input_ids[-(n - 1):]
    rewritten = (repeat != source).nonzero()  # a name list's separators; the first is not predictable
    if len(rewritten):
        labels[len(input_ids) - n + int(rewritten[0])] = IGNORE_INDEX
    return {"input_ids": input_ids, "labels": labels}


def copy_accuracy(model: Any, tokenizer: Any, examples: int = 200, seed: int = 10_007,
                  batch_size: int = 50) -> dict[str, float]:
    """Share of held-out copy examples of each kind in `COPY_KINDS` whose every labelled token is the model's
    argmax given the tokens before it, i.e. which greedy decoding copies exactly. `seed` is not a training seed."""
    import torch

    low, high = _token_range(tokenizer)
    generator = torch.Generator().manual_seed(seed)
    was_training = model.training
    model.eval()
    out = {}
    with torch.no_grad():
        for kind in COPY_KINDS:
            batch = [copy_example(generator, low, high, kind) for _ in range(examples)]
            exact = 0
            for start in range(0, examples, batch_size):
                ids = torch.stack([b["input_ids"] for b in batch[start:start + batch_size]])
                labels = torch.stack([b["labels"] for b in batch[start:start + batch_size]])
                predicted = model(input_ids=ids).logits[:, :-1].argmax(-1)
                target, mask = labels[:, 1:], labels[:, 1:] != IGNORE_INDEX
                exact += int(((predicted == target) | ~mask).all(-1).sum())
            out[kind] = exact / examples
    model.train(was_training)
    return out


def _token_range(tokenizer: Any) -> tuple[int, int]:
    """The tokenizer's ordinary ids [low, high): special tokens come first in the project tokenizer's vocabulary."""
    low, high = 1 + max(tokenizer.all_special_ids), len(tokenizer)
    if high - low < 2 * MAX_COPY:
        raise CopyPretrainError(f"the tokenizer has only {high - low} ordinary ids above its special tokens")
    return low, high


def copy_dataset(low: int, high: int, seed: int, kinds: tuple[str, ...] = TRAIN_KINDS) -> Any:
    """An endless, seeded stream of `copy_example`s of `kinds` (drawn uniformly per example when several; the same
    stream for the same seed, in any process)."""
    import torch

    class _CopyStream(torch.utils.data.IterableDataset):
        def __iter__(self) -> Any:
            generator = torch.Generator().manual_seed(seed)
            while True:
                kind = kinds[0] if len(kinds) == 1 else kinds[_randint(generator, 0, len(kinds) - 1)]
                yield copy_example(generator, low, high, kind)

    return _CopyStream()


def _stop_at_loss_callback(stop_loss: float) -> Any:
    from transformers import TrainerCallback

    class _StopAtLoss(TrainerCallback):
        def __init__(self) -> None:
            self.converged = False

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **_: Any) -> None:
            if logs and "loss" in logs and logs["loss"] < stop_loss:
                self.converged = True
                control.should_training_stop = True

    return _StopAtLoss()


def copy_pretrain(
    model: Any,
    tokenizer: Any,
    output_dir: str | Path,
    *,
    max_steps: int,
    stop_loss: float = 0.5,
    learning_rate: float = 3e-3,
    batch_size: int = 16,
    seed: int = 0,
    use_cpu: bool = True,
    progress: bool = True,
    kinds: tuple[str, ...] = TRAIN_KINDS,
) -> CopyPretrainResult:
    """Train every weight of `model` in place on the copy task until the logged loss is below `stop_loss`
    (averaged over `LOGGING_STEPS` steps) or `max_steps`, on examples of `kinds`; then measure `copy_accuracy` on
    every kind. Token ids are drawn from the tokenizer's ordinary
    vocabulary (special tokens excluded). Nothing is saved: step 15's warm start saves the model after SFT."""
    from transformers import Trainer, TrainingArguments

    from cells.training.warm_start import labelled_positions_trainer_cls

    if max_steps <= 0:
        raise CopyPretrainError(f"max_steps must be > 0 (got {max_steps}); set copy_pretrain_max_steps=0 to skip")
    if stop_loss <= 0:
        raise CopyPretrainError(f"stop_loss must be > 0 (got {stop_loss})")
    unknown = sorted(set(kinds) - set(COPY_KINDS))
    if not kinds or unknown:
        raise CopyPretrainError(f"kinds must be a non-empty subset of {COPY_KINDS} (got {kinds})")
    low, high = _token_range(tokenizer)
    args = TrainingArguments(
        output_dir=str(output_dir), max_steps=max_steps, per_device_train_batch_size=batch_size,
        learning_rate=learning_rate, lr_scheduler_type="constant", weight_decay=0.01, max_grad_norm=1.0,
        logging_steps=LOGGING_STEPS, save_strategy="no", report_to="none", seed=seed, use_cpu=use_cpu,
        disable_tqdm=not progress, dataloader_num_workers=0,
    )
    stopper = _stop_at_loss_callback(stop_loss)
    model.requires_grad_(True)
    trainer = labelled_positions_trainer_cls(Trainer)(
        model=model, args=args, train_dataset=copy_dataset(low, high, seed, kinds), callbacks=[stopper])
    t0 = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - t0
    losses = tuple(float(h["loss"]) for h in trainer.state.log_history if "loss" in h)
    return CopyPretrainResult(trainer.state.global_step, seconds, losses[-1] if losses else float("nan"),
                              stopper.converged, losses, copy_accuracy(model, tokenizer))
