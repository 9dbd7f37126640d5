"""The OpenEnv server (cells/server/): the real app under uvicorn on loopback, driven over WebSocket with
OpenEnv's client (`RemoteDriftCallEnv`) and with raw frames (`websockets`), and over HTTP (`httpx`).

Every refusal is checked for its documented status / close code and the JSON envelope with a request id,
and the server is checked to keep serving afterwards.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from cells.distributed import free_port
from cells.server.middleware import Limits
from cells.server.session import CLOSE_IDLE, CLOSE_TOO_BIG

TOKEN, JUDGE = "agent-token-0123456789", "judge-token-0123456789"
AGENT_H, JUDGE_H = {"Authorization": f"Bearer {TOKEN}"}, {"Authorization": f"Bearer {JUDGE}"}
CAP = 4
ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def served(stage: int = 2, token: str | None = TOKEN, **limits: Any) -> Iterator[str]:
    """The real app (`build_app`) under uvicorn on a free loopback port, in a thread; yields the base URL."""
    with served_app(stage, token, **limits) as (base, _):
        yield base


@contextmanager
def served_app(stage: int = 2, token: str | None = TOKEN, env_workers: int = 0, **limits: Any
               ) -> Iterator[tuple[str, Any]]:
    """`served`, yielding the app too; `env_workers` as `python -m cells serve --env-workers`."""
    import uvicorn

    from cells.server.app import build_app, close_app, uvicorn_options

    lim = Limits(**limits)
    app = build_app(stage, token=token, judge_token=JUDGE, limits=lim, env_workers=env_workers)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           **uvicorn_options(lim)))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", app
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        close_app(app)


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with served(stage=2, max_sessions=CAP, session_ttl_s=30.0, max_body_bytes=4096, max_frame_bytes=4096) as base:
        yield base


def ws(url: str, headers: dict[str, str] | None = AGENT_H, query: str = "") -> Any:
    return connect(url.replace("http", "ws") + "/ws" + query, additional_headers=headers, proxy=None)


def call(conn: Any, kind: str, data: dict[str, Any] | None = None) -> dict[str, Any]:
    conn.send(json.dumps({"type": kind, **({"data": data} if data is not None else {})}))
    return json.loads(conn.recv(timeout=10))


def assert_envelope(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status
    error = json.loads(response.body if hasattr(response, "body") else response.content)["error"]
    assert error["status"] == status and error["code"] == code and error["request_id"]
    headers = response.headers
    ids = headers.get_list("x-request-id") if isinstance(response, httpx.Response) else headers.get_all("x-request-id")
    assert ids == [error["request_id"]]  # one id, the same in the header and the body
    assert "Traceback" not in json.dumps(error)
    return error


def assert_serving(url: str) -> None:
    """A fresh session still plays: the server survived whatever the test did."""
    with ws(url) as conn:
        assert call(conn, "reset", {"seed": 1})["type"] == "observation"
        assert call(conn, "step", {"text": '{"action":"speak","message":"hi"}'})["data"]["observation"]["turn"] == 1


def expert_texts(stage: int, seed: int) -> tuple[list[str], Any]:
    from cells.agent.play import _play
    from cells.agent.policies import ExpertPolicy
    from cells.step_10_env import DriftCallEnv

    env = DriftCallEnv(stage)
    result = _play(env, ExpertPolicy(), seed)
    return list(result.transcript), result.episode


# ----------------------------------------------------------------------------------- episodes
def test_expert_episode_over_openenv_client_equals_in_process_byte_for_byte(url: str) -> None:
    from cells.agent.policies import ExpertPolicy, GoalReader
    from cells.server.client import RemoteDriftCallEnv
    from cells.step_10_env import DriftCallEnv

    drifted = 0
    with RemoteDriftCallEnv(url, judge_token=JUDGE) as remote:
        for seed in (3, 11, 12):  # one session, three episodes back to back
            local = DriftCallEnv(2)
            obs_l, obs_r = local.reset(seed=seed), remote.reset(seed=seed)
            reader = GoalReader.from_goal(local.goal)  # the scripted players' NLU, computed client-side
            pol_l, pol_r = ExpertPolicy(), ExpertPolicy()
            pol_l.reset(obs_l, reader)
            pol_r.reset(obs_r, reader)
            while True:
                assert obs_r.to_json() == obs_l.to_json()
                if obs_l.done:
                    break
                text = pol_r.act(obs_r)
                assert text == pol_l.act(obs_l)
                obs_l, obs_r = local.step_text(text), remote.step_text(text)
            assert remote.done and remote.episode().to_json() == local.episode().to_json()
            assert remote.rewards().to_json() == local.rewards().to_json()
            drifted += bool(local.episode().drifts)
    assert drifted >= 1  # the comparison covered an episode whose API drifted mid-way


def test_rollout_batch_plays_remote_envs_like_local_ones(url: str) -> None:
    from cells.agent.policies import ExpertPolicy, GoalReader
    from cells.agent.rollout import rollout_batch
    from cells.server.client import RemoteDriftCallEnv
    from cells.step_10_env import DriftCallEnv

    seeds = [5, 6, 7]

    class Experts:
        """One expert per episode, keyed by the turn-0 utterance (rollout_batch shares one policy object)."""

        def __init__(self) -> None:
            self.by_utterance: dict[str, Any] = {}
            for seed in seeds:
                env = DriftCallEnv(2)
                obs = env.reset(seed=seed)
                policy = ExpertPolicy()
                policy.reset(obs, GoalReader.from_goal(env.goal))
                self.by_utterance[env.goal.seed_utterance] = policy

        def act(self, obs: Any, history: Any) -> str:
            return str(self.by_utterance[history[1]["content"]].act(obs))

    local = rollout_batch([DriftCallEnv(2) for _ in seeds], seeds, policy=Experts())
    remotes = [RemoteDriftCallEnv(url, judge_token=JUDGE) for _ in seeds]
    try:
        remote = rollout_batch(remotes, seeds, policy=Experts())
    finally:
        for env in remotes:
            env.close()
    assert remote.transcripts == local.transcripts
    assert [e.to_json() for e in remote.episodes] == [e.to_json() for e in local.episodes]


def test_remote_env_waits_for_a_free_session_when_the_server_is_full(url: str) -> None:
    from cells.server.client import RemoteDriftCallEnv

    with ExitStack() as stack:
        live = [stack.enter_context(ws(url)) for _ in range(CAP)]
        threading.Timer(0.3, live[0].close).start()  # a slot frees up while the env waits
        with RemoteDriftCallEnv(url, judge_token=JUDGE) as env:
            t0 = time.monotonic()
            assert env.reset(seed=1).turn == 0 and time.monotonic() - t0 >= 0.25
    impatient = RemoteDriftCallEnv(url, judge_token=JUDGE, wait_for_session_s=0.2)
    with ExitStack() as stack:
        for _ in range(CAP):
            stack.enter_context(ws(url))
        with pytest.raises(ConnectionError, match="429"):
            impatient.reset(seed=1)
    impatient.close()


def test_remote_envs_release_their_session_once_the_episode_is_read(url: str) -> None:
    from cells.server.client import RemoteDriftCallEnv

    envs = [RemoteDriftCallEnv(url, judge_token=JUDGE) for _ in range(CAP + 2)]  # more envs than sessions
    for k, env in enumerate(envs):  # never closed, as a trainer's env_factory envs are simply dropped
        env.reset(seed=k)
        env.step_text('{"action":"abort","message":"bye"}')
        assert env.episode().seed == k
    again = envs[0]  # a released env plays on: reset opens a new session
    assert again.reset(seed=8).turn == 0 and not again.done
    again.close()
    assert [t.name for t in threading.enumerate()].count("driftcall-remote-envs") == 1  # one loop for all
    assert_serving(url)


def test_truncate_over_the_wire_ends_the_episode_as_a_timeout(url: str) -> None:
    from cells.server.client import RemoteDriftCallEnv

    with RemoteDriftCallEnv(url, judge_token=JUDGE) as env:
        env.reset(seed=2)
        env.step_text('{"action":"speak","message":"hello"}')
        env.truncate()
        assert env.done and env.episode().terminated_by.value == "timeout" and env.episode().turns_used == 1


def test_raw_frames_play_a_full_episode_and_agents_never_see_the_judge_view(url: str) -> None:
    texts, episode = expert_texts(2, 4)
    frames = []
    with ws(url) as conn:
        frames.append(call(conn, "reset", {"seed": 4}))
        for text in texts:
            frames.append(call(conn, "step", {"text": text}))
        state = call(conn, "state")
    assert [f["type"] for f in frames] == ["observation"] * len(frames)
    assert frames[-1]["data"]["done"] is True and frames[-1]["data"]["reward"] == episode.rewards.reward
    assert state["type"] == "state" and state["data"]["judge"] is None and state["data"]["done"] is True
    agent_keys = set().union(*(f["data"]["observation"] for f in frames)) | set(state["data"])
    assert not agent_keys & {"schedule", "fired", "drifts", "goal", "user", "rewards", "episode"}
    docs = [f["data"]["observation"]["available_tools"] for f in frames]
    assert docs[0] and all(d is None for d in docs[1:])  # the tool docs as at reset, sent with reset's frame only
    reset_text = json.dumps(frames[0], ensure_ascii=False)
    assert episode.goal.user.mfa_code not in reset_text  # hidden facts: only told when asked
    with ws(url, JUDGE_H) as conn:  # the judge token sees it all
        call(conn, "reset", {"seed": 4})
        judge = call(conn, "state")["data"]["judge"]
    assert judge["state"]["schedule"] and judge["state"]["goal"]["user"]["mfa_code"] == episode.goal.user.mfa_code


def test_agent_token_client_plays_but_cannot_read_the_episode(url: str) -> None:
    from cells.server.client import RemoteDriftCallEnv, RemoteEnvError

    with RemoteDriftCallEnv(url, token=TOKEN) as env:
        obs = env.reset(seed=3)
        obs = env.step_text('{"action":"abort","message":"no"}')
        assert obs.done and obs.reward == 0.0 and env.state().judge is None
        with pytest.raises(RemoteEnvError, match="judge"):
            env.episode()


# ----------------------------------------------------------------------------------- errors
def test_malformed_frames_and_actions_answer_error_frames_and_the_session_goes_on(url: str) -> None:
    with ws(url) as conn:
        call(conn, "reset", {"seed": 1})
        conn.send("{not json")
        cases = [json.loads(conn.recv(timeout=10))]
        cases.append(call(conn, "fly"))
        cases.append(call(conn, "step", {"bogus": 1}))  # unknown field
        cases.append(call(conn, "step", {"text": "x", "action_type": "speak"}))  # two kinds at once
        cases.append(call(conn, "step", {"action_type": "fly"}))
        cases.append(call(conn, "step", {"action_type": "submit", "confidence": 7}))
        codes = [c["data"]["code"] for c in cases]
        assert codes == ["INVALID_JSON", "UNKNOWN_TYPE"] + ["VALIDATION_ERROR"] * 4
        assert all(c["type"] == "error" and c["data"]["request_id"] for c in cases)
        bad_reset = call(conn, "reset", {"seed": "seven"})
        assert bad_reset["data"]["code"] == "EXECUTION_ERROR" and "seed must be" in bad_reset["data"]["message"]
        assert call(conn, "reset", {"seed": 1, "stage": 3})["data"]["message"].startswith("unknown reset argument")
        obs = call(conn, "step", {"text": "garbage"})  # a model's garbage is an observation, not an error
        assert obs["type"] == "observation" and obs["data"]["observation"]["parse_error"]


def test_step_after_done_is_an_error_frame_and_reset_starts_over(url: str) -> None:
    with ws(url) as conn:
        call(conn, "reset", {"seed": 2})
        assert call(conn, "step", {"action_type": "abort", "message": "bye"})["data"]["done"] is True
        late = call(conn, "step", {"text": '{"action":"speak","message":"still there?"}'})
        assert late["type"] == "error" and late["data"]["code"] == "EXECUTION_ERROR"
        assert "ended" in late["data"]["message"] and late["data"]["request_id"]
        assert call(conn, "reset", {"seed": 2})["data"]["observation"]["turn"] == 0


def test_unexpected_exceptions_reach_clients_as_an_opaque_reference(url: str, monkeypatch: Any) -> None:
    from cells.step_10_env import DriftCallEnv

    def broken(self: Any, text: str) -> Any:
        raise KeyError("SECRET-internal-detail")

    monkeypatch.setattr(DriftCallEnv, "step_text", broken)
    with ws(url) as conn:
        call(conn, "reset", {"seed": 1})
        frame = call(conn, "step", {"text": "hi"})
    assert frame["data"]["code"] == "EXECUTION_ERROR" and frame["data"]["message"].startswith("internal error (ref ")
    assert "SECRET" not in json.dumps(frame)
    monkeypatch.setattr(DriftCallEnv, "reset", broken)
    response = httpx.post(url + "/reset", headers=AGENT_H, json={"seed": 1})
    assert assert_envelope(response, 500, "internal_error") and "SECRET" not in response.text
    monkeypatch.undo()
    assert_serving(url)


# ------------------------------------------------------------------------------------- auth
@pytest.mark.parametrize("headers", [None, {"Authorization": "Bearer wrong-token-0123456789"},
                                     {"Authorization": TOKEN}, {"Authorization": "Basic " + TOKEN}])
def test_every_route_but_health_needs_the_token(url: str, headers: Any) -> None:
    assert httpx.get(url + "/health").json() == {"status": "healthy"}
    for method, path in [("GET", "/schema"), ("GET", "/metadata"), ("GET", "/state"), ("POST", "/reset"),
                         ("POST", "/step"), ("GET", "/openapi.json")]:
        response = httpx.request(method, url + path, headers=headers, json={})
        assert_envelope(response, 401, "unauthorized")
        assert response.headers["www-authenticate"] == "Bearer"
    with pytest.raises(InvalidStatus) as refused:
        ws(url, headers)
    assert_envelope(refused.value.response, 401, "unauthorized")
    assert httpx.get(url + "/schema", headers=AGENT_H).status_code == 200


def test_refused_upgrades_log_no_spurious_server_error(url: str, caplog: Any) -> None:
    caplog.set_level("INFO", logger="uvicorn.error")
    for _ in range(3):
        with pytest.raises(InvalidStatus):
            ws(url, headers=None)
    time.sleep(0.3)  # uvicorn logs after the app returns, in the server thread
    assert any("403" in r.getMessage() or "401" in r.getMessage() for r in caplog.records)  # the denials are logged
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


def test_openenv_client_without_token_is_refused(url: str) -> None:
    from cells.server.client import RemoteDriftCallEnv

    env = RemoteDriftCallEnv(url)
    with pytest.raises(ConnectionError, match="401"):
        env.reset(seed=1)
    env.close()


def test_unknown_routes_are_not_served(url: str) -> None:
    for path in ("/mcp", "/docs", "/web", "/list_environments", "/driftcall/tasks"):
        assert_envelope(httpx.get(url + path, headers=AGENT_H), 404, "not_found")


# ------------------------------------------------------------------------------------ limits
def test_oversized_bodies_get_413(url: str) -> None:
    big = {"action": {"text": "x" * 5000}}
    assert_envelope(httpx.post(url + "/step", headers=AGENT_H, json=big), 413, "body_too_large")
    chunked = httpx.post(url + "/step", headers=AGENT_H, content=iter([b"{" + b" " * 3000, b" " * 3000 + b"}"]))
    assert "content-length" not in chunked.request.headers
    assert_envelope(chunked, 413, "body_too_large")
    assert_serving(url)


def test_a_body_trickling_in_too_slowly_gets_408() -> None:
    with served(stage=1, body_timeout_s=0.3) as base:
        port = int(base.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            raw.sendall(f"POST /reset HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                        "Content-Type: application/json\r\nContent-Length: 50\r\n\r\n{".encode())
            reply = b""
            while not reply.endswith(b"}"):  # the envelope is the whole body
                chunk = raw.recv(65536)
                assert chunk, reply
                reply += chunk
        head, _, body = reply.decode().partition("\r\n\r\n")
        assert head.startswith("HTTP/1.1 408") and json.loads(body)["error"]["code"] == "request_timeout"
        assert_serving(base)


def test_oversized_frames_close_the_socket_with_1009(url: str) -> None:
    with ws(url) as conn:
        call(conn, "reset", {"seed": 1})
        conn.send(json.dumps({"type": "step", "data": {"text": "ॐ" * 1500}}))  # 1,500 chars, 4,500 bytes
        with pytest.raises(ConnectionClosed) as closed:
            conn.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == CLOSE_TOO_BIG
    assert_serving(url)


def test_session_ids_are_validated(url: str) -> None:
    for query, status, code in [("?session_id=../../etc", 400, "bad_session_id"),
                                (f"?session_id={uuid.uuid4()}", 404, "unknown_session"),
                                ("?other=1", 400, "bad_request")]:
        with pytest.raises(InvalidStatus) as refused:
            ws(url, query=query)
        assert_envelope(refused.value.response, status, code)
    assert_serving(url)


def test_session_cap_refuses_with_429_and_never_evicts_a_live_session(url: str) -> None:
    with ExitStack() as stack:
        live = [stack.enter_context(ws(url)) for _ in range(CAP)]
        for k, conn in enumerate(live):
            call(conn, "reset", {"seed": k})
        with pytest.raises(InvalidStatus) as refused:
            ws(url)
        assert_envelope(refused.value.response, 429, "too_many_sessions")
        assert refused.value.response.headers["retry-after"] == "1"
        for conn in live:  # every live session still plays
            assert call(conn, "step", {"text": '{"action":"speak","message":"hi"}'})["type"] == "observation"
        live[0].close()
        deadline = time.monotonic() + 5
        while True:  # the server frees the slot as soon as it has processed the close
            try:
                extra = ws(url)
                break
            except InvalidStatus as refused_again:
                assert refused_again.response.status_code == 429 and time.monotonic() < deadline
                time.sleep(0.02)
        with extra:
            assert call(extra, "reset", {"seed": 9})["type"] == "observation"


def test_default_server_holds_64_concurrent_sessions_and_refuses_the_65th() -> None:
    assert Limits().max_sessions == 64
    with served(stage=1) as base, ExitStack() as stack:
        conns = [stack.enter_context(ws(base)) for _ in range(64)]
        for k, conn in enumerate(conns):  # all 64 open at once, each with its own episode
            conn.send(json.dumps({"type": "reset", "data": {"seed": k}}))
        utterances = {json.loads(conn.recv(timeout=30))["data"]["observation"]["goal_utterance"] for conn in conns}
        assert len(utterances) > 32  # distinct envs, not one shared
        with pytest.raises(InvalidStatus) as refused:
            ws(base)
        assert_envelope(refused.value.response, 429, "too_many_sessions")
        for conn in conns:
            assert call(conn, "step", {"text": '{"action":"speak","message":"hi"}'})["data"]["observation"]["turn"] == 1


def test_steps_within_a_session_are_answered_in_order(url: str) -> None:
    with ws(url) as conn:
        call(conn, "reset", {"seed": 6})
        for k in range(3):  # three frames sent before reading any answer
            conn.send(json.dumps({"type": "step", "data": {"action_type": "speak", "message": f"m{k}"}}))
        turns = [json.loads(conn.recv(timeout=10))["data"]["observation"]["turn"] for _ in range(3)]
        assert turns == [1, 2, 3]
        assert call(conn, "state")["data"]["step_count"] == 3


def test_idle_sessions_expire_and_busy_ones_do_not() -> None:
    with served(stage=1, session_ttl_s=1.0) as base:
        with ws(base) as idle, ws(base) as busy:
            call(idle, "reset", {"seed": 1})
            call(busy, "reset", {"seed": 1})
            for _ in range(8):  # 1.6 s of activity, a frame every 0.2 s
                time.sleep(0.2)
                assert call(busy, "state")["type"] == "state"
            with pytest.raises(ConnectionClosed) as closed:
                idle.recv(timeout=5)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == CLOSE_IDLE
        assert_serving(base)


# -------------------------------------------------------------------------------------- HTTP
def test_http_routes_answer_or_refuse_with_the_envelope(url: str) -> None:
    reset = httpx.post(url + "/reset", headers=AGENT_H, json={"seed": 3})
    assert reset.status_code == 200 and reset.json()["observation"]["turn"] == 0 and reset.headers["x-request-id"]
    step = httpx.post(url + "/step", headers=AGENT_H, json={"action": {"text": "hi"}})
    assert "WebSocket" in assert_envelope(step, 409, "episode_state")["message"]
    assert_envelope(httpx.post(url + "/step", headers=AGENT_H, json={"action": {"nope": 1}}), 422, "invalid_action")
    assert_envelope(httpx.post(url + "/reset", headers=AGENT_H, json={"seed": -1}), 422, "invalid_request")
    assert_envelope(httpx.post(url + "/reset", headers=AGENT_H, json={"episode_id": "a b"}), 422, "invalid_reset")
    given = httpx.get(url + "/state", headers={**AGENT_H, "X-Request-ID": "trace-42"})
    assert given.headers["x-request-id"] == "trace-42" and given.json()["judge"] is None
    schema = httpx.get(url + "/schema", headers=AGENT_H).json()
    assert {"action", "observation", "state"} <= set(schema) and "text" in schema["action"]["properties"]
    assert httpx.get(url + "/metadata", headers=AGENT_H).json()["name"] == "DriftCall"


# ----------------------------------------------------------------------------- start-up rules
def test_tokens_are_required_unless_insecure_local_on_loopback() -> None:
    from cells.server.app import ServerConfigError, check_tokens

    check_tokens("127.0.0.1", TOKEN, JUDGE, insecure_local=False)
    check_tokens("::1", None, None, insecure_local=True)
    for host, token, judge, insecure in [("127.0.0.1", None, None, False), ("0.0.0.0", None, None, True),
                                         ("10.0.0.2", TOKEN, None, True), ("127.0.0.1", "short", None, False),
                                         ("127.0.0.1", TOKEN, TOKEN, False)]:
        with pytest.raises(ServerConfigError):
            check_tokens(host, token, judge, insecure)


def test_insecure_local_serves_agents_without_a_token_but_keeps_the_judge_view_locked() -> None:
    with served(stage=1, token=None) as base:
        assert httpx.get(base + "/schema").status_code == 200
        with ws(base, headers=None) as conn:
            call(conn, "reset", {"seed": 1})
            assert call(conn, "state")["data"]["judge"] is None
        with ws(base, JUDGE_H) as conn:
            call(conn, "reset", {"seed": 1})
            assert call(conn, "state")["data"]["judge"]["state"]["schedule"] is not None


def test_serve_command_refuses_to_start_without_a_token() -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}  # no DRIFTCALL_TOKEN
    done = subprocess.run([sys.executable, "-m", "cells", "serve", "--port", "1"], capture_output=True, text=True,
                          env=env, timeout=60, cwd=ROOT)
    assert done.returncode == 2 and "DRIFTCALL_TOKEN" in done.stderr


def test_serve_command_passes_its_limits_to_the_server(monkeypatch: Any) -> None:
    import cells.server.app as app_module
    from cells.__main__ import main

    seen: dict[str, Any] = {}
    monkeypatch.setattr(app_module, "serve", lambda host, port, stage, **kw: seen.update(kw))
    assert main(["serve", "--insecure-local", "--max-sessions", "3", "--session-ttl", "9", "--send-timeout", "2.5"]) == 0
    limits = seen["limits"]
    assert (limits.max_sessions, limits.session_ttl_s, limits.send_timeout_s) == (3, 9.0, 2.5)


def test_manifest_parses_with_openenv_and_names_an_importable_app(monkeypatch: Any) -> None:
    from openenv.validation.parsers.openenv_yaml import OpenEnvYamlParser

    import cells.server.app as app_module
    from cells.server.middleware import Guard

    manifest = OpenEnvYamlParser().parse(ROOT)
    assert manifest.name == "driftcall"
    import yaml

    entry = yaml.safe_load((ROOT / "openenv.yaml").read_text())["app"]
    assert entry == "cells.server.app:app"
    monkeypatch.setenv("DRIFTCALL_TOKEN", TOKEN)
    monkeypatch.delitem(app_module.__dict__, "app", raising=False)
    assert isinstance(app_module.app, Guard)
    monkeypatch.delitem(app_module.__dict__, "app")


def test_importing_the_server_package_stays_light() -> None:
    code = ("import sys, cells.server, cells.server.app, cells.server.middleware, cells.bench.serving; "
            "heavy = [m for m in ('openenv', 'fastapi', 'gradio', 'uvicorn', 'torch') if m in sys.modules]; "
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"
