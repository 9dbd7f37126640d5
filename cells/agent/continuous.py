"""Continuous batching for multi-turn rollouts: each episode starts its next turn as soon as its last one ends.

The lock-step driver (`rollout.rollout_batch`'s default) runs turn j of every episode as one `generate`, which
lasts as long as that turn's longest row: a row whose tool call took 20 tokens waits while another writes 90.
On a CPU the tiny models are bound by per-step overhead, not arithmetic, so what a rollout costs is its number
of decoding steps (`python -m cells bench train` logs them against the tokens generated). Here every step decodes
one token for every row, and the rows that just finished a turn take their environment tokens (the observation
and the template around it) in the same step; no row waits for another's turn, and no prefix is ever encoded
twice (one KV cache per row for the whole episode).

How: one `transformers.DynamicCache` over all rows, fed with a (B, K) block a step: each row's unfed tokens
right-aligned (K = the longest; decoding rows feed one), holes masked in the 2D attention mask, positions
given per row (so RoPE sees each episode's own positions). When some rows feed an observation while others
decode, the feeding rows run as a second forward on their own slice of the cache (`_forward_feeding_apart`):
one shared block would pad every decoding row to the observation's length, and an observation is far longer
than the one token a decoding row feeds. After a step that left holes, or dropped finished rows, the cache is
re-packed: every row's cached keys/values moved to the right, holes gone. Attention masks in transformers 5 are index-based (causal over cache indices + the 2D
padding mask), which is exact here since only left padding remains between steps.

The decisions are the lock-step driver's, per row: the same per-turn token caps and episode budget, the same
stop tokens, the same `advance` (env step, env/template tokens with mask 0), the same per-turn sampling seeds
(`turn_seed`, `cells.agent.turns`) drawn in the same order, so a seeded or greedy episode comes out as the lock-step one does up
to floating-point noise between batch shapes (`tests/test_step_14_trainer.py` compares them). Only for models
whose attention window covers a whole episode (`supports_continuous`): a sliding window shorter than that
(Gemma 3 1B/4B: 512/1024) measures distance in cache slots, so those models keep the lock-step driver.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cells.agent.sampling import categorical_by_inverse_cdf, logit_warpers
from cells.agent.turns import ChatPieces, EpisodeRun, GenerationSpec, advance, turn_seed


def causal_lm_of(model: Any) -> Any:
    """The `*ForCausalLM` module under a peft wrapper (LoRA layers stay injected), or `model` itself."""
    return model.get_base_model() if hasattr(model, "peft_config") and hasattr(model, "get_base_model") else model


def text_config_of(model: Any) -> Any:
    """The text (decoder) config of `model` or of the causal LM under its peft wrapper; None without a config."""
    config = getattr(causal_lm_of(model), "config", None)
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def supports_continuous(model: Any, longest_episode: int) -> bool:
    """True when `play_continuously` computes what `generate` would for `model`: a transformers causal LM
    whose forward takes a `cache` and `position_ids`, and whose attention window (if any) spans twice
    `longest_episode` tokens (room for one step's holes before a re-pack)."""
    causal, text = causal_lm_of(model), text_config_of(model)
    if text is None:
        return False
    window = getattr(text, "sliding_window", None)
    if window is not None and window < 2 * longest_episode:
        return False
    try:
        params = inspect.signature(type(causal).forward).parameters
    except (TypeError, ValueError):
        return False
    return {"cache", "position_ids", "logits_to_keep"} <= set(params)


@dataclass
class _Row:
    """One episode in flight: what of its tokens the cache holds, and its current turn."""

    run: EpisodeRun
    fed: int = 0  # tokens of prompt + completion + turn already in the cache
    turn: list[int] = field(default_factory=list)  # tokens sampled this turn
    limit: int = 1  # this turn's token cap
    budget: int = 0  # tokens left in the episode when the turn began
    generator: Any = None  # this turn's sampling generator (seeded rollouts)

    def unfed(self) -> list[int]:
        """Tokens of prompt + completion + turn not yet in the cache; mid-turn just the last sampled one (the
        common case, without copying the episode's tokens every decoding step)."""
        settled = len(self.run.prompt_ids) + len(self.run.completion)
        if self.fed >= settled:
            return self.turn[self.fed - settled:]
        return (self.run.prompt_ids + self.run.completion)[self.fed:] + self.turn


def _start_turn(row: _Row, spec: GenerationSpec, seeded: bool, device: Any) -> None:
    import torch

    row.budget = spec.max_episode_tokens - len(row.run.completion)
    row.limit = max(1, min(spec.max_new_tokens_per_turn, row.budget))
    row.turn = []
    if seeded:
        row.generator = torch.Generator(device=device).manual_seed(turn_seed(row.run))


def _sample(logits: Any, rows: Sequence[_Row], spec: GenerationSpec, seeded: bool, warp: Callable[[Any], Any]
            ) -> list[int]:
    """One token per row from `logits` (B, V): argmax, each row's own generator, or the global RNG, as the
    lock-step driver's `generate` call would."""
    import torch

    if spec.greedy:
        return logits.argmax(dim=-1).tolist()
    probs = torch.softmax(warp(logits).float(), dim=-1)  # (B, V)
    if seeded:
        return categorical_by_inverse_cdf(probs, [row.generator for row in rows]).tolist()
    return torch.multinomial(probs, 1).squeeze(1).tolist()


def _feed_block(rows: Sequence[_Row], feeds: Sequence[list[int]], pad: int, device: Any) -> tuple[Any, Any, Any]:
    """`(input_ids (B, K), block mask (B, K), position_ids (B, K))`: each row's `feeds`, right-aligned (an empty
    feed is a one-token hole)."""
    import torch

    width = max(1, max(len(f) for f in feeds))
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    positions = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (row, feed) in enumerate(zip(rows, feeds, strict=True)):
        if not feed:
            continue
        start = width - len(feed)
        ids[i, start:] = torch.tensor(feed, dtype=torch.long)
        mask[i, start:] = 1
        positions[i, start:] = torch.arange(row.fed, row.fed + len(feed))
    return ids.to(device), mask.to(device), positions.to(device)


def _last_logits(model: Any, ids: Any, mask: Any, positions: Any, cache: Any) -> Any:
    """Logits (B, V) at the last position of the block `ids`, extending `cache`; `mask` covers cache + block."""
    import torch

    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True,
                     logits_to_keep=1).logits[:, -1, :]


def _forward_feeding_apart(model: Any, cache: Any, mask: Any, rows: Sequence[_Row], feeds: Sequence[list[int]],
                           apart: Sequence[int], pad: int, device: Any) -> tuple[Any, Any]:
    """One decoding step where rows `apart` feed several tokens (an observation and its template) and the others
    one: the feeding rows run on their own slice of the cache, so the decoding rows are not padded to the
    observation's length (one shared block would pad every row to the longest feed).

    Returns `(logits (B, V), mask (B, L'))`; the feeding rows' new keys sit after a one-token hole that the
    decode block left in their row, and every hole goes at the next `_repack`."""
    import torch
    from transformers import DynamicCache

    index = torch.tensor(apart, dtype=torch.long, device=device)
    part = DynamicCache()
    for layer_idx, layer in enumerate(cache.layers):
        part.update(layer.keys[index], layer.values[index], layer_idx)
    part_rows = [rows[i] for i in apart]
    ids, part_block, positions = _feed_block(part_rows, [feeds[i] for i in apart], pad, device)
    part_logits = _last_logits(model, ids, torch.cat([mask[index], part_block], dim=1), positions, part)
    feeding = set(apart)
    decoding = [[] if i in feeding else feed for i, feed in enumerate(feeds)]
    ids, block_mask, positions = _feed_block(rows, decoding, pad, device)  # (B, 1): the feeding rows a hole
    mask = torch.cat([mask, block_mask], dim=1)  # (B, L + 1)
    logits = _last_logits(model, ids, mask, positions, cache).clone()
    logits[index] = part_logits
    width, added = mask.size(1), part_block.size(1)
    for layer, part_layer in zip(cache.layers, part.layers, strict=True):
        for name in ("keys", "values"):
            full = getattr(layer, name)  # (B, H, L + 1, D)
            grown = torch.cat([full, full.new_zeros(*full.shape[:2], added, full.size(3))], dim=2)
            grown[index, :, width:] = getattr(part_layer, name)[:, :, width - 1:]
            setattr(layer, name, grown)
    grown_mask = torch.cat([mask, mask.new_zeros(mask.size(0), added)], dim=1)  # (B, L + 1 + K)
    grown_mask[index, width:] = part_block
    return logits, grown_mask


def _repack(cache: Any, mask: Any, keep: Any) -> Any:
    """Keep rows `keep` (LongTensor) of the cache and `mask` (B, L), each row's cached tokens moved right with
    the holes removed (left padding only); returns the new mask (B', L')."""
    import torch

    valid = mask[keep].bool()  # (B', L)
    width = int(valid.sum(dim=1).max())
    # a stable sort puts each row's holes first and its cached tokens after them, in order
    order = torch.argsort(valid.to(torch.int8), dim=1, stable=True)[:, -width:]  # (B', L')
    for layer in cache.layers:
        if getattr(layer, "keys", None) is None or layer.keys.numel() == 0:
            continue
        index = order[:, None, :, None].expand(-1, layer.keys.size(1), -1, layer.keys.size(3))  # (B', H, L', D)
        layer.keys = torch.gather(layer.keys[keep], 2, index)
        layer.values = torch.gather(layer.values[keep], 2, index)
    return torch.gather(valid, 1, order).to(mask.dtype)


def play_continuously(model: Any, tokenizer: Any, pieces: ChatPieces, runs: Sequence[EpisodeRun], spec: GenerationSpec,
                      seeded: bool, render_observation: Callable[[Any], str]) -> tuple[int, int]:
    """Play `runs` (those not done) to the end with continuous batching; returns `(model tokens generated,
    decoding steps)`: every step samples one token for every row still playing."""
    import torch
    from transformers import DynamicCache

    device = next(model.parameters()).device
    warp = logit_warpers(spec)
    rows = [_Row(run) for run in runs if not run.done]
    for row in rows:
        _start_turn(row, spec, seeded, device)
    cache = DynamicCache()  # full-attention layers only: supports_continuous checked the window covers an episode
    mask = torch.zeros((len(rows), 0), dtype=torch.long, device=device)  # (B, L) over the cache
    generated = steps = 0
    while rows:
        feeds = [row.unfed() for row in rows]
        apart = [i for i, feed in enumerate(feeds) if len(feed) > 1]
        if apart and len(apart) < len(rows):  # some rows decode while others take their env tokens
            logits, mask = _forward_feeding_apart(model, cache, mask, rows, feeds, apart, pieces.tok.pad_token_id,
                                                  device)
        else:  # one block: every row decodes, or every row feeds (the prompts)
            ids, block_mask, positions = _feed_block(rows, feeds, pieces.tok.pad_token_id, device)
            mask = torch.cat([mask, block_mask], dim=1)  # (B, L + K)
            logits = _last_logits(model, ids, mask, positions, cache)
        holes = max(len(feed) for feed in feeds) > 1
        for row, feed in zip(rows, feeds, strict=True):
            row.fed += len(feed)
        picks = _sample(logits, rows, spec, seeded, warp)
        steps += 1
        keep = []
        for i, (row, token) in enumerate(zip(rows, picks, strict=True)):
            row.turn.append(int(token))
            if token in pieces.stop_ids or len(row.turn) >= row.limit:
                new, generated = row.turn, generated + len(row.turn)
                advance(row.run, tokenizer.decode(new, skip_special_tokens=True), new, row.budget, pieces,
                         render_observation)
                if row.run.done or len(row.run.spans) >= spec.max_turns:
                    continue  # the lock-step driver stops after max_turns turns too (the env is truncated later)
                _start_turn(row, spec, seeded, device)
            keep.append(i)
        if len(keep) < len(rows) or holes:
            rows = [rows[i] for i in keep]
            if rows:
                mask = _repack(cache, mask, torch.tensor(keep, dtype=torch.long, device=device))
    return generated, steps
