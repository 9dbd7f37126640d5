"""Sampling for model rollouts: `generate`'s temperature and top-p warpers, and a categorical draw per row from
that row's own `torch.Generator` (the lock-step driver's logits processor and the continuous driver both use it).

`spec` is a `cells.agent.turns.GenerationSpec` (its `temperature` and `top_p`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def seeded_sampling(seeds: Sequence[int], spec: Any) -> Any:
    """A logits processor that samples each row from its own `torch.Generator` and leaves that token alone
    for `generate`'s argmax to pick.

    Why not `do_sample=True`: that draws every row from one global RNG stream, so a row's tokens depend on
    which other rows share its batch. Seeded rows sample the same tokens in a batch of 8 on one process
    as in a batch of 4 on each of two (multi-process GRPO), and the same on a rerun. The distribution is
    `generate`'s own: its temperature and top-p warpers, then a categorical draw by inverse CDF: one uniform
    per row from its generator, searched in the row's cumulative probabilities (all rows in one
    `searchsorted`). A `torch.multinomial` per row cost ~3 ms of every ~14 ms decoding step for 16 rows."""
    import torch
    from transformers import LogitsProcessor

    warp = logit_warpers(spec)

    class SeededSampling(LogitsProcessor):
        def __init__(self) -> None:
            self.generators: list[Any] | None = None

        def __call__(self, input_ids: Any, scores: Any) -> Any:
            if self.generators is None:  # on the scores' device: CPU here, the GPU under CUDA
                self.generators = [torch.Generator(device=scores.device).manual_seed(int(s)) for s in seeds]
            picks = categorical_by_inverse_cdf(torch.softmax(warp(scores).float(), dim=-1), self.generators)  # (B,)
            chosen = torch.full_like(scores, float("-inf"))
            return chosen.scatter_(1, picks.unsqueeze(1), 0.0)

    return SeededSampling()


def logit_warpers(spec: Any) -> Callable[[Any], Any]:
    """`scores (B, V) -> scores`: `generate`'s own temperature and top-p warpers for `spec`."""
    from transformers import TemperatureLogitsWarper, TopPLogitsWarper

    warpers = [TemperatureLogitsWarper(spec.temperature)]
    if spec.top_p < 1.0:
        warpers.append(TopPLogitsWarper(spec.top_p))

    def warp(scores: Any) -> Any:
        for warper in warpers:
            scores = warper(None, scores)  # neither warper reads the input ids
        return scores

    return warp


def categorical_by_inverse_cdf(probs: Any, generators: Sequence[Any]) -> Any:
    """One draw per row of `probs` (B, V), row i from `generators[i]`: the first index whose cumulative
    probability exceeds u * total, u ~ U[0, 1). Cumulated in float64, so a 262k-token vocabulary loses
    nothing to rounding; a token of probability 0 (cut by top-p) is never drawn."""
    import torch

    cdf = probs.double().cumsum(dim=-1)  # (B, V)
    u = torch.stack([torch.rand((), generator=g, device=probs.device, dtype=torch.float64) for g in generators])
    target = (u * cdf[:, -1]).unsqueeze(1)  # (B, 1): strictly below each row's total
    return torch.searchsorted(cdf, target, right=True).squeeze(1).clamp_(max=probs.size(-1) - 1)  # (B,)
