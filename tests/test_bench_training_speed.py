"""`python -m cells bench train`: the arithmetic it prints and the collator counting behind SFT tokens/s."""

from __future__ import annotations

import dataclasses
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tiny import tiny_tokenizer

from cells.bench.training_speed import CountingCollator, TrainBench, main


def _bench(**kw):
    base = dict(profile="cpu-learn", params=643_584, sft_tokens_per_s=6000.0, sft_padding_share=0.05,
                sft_stock_tokens_per_s=3000.0, grpo_seconds_per_step=30.0, rollout_tokens_per_s=200.0,
                model_tokens_per_step=1200.0, floor_seconds_per_step=20.0, floor_tokens_per_step=1200.0)
    base.update(kw)
    return TrainBench(**base)


def test_ratio_is_seconds_per_generated_token_ours_over_plain_trl():
    assert _bench().ratio_per_generated_token == pytest.approx(1.5)
    # twice the generated tokens in the same time halves our cost per token
    assert _bench(model_tokens_per_step=2400.0).ratio_per_generated_token == pytest.approx(0.75)
    lines = "\n".join(_bench(decode_steps_per_step=288.0, floor_decode_steps_per_step=124.0).lines())
    assert "288   (plain TRL: 124)" in lines
    assert "GRPO steps per minute:                       2.0   (rollout: 40% of a step" in "\n".join(
        _bench(rollout_share=0.4).lines())
    unmerged = "\n".join(_bench(rollout_unmerged_tokens_per_s=150.0, grpo_unmerged_seconds_per_step=36.0).lines())
    assert "200   (LoRA merged for play; unmerged: 150 tokens/s, 36.0 s/step)" in unmerged
    assert "6,000" in lines and "x2.00" in lines and "x1.50 (target <= 1.5)" in lines
    assert dataclasses.asdict(_bench())["sft_tokens_per_s"] == 6000.0
    assert _bench().to_dict()["ratio_per_generated_token"] == pytest.approx(1.5)


def test_counting_collator_counts_real_tokens_labels_and_cells_of_trl_padding():
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    tok = tiny_tokenizer()
    collator = CountingCollator(DataCollatorForLanguageModeling(pad_token_id=tok.pad_token_id))
    rows = [{"input_ids": [5, 6, 7, 8], "labels": [-100, -100, 7, 8]}, {"input_ids": [5, 6], "labels": [-100, 6]}]
    batch = collator(rows)
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]  # TRL's mask has zeros: SDPA's mask path
    assert (collator.tokens, collator.labelled, collator.padded) == (6, 3, 8)


def test_bench_train_is_reachable_from_the_cli(monkeypatch, capsys):
    import cells.bench.training_speed as bt
    from cells.__main__ import main as cli

    seen = {}

    def fake(profile, sft_episodes, sft_steps, grpo_steps, model_dir):
        seen.update(profile=profile, sft_episodes=sft_episodes, sft_steps=sft_steps, grpo_steps=grpo_steps,
                    model_dir=model_dir)
        return _bench(profile=profile)

    monkeypatch.setattr(bt, "run_bench", fake)
    assert cli(["bench", "train", "--profile", "cpu-smoke", "--sft-steps", "3"]) == 0
    assert seen == {"profile": "cpu-smoke", "sft_episodes": 240, "sft_steps": 3, "grpo_steps": 2, "model_dir": None}
    assert cli(["bench", "train", "--model-dir", "runs/x/training/warm_start/model"]) == 0
    assert seen["model_dir"] == "runs/x/training/warm_start/model"
    assert "SFT training tokens/s" in capsys.readouterr().out
    assert main is bt.main


def test_grpo_step_counts_every_group_of_the_batch_and_skips_failure_mining(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from cells.bench.training_speed import bench_grpo
    from cells.pipeline import make_context
    from cells.training import grpo_stage

    seen = {}

    class Trainer:  # what bench_grpo reads of a trainer: args, train(), the logged rollout figures
        args = SimpleNamespace(save_strategy="steps", disable_tqdm=False)
        state = SimpleNamespace(log_history=[{"rollout/tokens_per_s": 500.0, "rollout/model_tokens_mean": 100.0,
                                              "rollout/decode_steps": 240.0, "rollout/seconds": 4.0}])

        def train(self):
            return None

    def builder(ctx, stage, out, callbacks):
        seen["candidates"] = ctx.profile.grpo_failure_candidates
        return Trainer()

    monkeypatch.setattr(grpo_stage, "build_stage_trainer", builder)
    ctx = make_context("cpu-learn", tmp_path)  # two groups of 8 a step, failure curriculum on
    assert ctx.profile.prompts_per_step == 2 and ctx.profile.grpo_failure_candidates > 0
    clock = iter([100.0, 110.0])  # the step takes 10 s on this clock
    monkeypatch.setattr("cells.bench.training_speed.time.perf_counter", lambda: next(clock))
    seconds, rate, tokens, decode_steps, rollout_share = bench_grpo(ctx, steps=1)
    assert seen["candidates"] == 0  # the greedy mining before step 1 is not a step's cost
    assert rate == 500.0 and tokens == 100.0 * 8 * 2  # per-episode mean times every episode of the step
    assert decode_steps == 240.0
    assert seconds == 10.0 and rollout_share == pytest.approx(0.4)  # 4 of the step's 10 s were play


def test_a_saved_model_is_played_only_with_the_profiles_vocabulary(tmp_path):
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    from cells.bench.training_speed import ModelVocabularyError, load_played_model

    tok = tiny_tokenizer()
    config = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=1,
                  num_key_value_heads=1, head_dim=16)
    Gemma3ForCausalLM(Gemma3TextConfig(vocab_size=len(tok), **config)).save_pretrained(tmp_path / "ok")
    assert load_played_model(tmp_path / "ok", tok).config.vocab_size == len(tok)
    Gemma3ForCausalLM(Gemma3TextConfig(vocab_size=len(tok) + 7, **config)).save_pretrained(tmp_path / "other")
    with pytest.raises(ModelVocabularyError, match=r"vocabulary of \d+ tokens, but the profile's tokenizer has"):
        load_played_model(tmp_path / "other", tok)
