"""Per-token log-probs of a multi-turn episode, projecting only the model's own tokens through the LM head.

TRL 1.16's `GRPOTrainer` scores completions through its fused LM head (`trl.trainer.utils.add_fused_lm_head`),
which projects *only the labelled positions* on Triton devices but, everywhere else (the CPU), every position
of the whole prompt + completion. A DriftCall episode is mostly environment and template tokens (an expert
episode: ~13% model tokens), and the loss reads log-probs only where `completion_mask * tool_mask` is 1, so on
the CPU most of that projection is thrown away; for the tiny CPU models the LM head is ~60% of the parameters.

`model_token_logps` runs the decoder once and hands only the model-token positions to TRL's own
`ChunkedLogProbFunction` (the kernel the fused head uses, with the same temperature, softcapping and fp32
option), on every device. Log-probs and entropies at the other positions are 0, as TRL's are at padding; the
loss, the KL term and the entropy metric never read them (`tests/test_step_14_trainer.py` checks the values at
model tokens against TRL's path).
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

from cells.agent.continuous import causal_lm_of, text_config_of

# TRL's vocabulary tile width for the chunked kernel (trl.trainer.utils._CHUNKED_LOGPROB_CHUNK_SIZE in 1.16)
VOCAB_CHUNK = 32768
# Config attributes under which TRL's fused head applies a logit multiplier; models with one keep TRL's path
_LOGIT_SCALE_ATTRS = ("logit_scale", "output_multiplier", "lm_head_multiplier", "logits_scaling")


def supports_model_token_scoring(model: Any) -> bool:
    """True when `model_token_logps` computes what TRL's fused head would: a text causal LM without a logit
    multiplier (Gemma 3, the tiny CPU models), reachable without a distributed wrapper (DDP synchronises
    gradients only through the wrapper's own forward)."""
    causal, config = causal_lm_of(model), text_config_of(model)
    if config is None or not (hasattr(causal, "get_decoder") and hasattr(causal, "get_output_embeddings")):
        return False
    return not any(getattr(config, name, None) is not None for name in _LOGIT_SCALE_ATTRS)


def model_token_logps(model: Any, input_ids: Any, attention_mask: Any, score_mask: Any, *, temperature: float,
                      compute_entropy: bool, cast_lm_head_to_fp32: bool = False, autocast: Any = None
                      ) -> tuple[Any, Any]:
    """`(logps (B, C), entropies (B, C) or None)` of the last C = `score_mask.size(1)` tokens of `input_ids`
    (B, T), at the positions where `score_mask` is 1; 0 elsewhere.

    Same numbers as TRL's `model(..., labels=..., fused_lm_head=True)` at those positions: position t - 1's
    hidden state scores token t, at `temperature`, with the config's final-logit softcapping."""
    import torch
    from trl.kernels import ChunkedLogProbFunction

    causal, config = causal_lm_of(model), text_config_of(model)
    width = score_mask.size(1)  # C
    with autocast if autocast is not None else nullcontext():
        hidden = causal.get_decoder()(input_ids=input_ids, attention_mask=attention_mask,
                                      use_cache=False).last_hidden_state  # (B, T, H)
    hidden = hidden[:, -width - 1:-1]  # (B, C, H): the state before each completion token
    keep = score_mask.to(torch.bool)  # (B, C)
    head = causal.get_output_embeddings()
    picked = hidden[keep]  # (N, H), N = model tokens
    head_ctx: Any = nullcontext()
    if cast_lm_head_to_fp32:
        picked, head_ctx = picked.float(), torch.autocast(picked.device.type, enabled=False)
    outputs = ("log_probs", "entropy") if compute_entropy else ("log_probs",)
    with head_ctx:
        logps, entropy, *_ = ChunkedLogProbFunction.apply(
            picked, head.weight, head.bias, input_ids[:, -width:][keep], temperature, VOCAB_CHUNK,
            getattr(config, "final_logit_softcapping", None), 1.0, outputs)
    # masked_scatter keeps the result connected to the graph even when no position is kept
    logps_full = logps.new_zeros(keep.shape).masked_scatter(keep, logps)
    entropy_full = None if entropy is None else entropy.new_zeros(keep.shape).masked_scatter(keep, entropy)
    return logps_full, entropy_full
