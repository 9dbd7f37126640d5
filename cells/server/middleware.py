"""`Guard`: one pure ASGI middleware in front of OpenEnv's FastAPI app (what we add on top of OpenEnv).

Pure ASGI rather than FastAPI's `@app.middleware("http")`, because that never sees WebSocket
upgrades, and the WebSocket at `/ws` is where episodes run. In order, for every connection:

1. request id: the client's `X-Request-ID` if it is 1-64 chars of [A-Za-z0-9._-], else a fresh one;
   echoed in the `x-request-id` response header and in every error envelope / error frame.
2. routes: only OpenEnv's reset/step/state/health/schema/metadata, `/ws` and `/openapi.json` (404
   otherwise: OpenEnv's MCP and task routes and the docs pages are not served).
3. auth: `Authorization: Bearer <token>` on everything but `/health`, compared with
   `hmac.compare_digest`; the judge token also works and turns on the judge view (`JUDGE_VIEW`).
4. size limits: HTTP bodies over `max_body_bytes` → 413 before the app reads them (bodies are buffered,
   so chunked uploads are counted too), a body not in within `body_timeout_s` → 408.
5. sessions (`/ws` only): one env per connection; at `max_sessions` open connections a new one is
   refused with HTTP 429 + Retry-After (a WebSocket denial response; close 4429 where the server
   cannot send one); a live session is never evicted. `session_id` (OpenEnv's attach-to-an-HTTP-
   session parameter) is validated: not a UUID → 400, a UUID → 404, since this server keeps no
   attachable sessions (the MCP routes that create them are not served).
6. each admitted connection runs as a `Session` (session.py): frames vetted before OpenEnv's loop sees
   them (an `INVALID_JSON` error frame, the session goes on), a frame over `max_frame_bytes` → close
   1009, no client frame for `session_ttl_s` → close 4408, a send to the client still waiting after
   `send_timeout_s` (it is not reading) → the connection reset, logged as close 4008; each frees the env
   and the slot.

Errors are one JSON envelope: `{"error": {"status", "code", "message", "request_id"}}`.
"""

from __future__ import annotations

import asyncio
import contextvars
import hmac
import json
import logging
import os
import re
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from cells.server.session import Session

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

REQUEST_ID_UNSET = "-"  # REQUEST_ID outside a request
REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("driftcall_request_id", default=REQUEST_ID_UNSET)
_DENIED: contextvars.ContextVar[bool] = contextvars.ContextVar("driftcall_ws_denied", default=False)
_SPURIOUS = "ASGI callable returned without completing handshake."


class _DeniedHandshakeFilter(logging.Filter):
    """uvicorn's websockets-sansio protocol logs `_SPURIOUS` at ERROR after every denial response, although
    the client got it (uvicorn PR 3138, open). Drop that record only for connections the Guard denied on
    purpose: the flag is set in the connection's own task, where uvicorn logs it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (_DENIED.get() and record.getMessage() == _SPURIOUS)


ROUTES = frozenset({"/health", "/schema", "/metadata", "/state", "/reset", "/step", "/ws", "/openapi.json"})
OPEN_PATHS = frozenset({"/health"})
_RID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@dataclass(frozen=True)
class Limits:
    """Server limits; every field is a `python -m cells serve` flag or fixed here with a reason."""

    max_sessions: int = 64  # >= G x concurrent rollout groups; one DriftCallEnv (~50 kB) each
    session_ttl_s: float = 300.0  # idle seconds before a session's env is freed
    max_body_bytes: int = 64 * 1024  # an action is < 20 kB even at MAX_TEXT_CHARS of non-ASCII
    max_frame_bytes: int = 64 * 1024
    retry_after_s: int = 1  # sessions end every few hundred ms under load
    body_timeout_s: float = 10.0  # a body trickling in slower than this is dropped (408), not waited on
    # a send to a client still waiting after this long ends its session (logged as close 4008) and frees the slot:
    # a client that sends and never reads would otherwise hold one for ever (session.py). A send waits only once
    # the socket buffers are full of unread replies (up to 4 MiB on loopback); an agent reads each before its next step
    send_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if (self.max_sessions < 1 or self.session_ttl_s <= 0 or self.body_timeout_s <= 0 or self.send_timeout_s <= 0
                or self.max_body_bytes < 1024 or self.max_frame_bytes < 1024):
            raise ValueError(f"limits out of range: {self}; need max_sessions >= 1, session_ttl_s, body_timeout_s "
                             "and send_timeout_s > 0, max_body_bytes and max_frame_bytes >= 1024")


def envelope(status: int, code: str, message: str, **extra: Any) -> bytes:
    """The JSON error body every refusal and error uses."""
    error = {"status": status, "code": code, "message": message, "request_id": REQUEST_ID.get(), **extra}
    return json.dumps({"error": error}, ensure_ascii=False).encode()


def http_protocol() -> type:
    """uvicorn's h11 protocol, its one answer of its own in the envelope: a request h11 cannot parse (a malformed
    request line, header or `Content-Length`) is refused in the protocol layer, before any ASGI app runs, with
    a plain-text 400; here it is the JSON envelope with a fresh request id. `uvicorn_options` passes it."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class EnvelopeH11Protocol(H11Protocol):
        def send_400_response(self, msg: str) -> None:  # uvicorn's hook for h11's RemoteProtocolError
            rid = os.urandom(8).hex()
            body = envelope(400, "bad_request", "malformed HTTP request (request line, headers or Content-Length)",
                            request_id=rid)
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                       (b"x-request-id", rid.encode()), (b"connection", b"close")]
            for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"), h11.Data(data=body),
                          h11.EndOfMessage()):
                self.transport.write(self.conn.send(event))
            self.transport.close()

    return EnvelopeH11Protocol


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value)
    return None


class Guard:
    """Request ids, route allow-list, bearer auth, size limits and the WebSocket session cap/TTL."""

    env_pool: Any = None  # set by `build_app` when envs run in worker processes; `close_app` stops them

    def __init__(self, app: ASGIApp, *, token: str | None, judge_token: str | None, limits: Limits,
                 judge_flag: contextvars.ContextVar[bool]) -> None:
        self.app = app
        self.token = token.encode() if token else None  # None: --insecure-local, no agent token needed
        self.judge_token = judge_token.encode() if judge_token else None
        self.limits = limits
        self.judge_flag = judge_flag
        self.sessions = 0  # open /ws connections, each holding one env
        uvicorn_log = logging.getLogger("uvicorn.error")
        if not any(isinstance(f, _DeniedHandshakeFilter) for f in uvicorn_log.filters):
            uvicorn_log.addFilter(_DeniedHandshakeFilter())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):  # lifespan
            await self.app(scope, receive, send)
            return
        given = _header(scope, b"x-request-id")
        rid = given.decode("latin-1") if given and _RID.fullmatch(given.decode("latin-1")) else os.urandom(8).hex()
        rid_token = REQUEST_ID.set(rid)
        try:
            path = scope["path"]
            if path not in ROUTES or (kind == "websocket") != (path == "/ws"):
                await self.deny(scope, receive, send, 404, "not_found", f"no route {kind} {path[:100]}")
                return
            role = self.role(scope)
            if role is None and path not in OPEN_PATHS:
                await self.deny(scope, receive, send, 401, "unauthorized",
                                "missing or wrong token; send 'Authorization: Bearer <token>'",
                                [(b"www-authenticate", b"Bearer")])
                return
            judge_token = self.judge_flag.set(role == "judge")
            try:
                if kind == "http":
                    await self.http(scope, receive, send, rid)
                else:
                    await self.websocket(scope, receive, send, rid)
            finally:
                self.judge_flag.reset(judge_token)
        finally:
            REQUEST_ID.reset(rid_token)

    def role(self, scope: Scope) -> str | None:
        """'judge', 'agent' or None (refused). Both comparisons always run, in constant time."""
        auth = _header(scope, b"authorization") or b""
        presented = auth[7:].strip() if auth[:7].lower() == b"bearer " else b""
        judge = bool(presented) and self.judge_token is not None and hmac.compare_digest(presented, self.judge_token)
        agent = bool(presented) and self.token is not None and hmac.compare_digest(presented, self.token)
        if judge:
            return "judge"
        return "agent" if agent or self.token is None else None

    # ------------------------------------------------------------------------------------ HTTP
    async def http(self, scope: Scope, receive: Receive, send: Send, rid: str) -> None:
        limit = self.limits.max_body_bytes
        declared = _header(scope, b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            await self.deny(scope, receive, send, 413, "body_too_large", f"request body over {limit} bytes")
            return
        chunks: list[bytes] = []
        size, more = 0, True
        try:
            async with asyncio.timeout(self.limits.body_timeout_s):
                while more:  # buffer the (small) body so chunked uploads are limited too
                    message = await receive()
                    if message["type"] != "http.request":
                        return  # client went away
                    chunks.append(message.get("body", b""))
                    size += len(chunks[-1])
                    more = message.get("more_body", False)
                    if size > limit:
                        break
        except TimeoutError:
            await self.deny(scope, receive, send, 408, "request_timeout",
                            f"request body not received within {self.limits.body_timeout_s:g}s")
            return
        if size > limit:
            await self.deny(scope, receive, send, 413, "body_too_large", f"request body over {limit} bytes")
            return
        body, sent = b"".join(chunks), False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()  # http.disconnect, when it comes
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def tag(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), (b"x-request-id", rid.encode())]}
            await send(message)

        await self.app(scope, replay, tag)

    # ------------------------------------------------------------------------------- WebSocket
    async def websocket(self, scope: Scope, receive: Receive, send: Send, rid: str) -> None:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        unknown = sorted(set(query) - {"session_id"})
        if unknown:
            await self.deny(scope, receive, send, 400, "bad_request", f"unknown query parameter(s) {unknown[:5]}")
            return
        if "session_id" in query:
            sid = query["session_id"][0]
            if not _UUID.fullmatch(sid):
                await self.deny(scope, receive, send, 400, "bad_session_id", "session_id must be a lowercase UUID")
            else:
                await self.deny(scope, receive, send, 404, "unknown_session",
                                "no such session: each WebSocket connection is its own session here; "
                                "connect without session_id")
            return
        if self.sessions >= self.limits.max_sessions:
            await self.deny(scope, receive, send, 429, "too_many_sessions",
                            f"all {self.limits.max_sessions} sessions are in use; retry later",
                            [(b"retry-after", str(self.limits.retry_after_s).encode())])
            return
        self.sessions += 1
        session = Session(receive, send, rid, self.limits)
        try:
            await self.app(scope, session.receive, session.send)
        finally:
            session.stop()
            self.sessions -= 1

    # --------------------------------------------------------------------------------- refusal
    async def deny(self, scope: Scope, receive: Receive, send: Send, status: int, code: str, message: str,
                   headers: list[tuple[bytes, bytes]] | None = None) -> None:
        body = envelope(status, code, message)
        all_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                       (b"x-request-id", REQUEST_ID.get().encode()), *(headers or [])]
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": status, "headers": all_headers})
            await send({"type": "http.response.body", "body": body})
            return
        await receive()  # websocket.connect
        if "websocket.http.response" in scope.get("extensions", {}):  # a real HTTP status on the upgrade
            _DENIED.set(True)
            await send({"type": "websocket.http.response.start", "status": status, "headers": all_headers})
            await send({"type": "websocket.http.response.body", "body": body})
        else:
            await send({"type": "websocket.close", "code": 4000 + status, "reason": message[:100]})
