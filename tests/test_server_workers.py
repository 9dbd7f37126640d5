"""The server with the sessions' envs in worker processes (`python -m cells serve --env-workers N`,
cells/server/workers.py): the in-loop server's episode and error behaviour, replayed against this layout
by the same checks, plus what only this layout has (the worker's lifecycle, a worker that dies).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import test_server as ts

SAME_AS_IN_LOOP = [
    ts.test_expert_episode_over_openenv_client_equals_in_process_byte_for_byte,
    ts.test_rollout_batch_plays_remote_envs_like_local_ones,
    ts.test_remote_env_waits_for_a_free_session_when_the_server_is_full,
    ts.test_remote_envs_release_their_session_once_the_episode_is_read,
    ts.test_raw_frames_play_a_full_episode_and_agents_never_see_the_judge_view,
    ts.test_agent_token_client_plays_but_cannot_read_the_episode,
    ts.test_truncate_over_the_wire_ends_the_episode_as_a_timeout,
    ts.test_malformed_frames_and_actions_answer_error_frames_and_the_session_goes_on,
    ts.test_step_after_done_is_an_error_frame_and_reset_starts_over,
    ts.test_steps_within_a_session_are_answered_in_order,
    ts.test_http_routes_answer_or_refuse_with_the_envelope,
]


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, Any]]:
    with ts.served_app(stage=2, env_workers=1, max_sessions=ts.CAP, session_ttl_s=30.0, max_body_bytes=4096,
                       max_frame_bytes=4096) as (base, app):
        yield base, app


@pytest.mark.parametrize("check", SAME_AS_IN_LOOP, ids=lambda f: f.__name__.removeprefix("test_"))
def test_worker_layout_behaves_like_the_in_loop_server(served: tuple[str, Any], check: Any) -> None:
    check(served[0])


def wait_for(condition: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def test_sessions_live_in_the_worker_and_are_released_on_close(served: tuple[str, Any]) -> None:
    base, app = served
    worker = app.env_pool.workers[0]
    assert worker.process.poll() is None and worker.process.pid != os.getpid()
    wait_for(lambda: worker.sessions == 0)  # earlier tests' sessions are closed after their sockets close
    with ts.ws(base) as conn:
        ts.call(conn, "reset", {"seed": 5})
        assert worker.sessions == 1
        ts.call(conn, "step", {"text": '{"action":"speak","message":"hi"}'})
    wait_for(lambda: worker.sessions == 0)


def test_a_worker_that_dies_fails_its_sessions_and_is_replaced(served: tuple[str, Any], caplog: Any,
                                                               monkeypatch: Any) -> None:
    from cells.server import workers

    monkeypatch.setattr(workers, "MIN_LIFE_TO_REPLACE_S", 0.0)  # however young this module's worker is
    base, app = served
    pool = app.env_pool
    with ts.ws(base) as conn:
        ts.call(conn, "reset", {"seed": 6})
        doomed = pool.workers[0]
        os.kill(doomed.process.pid, signal.SIGKILL)
        doomed.process.wait(timeout=10)
        wait_for(lambda: pool.workers[0] is not doomed)
        frame = ts.call(conn, "step", {"text": '{"action":"speak","message":"hi"}'})
        assert frame["type"] == "error" and frame["data"]["code"] == "EXECUTION_ERROR"
        assert "env worker 0 exited" in frame["data"]["message"]
    assert any("env worker 0 exited" in r.getMessage() for r in caplog.records)
    with ts.ws(base) as conn:  # a new session goes to the replacement, which may still be importing OpenEnv
        conn.send(json.dumps({"type": "reset", "data": {"seed": 6}}))
        assert json.loads(conn.recv(timeout=120))["type"] == "observation"
    ts.assert_serving(base)
    assert pool.workers[0].process.poll() is None


def test_a_worker_that_dies_young_is_not_replaced(caplog: Any, monkeypatch: Any) -> None:
    from cells.server import workers

    monkeypatch.setattr(workers, "MIN_LIFE_TO_REPLACE_S", 3600.0)  # every death counts as young
    with ts.served_app(stage=1, env_workers=1) as (base, app):
        pool = app.env_pool
        with ts.ws(base) as conn:
            ts.call(conn, "reset", {"seed": 1})  # binds the worker's socket to the serving loop
            doomed = pool.workers[0]
            os.kill(doomed.process.pid, signal.SIGKILL)
            wait_for(lambda: not doomed.alive)
        assert pool.workers[0] is doomed  # a crash loop at start-up is not restarted forever
        assert any("is not replaced" in r.getMessage() for r in caplog.records)


def test_a_bug_inside_a_worker_reaches_the_client_as_an_opaque_reference(tmp_path: Any, monkeypatch: Any,
                                                                         capfd: Any) -> None:
    # the bug must live in the worker's interpreter: a sitecustomize module on its PYTHONPATH breaks its env
    (tmp_path / "sitecustomize.py").write_text(
        "from cells.step_10_env import DriftCallEnv\n"
        "def broken(self, text):\n"
        "    raise KeyError('SECRET-internal-detail')\n"
        "DriftCallEnv.step_text = broken\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p))
    with ts.served_app(stage=1, env_workers=1) as (base, app):
        with ts.ws(base) as conn:
            ts.call(conn, "reset", {"seed": 1})
            frame = ts.call(conn, "step", {"text": "hi"})
            assert frame["data"]["code"] == "EXECUTION_ERROR" and "SECRET" not in json.dumps(frame)
            message = frame["data"]["message"]
            assert message.startswith("internal error (ref ")
            assert ts.call(conn, "reset", {"seed": 2})["type"] == "observation"  # the session goes on
        assert app.env_pool.workers[0].process.poll() is None
    ref = message.removeprefix("internal error (ref ").split(")")[0]
    log = capfd.readouterr().err  # the worker's log: the reference, with the traceback the client never sees
    assert f"internal error ref={ref}" in log and "SECRET-internal-detail" in log and "Traceback" in log


def test_closing_the_app_stops_its_workers() -> None:
    from cells.server.app import build_app, close_app

    app = build_app(1, token=ts.TOKEN, env_workers=2)
    processes = [w.process for w in app.env_pool.workers]
    assert len(processes) == 2 and all(p.poll() is None for p in processes)
    close_app(app)
    assert all(p.poll() is not None for p in processes)


def test_a_worker_that_cannot_start_stops_the_server_from_starting(capfd: Any) -> None:
    from cells.server.app import build_app
    from cells.server.workers import EnvWorkerError

    with pytest.raises(EnvWorkerError, match="exited during start-up"):
        build_app(9, token=ts.TOKEN, env_workers=1)  # no stage 9: the worker's env refuses it
    assert "stage" in capfd.readouterr().err  # the worker's traceback reached the server's log


def test_serve_refuses_a_negative_worker_count() -> None:
    result = subprocess.run([sys.executable, "-m", "cells", "serve", "--env-workers", "-1"], cwd=ts.ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "--env-workers: must be >= 0" in result.stderr
