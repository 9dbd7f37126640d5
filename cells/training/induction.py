"""Copy pretraining: teach a never-pretrained tiny model to copy before it sees a single expert conversation.

Why: every DriftCall booking carries strings the model must copy exactly from earlier in the episode (the
issued `payment_token`, a `flight_id`, a `room_id`), and copying needs induction heads, which a pretrained
Gemma has and the CPU profiles' randomly initialised tiny model does not. Measured on the cpu-learn model
(`python -m cells diagnose` on its run): after 24,000 expert conversations of SFT alone, 0 of 153 booking
calls carried the token the episode issued. With this synthetic task first (a random token string, random
filler, the string again; loss on the repeat only; 2.2 minutes), the same 24,000 conversations left 101 of 104
booking calls carrying it, and held-out success went from 0% to 26.7% (README, cpu-learn). The loss shows the classic induction phase change: flat near ln(vocab) for ~1,400
steps, then below 0.5 within ~200 more (batch 16, lr 3e-3), so the phase stops itself once the repeat is
copied (`stop_loss`) instead of running a guessed number of steps.

The data is a seeded `torch.utils.data.IterableDataset`; training is a `transformers.Trainer` (the ecosystem's
loop, schedule, clipping and progress bar) with the warm start's labelled-positions loss (only the repeat is
projected through the LM head) and a callback that stops at `stop_loss`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
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

    def to_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "seconds": round(self.seconds, 1), "final_loss": round(self.final_loss, 4),
                "converged": self.converged, "losses": [round(x, 4) for x in self.losses]}

    def line(self) -> str:
        state = "copies" if self.converged else "did NOT reach the stop loss"
        return (f"[copy pretraining] {self.steps} steps in {self.seconds:.0f}s, loss {self.final_loss:.3f}: "
                f"the model {state}")


def copy_example(generator: Any, low: int, high: int) -> dict[str, Any]:
    """One `SEQUENCE_TOKENS`-long example: ids in [low, high), labels only on the repeat after its first token
    (the first repeated token is not predictable from the filler)."""
    import torch

    n = int(torch.randint(MIN_COPY, MAX_COPY + 1, (1,), generator=generator))
    string = torch.randint(low, high, (n,), generator=generator)
    filler = torch.randint(low, high, (SEQUENCE_TOKENS - 2 * n,), generator=generator)
    input_ids = torch.cat([string, filler, string])
    labels = torch.full_like(input_ids, IGNORE_INDEX)
    labels[-(n - 1):] = input_ids[-(n - 1):]
    return {"input_ids": input_ids, "labels": labels}


def copy_dataset(low: int, high: int, seed: int) -> Any:
    """An endless, seeded stream of `copy_example`s (the same stream for the same seed, in any process)."""
    import torch

    class _CopyStream(torch.utils.data.IterableDataset):
        def __iter__(self) -> Any:
            generator = torch.Generator().manual_seed(seed)
            while True:
                yield copy_example(generator, low, high)

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
) -> CopyPretrainResult:
    """Train every weight of `model` in place on the copy task until the logged loss is below `stop_loss`
    (averaged over `LOGGING_STEPS` steps) or `max_steps`. Token ids are drawn from the tokenizer's ordinary
    vocabulary (special tokens excluded). Nothing is saved: step 15's warm start saves the model after SFT."""
    from transformers import Trainer, TrainingArguments

    from cells.training.warm_start import labelled_positions_trainer_cls

    if max_steps <= 0:
        raise CopyPretrainError(f"max_steps must be > 0 (got {max_steps}); set copy_pretrain_max_steps=0 to skip")
    if stop_loss <= 0:
        raise CopyPretrainError(f"stop_loss must be > 0 (got {stop_loss})")
    low = 1 + max(tokenizer.all_special_ids)  # special tokens come first in the project tokenizer's vocabulary
    high = len(tokenizer)
    if high - low < 2 * MAX_COPY:
        raise CopyPretrainError(f"the tokenizer has only {high - low} ordinary ids above its special tokens")
    args = TrainingArguments(
        output_dir=str(output_dir), max_steps=max_steps, per_device_train_batch_size=batch_size,
        learning_rate=learning_rate, lr_scheduler_type="constant", weight_decay=0.01, max_grad_norm=1.0,
        logging_steps=LOGGING_STEPS, save_strategy="no", report_to="none", seed=seed, use_cpu=use_cpu,
        disable_tqdm=not progress, dataloader_num_workers=0,
    )
    stopper = _stop_at_loss_callback(stop_loss)
    model.requires_grad_(True)
    trainer = labelled_positions_trainer_cls(Trainer)(
        model=model, args=args, train_dataset=copy_dataset(low, high, seed), callbacks=[stopper])
    t0 = time.perf_counter()
    trainer.train()
    losses = tuple(float(h["loss"]) for h in trainer.state.log_history if "loss" in h)
    return CopyPretrainResult(trainer.state.global_step, time.perf_counter() - t0,
                              losses[-1] if losses else float("nan"), stopper.converged, losses)
