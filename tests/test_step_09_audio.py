"""Step 9, the voice boundary: espeak-ng and Whisper base for real (offline), the round trip, and the env's
voice option (off by default; on, the agent reads transcripts while the episode keeps what the user said)."""

from __future__ import annotations

import io
import wave

import pytest

from cells import step_09_audio as s9
from cells.step_02_profiles import LANGUAGES

SUPPORT = s9.voice_support()
needs_tts = pytest.mark.skipif(SUPPORT["tts"] is not None, reason=f"no TTS here: {SUPPORT['tts']}")
needs_whisper = pytest.mark.skipif(SUPPORT["asr"] is not None, reason=f"no Whisper here: {SUPPORT['asr']}")
needs_voice = pytest.mark.skipif(any(SUPPORT.values()), reason=f"voice boundary unavailable here: {SUPPORT}")
pytestmark = pytest.mark.xdist_group("voice")  # one worker loads Whisper once for the whole module


@needs_tts
@pytest.mark.parametrize("language", LANGUAGES)
def test_espeak_speaks_every_language_as_a_wav(language):
    wav = s9.EspeakTTS().synthesize(s9.SAMPLE_LINES[language], language)
    with wave.open(io.BytesIO(wav)) as w:
        assert w.getnchannels() == 1 and w.getframerate() > 8000
    assert 1.0 < s9.wav_seconds(wav) < 20.0


def test_unknown_language_is_refused():
    with pytest.raises(ValueError, match="unknown language"):
        s9._check_language("fr")


def test_character_error_rate_ignores_case_spaces_and_punctuation():
    assert s9.character_error_rate("Book a flight, please!", "book a flight please") == 0.0
    assert s9.character_error_rate("abcd", "abxd") == pytest.approx(0.25)
    assert s9.character_error_rate("मुझे टिकट", "मुझे टिकट।") == 0.0  # the danda is punctuation


@needs_whisper
def test_whisper_cache_built_by_racing_builders_is_whole_and_left_clean(tmp_path):
    """Several processes may build the cache at once (pytest workers, `accelerate launch`): each builds in a
    directory of its own and one rename wins; a shared scratch directory made one of them fail."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(3) as pool:
        dirs = list(pool.map(lambda _: s9.whisper_model_dir(tmp_path), range(3)))
    target = tmp_path / "whisper-base"
    assert dirs == [target] * 3
    assert {p.name for p in tmp_path.iterdir()} == {"whisper-base"}  # no scratch directory left behind
    assert sorted(p.name for p in target.iterdir()) == sorted(["model.bin", *s9.WHISPER_FILES])
    assert (target / "model.bin").stat().st_size > 100_000_000


@needs_whisper
def test_building_whisper_leaves_torchs_thread_count_as_it_was():
    """ctranslate2 shares torch's OpenMP runtime: before the fix, building the ASR left every later torch op on the
    core count in a process told to use 1 thread (OMP_NUM_THREADS, as `make test` and `accelerate launch` set), and
    the pipeline ran 4-5x slower beside another busy process. A fresh process, as the pipeline starts."""
    import os
    import subprocess
    import sys

    code = ("import torch; from cells.step_09_audio import WhisperASR; WhisperASR(); a = torch.get_num_threads(); "
            "WhisperASR(threads=2); print(a, torch.get_num_threads())")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "OMP_NUM_THREADS": "1"},
                         capture_output=True, text=True, timeout=300, check=True).stdout.split()
    assert out == ["1", "1"]


@needs_whisper
def test_a_broken_whisper_cache_is_named_with_the_fix(tmp_path):
    (tmp_path / "whisper-base").mkdir()
    (tmp_path / "whisper-base" / "config.json").write_text("{}")
    with pytest.raises(s9.VoiceUnavailableError, match="delete it and rerun"):
        s9.whisper_model_dir(tmp_path)


@needs_voice
def test_english_round_trip_keeps_the_request():
    """In a fresh process with two OpenMP threads, as `python -m cells bench voice` measured it (CER 0.0-0.05).
    Whisper's int8 transcript depends on the process's OpenMP thread count, fixed when the runtime starts: with one
    thread (a pytest-xdist worker on 2 cores) "Bengaluru" came back as "Mangle" (CER 0.23), with two as "Bengal"."""
    import os
    import subprocess
    import sys

    code = ("from cells import step_09_audio as s9; "
            "print(s9.default_boundary().hear(s9.SAMPLE_LINES['en'], 'en').transcript)")
    transcript = subprocess.run([sys.executable, "-c", code], env={**os.environ, "OMP_NUM_THREADS": "2"},
                                capture_output=True, text=True, timeout=300, check=True).stdout.strip()
    assert s9.character_error_rate(s9.SAMPLE_LINES["en"], transcript) < 0.2, transcript
    trace = s9.default_boundary().hear(s9.SAMPLE_LINES["en"], "en")
    assert s9.default_boundary().hear(s9.SAMPLE_LINES["en"], "en") is trace  # memoised


@needs_voice
@pytest.mark.parametrize("language", ["hi", "ta", "kn", "hinglish"])
def test_every_language_comes_back_as_text(language):
    trace = s9.default_boundary().hear(s9.SAMPLE_LINES[language], language)
    assert trace.transcript.strip(), language
    assert trace.audio_seconds > 1.0 and trace.asr_seconds > 0.0


def test_every_spoken_slot_key_has_a_kind():
    from cells.bench.voice import SLOT_KINDS
    from cells.step_07_tasks import generate
    from cells.tasks.generator import render_values

    keys = set()
    for seed in range(40):
        goal = generate(seed, 3, dict.fromkeys(LANGUAGES, 1.0))
        keys |= set(render_values(goal.domain, goal.slots, goal.language))
    assert keys <= set(SLOT_KINDS), keys - set(SLOT_KINDS)


def test_slot_mentions_count_only_what_the_utterance_says():
    from cells.bench.voice import slot_mentions
    from cells.step_07_tasks import generate

    goal = generate(3, 1, {"en": 1.0})
    perfect = slot_mentions(goal, goal.seed_utterance, goal.seed_utterance)
    assert perfect and all(ok for _, ok in perfect)
    assert not any(ok for _, ok in slot_mentions(goal, goal.seed_utterance, "nothing heard"))


@needs_voice
def test_env_voice_option_gives_the_agent_transcripts_and_keeps_what_was_said():
    from cells.agent.play import play_episode
    from cells.agent.policies import ExpertPolicy
    from cells.agent.rollout import default_goal
    from cells.step_10_env import DriftCallEnv

    plain, spoken = DriftCallEnv(1, {"en": 1.0}), DriftCallEnv(1, {"en": 1.0}, voice=s9.default_boundary())
    said, heard = plain.reset(seed=5), spoken.reset(seed=5)
    assert said.goal_utterance == plain.goal.seed_utterance and plain.audio_traces() == ()  # off by default
    (trace,) = spoken.audio_traces()
    assert trace.text == spoken.goal.seed_utterance and heard.goal_utterance == trace.transcript
    assert default_goal(spoken, heard).seed_utterance == trace.transcript  # what a model rollout opens with
    episode, _ = play_episode(spoken, ExpertPolicy(), seed=5)
    assert episode.user_messages[0].text == spoken.goal.seed_utterance  # the episode keeps what was said
    assert all(t.transcript for t in spoken.audio_traces())


@needs_voice
@pytest.mark.slow
def test_step_18_voice_evaluation_and_its_report_section():
    """`profile.voice_eval_per_cell` (cpu-voice): step 18 plays the scripted players both ways on the same cases;
    step 22 renders the rows. Measured (cpu-voice, 15 episodes): expert success 1.0 -> 0.27, the names it
    reads back from the user's garbled replies."""
    import types

    from cells.evaluation.markdown import voice_section
    from cells.step_02_profiles import get_profile
    from cells.step_18_eval_baseline import VOICE_POLICIES, evaluate_voice

    ctx = types.SimpleNamespace(profile=get_profile("cpu-voice"))
    voice = evaluate_voice(ctx, 1)
    assert voice["episodes_per_policy"] == 15 and set(voice["policies"]) == set(VOICE_POLICIES)
    expert = voice["policies"]["expert"]
    assert expert["success_text"] == 1.0 and expert["success_voice"] < expert["success_text"]
    assert set(voice["cer_by_language"]) == set(LANGUAGES) and voice["cer_by_language"]["en"] < 0.3
    text = voice_section(voice)
    assert "| expert | 1.000 |" in text and "| kn |" in text
    assert "Not run here" in voice_section({"skipped": "espeak-ng is not installed"})
