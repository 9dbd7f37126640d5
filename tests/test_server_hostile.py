"""The server against hostile clients, on loopback, in both layouts (in-loop and `--env-workers 1`): clients that
push frames and never read, frames OpenEnv's loop cannot handle, arguments nested deep enough to break pickling,
and an exception escaping OpenEnv's loop. After each, a session plays an expert episode to its end.

Timeouts are short here (`send_timeout_s` 1 s); every client is bounded in frames and seconds.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import test_server as ts
from websockets.client import ClientProtocol
from websockets.exceptions import InvalidStatus
from websockets.http11 import Response
from websockets.uri import parse_uri

from cells.server.session import (
    CLOSE_IDLE,
    CLOSE_SLOW_READER,
    INVALID_FRAME,
    MAX_FRAME_DEPTH,
    MAX_INT_DIGITS,
    frame_problem,
)

SLOTS, SEND_TIMEOUT_S = 2, 1.0
MAX_PUSHED_FRAMES, PUSH_FOR_S = 1000, 10.0  # bounds on each never-reading client
FREED_WITHIN_S = SEND_TIMEOUT_S + 4.0  # the timeout, plus room for a loaded 2-core machine


@pytest.fixture(scope="module", params=[0, 1], ids=["in-loop", "env-workers-1"])
def served(request: Any) -> Iterator[tuple[str, Any]]:
    with ts.served_app(stage=2, env_workers=request.param, max_sessions=SLOTS, session_ttl_s=60.0,
                       send_timeout_s=SEND_TIMEOUT_S) as (base, app):
        yield base, app


def play_expert_episode(conn: Any, seed: int = 4) -> None:
    """An expert episode to its end on an open session, with the in-process episode's reward."""
    texts, episode = ts.expert_texts(2, seed)
    assert ts.call(conn, "reset", {"seed": seed})["type"] == "observation"
    frames = [ts.call(conn, "step", {"text": text}) for text in texts]
    assert [f["type"] for f in frames] == ["observation"] * len(texts)
    assert frames[-1]["data"]["done"] is True and frames[-1]["data"]["reward"] == episode.rewards.reward


# ------------------------------------------------------------------------------------ slow readers
class NeverReads:
    """A WebSocket client (websockets' sans-I/O framing over a raw socket) with tiny socket buffers that plays an
    expert episode with the judge token, then pushes `state` frames and reads nothing. Each `state` answer is
    the finished episode's judge view (~23 kB for 16 bytes sent), so the server's kernel buffer (up to 4 MiB on
    loopback) fills after a few hundred frames and its sends block, as they would after many more agent frames."""

    def __init__(self, base: str) -> None:
        port = int(base.rsplit(":", 1)[1])
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        for option in (socket.SO_RCVBUF, socket.SO_SNDBUF):  # before connect: the window the server sees
            self.sock.setsockopt(socket.SOL_SOCKET, option, 4096)
        self.sock.settimeout(10)
        self.sock.connect(("127.0.0.1", port))
        self.proto = ClientProtocol(parse_uri(f"ws://127.0.0.1:{port}/ws"), max_size=None)
        handshake = self.proto.connect()
        handshake.headers["Authorization"] = f"Bearer {ts.JUDGE}"
        self.proto.send_request(handshake)
        self._send()
        response = self._next_event()
        assert isinstance(response, Response) and response.status_code == 101
        texts, _ = ts.expert_texts(2, 4)
        self.call({"type": "reset", "data": {"seed": 4}})
        for text in texts:
            self.call({"type": "step", "data": {"text": text}})

    def _send(self) -> None:
        self.sock.sendall(b"".join(self.proto.data_to_send()))

    def _next_event(self) -> Any:
        events: list[Any] = []
        while not events:
            self.proto.receive_data(self.sock.recv(1 << 16))
            events = self.proto.events_received()
        return events[0]

    def call(self, frame: dict[str, Any]) -> dict[str, Any]:
        self.proto.send_text(json.dumps(frame).encode())
        self._send()
        reply = json.loads(self._next_event().data)
        assert reply["type"] != "error", reply
        return reply

    def push(self) -> int:
        """Send `state` frames until MAX_PUSHED_FRAMES, PUSH_FOR_S or a send that blocks; return how many went."""
        self.sock.settimeout(0.2)
        deadline, sent = time.monotonic() + PUSH_FOR_S, 0
        while sent < MAX_PUSHED_FRAMES and time.monotonic() < deadline:
            self.proto.send_text(b'{"type":"state"}')
            try:
                self._send()
            except TimeoutError:  # the server stopped reading us: its sends to us are stuck
                break
            sent += 1
        return sent

    def was_reset(self) -> bool:
        """Read again: True when the server has dropped the connection (what was queued is gone with it)."""
        self.sock.settimeout(5)
        try:
            while self.sock.recv(1 << 16):
                pass
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False
        return True  # EOF

    def close(self) -> None:
        self.sock.close()


def wait_for_sessions(base: str, count: int, within_s: float) -> tuple[list[Any], float]:
    """Hold `count` sessions at once, opening each as soon as the server has a slot; and how long that took."""
    t0, conns = time.monotonic(), []
    while len(conns) < count:
        try:
            conns.append(ts.ws(base))
        except InvalidStatus as refused:
            assert refused.response.status_code == 429 and time.monotonic() - t0 < within_s, "no slot was freed"
            time.sleep(0.02)
    return conns, time.monotonic() - t0


def test_clients_that_push_and_never_read_lose_their_slots_within_the_send_timeout(
        served: tuple[str, Any], caplog: Any) -> None:
    caplog.set_level(logging.WARNING, logger="driftcall.server")
    base, app = served
    hostile = [NeverReads(base) for _ in range(SLOTS)]
    try:
        assert all(client.push() >= 200 for client in hostile)
        with pytest.raises(InvalidStatus) as full:  # both slots are held
            ts.ws(base)
        assert full.value.response.status_code == 429
        conns, waited = wait_for_sessions(base, SLOTS, FREED_WITHIN_S)
        with conns[0], conns[1]:
            play_expert_episode(conns[0])
        assert all(client.was_reset() for client in hostile)
    finally:
        for client in hostile:
            client.close()
    assert waited < FREED_WITHIN_S
    closes = [r for r in caplog.records if f"closed with {CLOSE_SLOW_READER}" in r.getMessage()]
    assert len(closes) == SLOTS
    envs_held = [lambda: app.sessions] + ([lambda: app.env_pool.workers[0].sessions] if app.env_pool else [])
    deadline = time.monotonic() + 10
    while any(held() for held in envs_held):  # every slot and every worker-side env is freed
        assert time.monotonic() < deadline, [held() for held in envs_held]
        time.sleep(0.02)


def test_the_idle_ttl_runs_while_the_app_is_stuck_sending(caplog: Any) -> None:
    """The TTL counts from the last frame received, whatever the app does: with the send timeout far away, a
    client that pushed and never read is closed by the TTL (4408)."""
    caplog.set_level(logging.WARNING, logger="driftcall.server")
    with ts.served_app(stage=2, max_sessions=1, session_ttl_s=1.0, send_timeout_s=60.0) as (base, _):
        client = NeverReads(base)
        try:
            assert client.push() >= 200
            conns, waited = wait_for_sessions(base, 1, FREED_WITHIN_S)
            with conns[0]:
                play_expert_episode(conns[0])
            assert client.was_reset()
        finally:
            client.close()
    assert waited < FREED_WITHIN_S
    assert [r for r in caplog.records if f"closed with {CLOSE_IDLE}" in r.getMessage()]


# ----------------------------------------------------------------------------------- frame vetting
BAD_FRAMES = {
    "array": "[1,2]",
    "string": '"x"',
    "number": "3",
    "null": "null",
    "binary": b'{"type":"reset","data":{"seed":1}}',
    "5000-digit integer": '{"type":"reset","data":{"seed":' + "7" * 5000 + "}}",
    "1100-deep nesting": '{"type":"step","data":{"args":' + "[" * 1100 + "]" * 1100 + "}}",
    "lone surrogate": '{"type":"step","data":{"text":"\\ud800"}}',
}


def test_frames_openenv_cannot_handle_get_an_error_frame_and_the_session_plays_on(served: tuple[str, Any]) -> None:
    base, _ = served
    with ts.ws(base) as conn:
        for name, frame in BAD_FRAMES.items():
            conn.send(frame)
            answer = json.loads(conn.recv(timeout=10))
            assert answer["type"] == "error", name
            assert answer["data"]["code"] == INVALID_FRAME and answer["data"]["request_id"], name
        play_expert_episode(conn)


def test_frame_rules_at_their_thresholds() -> None:
    def nested(levels: int) -> str:  # the frame object itself is the first level
        return '{"a":' + "[" * (levels - 1) + "]" * (levels - 1) + "}"

    def with_int(chars: int) -> str:
        return '{"seed":' + "9" * chars + "}"

    assert frame_problem(nested(MAX_FRAME_DEPTH)) is None
    assert "nested deeper" in frame_problem(nested(MAX_FRAME_DEPTH + 1))
    assert frame_problem('{"a":"' + "[" * 200 + '"}') is None  # brackets inside a string are text
    assert frame_problem(with_int(MAX_INT_DIGITS)) is None
    assert "integer longer" in frame_problem(with_int(MAX_INT_DIGITS + 1))
    assert frame_problem('{"a":"' + "9" * 5000 + '"}') is None  # digits inside a string are text
    assert frame_problem('{"text":"\\ud83d\\ude00"}') is None  # a surrogate pair is one character
    assert "lone surrogate" in frame_problem('{"\\udc00":1}')
    assert frame_problem("{not json") is None  # OpenEnv answers INVALID_JSON itself, and goes on
    assert frame_problem(' \n{"type":"state"}') is None


def test_an_exception_escaping_openenvs_loop_reaches_the_client_as_a_reference(
        served: tuple[str, Any], monkeypatch: Any, caplog: Any) -> None:
    from openenv.core.env_server import http_server

    class Exploding:  # OpenEnv's loop decodes frames with `json.loads`; this one fails outside its try
        JSONDecodeError = json.JSONDecodeError
        dumps = staticmethod(json.dumps)

        @staticmethod
        def loads(text: str, *args: Any, **kwargs: Any) -> Any:
            if "explode" in text:
                raise KeyError("SECRET-internal-detail")
            return json.loads(text, *args, **kwargs)

    caplog.set_level(logging.ERROR, logger="driftcall.server")
    monkeypatch.setattr(http_server, "json", Exploding)
    base, _ = served
    with ts.ws(base) as conn:
        frame = ts.call(conn, "explode")
    rid = frame["data"]["request_id"]
    assert frame["data"]["message"].startswith(f"internal error (ref {rid})") and "SECRET" not in json.dumps(frame)
    assert any(rid in r.getMessage() and "SECRET-internal-detail" in r.getMessage() for r in caplog.records)
    monkeypatch.undo()
    with ts.ws(base) as conn:
        play_expert_episode(conn)


# ------------------------------------------------------------------------ one validation path
def deep_args(levels: int) -> dict[str, Any]:
    value: Any = []
    for _ in range(levels - 1):
        value = [value]
    return {"action_type": "tool_call", "tool": "airline.search", "args": {"a": value}}


def test_deeply_nested_arguments_are_refused_alike_in_both_layouts(served: tuple[str, Any]) -> None:
    base, app = served
    deep = httpx.post(base + "/step", headers=ts.AGENT_H, json={"action": deep_args(900)})
    assert "nested deeper than" in ts.assert_envelope(deep, 422, "invalid_action")["message"]
    reset = httpx.post(base + "/reset", headers=ts.AGENT_H, json={"seed": 1, "extra": deep_args(900)})
    ts.assert_envelope(reset, 422, "invalid_reset")
    with ts.ws(base) as conn:
        ts.call(conn, "reset", {"seed": 1})
        too_deep = ts.call(conn, "step", deep_args(900))  # past the frame limit: refused before OpenEnv
        assert too_deep["type"] == "error" and too_deep["data"]["code"] == INVALID_FRAME
        env_deep = ts.call(conn, "step", deep_args(20))  # within it: the env's own check, before any pickling
        assert env_deep["data"]["code"] == "EXECUTION_ERROR" and "nested deeper than 6" in env_deep["data"]["message"]
        assert ts.call(conn, "step", {"text": '{"action":"speak","message":"hi"}'})["type"] == "observation"
    if app.env_pool is not None:
        assert all(not worker.pending for worker in app.env_pool.workers)  # every call answered


# ------------------------------------------------------------------------------ the protocol layer
@pytest.mark.parametrize("head", ["POST /reset HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n",
                                  "GET /health HTTP/1.1\r\nHost: x\r\nBad Header\r\n",
                                  "NOT A REQUEST LINE\r\n"])
def test_requests_uvicorn_cannot_parse_get_the_json_envelope(served: tuple[str, Any], head: str) -> None:
    base, _ = served
    with socket.create_connection(("127.0.0.1", int(base.rsplit(":", 1)[1])), timeout=10) as raw:
        raw.sendall(f"{head}Authorization: Bearer {ts.TOKEN}\r\n\r\n".encode())
        reply = b""
        while chunk := raw.recv(65536):  # the server closes the connection after its answer
            reply += chunk
    head_out, _, body = reply.decode().partition("\r\n\r\n")
    lines = head_out.split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    error = json.loads(body)["error"]
    assert lines[0].startswith("HTTP/1.1 400") and headers["content-type"] == "application/json"
    assert error["status"] == 400 and error["code"] == "bad_request" and error["request_id"] == headers["x-request-id"]
    assert httpx.get(base + "/health").status_code == 200
