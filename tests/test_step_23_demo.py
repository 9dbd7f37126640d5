"""Step 23: the demo panel, driven as a user would: set widget values, click buttons, read what it shows.

The last test serves the panel as a page with Voilà and clicks through it in a real browser
(Playwright on Debian's chromium; `.ci/run` installs it), saving a screenshot.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cells.distributed import free_port
from cells.step_04_datatypes import LANGUAGES
from cells.step_07_tasks import script_of
from cells.step_23_demo import MODEL_PLAYERS, DemoError, DemoPanel, DemoSession, player_names, render_html
from cells.tasks.i18n import LANGUAGE_SCRIPT

ROOT = Path(__file__).resolve().parents[1]


def test_expert_episode_logs_goal_calls_drift_and_reward() -> None:
    s = DemoSession()
    s.reset(2, "ta", 5, "expert")
    s.play()
    kinds = [e.kind for e in s.entries]
    assert kinds[0] == "goal" and script_of(s.entries[0].text) == "tamil" and s.entries[0].language == "ta"
    assert "agent" in kinds and "tool" in kinds and kinds[-1] == "end"
    fired = s.env.episode().drifts
    assert fired and sum(k == "drift" for k in kinds) == len(fired)
    assert f"reward {s.env.rewards().reward:.3f}" in s.entries[-1].text
    with pytest.raises(DemoError, match="ended"):
        s.step()


def test_injected_drift_fires_in_this_episode() -> None:
    s = DemoSession()
    s.reset(1, "en", 11, "expert")  # stage 1: nothing scheduled
    assert s.env.state.schedule == ()
    pattern = next(p for p in s.applicable_patterns() if p.startswith("payment_scope"))
    s.inject(pattern)
    s.play()
    assert [d.pattern_id for d in s.env.episode().drifts] == [pattern]
    assert any(e.kind == "drift" and e.text.startswith(f"fired {pattern}") for e in s.entries)
    with pytest.raises(DemoError):
        s.inject(pattern)  # the episode is over


def test_injecting_an_unknown_or_repeated_pattern_is_refused() -> None:
    s = DemoSession()
    s.reset(2, "hi", 3, "naive")
    with pytest.raises(KeyError):
        s.inject("no_such_pattern")
    scheduled = s.env.state.schedule[0].pattern_id
    with pytest.raises(ValueError, match="already scheduled"):
        s.inject(scheduled)


@pytest.mark.parametrize("language", LANGUAGES)
def test_panel_reset_step_play_in_every_language(language: str) -> None:
    panel = DemoPanel(DemoSession(), seed=4)
    panel.language.value = language
    panel.stage.value = 3
    panel.reset_button.click()
    goal = panel.session.entries[0].text
    assert script_of(goal) in (LANGUAGE_SCRIPT[language], "mixed")
    assert f'lang="{language}"' in panel.log.value and "turn 0" in panel.status.value
    panel.step_button.click()
    assert "turn 1" in panel.status.value and "[1] agent" in panel.log.value
    panel.play_button.click()
    assert "ended" in panel.status.value and "reward" in panel.log.value
    panel.step_button.click()  # past the end: a message, not an exception
    assert "press Reset" in panel.status.value


def test_panel_inject_button_uses_the_pattern_dropdown() -> None:
    panel = DemoPanel(DemoSession(), seed=11)
    panel.stage.value = 1
    panel.reset_button.click()
    assert panel.pattern.options and all(isinstance(p, str) for p in panel.pattern.options)
    panel.pattern.value = panel.pattern.options[-1]
    panel.inject_button.click()
    assert f"scheduled {panel.pattern.value}" in panel.log.value


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed (apt-get install espeak-ng)")
@pytest.mark.parametrize("language", ["kn", "hinglish"])
def test_speak_button_gives_an_audio_player_per_user_and_agent_line(language: str) -> None:
    import ipywidgets as w

    panel = DemoPanel(DemoSession(), seed=6)
    panel.language.value = language
    panel.reset_button.click()
    panel.play_button.click()
    assert not panel.players.children  # generated on demand only
    panel.speak_button.click()
    lines = panel.session.spoken_lines()
    players = [c.children[1] for c in panel.players.children]
    assert len(players) == len(lines) >= 2 and all(isinstance(p, w.Audio) for p in players)
    assert all(p.value[:4] == b"RIFF" and p.format == "wav" for p in players)
    kinds = {entry.kind for entry, _, _ in lines}
    assert {"goal", "agent"} <= kinds and lines[0][2] == language  # the goal line, in the panel's language
    panel.reset_button.click()
    assert not panel.players.children


def test_model_players_are_offered_only_with_a_model() -> None:
    assert not set(MODEL_PLAYERS) & set(player_names(False))
    assert set(MODEL_PLAYERS) <= set(player_names(True))
    with pytest.raises(DemoError, match="needs a model"):
        DemoSession().reset(1, "en", 0, MODEL_PLAYERS[1])


@pytest.mark.parametrize("player", MODEL_PLAYERS)
def test_model_player_steps_through_the_panel(player: str) -> None:
    from tiny import tiny_model, tiny_tokenizer

    tok = tiny_tokenizer()
    session = DemoSession(tiny_model(tok), tok, max_new_tokens=12)
    panel = DemoPanel(session)
    assert player in panel.player.options
    panel.player.value = player
    panel.reset_button.click()
    panel.step_button.click()
    agent = [e for e in session.entries if e.kind == "agent"]
    assert len(agent) == 1 and session.observation.turn == 1
    assert "[1] agent" in panel.log.value  # an untrained tiny model writes garbage: shown, with the format error
    assert any(e.kind == "error" for e in session.entries) or session.observation.parse_error is None


def test_render_html_escapes_model_text() -> None:
    from cells.step_23_demo import Entry

    out = render_html([Entry("agent", 1, "<script>alert(1)</script>")])
    assert "<script>" not in out and "&lt;script&gt;" in out


# ---------------------------------------------------------------------------------------------- browser
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DEMO_NOTEBOOK = {
    "cells": [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source":
               "from cells.step_23_demo import DemoPanel, DemoSession\nDemoPanel(DemoSession(), seed=4).widget"}],
    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    "nbformat": 4, "nbformat_minor": 5,
}


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)")
def test_demo_in_a_real_browser_through_voila(tmp_path: Path) -> None:
    import json

    from playwright.sync_api import sync_playwright

    notebook = tmp_path / "demo.ipynb"
    notebook.write_text(json.dumps(DEMO_NOTEBOOK), encoding="utf-8")
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen(
        [sys.executable, "-m", "voila", str(notebook), "--no-browser", f"--port={port}", "--Voila.ip=127.0.0.1",
         "--Voila.tornado_settings={'disable_check_xsrf': True}"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.5)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto(f"http://127.0.0.1:{port}/", timeout=90_000)
            page.get_by_role("button", name="Step").wait_for(timeout=90_000)
            page.wait_for_selector(".driftcall-demo-log", timeout=30_000)
            assert "[0] user (goal)" in page.inner_text(".driftcall-demo-log")
            page.get_by_role("button", name="Step").click()
            page.wait_for_function("document.body.innerText.includes('[1] agent')", timeout=30_000)
            page.get_by_role("button", name="Play to end").click()
            page.wait_for_function("document.body.innerText.includes('] reward')", timeout=30_000)
            shot = Path(os.environ.get("DRIFTCALL_SCREENSHOT_DIR", tmp_path)) / "demo_voila.png"
            shot.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(shot), full_page=True)
            browser.close()
        assert shot.stat().st_size > 10_000
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
