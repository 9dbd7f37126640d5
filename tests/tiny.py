"""Tiny CPU model, tokenizer and trainer factories shared by the training tests (steps 15-17).

A 2-layer `Gemma3ForCausalLM` (hidden 32) with a LoRA adapter, a byte-level BPE tokenizer trained
in memory on a few sentences, with a Gemma-style chat template (system folded into the first user
turn, assistant rendered as `model`, `<end_of_turn>` closing each turn). Everything builds in well
under a second and is deterministic for a given seed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}"
    "{%- set first_user_prefix = '' -%}"
    "{%- set loop_messages = messages -%}"
    "{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- set role = 'model' if message['role'] in ['assistant', 'model'] else 'user' -%}"
    "<start_of_turn>{{ role }}\n{{ (first_user_prefix if loop.first else '') + message['content'] | trim }}"
    "{{ '<end_of_turn>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}"
)

SPECIALS = ("<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>")

CORPUS = (
    "book a flight from HYD to BLR on 2026-05-02",
    '{"action":"tool_call","tool":"airline.search","args":{"from":"HYD","to":"BLR"}}',
    '{"action":"submit","message":"done","confidence":0.8}',
    "aaaa bbbb abab you are a concierge user model system",
    "मुझे कल की फ्लाइट चाहिए  நாளை விமானம்  ನಾಳೆ ವಿಮಾನ",
)


def tiny_tokenizer() -> Any:
    """A ~300-token byte-level BPE tokenizer with the Gemma-style chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320, special_tokens=list(SPECIALS), initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(list(CORPUS) * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="<eos>",
        bos_token="<bos>",
        unk_token="<unk>",
        additional_special_tokens=["<start_of_turn>", "<end_of_turn>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def tiny_model(tokenizer: Any, seed: int = 0, lora: bool = True) -> Any:
    """A 2-layer Gemma 3 text model (hidden 32), optionally wrapped in a LoRA r=4 adapter."""
    import torch
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(seed)
    config = Gemma3TextConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=512,
        sliding_window=64,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=[tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<end_of_turn>")],
        bos_token_id=tokenizer.bos_token_id,
    )
    model = Gemma3ForCausalLM(config)
    if not lora:
        return model
    from peft import LoraConfig, get_peft_model

    peft_config = LoraConfig(
        r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, peft_config)


def a_reward(completions: list[Any], **_: Any) -> list[float]:
    """Single-turn toy reward: distinct characters in the completion plus a bonus per letter 'a'.

    Random 6-token completions almost always differ in it, so group advantages are non-zero.
    """
    out = []
    for completion in completions:
        text = completion[-1]["content"] if isinstance(completion, list) else str(completion)
        out.append(len(set(text)) / 10 + text.count("a"))
    return out


def prompt_dataset(n: int = 16) -> Any:
    """A conversational prompt dataset for GRPO."""
    from datasets import Dataset

    rows = [{"prompt": [{"role": "user", "content": f"say a {i % 4}"}]} for i in range(n)]
    return Dataset.from_list(rows)


def grpo_config(output_dir: Path, max_steps: int, seed: int = 7, **overrides: Any) -> Any:
    """A CPU GRPOConfig: G=4, batch 4, 6 new tokens, cosine LR, checkpoint every step."""
    from trl import GRPOConfig

    kwargs: dict[str, Any] = {
        "output_dir": str(output_dir),
        "use_cpu": True,
        "bf16": False,
        "report_to": "none",
        "per_device_train_batch_size": 4,
        "num_generations": 4,
        "max_completion_length": 6,
        "max_steps": max_steps,
        "learning_rate": 5e-3,
        "lr_scheduler_type": "cosine",
        "warmup_steps": 0,
        "beta": 0.04,
        "logging_steps": 1,
        "save_strategy": "steps",
        "save_steps": 1,
        "seed": seed,
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        "activation_checkpointing": True,  # TRL's default under transformers 5's name: its old name warns
    }
    kwargs.update(overrides)
    return GRPOConfig(**kwargs)


def grpo_factory(max_steps: int, seed: int = 7, model_seed: int = 0, **overrides: Any) -> Any:
    """A `trainer_factory(output_dir, callbacks)` building a real `trl.GRPOTrainer` on a fresh tiny model."""
    from trl import GRPOTrainer

    def factory(output_dir: Path, callbacks: list[Any]) -> Any:
        tokenizer = tiny_tokenizer()
        model = tiny_model(tokenizer, seed=model_seed)
        return GRPOTrainer(
            model=model,
            reward_funcs=a_reward,
            args=grpo_config(output_dir, max_steps, seed=seed, **overrides),
            train_dataset=prompt_dataset(),
            processing_class=tokenizer,
            callbacks=callbacks,
        )

    return factory


class Interrupted(RuntimeError):
    """Raised by `CrashAtStepBegin` to simulate a killed training run."""


def crash_at_step_begin(at: int) -> Any:
    """A TrainerCallback raising `Interrupted` at the start of the step after `global_step == at`."""
    from transformers import TrainerCallback

    class CrashAtStepBegin(TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            if state.global_step == at:
                raise Interrupted(f"crash after step {at}")
            return control

    return CrashAtStepBegin()
