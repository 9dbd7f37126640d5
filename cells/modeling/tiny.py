"""The tiny local model used by CPU profiles: a corpus-trained tokenizer and a Gemma-3-architecture LM.

Everything here is offline and deterministic: the tokenizer is a byte-level BPE trained with the
`tokenizers` library on the project's own text (every string in every YAML/JSON fixture under
`cells/data`, the registry's tool names, sample JSON actions, the pinned system prompt, expert
transcripts), so any Devanagari, Tamil or Kannada string encodes (bytes are the base alphabet) and
round-trips exactly. Special
tokens and the chat template follow Gemma's conventions (`<bos>`, `<start_of_turn>user|model`,
`<end_of_turn>`, system folded into the first user turn).

The tokenizer is a versioned artefact: `tokenizers/tiny-v{TOKENIZER_VERSION}-{vocab}.json`, trained once from the
corpus of the day it was written and committed. A run loads it, so an edit to a template, a drift's wording or a
prompt changes no seed's tokenizer or initial weights until the version is bumped. To retrain: bump
`TOKENIZER_VERSION`, run `python -m cells.modeling.tiny --write` (one file per preset vocabulary), commit them.
A recipe whose vocabulary has no versioned file trains its tokenizer from the current corpus, as do calls that
pass `texts`.

`build_or_load_tiny(recipe, cache_root, seed)` caches the base model and tokenizer under
`cache_root/<digest>/`, keyed by the recipe, the tokenizer and `TINY_BUILD_VERSION`.
"""

from __future__ import annotations

import json
import shutil
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from cells.errors import DriftCallError
from cells.step_02_profiles import TinyModelRecipe
from cells.step_03_data import DATA_DIR
from cells.step_04_datatypes import stable_digest
from cells.step_05_vendors import TOOL_NAMES  # the registry's 16 tools (the corpus teaches their names)

# Bump when the tokenizer or model recipe code changes (3: BPE merges across punctuation; 4: built-in
# samples produced by the prompt, action grammar and vendor errors instead of hand-copied text; 5: digits split;
# 6: JSON string values split off their keys; 7: digits split into pairs; 8: every digit pair a token).
TINY_BUILD_VERSION = 8
# Bump to retrain the committed CPU tokenizers from today's corpus (`python -m cells.modeling.tiny --write`).
TOKENIZER_VERSION = 1
TOKENIZER_DIR = Path(__file__).resolve().parent / "tokenizers"
# Digits become pre-tokens of at most two: a month, a day, a two-digit hour each one token. See `train_tokenizer`.
DIGIT_PAIRS = r"\d{1,2}"
# All 100 pairs, each seen this often on top of the corpus, so each is merged into one token (see `train_tokenizer`).
DIGIT_PAIR_TOKENS: tuple[str, ...] = tuple(f"{i:02d}" for i in range(100))
ALL_DIGIT_PAIRS = "".join(DIGIT_PAIR_TOKENS)  # "000102...99": split by DIGIT_PAIRS into exactly those pairs
DIGIT_PAIR_REPEATS = 1_000
# A JSON string value (compact separators, as every observation and action is rendered) becomes its own
# pre-token, so BPE never merges it with the key before it. See `train_tokenizer`.
JSON_STRING_VALUE = r'(?<=":")[^"]+'


class TokenizerBuildError(DriftCallError, RuntimeError):
    """The trained tokenizer breaks a rule the tiny model relies on (e.g. a digit pair left unmerged)."""


class MissingTokenizerError(DriftCallError, FileNotFoundError):
    """No versioned tokenizer is committed for a vocabulary size (the message names the command that writes one)."""


BOS, EOS, PAD, UNK = "<bos>", "<eos>", "<pad>", "<unk>"
START_OF_TURN, END_OF_TURN = "<start_of_turn>", "<end_of_turn>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, EOS, BOS, UNK, START_OF_TURN, END_OF_TURN)  # ids 0..5

# Gemma-style template: the system message is folded into the first user turn; roles user/model.
# Content is not trimmed, so a rendered assistant turn holds exactly the text the model produced.
# The opening, up to each message's role, is shared with the tool-calling variant (cells/trl_env/chat_template.py).
TURNS_OPENING = (
    "{{ bos_token }}"
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set first_prefix = messages[0]['content'] + '\n\n' -%}{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}{%- set first_prefix = '' -%}{%- set loop_messages = messages -%}{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- set role = 'model' if message['role'] in ['assistant', 'model'] else 'user' -%}"
)
CHAT_TEMPLATE = (
    TURNS_OPENING
    + "{{ '<start_of_turn>' + role + '\n' + (first_prefix if loop.first else '') + message['content']"
    " + '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)

# User turns in each language (spoken text the fixtures phrase differently) and the number formats.
_SAMPLE_USER_TEXT: tuple[str, ...] = (
    "[user] मुझे कल सुबह हैदराबाद से बेंगलुरु की फ्लाइट चाहिए, बजट ₹6000।",
    "[user] நாளை காலை சென்னையிலிருந்து பெங்களூருக்கு விமானம் வேண்டும்.",
    "[user] ನಾಳೆ ಬೆಂಗಳೂರಿನಿಂದ ಮೈಸೂರಿಗೆ ಕ್ಯಾಬ್ ಬುಕ್ ಮಾಡಿ.",
    "[user] Mujhe kal Delhi se Mumbai ki flight book karni hai, budget 5000 tak.",
    "[user] Please book a hotel in Goa for two nights under ₹7,500.",
    "0123456789 ₹ INR +05:30 2026-05-02T09:30:00+05:30 true false null",
)


def builtin_texts() -> tuple[str, ...]:
    """Text the tokenizer needs even without fixtures: the pinned system prompt, one action of each type
    and a schema-error result, each produced by the code that writes it for real (prompt, action
    grammar, vendor errors), so a change there reaches the corpus and the cache digest."""
    from cells.actions import format_action
    from cells.agent.prompt import PINNED_SYSTEM_PROMPT, render_tool_result
    from cells.step_04_datatypes import ActionType, DriftCallAction, ToolResult
    from cells.step_05_vendors import ErrorCode, VendorError

    def act(kind: ActionType, **fields: Any) -> str:
        return format_action(DriftCallAction(kind, **fields))

    missing = VendorError(ErrorCode.MISSING_REQUIRED_FIELD, field_name="passenger_count", expected="int")
    actions = (
        act(ActionType.TOOL_CALL, tool_name="airline.search", tool_args={"from": "HYD", "to": "BLR",
                                                                          "date": "2026-05-02"}),
        act(ActionType.TOOL_CALL, tool_name="cab.estimate", tool_args={"pickup": "Koramangala", "drop": "BLR"}),
        act(ActionType.TOOL_CALL, tool_name="payment.get_token", tool_args={"scope": "payments.v2"}),
        act(ActionType.SPEAK, message="The fare now includes a ₹199 convenience fee."),
        act(ActionType.CLARIFY, message="Please share the OTP sent to your phone."),
        act(ActionType.PROBE_SCHEMA, tool_name="airline"),
        act(ActionType.SUBMIT, message="Booked 6E-2345 for ₹4,820.", confidence=0.8),
        act(ActionType.ABORT, message="I could not complete the booking."),
    )
    result = render_tool_result(ToolResult("airline.book", missing.status, missing.response(), 1, 40, 1))
    return (PINNED_SYSTEM_PROMPT, *actions, result, *_SAMPLE_USER_TEXT)


def _strings_in(value: Any) -> Iterator[str]:
    """Every string (keys included) inside a parsed YAML/JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _strings_in(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings_in(item)
    elif value is not None:
        yield str(value)


def fixture_strings(data_dir: Path = DATA_DIR) -> tuple[str, ...]:
    """Every string in every YAML/JSON file under `data_dir` (recursively, sorted by path)."""
    if not data_dir.is_dir():
        return ()
    import yaml

    out: list[str] = []
    for path in sorted(p for p in data_dir.rglob("*") if p.suffix in (".yaml", ".yml", ".json")):
        text = path.read_text(encoding="utf-8")
        try:
            parsed = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        except (ValueError, yaml.YAMLError) as exc:  # step 3 reports broken fixtures; the raw text still counts
            warnings.warn(f"tokenizer corpus: {path.name} does not parse ({exc}); using its raw lines", stacklevel=2)
            parsed = text.splitlines()
        out.extend(_strings_in(parsed))
    return tuple(out)


def corpus_texts(include_fixtures: bool = True, data_dir: Path = DATA_DIR) -> tuple[str, ...]:
    """The tokenizer's training corpus: built-in samples, tool names, JSON actions and fixtures."""
    actions = tuple(
        json.dumps({"action": "tool_call", "tool": t, "args": {}}, separators=(",", ":")) for t in TOOL_NAMES
    )
    fixtures = fixture_strings(data_dir) if include_fixtures else ()
    transcripts = _transcripts() if include_fixtures else ()
    return (*builtin_texts(), *TOOL_NAMES, *actions, "{}[]:,\"", *fixtures, *transcripts)


def _transcripts() -> tuple[str, ...]:
    """Expert transcripts (prompts, tool results, actions): the text the model actually sees and writes."""
    from cells.agent.corpus import transcript_corpus

    return transcript_corpus()


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> Any:
    """Train a byte-level BPE and wrap it as a Gemma-style `PreTrainedTokenizerFast`."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    core = Tokenizer(models.BPE(unk_token=None))
    # use_regex=False: no GPT-2 word/punctuation pre-split, so BPE can merge the corpus's recurring JSON
    # fragments (`","args":{"from":"` is one token at vocab 4096, and so is each tool name): episodes get about
    # half as long as with a word pre-split, so a step trains or plays twice the conversation.
    # Digits are split off into runs of at most two (DIGIT_PAIRS), left to right. Without a digit split, BPE
    # learns pieces like `":"2026-0` and `5-1`, so the date 2026-05-14 (which the model must write from
    # "14 May") and every id, price and time come out as a different mix of digit chunks per value. Single digits
    # (as Gemma's own tokenizer does) make a one-digit day two decisions, `0` then `2`, and the tiny model writes
    # the day's digit where its zero goes (2026-05-02 -> 2026-05-22). In pairs, `02` and `14` are each one token:
    # a value is written the same way everywhere and a day is one choice.
    # String values are split off their keys (JSON_STRING_VALUE). Without this, BPE learns key+value tokens
    # such as `payment_token":"tok_payments.basic_` and `flight_id":"AI-`, so an id the agent writes begins with
    # a token that never occurs where the id was shown (`"token":"tok`, `_`, `payments.v`, ...): the first piece
    # of every copied id is a choice from habit, not a copy (an invented `tok_payments.basic_22_c4f9` for an
    # upgraded `tok_payments.v2_c4f9`). Split off, a value tokenizes the same in a tool result and in the call
    # that copies it.
    # Every pair is made a token (ALL_DIGIT_PAIRS). BPE learns merges by frequency, and the corpus alone leaves
    # some of the 100 pairs unmerged: `6E-8860` would come out as `8`,`8`,`60` where `6E-2653` is `26`,`53`, one
    # more way to write an id that was shown. The pairs merge only with each other (digits are isolated
    # pre-tokens), so the extra text takes the places of the least frequent merges and changes nothing else.
    texts = [*texts, *([ALL_DIGIT_PAIRS] * DIGIT_PAIR_REPEATS)]
    core.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(JSON_STRING_VALUE), behavior="isolated"),
        pre_tokenizers.Split(Regex(DIGIT_PAIRS), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte: nothing is ever unknown
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer=trainer)
    unmerged = [pair for pair in DIGIT_PAIR_TOKENS if core.token_to_id(pair) is None]
    if unmerged:
        raise TokenizerBuildError(f"the tokenizer left digit pairs {unmerged} unmerged at vocab {vocab_size}; "
                                  "raise DIGIT_PAIR_REPEATS or the vocab size")
    return wrap_tokenizer(core)


def wrap_tokenizer(core: Any) -> Any:
    """A `tokenizers.Tokenizer` as the Gemma-style `PreTrainedTokenizerFast` the pipeline uses (special tokens,
    left padding, the chat template)."""
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token=BOS, eos_token=EOS, pad_token=PAD, unk_token=UNK,
        additional_special_tokens=[START_OF_TURN, END_OF_TURN], padding_side="left",
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def tokenizer_file(vocab_size: int, version: int = TOKENIZER_VERSION) -> Path:
    """Where the committed tokenizer of `vocab_size` tokens, version `version`, lives."""
    return TOKENIZER_DIR / f"tiny-v{version}-{vocab_size}.json"


def versioned_tokenizer(vocab_size: int) -> Any | None:
    """The committed tokenizer for `vocab_size` at `TOKENIZER_VERSION`, or None when there is none."""
    path = tokenizer_file(vocab_size)
    if not path.is_file():
        return None
    from tokenizers import Tokenizer

    return wrap_tokenizer(Tokenizer.from_file(str(path)))


def write_versioned_tokenizers(vocab_sizes: Iterable[int], texts: tuple[str, ...] | None = None) -> list[Path]:
    """Train one tokenizer per vocabulary size from `texts` (default: today's corpus) and save them as version
    `TOKENIZER_VERSION`; refuses to overwrite an existing file (bump the version instead)."""
    texts = corpus_texts() if texts is None else texts
    written = []
    for vocab_size in sorted(set(vocab_sizes)):
        path = tokenizer_file(vocab_size)
        if path.exists():
            raise TokenizerBuildError(f"{path} exists: a written version never changes; bump TOKENIZER_VERSION "
                                      f"(now {TOKENIZER_VERSION}) to retrain")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(train_tokenizer(texts, vocab_size).backend_tokenizer.to_str(pretty=False) + "\n",
                        encoding="utf-8")
        written.append(path)
    return written


def tiny_config(recipe: TinyModelRecipe, tokenizer: Any) -> Any:
    """A `Gemma3TextConfig` for `recipe`, with special-token ids from `tokenizer`."""
    from transformers import Gemma3TextConfig

    return Gemma3TextConfig(
        vocab_size=len(tokenizer),
        hidden_size=recipe.hidden_size,
        intermediate_size=recipe.intermediate_size,
        num_hidden_layers=recipe.num_hidden_layers,
        num_attention_heads=recipe.num_attention_heads,
        num_key_value_heads=recipe.num_key_value_heads,
        head_dim=recipe.head_dim,
        query_pre_attn_scalar=recipe.head_dim,
        max_position_embeddings=recipe.max_position_embeddings,
        sliding_window=recipe.max_position_embeddings,  # episodes fit the window; keeps attention exact
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=[tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids(END_OF_TURN)],
        tie_word_embeddings=True,
        # With tied embeddings at the default std 0.02, logits span only about +-1 (|h| ~ sqrt(hidden)
        # after the final norm), so a LoRA-only policy can barely move the output distribution.
        # std 0.1 gives a +-6 logit range, enough for GRPO's LoRA to move what the model samples.
        initializer_range=0.1,
    )


def tiny_parameters(recipe: TinyModelRecipe) -> int:
    """The parameters of the tiny model `recipe` builds (tied embeddings counted once), from its config on the meta
    device: no weights allocated, nothing trained. The versioned tokenizer of its vocabulary sizes the embeddings."""
    import torch
    from transformers import Gemma3ForCausalLM

    tokenizer = versioned_tokenizer(recipe.vocab_size)
    if tokenizer is None:
        raise MissingTokenizerError(f"no versioned tokenizer for vocab_size={recipe.vocab_size} under {TOKENIZER_DIR}: "
                                "`python -m cells.modeling.tiny --write` writes one for a preset's vocabulary")
    with torch.device("meta"):
        model = Gemma3ForCausalLM(tiny_config(recipe, tokenizer))
    return sum(p.numel() for p in model.parameters())


def tiny_digest(recipe: TinyModelRecipe, tokenizer_source: str | tuple[str, ...], seed: int) -> str:
    """Cache key over everything that determines the built artefacts (`tokenizer_source`: the versioned file's
    text, or the corpus the tokenizer is trained from)."""
    parts = (TINY_BUILD_VERSION, recipe.__dict__, seed, CHAT_TEMPLATE, tokenizer_source)
    return stable_digest(*parts, size=8).hex()


def build_or_load_tiny(
    recipe: TinyModelRecipe, cache_root: Path, seed: int, texts: tuple[str, ...] | None = None
) -> tuple[Any, Any, Path]:
    """Return `(base_model, tokenizer, cache_dir)`, building and caching them on first use. The tokenizer is the
    committed version for the recipe's vocabulary; `texts` (or a vocabulary without one) trains it instead."""
    import torch
    from transformers import Gemma3ForCausalLM, PreTrainedTokenizerFast

    versioned = tokenizer_file(recipe.vocab_size)
    if texts is None and versioned.is_file():
        source: str | tuple[str, ...] = versioned.read_text(encoding="utf-8")
    else:
        source = texts = corpus_texts() if texts is None else texts
    cache_dir = Path(cache_root) / tiny_digest(recipe, source, seed)
    if (cache_dir / "model" / "config.json").is_file() and (cache_dir / "tokenizer").is_dir():
        tok = PreTrainedTokenizerFast.from_pretrained(cache_dir / "tokenizer")
        model = Gemma3ForCausalLM.from_pretrained(cache_dir / "model", dtype=torch.float32)
        return model, tok, cache_dir
    tok = train_tokenizer(texts, recipe.vocab_size) if texts is not None else versioned_tokenizer(recipe.vocab_size)
    with torch.random.fork_rng(devices=[]):  # deterministic init without touching the global RNG
        torch.manual_seed(seed)
        model = Gemma3ForCausalLM(tiny_config(recipe, tok))
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = model.config.eos_token_id
    tmp = cache_dir.with_name(cache_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)  # leftovers of an interrupted build
    tok.save_pretrained(tmp / "tokenizer")
    model.save_pretrained(tmp / "model")
    if cache_dir.exists():  # another process finished first; keep its copy
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        tmp.rename(cache_dir)
    return model, tok, cache_dir


def _main(argv: list[str] | None = None) -> int:
    """`python -m cells.modeling.tiny --write`: train and save this version's tokenizer for every preset's
    vocabulary (after bumping `TOKENIZER_VERSION`)."""
    import argparse

    from cells.step_02_profiles import PROFILES

    parser = argparse.ArgumentParser(prog="python -m cells.modeling.tiny", description=_main.__doc__)
    parser.add_argument("--write", action="store_true", help="train and write the missing versioned tokenizers")
    args = parser.parse_args(argv)
    sizes = sorted({p.tiny.vocab_size for p in PROFILES.values() if p.tiny is not None})
    missing = [v for v in sizes if not tokenizer_file(v).is_file()]
    print(f"tokenizer version {TOKENIZER_VERSION}; preset vocabularies {sizes}; missing {missing}")
    if args.write and missing:
        for path in write_versioned_tokenizers(missing):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
