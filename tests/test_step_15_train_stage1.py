"""Step 15 machinery: SFT warm start, adapter-only checkpoints, resume after an interrupt.

Real `trl.SFTTrainer` / `trl.GRPOTrainer` on the tiny Gemma 3 model from `tests/tiny.py`.
"""

from __future__ import annotations

import dataclasses
import json
import re
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file
from tiny import Interrupted, crash_at_step_begin, grpo_factory, tiny_model, tiny_tokenizer

from cells.agent.chat import ChatTemplateError, render_segments
from cells.context import Context
from cells.step_01_setup import git_sha
from cells.step_02_profiles import get_profile
from cells.step_15_train_stage1 import (
    evaluate_warm_start,
    expert_conversations_for,
    warm_start_conversations,
)
from cells.training.checkpoints import (
    FULL_MODEL_FILES,
    META_NAME,
    CheckpointError,
    assert_adapter_only,
    latest_checkpoint,
    list_checkpoints,
    read_meta,
    read_trainer_state,
)
from cells.training.curriculum import run_stage
from cells.training.sft_data import IGNORE_INDEX, WarmStartError, stage_split, tokenize_conversation
from cells.training.warm_start import sft_warm_start, summarize_eval

CONV = [
    {"role": "system", "content": "you are a concierge"},
    {"role": "user", "content": "book a flight HYD to BLR"},
    {"role": "model", "content": '{"action":"tool_call","tool":"airline.search","args":{"from":"HYD"}}'},
    {"role": "user", "content": '[tool_result] {"status":"ok"}'},
    {"role": "assistant", "content": '{"action":"submit","message":"done","confidence":0.8}'},
    {"role": "user", "content": "thanks"},  # trailing user turn: dropped, nothing to learn
]


# ---------------------------------------------------------------- warm start: labels


def test_labels_are_minus_100_exactly_off_assistant_tokens():
    tok = tiny_tokenizer()
    tc = tokenize_conversation(tok, CONV)
    assert len(tc.input_ids) == len(tc.labels)
    # the token stream is the full render up to the last assistant turn
    full = tok.apply_chat_template(CONV[:5], tokenize=False)
    assert tok.decode(list(tc.input_ids)) == full
    trained = [i for i, lab in enumerate(tc.labels) if lab != IGNORE_INDEX]
    for i in trained:
        assert tc.labels[i] == tc.input_ids[i]
    # trained tokens decode to exactly the two assistant contents, each closed by <end_of_turn>
    eot = tok.convert_tokens_to_ids("<end_of_turn>")
    spans, cur = [], []
    for lab in tc.labels:
        if lab != IGNORE_INDEX:
            cur.append(lab)
        elif cur:
            spans.append(cur)
            cur = []
    if cur:
        spans.append(cur)
    assert [tok.decode(s[:-1]) for s in spans] == [CONV[2]["content"], CONV[4]["content"]]
    assert all(s[-1] == eot for s in spans)
    # the template glue after <end_of_turn> (the newline) and every role header stay untrained
    assert tc.labels[-1] == IGNORE_INDEX
    assert tc.n_trained == sum(len(s) for s in spans)


def test_segments_follow_incremental_rendering():
    tok = tiny_tokenizer()
    segs = render_segments(tok, CONV)
    assert [is_a for _, is_a in segs] == [False, True, False, True]
    assert segs[0][0].endswith("<start_of_turn>model\n")
    assert segs[1][0] == CONV[2]["content"] + "<end_of_turn>\n"  # newline: in the segment, not trained
    assert segs[2][0].startswith("<start_of_turn>user\n[tool_result]")


def test_bad_conversations_are_rejected():
    tok = tiny_tokenizer()
    with pytest.raises(ChatTemplateError, match="start with"):
        tokenize_conversation(tok, [{"role": "assistant", "content": "x"}])
    with pytest.raises(ChatTemplateError, match="no assistant"):
        tokenize_conversation(tok, [{"role": "user", "content": "x"}])
    tok.chat_template = "{% for m in messages|reverse %}{{ m['content'] }}{% endfor %}"
    with pytest.raises(ChatTemplateError, match="prefix-preserving"):
        tokenize_conversation(tok, CONV)


def test_sft_loss_falls_and_only_the_adapter_is_saved(tmp_path):
    tok = tiny_tokenizer()
    model = tiny_model(tok)
    result = sft_warm_start(model, tok, [CONV] * 8, tmp_path, learning_rate=3e-3, epochs=3, batch_size=4,
                            disable_tqdm=True)
    assert result.steps == 6 and len(result.losses) == 6
    assert result.losses[-1] < result.losses[0] - 0.05
    assert result.trained_tokens < result.tokens
    files = {p.name for p in result.adapter_dir.iterdir()}
    assert "adapter_model.safetensors" in files and not files & set(FULL_MODEL_FILES)


# ---------------------------------------------------------------- checkpoints


def test_checkpoints_are_adapter_only_with_sidecar(tmp_path):
    stage_dir = tmp_path / "stage1"
    result = run_stage(1, grpo_factory(2), stage_dir, None, 2, metrics_path=tmp_path / "m.csv",
                       profile_name="cpu-smoke")
    assert [p.name for p in list_checkpoints(stage_dir)] == ["checkpoint-1", "checkpoint-2"]
    assert result.checkpoint == latest_checkpoint(stage_dir) == stage_dir / "checkpoint-2"
    for ckpt in list_checkpoints(stage_dir):
        names = {p.name for p in ckpt.rglob("*")}
        assert not names & set(FULL_MODEL_FILES)
        assert {"adapter_model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth",
                "trainer_state.json", META_NAME} <= names
        # adapter weights only: every tensor is a LoRA matrix
        assert all("lora_" in k for k in load_file(str(ckpt / "adapter_model.safetensors")))
    meta = read_meta(result.checkpoint)
    assert (meta.profile, meta.stage, meta.step) == ("cpu-smoke", 1, 2)
    assert {"torch", "transformers", "trl", "peft"} <= dict(meta.versions).keys()
    assert dict(meta.versions)["trl"] == "1.16.0"
    assert meta.git_sha == git_sha()
    assert meta.created_at.endswith("Z")
    raw = json.loads((result.checkpoint / META_NAME).read_text())
    assert set(raw) == {"profile", "stage", "step", "versions", "git_sha", "created_at", "knobs", "knobs_digest",
                        "resolved_profile"}
    assert raw["knobs"] == {"profile": "cpu-smoke"}  # run_stage's default when no profile knobs are passed


def test_adapter_only_guard_and_incomplete_checkpoints(tmp_path):
    ckpt = tmp_path / "checkpoint-3"
    ckpt.mkdir()
    with pytest.raises(CheckpointError, match="no adapter"):
        assert_adapter_only(ckpt)
    (ckpt / "adapter_model.safetensors").write_bytes(b"x")
    assert latest_checkpoint(tmp_path) is None  # no trainer_state.json yet: half-written
    (ckpt / "trainer_state.json").write_text("{}")
    assert latest_checkpoint(tmp_path) == ckpt
    (ckpt / "model.safetensors").write_bytes(b"x")
    with pytest.raises(CheckpointError, match="full-model weights"):
        assert_adapter_only(ckpt)
    with pytest.raises(CheckpointError, match=r"has no driftcall_meta\.json"):
        read_meta(ckpt)


# ---------------------------------------------------------------- resume after an interrupt




def _optimizer_state(ckpt):
    return torch.load(ckpt / "optimizer.pt", weights_only=True)["state"]


def test_interrupted_stage_resumes_like_an_uninterrupted_run(tmp_path):
    n = 5
    straight = run_stage(1, grpo_factory(n, save_steps=2), tmp_path / "a", None, n, metrics_path=tmp_path / "a.csv")

    b = tmp_path / "b"
    with pytest.raises(Interrupted):  # checkpoint-2 saved, step 3 trained and logged, crash before step 4
        run_stage(1, grpo_factory(n, save_steps=2), b, None, n, metrics_path=tmp_path / "b.csv",
                  extra_callbacks=[crash_at_step_begin(3)])
    assert latest_checkpoint(b) == b / "checkpoint-2"
    resumed = run_stage(1, grpo_factory(n, save_steps=2), b, None, n, metrics_path=tmp_path / "b.csv")
    assert resumed.resumed_from == b / "checkpoint-2" and resumed.trained_steps == n - 2

    sa, sb = read_trainer_state(straight.checkpoint), read_trainer_state(resumed.checkpoint)
    assert sa["global_step"] == sb["global_step"] == n
    lr = [[h["learning_rate"] for h in s["log_history"] if "learning_rate" in h] for s in (sa, sb)]
    assert len(lr[0]) == n and lr[0] == pytest.approx(lr[1])
    oa, ob = _optimizer_state(straight.checkpoint), _optimizer_state(resumed.checkpoint)
    assert oa.keys() == ob.keys()
    for k in oa:
        assert float(oa[k]["step"]) == float(ob[k]["step"]) == n
        for moment in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(oa[k][moment], ob[k][moment], rtol=1e-4, atol=1e-7)
    wa = load_file(str(straight.checkpoint / "adapter_model.safetensors"))
    wb = load_file(str(resumed.checkpoint / "adapter_model.safetensors"))
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=1e-4, atol=1e-6)
    # the adapter really moved, so the comparison is not vacuous
    assert any(float(v.abs().max()) > 0 for k, v in wa.items() if "lora_B" in k)
    # rerunning a complete stage trains nothing
    again = run_stage(1, grpo_factory(n, save_steps=2), b, None, n, metrics_path=tmp_path / "b.csv")
    assert again.trained_steps == 0 and again.checkpoint == resumed.checkpoint


# ---------------------------------------------------------------- warm start: data mix, held-out parse rate


def _rec(turns: int, fails: int, success: bool, reward: float) -> SimpleNamespace:
    return SimpleNamespace(turns_used=turns, parse_failures=fails, success=success, reward=reward)


def test_summarize_eval_counts_valid_turns_success_and_reward():
    summary = summarize_eval([_rec(4, 1, True, 0.9), _rec(3, 3, False, 0.0), _rec(5, 0, False, 0.3)])
    assert (summary.episodes, summary.turns, summary.invalid_turns) == (3, 12, 4)
    assert summary.valid_share == pytest.approx(8 / 12)
    assert summary.success_rate == pytest.approx(1 / 3)
    assert summary.mean_reward == pytest.approx(0.4)
    assert summary.to_dict()["valid_share"] == pytest.approx(8 / 12)
    assert summary.line().startswith("[warm start] valid-action share on 12 held-out turns: 66.7% (episodes: 3,")
    assert summary.success_by_stage == () and "by stage" not in summary.line()
    staged = [SimpleNamespace(**vars(_rec(4, 0, ok, 1.0 * ok)), stage=st)
              for st, ok in ((1, True), (1, False), (2, False), (3, True))]
    per = summarize_eval(staged)
    assert per.success_by_stage == ((1, 0.5, 2), (2, 0.0, 1), (3, 1.0, 1))
    assert per.line().endswith("; success by stage: 1: 50% of 2, 2: 0% of 1, 3: 100% of 1")
    assert per.to_dict()["success_by_stage"]["1"] == {"success_rate": 0.5, "episodes": 2}
    empty = summarize_eval([])
    assert (empty.valid_share, empty.success_rate, empty.mean_reward) == (0.0, 0.0, 0.0)


def test_stage_split_is_even_and_covers_n():
    assert stage_split(10, (1, 2, 3)) == [(1, 4), (2, 3), (3, 3)]
    assert stage_split(2, (1, 2, 3)) == [(1, 1), (2, 1), (3, 0)]
    assert stage_split(5, (1,)) == [(1, 5)]
    with pytest.raises(ValueError):
        stage_split(3, ())


def test_warm_start_conversations_mix_stages_on_disjoint_seeds(tmp_path):
    profile = dataclasses.replace(get_profile("cpu-smoke"), sft_episodes=6, sft_stages=(1, 2, 3))
    ctx = Context(profile=profile, run_dir=tmp_path)
    convs = warm_start_conversations(ctx)
    assert len(convs) == 6
    # interleaved by stage: 1, 2, 3, 1, 2, 3 -> stage-2/3 goals (with drift) are in the data
    stage2 = expert_conversations_for(ctx, 2, 2)
    assert convs[1] == stage2[0] and convs[4] == stage2[1]
    assert all(c[0]["role"] == "system" and any(m["role"] == "assistant" for m in c) for c in convs)


def test_tokenizing_in_worker_processes_gives_the_same_rows_in_order(tmp_path, monkeypatch):
    from cells.training import sft_data

    monkeypatch.setattr(sft_data, "_CHUNK", 5)  # several chunks per worker: order across chunks is tested

    ctx = Context(profile=get_profile("cpu-learn"), run_dir=tmp_path)
    convs = [c for stage in (1, 2, 3) for c in expert_conversations_for(ctx, 4, stage)]  # drills included
    tok = tiny_tokenizer()
    serial = sft_data.tokenize_all(tok, convs, workers=1)
    pooled = sft_data.tokenize_all(tok, convs, workers=2)
    assert serial.to_dict() == pooled.to_dict() and len(serial) == len(convs)
    first = tokenize_conversation(tok, convs[0])
    assert serial[0]["input_ids"] == list(first.input_ids) and serial[0]["labels"] == list(first.labels)
    assert sft_data.tokenization_workers(sft_data.PARALLEL_MIN - 1) == 1
    with pytest.raises(WarmStartError, match="no conversations"):
        sft_data.tokenize_all(tok, [])


def test_evaluate_warm_start_plays_the_held_out_plan_and_stores_the_summary(tmp_path, monkeypatch, capsys):
    import cells.evaluation.runner as runner

    seen = {}

    def fake_run_model(name, model, tokenizer, cases, spec, *, greedy, trial, batch_size=64):
        seen.update(name=name, cases=cases, greedy=greedy, spec=spec)
        return [_rec(3, 1, i == 0, 0.5 if i == 0 else 0.0) for i, _ in enumerate(cases)]

    monkeypatch.setattr(runner, "run_model", fake_run_model)
    ctx = Context(profile=get_profile("cpu-smoke"), run_dir=tmp_path)
    ctx.model = object()
    summary = evaluate_warm_start(ctx)
    assert seen["greedy"] and seen["cases"] == runner.eval_plan(1) and len(seen["cases"]) == 15
    assert seen["spec"].max_new_tokens_per_turn == ctx.profile.max_new_tokens_per_turn
    assert ctx.trainer_state["warm_start_eval"] is summary
    assert (summary.episodes, summary.turns, summary.invalid_turns) == (15, 45, 15)
    assert summary.success_rate == pytest.approx(1 / 15)
    out = capsys.readouterr().out
    assert "[warm start] valid-action share on 45 held-out turns: 66.7% (episodes: 15, success: 6.7%" in out
    ctx2 = Context(profile=dataclasses.replace(ctx.profile, warm_start_eval_per_cell=0), run_dir=tmp_path)
    ctx2.model = object()
    assert evaluate_warm_start(ctx2) is None and "warm_start_eval" not in ctx2.trainer_state


def test_trained_embeddings_stay_tied_and_inside_the_adapter(tmp_path):
    from peft import get_peft_model

    from cells.step_12_model import lora_config

    tok = tiny_tokenizer()
    base = tiny_model(tok, lora=False)
    before = base.get_input_embeddings().weight.detach().clone()
    profile = dataclasses.replace(get_profile("cpu-smoke"), lora_targets=("q_proj", "v_proj"), warm_start_full=False,
                                  copy_pretrain_max_steps=0, lora_modules_to_save=("embed_tokens",))  # the LoRA-only warm start (pre issue 10)
    model = get_peft_model(base, lora_config(profile))
    result = sft_warm_start(model, tok, [CONV] * 4, tmp_path, learning_rate=1e-2, epochs=2, batch_size=2,
                            disable_tqdm=True)
    assert result.losses[-1] < result.losses[0]
    emb, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    assert torch.equal(emb, head)  # lm_head reads the trained copy (weights stay tied)
    assert not torch.equal(emb.detach(), before)  # the embeddings really trained
    with model.disable_adapter():  # the baseline (step 18) still sees the untouched base embeddings
        assert torch.equal(model.get_input_embeddings().weight, before)
    files = {p.name for p in result.adapter_dir.iterdir()}
    assert not files & set(FULL_MODEL_FILES)
    keys = load_file(str(result.adapter_dir / "adapter_model.safetensors"))
    assert any("embed_tokens" in k for k in keys) and any("lora_" in k for k in keys)
    # step 15's rerun path reloads the saved warm start: the trained embeddings come back, still tied
    from cells.training.checkpoints import load_adapter_weights

    fresh = get_peft_model(tiny_model(tok, lora=False), lora_config(profile))
    load_adapter_weights(fresh, result.adapter_dir)
    assert torch.equal(fresh.get_input_embeddings().weight, emb)
    assert torch.equal(fresh.get_output_embeddings().weight, emb)


# ---------------------------------------------------------------- full warm start (CPU profiles)


def _full_ctx(tmp_path, monkeypatch, seed=0):
    import cells.step_15_train_stage1 as s15

    monkeypatch.setattr(s15, "expert_conversations_for", lambda ctx, n, stage: [CONV] * n)
    profile = dataclasses.replace(get_profile("cpu-smoke"), sft_episodes=8, sft_stages=(1,), sft_batch_size=4,
                                  sft_learning_rate=3e-3, warm_start_eval_per_cell=0)
    ctx = Context(profile=profile, run_dir=tmp_path)
    ctx.tokenizer = tiny_tokenizer()
    ctx.model = tiny_model(ctx.tokenizer, seed=seed, lora=False)
    return ctx


def _ids(tok):
    return torch.tensor([tok.apply_chat_template(CONV[:3], tokenize=True, return_dict=False)])


def test_full_warm_start_trains_every_weight_saves_the_base_and_puts_a_fresh_lora_on_top(tmp_path, monkeypatch):
    from cells.step_15_train_stage1 import warm_start

    ctx = _full_ctx(tmp_path, monkeypatch)
    initial = {k: v.clone() for k, v in ctx.model.state_dict().items()}
    result = warm_start(ctx)
    assert result.full_model and result.steps == 2 and result.examples == 8
    assert result.saved_dir == tmp_path / "training" / "warm_start" / "model"
    assert result.tokens > result.trained_tokens > 0 and result.tokens_per_s > 0
    assert result.losses[-1] < result.losses[0]
    saved = load_file(str(result.saved_dir / "model.safetensors"))
    # every weight moved (attention, MLP, norms, embeddings), not just an adapter
    moved = {k for k, v in saved.items() if not torch.equal(v, initial[k])}
    assert moved == set(saved)
    # GRPO's policy: a fresh LoRA over the warm-started model; adapter off = the KL reference = the saved model
    assert hasattr(ctx.model, "peft_config")
    trainable = [n for n, p in ctx.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    base = ctx.model.get_base_model().state_dict()
    for key, value in saved.items():
        torch.testing.assert_close(base[key.replace(".weight", ".base_layer.weight")] if key not in base else base[key],
                                   value)
    ids = _ids(ctx.tokenizer)
    with torch.no_grad():
        policy = ctx.model(input_ids=ids).logits
        with ctx.model.disable_adapter():
            reference = ctx.model(input_ids=ids).logits
    torch.testing.assert_close(policy, reference)


def test_full_warm_start_is_reloaded_not_retrained(tmp_path, monkeypatch):
    from cells.step_15_train_stage1 import warm_start

    first = _full_ctx(tmp_path, monkeypatch)
    warm_start(first)
    again = _full_ctx(tmp_path, monkeypatch, seed=1)  # a different random init: must be replaced by the saved one
    result = warm_start(again)
    assert result.full_model and result.steps == 0
    ids = _ids(again.tokenizer)
    with torch.no_grad(), first.model.disable_adapter(), again.model.disable_adapter():
        torch.testing.assert_close(again.model(input_ids=ids).logits, first.model(input_ids=ids).logits)


def test_right_pad_collator_without_padding_mask_gives_the_masked_logits_on_real_tokens():
    from cells.training.sft_data import RightPadCollator

    tok = tiny_tokenizer()
    model = tiny_model(tok, lora=False).eval()
    long, short = tokenize_conversation(tok, CONV), tokenize_conversation(tok, CONV[:3])
    rows = [{"input_ids": list(t.input_ids), "labels": list(t.labels)} for t in (long, short)]
    collator = RightPadCollator(tok.pad_token_id)
    batch = collator(rows)
    n = len(short.input_ids)
    assert batch["attention_mask"].all() and (batch["input_ids"][1, n:] == tok.pad_token_id).all()
    assert (batch["labels"][1, n:] == IGNORE_INDEX).all()
    assert collator.tokens == len(long.input_ids) + n and collator.padded == 2 * len(long.input_ids)
    assert collator.labelled == long.n_trained + short.n_trained
    masked = batch["attention_mask"].clone()
    masked[1, n:] = 0
    with torch.no_grad():
        fast = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        exact = model(input_ids=batch["input_ids"], attention_mask=masked).logits
        alone = model(input_ids=batch["input_ids"][1:, :n]).logits
    torch.testing.assert_close(fast[1, :n], exact[1, :n], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(fast[1, :n], alone[0], rtol=1e-4, atol=1e-5)


def test_expert_episodes_follow_the_stage_language_weights(tmp_path):
    from cells.step_15_train_stage1 import expert_conversations_for

    tamil = tuple((lang, 1.0 if lang == "ta" else 0.0) for lang in ("hi", "ta", "kn", "en", "hinglish"))
    profile = dataclasses.replace(get_profile("cpu-smoke"), language_weights=(tamil, tamil, tamil))
    convs = expert_conversations_for(Context(profile=profile, run_dir=tmp_path), 4, 2)
    assert len(convs) == 4
    assert all(any("\u0b80" <= ch <= "\u0bff" for ch in c[1]["content"]) for c in convs)  # Tamil script utterances
    uniform = expert_conversations_for(Context(profile=get_profile("cpu-smoke"), run_dir=tmp_path), 4, 2)
    assert [c[1]["content"] for c in uniform] != [c[1]["content"] for c in convs]


def test_signal_report_folds_zero_variance_groups_per_stage(capsys):
    from cells.training.signal import SignalReport, fold_signal

    sink = {}
    report = SignalReport(2, sink)
    for zero, reward in ((1.0, 0.0), (0.5, 0.2), (0.0, 0.4)):
        report.on_log(None, None, None, logs={"groups/zero_std_frac": zero, "reward/mean": reward, "loss": 0.1})
    report.on_log(None, None, None, logs={"train_runtime": 3.0})  # the end-of-training log carries no signal
    assert report.on_step_end(None, None, None) is None  # other events: no-ops
    report.on_train_end(None, None, None)
    signal = sink["stage2_signal"]
    assert (signal.stage, signal.steps) == (2, 3)
    assert signal.zero_variance_groups == pytest.approx(0.5) and signal.mean_reward == pytest.approx(0.2)
    assert "[stage 2] zero-variance groups: 50% over 3 steps (target <= 30%)" in capsys.readouterr().out
    assert fold_signal(1, [{"loss": 1.0}]) is None
    assert "target" not in fold_signal(1, [{"groups/zero_std_frac": 1.0, "reward/mean": 0.0}]).line()


def test_signal_report_folds_dynamic_sampling_per_pattern_set(capsys):
    from cells.training.signal import fold_signal

    def step(first, final, resampled, reinforced, demonstrated):
        (rn, rz, rfz), (dn, dz, dfz) = reinforced, demonstrated
        return {"groups/zero_std_frac": final, "groups/zero_std_first_frac": first, "groups/resampled": resampled,
                "reward/mean": 0.5, "groups/reinforced/n": rn, "groups/reinforced/zero": rz,
                "groups/reinforced/first_n": rn, "groups/reinforced/first_zero": rfz,
                "groups/demonstrated/n": dn, "groups/demonstrated/zero": dz,
                "groups/demonstrated/first_n": dn, "groups/demonstrated/first_zero": dfz}

    # Two steps of two groups each: 3 reinforced groups (2 zero at the first draw, 1 after), 1 demonstrated.
    signal = fold_signal(3, [step(1.0, 0.5, 2, (2, 1, 2), (0, 0, 0)), step(0.5, 0.0, 1, (1, 0, 0), (1, 0, 1))])
    assert signal.first_zero_variance_groups == pytest.approx(0.75) and signal.resampled_groups == 3
    assert signal.zero_variance_groups == pytest.approx(0.25)
    reinforced, demonstrated = signal.by_set["reinforced"], signal.by_set["demonstrated"]
    assert (reinforced.groups, reinforced.first_zero, reinforced.zero) == (3, pytest.approx(2 / 3), pytest.approx(1 / 3))
    assert (demonstrated.groups, demonstrated.first_zero, demonstrated.zero) == (1, 1.0, 0.0)
    assert ("[stage 3] zero-variance groups: 25% (75% at the first draw, 3 groups resampled) over 2 steps "
            "(target <= 30%); demonstrated 0% of 1 (first draw 100%); reinforced 33% of 3 (first draw 67%)"
            in signal.line())
    assert signal.to_dict()["by_set"]["reinforced"]["groups"] == 3
    plain = fold_signal(2, [{"groups/zero_std_frac": 0.5, "reward/mean": 0.1, "groups/resampled": 0.0}])
    assert plain.first_zero_variance_groups is None and plain.by_set == {}


def test_pattern_set_labels_name_each_group_by_its_scheduled_drifts():
    from cells.training.signal import NO_DRIFT, pattern_set_labels

    labels = pattern_set_labels(get_profile("cpu-rl"))
    assert labels.names == ("demonstrated", "reinforced", "unseen", NO_DRIFT)

    def episode(*ids):
        return SimpleNamespace(schedule=tuple(SimpleNamespace(pattern_id=i) for i in ids))

    assert labels.of(episode()) == NO_DRIFT
    assert labels.of(episode("payment_scope_upgrade")) == "demonstrated"
    assert labels.of(episode("payment_scope_upgrade", "cab_city_required")) == "reinforced"
    assert pattern_set_labels(get_profile("cpu-learn")) is None


def test_resample_rounds_past_the_trainers_reserve_are_refused_by_the_profile():
    from cells.step_02_profiles import ProfileError, knob_cap

    with pytest.raises(ProfileError, match="grpo_resample_rounds"):
        dataclasses.replace(get_profile("cpu-smoke"), grpo_resample_rounds=knob_cap("grpo_resample_rounds") + 1)


def test_labelled_positions_loss_equals_the_models_own_loss():
    from cells.training.sft_data import RightPadCollator
    from cells.training.warm_start import labelled_positions_loss

    tok = tiny_tokenizer()
    model = tiny_model(tok, lora=False).eval()
    rows = [{"input_ids": list(t.input_ids), "labels": list(t.labels)}
            for t in (tokenize_conversation(tok, CONV), tokenize_conversation(tok, CONV[:3]))]
    batch = RightPadCollator(tok.pad_token_id)(rows)
    torch.testing.assert_close(labelled_positions_loss(model, batch["input_ids"], batch["labels"]),
                               model(**batch).loss)
    no_labels = torch.full_like(batch["labels"], IGNORE_INDEX)
    assert labelled_positions_loss(model, batch["input_ids"], no_labels).item() == 0.0


def test_held_out_checkpoints_play_at_even_steps_and_land_in_warm_start_json(tmp_path, monkeypatch, capsys):
    import cells.evaluation.runner as runner
    from cells.step_15_train_stage1 import HeldOutCheckpoints, save_warm_start_summary, warm_start

    ctx = _full_ctx(tmp_path, monkeypatch)
    assert HeldOutCheckpoints(ctx, 100).at == set()  # warm_start_checkpoints = 0: no plays
    ctx.profile = dataclasses.replace(ctx.profile, warm_start_checkpoints=4, sft_episodes=40, warm_start_eval_per_cell=1)
    assert HeldOutCheckpoints(ctx, 100).at == {20, 40, 60, 80}
    played = []

    def fake_run_model(name, model, tokenizer, cases, spec, *, greedy, trial, batch_size=64):
        played.append((model.training, len(cases)))
        return [_rec(3, 0, i == 0, 0.5 if i == 0 else 0.0) for i, _ in enumerate(cases)]

    monkeypatch.setattr(runner, "run_model", fake_run_model)
    result = warm_start(ctx)  # 40 conversations / batch 4 = 10 SFT steps: plays at steps 2, 4, 6, 8
    rows = ctx.trainer_state["warm_start_checkpoints"]
    assert [r["step"] for r in rows] == [2, 4, 6, 8] and all(not training for training, _ in played)
    assert all(n == 15 for _, n in played) and "[warm start] step 2 (" in capsys.readouterr().out
    path = save_warm_start_summary(ctx, result, None)
    saved = json.loads(path.read_text())
    assert saved["training"]["steps"] == 10 and [r["step"] for r in saved["checkpoints"]] == [2, 4, 6, 8]
    reused = dataclasses.replace(result, steps=0, examples=0)  # a rerun that reloads the model keeps the record
    save_warm_start_summary(ctx, reused, None)
    assert json.loads(path.read_text())["training"]["steps"] == 10


# ---------------------------------------------------------------- copy pretraining (cells.training.induction)


def test_copy_examples_repeat_a_seeded_source_and_label_only_the_predictable_repeat():
    from cells.training.induction import (
        COPY_KINDS,
        SEQUENCE_TOKENS,
        CopyPretrainError,
        copy_dataset,
        copy_example,
    )
    from cells.training.induction import IGNORE_INDEX as COPY_IGNORE

    first = [ex for ex, _ in zip(copy_dataset(10, 300, seed=7, kinds=COPY_KINDS), range(60), strict=False)]
    again = [ex for ex, _ in zip(copy_dataset(10, 300, seed=7, kinds=COPY_KINDS), range(60), strict=False)]
    other = next(iter(copy_dataset(10, 300, seed=8, kinds=COPY_KINDS)))
    assert all(torch.equal(a["input_ids"], b["input_ids"]) for a, b in zip(first, again, strict=True))
    assert not torch.equal(first[0]["input_ids"], other["input_ids"])
    generator = torch.Generator().manual_seed(3)
    for kind in COPY_KINDS:
        for _ in range(30):
            ex = copy_example(generator, 10, 300, kind)
            ids, labels = ex["input_ids"], ex["labels"]
            assert ids.shape == labels.shape == (SEQUENCE_TOKENS,)
            assert int(ids.min()) >= 10 and int(ids.max()) < 300
            first_label = int((labels != COPY_IGNORE).nonzero()[0])
            n = SEQUENCE_TOKENS - first_label + 1  # the repeat: its first token is unlabelled
            source, repeat = ids[:n], ids[-n:]
            assert bool((labels[:-(n - 1)] == COPY_IGNORE).all())
            if kind != "name_list":
                assert torch.equal(source, repeat) and torch.equal(labels[-(n - 1):], repeat[1:])
                continue
            # a family's names: the same tokens, separators rewritten to one token; the first one is unlabelled
            changed = (source != repeat).nonzero().flatten().tolist()
            assert changed and len(set(repeat[changed].tolist())) == 1 and len(set(source[changed].tolist())) <= 2
            unlabelled = [i for i in range(1, n) if labels[SEQUENCE_TOKENS - n + i] == COPY_IGNORE]
            assert unlabelled == [changed[0]]
    small = [copy_example(generator, 10, 4000, "small_alphabet")["input_ids"] for _ in range(20)]
    uniform = [copy_example(generator, 10, 4000, "uniform")["input_ids"] for _ in range(20)]
    distinct = lambda examples: sum(len(set(e.tolist())) for e in examples) / len(examples)  # noqa: E731
    assert distinct(small) < 0.9 * distinct(uniform)  # few-token strings whose tokens recur in the filler
    with pytest.raises(CopyPretrainError, match="unknown copy kind"):
        copy_example(generator, 10, 300, "hex")


class _Oracle(torch.nn.Module):
    """A stand-in for a model in the copy measurement: its logits at t put all weight on input_ids[t + 1]
    (`shift` > 1: on a wrong token), so the measurement's answer is known."""

    def __init__(self, vocab: int, shift: int = 1) -> None:
        super().__init__()
        self.vocab, self.shift = vocab, shift

    def forward(self, input_ids):
        nxt = torch.roll(input_ids, -self.shift, dims=1)
        return SimpleNamespace(logits=torch.nn.functional.one_hot(nxt, self.vocab).float())


def test_copy_accuracy_is_the_share_of_examples_copied_exactly_per_kind():
    from cells.training.induction import COPY_KINDS, copy_accuracy

    tok = tiny_tokenizer()
    perfect = copy_accuracy(_Oracle(len(tok)), tok, examples=20, batch_size=7)
    assert perfect == {kind: 1.0 for kind in COPY_KINDS}
    assert copy_accuracy(_Oracle(len(tok), shift=2), tok, examples=20) == {kind: 0.0 for kind in COPY_KINDS}
    untrained = tiny_model(tok, lora=False)
    assert untrained.training and max(copy_accuracy(untrained, tok, examples=20).values()) == 0.0
    assert untrained.training  # the measurement leaves the model's mode as it found it


def test_copy_pretraining_trains_every_weight_and_stops_at_the_stop_loss(tmp_path):
    from cells.training.induction import LOGGING_STEPS, CopyPretrainError, copy_pretrain

    tok = tiny_tokenizer()
    model = tiny_model(tok, lora=False)
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    capped = copy_pretrain(model, tok, tmp_path / "a", max_steps=30, stop_loss=1e-6, progress=False)
    assert capped.steps == 30 and not capped.converged and len(capped.losses) == 30 // LOGGING_STEPS
    moved = {k for k, v in model.state_dict().items() if not torch.equal(v, initial[k])}
    assert moved == set(initial)
    stopped = copy_pretrain(model, tok, tmp_path / "b", max_steps=500, stop_loss=1e3, progress=False)
    assert stopped.converged and stopped.steps == LOGGING_STEPS  # the first logged loss is below 1000: stop there
    assert stopped.to_dict()["steps"] == LOGGING_STEPS and "copies" in stopped.line()
    assert set(stopped.to_dict()["copy_accuracy"]) == {"uniform", "small_alphabet", "name_list"}
    with pytest.raises(CopyPretrainError, match="copy_pretrain_max_steps=0"):
        copy_pretrain(model, tok, tmp_path / "c", max_steps=0)
    with pytest.raises(CopyPretrainError, match="non-empty subset"):
        copy_pretrain(model, tok, tmp_path / "d", max_steps=5, kinds=("uniform", "hex"))


def test_full_warm_start_copy_pretrains_first_and_records_it(tmp_path, monkeypatch, capsys):
    from cells.step_15_train_stage1 import save_warm_start_summary, warm_start

    ctx = _full_ctx(tmp_path, monkeypatch)
    ctx.profile = dataclasses.replace(ctx.profile, copy_pretrain_max_steps=25, copy_pretrain_stop_loss=1e-6)
    result = warm_start(ctx)
    copied = ctx.trainer_state["copy_pretrain"]
    assert copied.steps == 25 and not copied.converged and result.steps == 2
    assert "[copy pretraining] 25 steps" in capsys.readouterr().out
    saved = json.loads(save_warm_start_summary(ctx, result, None).read_text())
    assert saved["copy_pretrain"]["steps"] == 25 and saved["training"]["steps"] == 2


def test_search_drills_end_at_the_goals_search_behind_only_the_callers_time(tmp_path):
    from cells.actions import parse_action
    from cells.agent.prompt import format_now
    from cells.step_02_profiles import TRAIN_SEEDS
    from cells.step_04_datatypes import GOAL_SEARCH_TOOLS
    from cells.step_07_tasks import generate
    from cells.training.sft_data import DRILL_SEED_OFFSET, EpisodePlanItem, generate_conversations

    weights = tuple((lang, 1.0) for lang in ("hi", "ta", "kn", "en", "hinglish"))
    item = EpisodePlanItem(2, 6, weights, 0, search_drills=1.5)
    assert item.drills == 9
    mixed = generate_conversations([item])
    plain = generate_conversations([dataclasses.replace(item, search_drills=0.0)])
    drills = [m for m in mixed if m[0]["content"].startswith("Now: ")]
    assert len(mixed) == 15 and len(drills) == 9
    assert [m for m in mixed if m not in drills] == plain  # the conversations are unchanged, drills spread among them
    assert sum(m in drills for m in mixed[:8]) in (4, 5)  # spread evenly, not appended
    for index, drill in enumerate(drills):
        goal = generate(TRAIN_SEEDS.seed(DRILL_SEED_OFFSET + index), 2, dict(weights))  # the expert never fails a search
        assert drill[0] == {"role": "system", "content": format_now(goal.now)}
        assert drill[1] == {"role": "user", "content": goal.seed_utterance}
        search = parse_action(drill[-1]["content"])
        assert drill[-1]["role"] == "assistant" and search.tool_name == GOAL_SEARCH_TOOLS[goal.domain]
        assert all(str(v) == str(goal.slots[k]) for k, v in search.tool_args.items() if k in goal.slots)
    assert not any(m[1]["content"] == d[1]["content"] for m in plain for d in drills)  # fresh seeds


def test_search_drills_reach_the_warm_start_from_the_profile(tmp_path):
    profile = dataclasses.replace(get_profile("cpu-smoke"), sft_episodes=6, sft_stages=(1, 2, 3), sft_search_drills=1.0)
    convs = warm_start_conversations(Context(profile=profile, run_dir=tmp_path))
    assert len(convs) == 12 and sum(c[0]["content"].startswith("Now: ") for c in convs) == 6
    with pytest.raises(ValueError, match="sft_search_drills"):
        dataclasses.replace(profile, sft_search_drills=-1.0)


def test_booking_drills_end_at_the_experts_first_booking_call_carrying_every_binding_fact():
    from cells.actions import parse_action
    from cells.agent.prompt import format_now
    from cells.step_02_profiles import TRAIN_SEEDS
    from cells.step_04_datatypes import GOAL_SEARCH_TOOLS, GOAL_WRITE_TOOLS, passengers_arg
    from cells.step_07_tasks import generate
    from cells.training.sft_data import (
        BOOKING_SEED_OFFSET,
        EpisodePlanItem,
        generate_conversations,
        sft_plan_item,
    )

    weights = tuple((lang, 1.0) for lang in ("hi", "ta", "kn", "en", "hinglish"))
    item = EpisodePlanItem(3, 6, weights, 0, search_drills=0.5, booking_drills=1.5)
    assert (item.drills, item.bookings, item.examples) == (3, 9, 18)
    mixed = generate_conversations([item])
    plain = generate_conversations([dataclasses.replace(item, booking_drills=0.0)])
    assert len(mixed) == 18 and [m for m in mixed if m in plain] == plain  # the rest unchanged, drills among them
    scanned = (generate(TRAIN_SEEDS.seed(BOOKING_SEED_OFFSET + i), 3, dict(weights)) for i in range(4 * 9 + 100))
    goals = {goal.seed_utterance: goal for goal in scanned}
    bookings = [m for m in mixed if m not in plain]
    assert len(bookings) == 9 and {goals[d[1]["content"]].domain for d in bookings} >= {"airline", "restaurant"}
    for drill in bookings:
        goal = goals[drill[1]["content"]]
        assert drill[0] == {"role": "system", "content": format_now(goal.now)}
        calls = [parse_action(m["content"]).tool_name for m in drill if m["role"] == "assistant"]
        assert drill[-1]["role"] == "assistant" and calls[-1] == GOAL_WRITE_TOOLS[goal.domain]
        assert GOAL_SEARCH_TOOLS[goal.domain] in calls and GOAL_WRITE_TOOLS[goal.domain] not in calls[:-1]
        args = parse_action(drill[-1]["content"]).tool_args
        if goal.domain == "restaurant":  # a portion per diner, as a number the user said, on one dish
            assert len(args["items"]) == 1 and args["items"][0]["qty"] >= goal.slots["party_size"]
        if goal.domain == "airline":  # the names the user gave when asked, one per seat
            assert args["passengers"] == passengers_arg(goal.user.passenger_names)
    profile = dataclasses.replace(get_profile("cpu-smoke"), sft_booking_drills=0.4)
    assert [sft_plan_item(profile, 10, stage, stage - 1).bookings for stage in (1, 2, 3)] == [4, 4, 4]
    with pytest.raises(ValueError, match="sft_booking_drills"):
        dataclasses.replace(profile, sft_booking_drills=-0.1)


def test_recovery_drills_end_at_the_experts_new_choice_after_a_refusal_listing_what_is_available():
    from cells.actions import parse_action
    from cells.agent.prompt import format_now
    from cells.step_02_profiles import TRAIN_SEEDS
    from cells.step_04_datatypes import GOAL_WRITE_TOOLS
    from cells.step_07_tasks import generate
    from cells.training.sft_data import RECOVERY_SEED_OFFSET, EpisodePlanItem, generate_conversations

    weights = tuple((lang, 1.0) for lang in ("hi", "ta", "kn", "en", "hinglish"))
    item = EpisodePlanItem(3, 4, weights, 0, recovery_drills=1.5)
    assert item.recoveries == 6 and item.examples == 10
    mixed = generate_conversations([item])
    plain = generate_conversations([dataclasses.replace(item, recovery_drills=0.0)])
    drills = [m for m in mixed if m[0]["content"].startswith("Now: ")]
    assert len(mixed) == 10 and len(drills) == 6
    assert [m for m in mixed if m not in drills] == plain  # the conversations are unchanged, drills spread among them
    scanned = (generate(TRAIN_SEEDS.seed(RECOVERY_SEED_OFFSET + i), 3, dict(weights)) for i in range(40 * 6 + 100))
    goals = {goal.seed_utterance: goal for goal in scanned}
    for drill in drills:
        refused = json.loads(next(m["content"] for m in drill if '"available"' in m["content"]).removeprefix(
            "[tool_result] "))
        assert refused["status"] != "ok" and refused["available"]
        goal = goals[drill[1]["content"]]
        assert drill[0] == {"role": "system", "content": format_now(goal.now)}
        refusal = next(i for i, m in enumerate(drill) if m["role"] == "user" and '"available"' in m["content"])
        before, after = parse_action(drill[refusal - 1]["content"]), parse_action(drill[-1]["content"])
        assert before.tool_name == refused["tool"] == GOAL_WRITE_TOOLS[goal.domain]
        assert drill[-1]["role"] == "assistant" and after.tool_name == before.tool_name
        assert len(drill) - refusal in (2, 4)  # the new call next, or after one word to the user
        chosen = {k: v for k, v in after.tool_args.items() if v in refused["available"]}
        assert chosen and after.tool_args != before.tool_args  # a new choice among what is available, not a repeat


def test_recovery_drills_come_from_the_drifted_stages_of_the_profile():
    from cells.agent.play import PlayError, collect_expert
    from cells.step_02_profiles import TRAIN_SEEDS
    from cells.training.sft_data import sft_plan_item

    profile = dataclasses.replace(get_profile("cpu-smoke"), sft_recovery_drills=0.5)
    assert [sft_plan_item(profile, 10, stage, stage - 1).recoveries for stage in (1, 2, 3)] == [0, 5, 5]
    with pytest.raises(ValueError, match="sft_recovery_drills"):
        dataclasses.replace(profile, sft_recovery_drills=-0.5)
    with pytest.raises(PlayError, match="too few recovery drills: 2 of 3 after 221 seeds"):  # > 40 * 3 + 100
        collect_expert(3, 0, lambda seed: [] if seed in (TRAIN_SEEDS.seed(4), TRAIN_SEEDS.seed(9)) else None,
                       what="recovery drills", seeds_per_result=40)


def test_year_turn_drills_are_search_drills_on_goals_dated_in_the_next_year():
    from cells.actions import parse_action
    from cells.agent.prompt import format_now
    from cells.step_02_profiles import TRAIN_SEEDS
    from cells.step_07_tasks import crosses_year, generate, in_later_year
    from cells.training.sft_data import (
        YEAR_TURN_SEED_OFFSET,
        YEAR_TURN_SEEDS_PER,
        EpisodePlanItem,
        generate_conversations,
        sft_plan_item,
    )

    weights = tuple((lang, 1.0) for lang in ("hi", "ta", "kn", "en", "hinglish"))
    item = EpisodePlanItem(1, 4, weights, 0, search_drills=0.5, year_turn_drills=1.0)
    assert (item.drills, item.year_turns, item.examples) == (2, 4, 10)
    mixed = generate_conversations([item])
    plain = generate_conversations([dataclasses.replace(item, year_turn_drills=0.0)])
    assert len(mixed) == 10 and [m for m in mixed if m not in plain] != []
    assert [m for m in mixed if m in plain] == plain  # conversations and search drills unchanged
    scanned = (generate(TRAIN_SEEDS.seed(YEAR_TURN_SEED_OFFSET + i), 1, dict(weights))
               for i in range(YEAR_TURN_SEEDS_PER * 4 + 100))
    goals = {goal.seed_utterance: goal for goal in scanned}
    year_turns = [m for m in mixed if m not in plain]
    assert len(year_turns) == 4
    for drill in year_turns:
        goal = goals[drill[1]["content"]]
        assert crosses_year(goal) and drill[0] == {"role": "system", "content": format_now(goal.now)}
        search = parse_action(drill[-1]["content"])
        assert drill[-1]["role"] == "assistant" and search.tool_name is not None
        assert any(in_later_year(v, goal.now) for v in search.tool_args.values())  # the expert wrote next year
    profile = dataclasses.replace(get_profile("cpu-smoke"), sft_year_turn_drills=0.3)
    assert [sft_plan_item(profile, 10, stage, stage - 1).year_turns for stage in (1, 2, 3)] == [3, 3, 3]
    with pytest.raises(ValueError, match="sft_year_turn_drills"):
        dataclasses.replace(profile, sft_year_turn_drills=-0.1)


def test_field_drills_repair_a_call_with_a_field_its_tool_never_takes_once_the_vendor_names_it():
    from cells.actions import parse_action
    from cells.agent.prompt import format_now
    from cells.step_02_profiles import TRAIN_SEEDS
    from cells.step_04_datatypes import GOAL_SEARCH_TOOLS, GOAL_WRITE_TOOLS
    from cells.step_05_vendors import DEFAULT_FLAGS, TOOLS
    from cells.step_06_drift import demonstration_pool, drift_split
    from cells.step_07_tasks import generate
    from cells.training.sft_data import (
        FIELD_DRILL_SEEDS_PER,
        FIELD_SEED_OFFSET,
        NO_LOSS_KEY,
        EpisodePlanItem,
        generate_conversations,
        sft_plan_item,
    )

    weights = tuple((lang, 1.0) for lang in ("hi", "ta", "kn", "en", "hinglish"))
    pool = demonstration_pool(drift_split("latin"))
    item = EpisodePlanItem(2, 8, weights, 0, drift_pool=pool, field_drills=2.0)
    assert (item.fields, item.examples) == (16, 24)
    mixed = generate_conversations([item])
    plain = generate_conversations([dataclasses.replace(item, field_drills=0.0)])
    drills = [m for m in mixed if m not in plain]
    assert len(mixed) == 24 and len(drills) == 16 and [m for m in mixed if m in plain] == plain
    scanned = (generate(TRAIN_SEEDS.seed(FIELD_SEED_OFFSET + i), 2, dict(weights))
               for i in range(FIELD_DRILL_SEEDS_PER * 16 + 100))
    goals = {goal.seed_utterance: goal for goal in scanned}
    repairs = set()
    for drill in drills:
        goal = goals[drill[1]["content"]]
        assert drill[0] == {"role": "system", "content": format_now(goal.now)}
        # the latin split withholds a missing-field recovery at the cab and the restaurant: no drill there
        assert goal.domain in ("airline", "hotel")
        refused, error, repaired = drill[-3:]
        assert refused[NO_LOSS_KEY] is True and [m for m in drill if m.get(NO_LOSS_KEY)] == [refused]
        named = json.loads(error["content"].removeprefix("[tool_result] "))
        assert (named["error_code"], repaired["role"]) == ("MISSING_REQUIRED_FIELD", "assistant")
        refused_call, repaired_call = parse_action(refused["content"]), parse_action(repaired["content"])
        assert repaired_call.tool_name == refused_call.tool_name == named["tool"]
        tool = repaired_call.tool_name
        assert tool in (GOAL_SEARCH_TOOLS[goal.domain], GOAL_WRITE_TOOLS[goal.domain])
        field = named["field_name"]
        # a field the tool never declares (its docs do not name it), valued as the goal's slot, appended
        assert field not in {a.name for a in TOOLS[tool].args(DEFAULT_FLAGS[goal.domain])}
        assert list(repaired_call.tool_args.items()) == [*refused_call.tool_args.items(), (field, goal.slots[field])]
        repairs.add((tool, field))
    # the repair on several tools and fields of both domains
    assert len({tool for tool, _ in repairs}) >= 2 and len({field for _, field in repairs}) >= 3
    profile = dataclasses.replace(get_profile("cpu-smoke"), sft_field_drills=0.5)
    assert [sft_plan_item(profile, 10, stage, stage - 1).fields for stage in (1, 2, 3)] == [5, 5, 5]
    with pytest.raises(ValueError, match="sft_field_drills"):
        dataclasses.replace(profile, sft_field_drills=-0.1)


def test_field_choices_are_goal_slots_the_tool_never_takes_typed_as_the_domain_types_them():
    from cells.step_07_tasks import generate
    from cells.training.sft_data import new_field_choices

    goals = {}
    for seed in range(400):
        goal = generate(seed, 1, {"en": 1.0})
        goals.setdefault((goal.domain, "room_type" in goal.slots), goal)
    airline = goals[("airline", False)]
    # `passengers` is a count in the goal but a list of passenger objects at airline.book: never a choice
    assert new_field_choices(airline) == (("airline.book", "from", "str", airline.slots["from"]),
                                          ("airline.book", "to", "str", airline.slots["to"]))
    hotel = goals[("hotel", True)]
    assert {(tool, field, kind) for tool, field, kind, _ in new_field_choices(hotel)} == {
        ("hotel.search", "room_type", "str"), ("hotel.search", "rooms", "int"), ("hotel.book", "city", "str")}
    # the cab's `city` is declared (optional) by cab.book itself, so the withheld pattern's field is never drilled
    assert ("cab.book", "city") not in {(t, f) for t, f, _, _ in new_field_choices(goals[("cab", False)])}


def test_field_drills_stay_out_of_every_domain_where_a_withheld_recovery_is_a_missing_field():
    from cells.step_06_drift import demonstration_pool, drift_split, load_catalogue
    from cells.training.sft_data import FIELD_ERROR, field_drill_domains

    split = drift_split("latin")
    withheld = {p.domain for p in load_catalogue() if split.set_of(p.id) != "demonstrated"
                and FIELD_ERROR in p.evidence.error_codes}
    assert withheld == {"cab", "restaurant"}  # cab_city_required (reinforced), the item modifiers (unseen)
    assert field_drill_domains(demonstration_pool(split)) == ("airline", "hotel")
    assert field_drill_domains(None) == ("airline", "cab", "restaurant", "hotel")  # no split: every domain


def test_item_field_drills_repair_a_nested_field_in_every_element_only_where_the_split_demonstrates_it():
    from cells.actions import parse_action
    from cells.drift.families import all_instances
    from cells.step_06_drift import demonstration_pool, drift_split
    from cells.training.sft_data import (
        ITEM_FIELD_DRILL_NAMES,
        NO_LOSS_KEY,
        EpisodePlanItem,
        WarmStartError,
        drill_name_words,
        family_value_words,
        generate_conversations,
        invented_field_name,
        item_field_drill_targets,
        sft_plan_item,
        word_field_name,
    )

    # no drill name shares a word with any family's value: a drill never shows a drift instance, nor a held-out
    # value's word inside another name
    family_words = {w for inst in all_instances() for v in inst.values.values()
                    for w in re.split(r"[^a-z]+", str(v).lower())}
    drill_words = {w for name in ITEM_FIELD_DRILL_NAMES for w in name.split("_")}
    assert len(set(ITEM_FIELD_DRILL_NAMES)) == len(ITEM_FIELD_DRILL_NAMES) >= 400
    assert not family_words & drill_words and {"assistance", "needs", "special"} <= family_words
    pool = demonstration_pool(drift_split("latin-gen"))
    # latin-gen withholds the restaurant's nested field whole (hold-out a): the airline's list only
    assert item_field_drill_targets(pool) == (("airline.book", "passengers", ("airline",)),)
    assert {t for t, _, _ in item_field_drill_targets(None)} == {"airline.book", "restaurant.order"}
    weights = tuple((lang, 1.0) for lang in ("hi", "ta", "kn", "en", "hinglish"))
    item = EpisodePlanItem(2, 6, weights, 0, drift_pool=pool, drift_source="both", item_field_drills=2.0)
    assert (item.item_fields, item.examples) == (12, 18)
    mixed = generate_conversations([item])
    plain = generate_conversations([dataclasses.replace(item, item_field_drills=0.0)])
    drills = [m for m in mixed if m not in plain]
    assert len(mixed) == 18 and len(drills) == 12 and [m for m in mixed if m in plain] == plain
    names = set()
    for drill in drills:
        refused, error, repaired = drill[-3:]
        assert refused[NO_LOSS_KEY] is True and [m for m in drill if m.get(NO_LOSS_KEY)] == [refused]
        named = json.loads(error["content"].removeprefix("[tool_result] "))
        assert (named["error_code"], named["tool"]) == ("MISSING_REQUIRED_FIELD", "airline.book")
        listed, _, field = named["field_name"].partition("[].")
        before, after = parse_action(refused["content"]).tool_args, parse_action(repaired["content"]).tool_args
        # the same call, each passenger now carrying the named field as an empty list, nothing else changed
        assert listed == "passengers" and field in ITEM_FIELD_DRILL_NAMES
        assert after == {**before, "passengers": [{**p, field: []} for p in before["passengers"]]}
        names.add(field)
    assert len(names) >= 4
    with pytest.raises(WarmStartError, match="item_field_drills"):  # a split with no nested field demonstrated
        generate_conversations([dataclasses.replace(item, drift_pool=demonstration_pool(drift_split("latin")))])
    profile = dataclasses.replace(get_profile("cpu-smoke"), sft_item_field_drills=0.5)
    assert [sft_plan_item(profile, 10, stage, stage - 1).item_fields for stage in (1, 2, 3)] == [5, 5, 5]
    # a preset keeps the knob at every curve point: none where its split demonstrates no nested field
    gen = dataclasses.replace(get_profile("cpu-gen"), sft_item_field_drills=0.5)
    assert sft_plan_item(gen, 10, 2, 1).item_fields == 5
    assert sft_plan_item(dataclasses.replace(gen, drift_train_instances=0), 10, 2, 1).item_fields == 0
    assert sft_plan_item(dataclasses.replace(gen, drift_split="latin"), 10, 2, 1).item_fields == 0
    with pytest.raises(ValueError, match="sft_item_field_drills"):
        dataclasses.replace(profile, sft_item_field_drills=-0.1)
    # invented names: a new made-up name per drill, no word of any family value, the same from the same seed
    invented = generate_conversations([dataclasses.replace(item, item_field_names="invented")])
    invented_drills = [m for m in invented if m not in plain]
    fields = {json.loads(d[-2]["content"].removeprefix("[tool_result] "))["field_name"].partition("[].")[2]
              for d in invented_drills}
    assert len(invented_drills) == 12 and len(fields) == 12 and not fields & set(ITEM_FIELD_DRILL_NAMES)
    assert not {w for f in fields for w in f.split("_")} & family_words
    assert family_value_words() == family_words - {""}
    clash = invented_field_name(7, frozenset()).split("_")[0]  # a word to avoid is never drawn
    assert clash not in invented_field_name(7, frozenset({clash})).split("_")
    assert invented == generate_conversations([dataclasses.replace(item, item_field_names="invented")])
    assert sft_plan_item(dataclasses.replace(gen, sft_item_field_drill_names="invented"), 10, 2, 1).item_field_names \
        == "invented"
    with pytest.raises(ValueError, match="sft_item_field_drill_names"):
        dataclasses.replace(profile, sft_item_field_drill_names="random")
    # words: two distinct words of the project's text per drill, none a family value's word, the same from the seed
    worded = generate_conversations([dataclasses.replace(item, item_field_names="words")])
    worded_fields = [json.loads(d[-2]["content"].removeprefix("[tool_result] "))["field_name"].partition("[].")[2]
                     for d in worded if d not in plain]
    words = drill_name_words()
    assert len(worded_fields) == 12 and len(set(worded_fields)) == 12 and len(words) >= 500
    assert all(a in words and b in words and a != b for a, b in (f.split("_") for f in worded_fields))
    assert not set(words) & family_words and {"evening", "option"} <= set(words)
    assert worded == generate_conversations([dataclasses.replace(item, item_field_names="words")])
    assert word_field_name(3, ("ab", "cd")) in {"ab_cd", "cd_ab"}


def test_item_field_drills_ending_at_the_report_carry_the_repair_on_to_a_successful_booking_told_to_the_user():
    from cells.actions import parse_action
    from cells.step_06_drift import demonstration_pool, drift_split
    from cells.step_10_env import DriftCallEnv
    from cells.training.sft_data import (
        NO_LOSS_KEY,
        EpisodePlanItem,
        generate_conversations,
        item_field_drill,
        sft_plan_item,
    )

    pool = demonstration_pool(drift_split("latin-gen"))
    weights = tuple((lang, 1.0) for lang in ("hi", "ta", "kn", "en", "hinglish"))
    item = EpisodePlanItem(2, 6, weights, 0, drift_pool=pool, drift_source="both", item_field_drills=1.0,
                           item_field_names="words")
    plain = generate_conversations([dataclasses.replace(item, item_field_drills=0.0)])
    cut = [m for m in generate_conversations([item]) if m not in plain]
    reported = [m for m in generate_conversations([dataclasses.replace(item, item_field_until="report")])
                if m not in plain]
    assert len(cut) == len(reported) == 6
    for short, full in zip(cut, reported, strict=True):
        # the same episode (same seed, same name), now played on past the repaired call to the expert's report
        assert full[:len(short)] == short and len(full) > len(short)
        assert [m for m in full if m.get(NO_LOSS_KEY)] == [m for m in short if m.get(NO_LOSS_KEY)]
        results = [json.loads(m["content"].removeprefix("[tool_result] ")) for m in full[len(short):]
                   if m["content"].startswith("[tool_result] ")]
        # the repair was taken (an OTP or a scope may still come between it and the booking)
        assert results[0].get("error_code") != "MISSING_REQUIRED_FIELD"
        confirmed = next(r for r in results if r["tool"] == "airline.book" and r["status"] == "confirmed")
        last = parse_action(full[-1]["content"])
        assert last.action_type.value == "submit" and confirmed["booking_id"] in (last.message or "")
    env = DriftCallEnv(2, dict(weights), drift_pool=pool, drift_source="both")
    with pytest.raises(WarmStartError, match="repair, report"):
        item_field_drill(env, 0, (), until="answer")
    gen = dataclasses.replace(get_profile("cpu-gen"), sft_item_field_drills=0.5, sft_item_field_drill_until="report")
    assert sft_plan_item(gen, 10, 2, 1).item_field_until == "report"
    with pytest.raises(ValueError, match="sft_item_field_drill_until"):
        dataclasses.replace(gen, sft_item_field_drill_until="answer")


def test_an_assistant_turn_marked_no_loss_is_context_only():
    from cells.training.sft_data import NO_LOSS_KEY

    tok = tiny_tokenizer()
    marked = [*CONV[:2], {**CONV[2], NO_LOSS_KEY: True}, *CONV[3:]]
    plain, context = tokenize_conversation(tok, CONV), tokenize_conversation(tok, marked)
    assert context.input_ids == plain.input_ids  # the marked turn is still in the text the model reads
    trained = [lab for lab in context.labels if lab != IGNORE_INDEX]
    assert tok.decode(trained[:-1]) == CONV[4]["content"]  # only the unmarked turn is learnt
    assert 0 < context.n_trained < plain.n_trained


def test_stage_trainers_play_the_env_factory_step_10_stored(tmp_path, monkeypatch):
    import cells.modeling.grpo_trainer as grpo_trainer
    import cells.training.grpo_stage as grpo_stage
    from cells.step_10_env import stage_env_factories

    built: dict[str, object] = {}

    class Recorder:
        def __init__(self, **kwargs):
            built.update(kwargs)

    monkeypatch.setattr(grpo_trainer, "DriftCallGRPOTrainer", Recorder)
    monkeypatch.setattr(grpo_stage, "ensure_grpo_policy", lambda ctx: None)
    profile = dataclasses.replace(get_profile("cpu-smoke"), turn_budgets=(5, 9, 11))
    ctx = Context(profile=profile, run_dir=tmp_path, tokenizer=tiny_tokenizer())
    ctx.env_factory = stage_env_factories(profile)
    grpo_stage.build_stage_trainer(ctx, 2, tmp_path / "stage2", [])
    assert built["env_factory"] is ctx.env_factory[2]
    ctx.env_factory = None  # step 15 run alone: the same factories, built from the profile
    grpo_stage.build_stage_trainer(ctx, 3, tmp_path / "stage3", [])
    assert built["env_factory"]().max_turns == 11


def test_bench_copy_measures_step_15s_copy_pretraining_then_the_mix(capsys):
    from cells.__main__ import main as cli
    from cells.bench.copy import bench_copy
    from cells.training.induction import COPY_KINDS, CopyPretrainError

    rows = bench_copy("cpu-smoke", mixed_steps=7, chunk=5, progress=False)  # cpu-smoke copy-pretrains 25 steps
    assert [r["steps"] for r in rows] == [25, 30, 32] and rows[0]["phase"].startswith("as step 15")
    assert all(set(COPY_KINDS) <= set(r) and all(0.0 <= r[k] <= 1.0 for k in COPY_KINDS) for r in rows)
    assert "copied exactly: uniform" in capsys.readouterr().out
    mixed = bench_copy("cpu-smoke", mixed_steps=0, chunk=1, progress=False, from_scratch=True)
    assert len(mixed) == 1 and mixed[0]["phase"] == "every kind mixed from the start" and mixed[0]["steps"] == 25
    with pytest.raises(CopyPretrainError, match="no copy pretraining"):
        bench_copy("colab-t4", mixed_steps=0, chunk=1)
    with pytest.raises(CopyPretrainError, match="--chunk"):
        bench_copy("cpu-smoke", mixed_steps=5, chunk=0)
    assert cli(["bench", "copy", "--profile", "cpu-smoke", "--mixed-steps", "0"]) == 0
    assert "held-out strings a kind" in capsys.readouterr().out


def test_bench_copy_measures_another_model_shape(capsys):
    from cells.__main__ import main as cli
    from cells.bench.copy import bench_copy
    from cells.training.induction import CopyPretrainError

    bench_copy("cpu-smoke", mixed_steps=0, chunk=1, progress=False, tiny={"num_hidden_layers": 3})
    wider = bench_copy("cpu-smoke", mixed_steps=0, chunk=1, progress=False,
                       tiny={"num_attention_heads": 4, "num_key_value_heads": 2})
    out = capsys.readouterr().out
    shapes = [line for line in out.splitlines() if line.startswith("model: ")]
    assert "num_hidden_layers=3" in shapes[0] and "num_attention_heads=4" in shapes[1]
    assert int(shapes[0].split()[1].replace(",", "")) > 0 and wider[0]["steps"] == 25
    with pytest.raises(CopyPretrainError, match="no field heads"):
        bench_copy("cpu-smoke", mixed_steps=0, chunk=1, tiny={"heads": 4})
    with pytest.raises(SystemExit):
        cli(["bench", "copy", "--profile", "cpu-smoke", "--tiny", "num_hidden_layers"])
    assert "expected FIELD=INTEGER" in capsys.readouterr().err


def test_where_a_runs_gradient_and_seconds_went_per_stage_and_per_pattern(tmp_path):
    """`diagnose --signal` on a run directory written by hand: the stage table's shares and seconds per episode,
    RAFT's line and the per-pattern table, from metrics.csv, the stages' groups.jsonl and the RAFT control's file."""
    import json

    from cells.commands.diagnose import SIGNAL_FILE, diagnose_signal
    from cells.training.metrics import COLUMNS, logs_to_row
    from cells.training.signal import GROUP_TRACE

    (tmp_path / "profile.json").write_text(json.dumps(dataclasses.asdict(get_profile("cpu-rl"))))  # as step 2 writes it
    training = tmp_path / "training"
    (training / "stage2").mkdir(parents=True)
    step = {"groups/contrast_frac": 0.5, "episodes/contrast_frac": 0.5, "tokens/contrast_frac": 0.6,
            "tokens/updated_frac": 1.0, "time/rollout_s": 8.0, "time/logps_s": 2.0, "step_time": 26.0,
            "episodes/played": 16.0}
    with (training / "metrics.csv").open("w", newline="") as fh:
        import csv

        writer = csv.DictWriter(fh, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows([logs_to_row(step, 2, 1), logs_to_row(step, 2, 2)])
        # stage 3 at grpo_iterations=2: the generating step logs the rollout and its episodes, the reuse its time only
        writer.writerows([logs_to_row({**step, "step_time": 12.0, "episodes/played": 20.0}, 3, 3),
                          logs_to_row({"step_time": 6.0}, 3, 4)])
    groups = [{"step": 1, "group": 0, "first_generation": 0, "patterns": ["cab_city_required"],
               "rewards": [1.0, 0.0], "successes": [1.0, 0.0], "advantages": [0.7, -0.7]},
              {"step": 2, "group": 0, "first_generation": 0, "patterns": ["restaurant_min_order_raised"],
               "rewards": [0.0, -0.1], "successes": [0.0, 0.0], "advantages": [0.7, -0.7]}]
    (training / "stage2" / GROUP_TRACE).write_text("".join(json.dumps(g) + "\n" for g in groups))
    (tmp_path / "eval_raft_control.json").write_text(json.dumps(
        {"control": {"episodes": 64, "kept": 16, "sample_seconds": 32.0, "train_seconds": 16.0, "grpo_measure": "cpu"}}))
    text = diagnose_signal(tmp_path)
    assert (tmp_path / SIGNAL_FILE).read_text() == text
    stage_row = next(line for line in text.splitlines() if line.startswith("| 2 |"))
    # 16 episodes a step: rollout 8/16, log-probs 2/16, update (26 - 8 - 2)/16 seconds per episode
    assert stage_row == "| 2 | 2 | 32 | 50% | 50% | 60% | 100% | 0.50 | 0.12 | 1.00 |"
    # 20 episodes over 2 steps: rollout 8/20, log-probs 2/20, update (12 + 6 - 8 - 2)/20 seconds per episode
    reused = next(line for line in text.splitlines() if line.startswith("| 3 |"))
    assert reused == "| 3 | 2 | 20 | 50% | 50% | 60% | 100% | 0.40 | 0.10 | 0.40 |"
    assert "64 episodes, 16 kept" in text and "sampling 0.50, training 0.25" in text
    assert "| `cab_city_required` | reinforced | 1 | 100% | 100% | 50% | +0.70 | -0.70 |" in text
    assert "| `restaurant_min_order_raised` | reinforced | 1 | 0% | 0% | 0% | — | +0.00 |" in text
