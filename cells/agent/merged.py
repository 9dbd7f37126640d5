"""`adapters_merged(model)`: play a LoRA policy with its adapter folded into the weights, then restore them exactly.

Why: on a CPU the tiny models are bound by per-operation overhead, not arithmetic, and an unmerged LoRA adds
four small operations to every adapted projection (7 projections in each of cpu-learn's 3 layers). Merged, a
decoding step costs what the plain model's does (`python -m cells bench train` plays GRPO's rollouts both ways).

How: peft's own `merge()` / `unmerge()` on every LoRA layer (W + s·BA in, then out), plus a copy of each base
weight taken before the merge and written back after the unmerge, so the base model the trainer and the KL
reference see afterwards is bit-for-bit what it was (an unmerge alone leaves float rounding behind, and GRPO
merges once per step). Generation sees W + s·BA computed once instead of x·W + s·(x·A)·B: the same function up
to float rounding, which is below the noise of sampling.

When it does nothing (the model plays unmerged, as before): inside `unmerged_play()`; no LoRA layers; adapters switched off (the
"adapter off" evaluation already plays the base model); an adapter already merged; LoRA dropout active in
training mode (merged weights cannot drop the adapter's input); base weights that are quantised or off the CPU
(a 4-bit base cannot take a float delta exactly, and on a GPU the adapter's extra operations are cheap next to
the base model's while a backup would cost GPU memory).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_MERGE_FOR_PLAY = [True]  # off only inside `unmerged_play` (a benchmark's A/B)


@contextmanager
def unmerged_play() -> Iterator[None]:
    """Within the block rollouts play LoRA policies unmerged, as before this module (`bench train` times both)."""
    _MERGE_FOR_PLAY[0] = False
    try:
        yield
    finally:
        _MERGE_FOR_PLAY[0] = True


def lora_layers(model: Any) -> list[Any]:
    """Every peft tuner layer (LoRA) inside `model`; empty for a plain model."""
    modules = getattr(model, "modules", None)
    if modules is None or "peft" not in sys.modules:  # no peft loaded: no adapter can exist (and none is imported)
        return []
    from peft.tuners.tuners_utils import BaseTunerLayer

    return [m for m in modules() if isinstance(m, BaseTunerLayer)]


def _dropout_active(layer: Any) -> bool:
    dropouts = getattr(layer, "lora_dropout", {})
    return bool(getattr(layer, "training", False)) and any(
        float(getattr(dropouts[name], "p", 0.0)) > 0 for name in layer.active_adapters if name in dropouts)


def _mergeable_weight(layer: Any) -> Any:
    """The base layer's weight when a float delta can be added to it exactly on the CPU, else None."""
    import torch

    weight = getattr(layer.get_base_layer(), "weight", None)
    if not isinstance(weight, torch.Tensor) or not weight.dtype.is_floating_point or weight.device.type != "cpu":
        return None
    return weight


def mergeable(model: Any) -> list[tuple[Any, Any]]:
    """`(layer, base weight)` for every LoRA layer when all of them can be merged for generation, else []."""
    layers = lora_layers(model) if _MERGE_FOR_PLAY[0] else []
    if not layers or any(layer.disable_adapters or layer.merged or _dropout_active(layer) for layer in layers):
        return []
    weights = [_mergeable_weight(layer) for layer in layers]
    if any(w is None for w in weights):
        return []
    return list(zip(layers, weights, strict=True))


@contextmanager
def adapters_merged(model: Any) -> Iterator[bool]:
    """Within the block `model`'s active LoRA adapters are merged into its base weights (yields True), or the
    model is left as it is (yields False; see the module docstring for when). On exit every base weight is
    restored bit for bit, also when the block raises."""
    import torch

    pairs = mergeable(model)
    if not pairs:
        yield False
        return
    with torch.no_grad():
        backups = [weight.detach().clone() for _, weight in pairs]
        merged: list[Any] = []
        try:
            for layer, _ in pairs:
                layer.merge()
                merged.append(layer)
            yield True
        finally:
            for layer in merged:
                layer.unmerge()
            for (_, weight), backup in zip(pairs, backups, strict=True):
                weight.copy_(backup)
