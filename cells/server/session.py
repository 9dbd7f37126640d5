"""One `/ws` session between uvicorn and OpenEnv's WebSocket loop: frame vetting, the idle TTL, the send
timeout, request ids on error frames. The `Guard` (middleware.py) wraps every admitted connection in a `Session`.

Frames. OpenEnv's loop ends a session with a Python message on a frame it cannot handle (it catches only
`JSONDecodeError`, calls `.get` on whatever was decoded outside its try, and echoes pydantic's errors with the
offending input, which may not serialise). So only text frames holding one JSON object, nested at most
`MAX_FRAME_DEPTH` levels, with no integer over `MAX_INT_DIGITS` characters and no lone surrogate, reach it;
anything else is answered with an `INVALID_JSON` error frame here and the session goes on. A frame over
`max_frame_bytes` closes the session (1009).

Closes, each code declared once, here:
- `CLOSE_IDLE` (4408): no frame from the client for `session_ttl_s`, whatever the app is doing meanwhile;
- `CLOSE_TOO_BIG` (1009): a frame over `max_frame_bytes`;
- `CLOSE_SLOW_READER` (4008): a send to the client waited `send_timeout_s`: it is not reading. The code goes to
  the server log; the client finds its connection reset (below), as for a 4408 while a send waits.

Outgoing data is bounded per session: OpenEnv's loop awaits each send before it reads the next frame, and
uvicorn's send waits while the transport holds more than its high-water mark (64 KiB), so a session holds that
plus one frame at most. A send still waiting after `send_timeout_s` means a client that is not reading, and no
close frame can reach it: it would queue behind the frames it has not taken, and a socket closed with frames of
the client's still unread (it pushed on while the server waited) is reset by the kernel anyway. So the session
hangs up (`_hang_up`): the server logs the close code and resets the connection, which ends the app's stuck send;
the env and the slot are freed as on any hang-up (the client sees an abnormal closure, 1006 in most clients).
An unexpected exception that ends a session (OpenEnv's `SESSION_ERROR`) reaches the client as
`internal error (ref <request id>)`; its text goes to the log.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from cells.actions import max_nesting
from cells.errors import DriftCallError

if TYPE_CHECKING:  # pragma: no cover
    from cells.server.middleware import Limits

Message = MutableMapping[str, Any]

CLOSE_IDLE, CLOSE_TOO_BIG, CLOSE_SLOW_READER = 4408, 1009, 4008
# OpenEnv's envelope (2 levels) around an action whose args the env bounds at 6 levels, with room to spare; far
# below the ~1,000 levels where json.loads and pickle raise RecursionError
MAX_FRAME_DEPTH = 32
# characters of one integer literal, sign included: seeds are < 2**63 (19 digits); Python's int() refuses over
# 4,300 digits with a ValueError that OpenEnv's loop does not catch
MAX_INT_DIGITS = 100
INVALID_FRAME = "INVALID_JSON"  # OpenEnv's own error code for a frame it cannot decode: clients already know it
log = logging.getLogger("driftcall.server")

_OBJECT_START = re.compile(r"[ \t\n\r]*\{")
_SURROGATE = re.compile("[\ud800-\udfff]")  # after decoding: json.loads joins valid pairs, so any left is lone
_ERROR_FRAME = '{"type":"error"'  # how OpenEnv's WSErrorResponse.model_dump_json() starts
_SESSION_ERROR = "SESSION_ERROR"  # OpenEnv's code when an exception escapes its loop (the session then ends)


class FrameIntegerError(DriftCallError):
    """An integer literal over MAX_INT_DIGITS characters, raised while decoding a frame (not a ValueError: to
    `frame_problem` that means "not JSON")."""


def _bounded_int(literal: str) -> int:
    if len(literal) > MAX_INT_DIGITS:
        raise FrameIntegerError(f"integer literal {literal[:20]}... over {MAX_INT_DIGITS} characters")
    return int(literal)


_DECODER = json.JSONDecoder(parse_int=_bounded_int)


def frame_problem(text: str) -> str | None:
    """Why OpenEnv's loop must not see this text frame, or None. The depth is scanned before decoding (so the
    decoder never recurses), and only where a C-speed count of brackets says it could be too deep; integers are
    bounded while decoding (one decode costs less than a regex scan for long digit runs)."""
    if not _OBJECT_START.match(text):
        return 'a frame is one JSON object: {"type": "reset" | "step" | "state" | "close", "data": {...}}'
    if text.count("{") + text.count("[") > MAX_FRAME_DEPTH and max_nesting(text) > MAX_FRAME_DEPTH:
        return f"JSON nested deeper than {MAX_FRAME_DEPTH} levels"
    try:
        value = _DECODER.decode(text)
    except FrameIntegerError:
        return f"an integer longer than {MAX_INT_DIGITS} characters"
    except ValueError:  # not JSON: OpenEnv's loop answers INVALID_JSON itself and goes on
        return None
    if ("\\ud" in text or "\\uD" in text) and _holds_lone_surrogate(value):  # only an escape makes a surrogate
        return "a string holds a lone surrogate (an unpaired \\ud800-\\udfff escape); send valid Unicode"
    return None


def _holds_lone_surrogate(value: Any) -> bool:
    stack = [value]  # depth is already bounded by MAX_FRAME_DEPTH; a stack keeps the walk flat anyway
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item)  # keys
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def error_frame(code: str, message: str, request_id: str) -> str:
    """An error frame shaped like OpenEnv's `WSErrorResponse`, with the session's request id."""
    return json.dumps({"type": "error", "data": {"message": message, "code": code, "request_id": request_id}},
                      ensure_ascii=False)


class Session:
    """One `/ws` connection's receive/send as the app sees them (see the module docstring).

    One watchdog timer per session, re-armed only when its due time changes (an `asyncio.timeout` around every
    receive or send cost ~15 us a step): it closes the session when the last client frame is `session_ttl_s`
    old (4408), or a send has waited `send_timeout_s` (4008)."""

    def __init__(self, receive: Callable[[], Awaitable[Message]], send: Callable[[Message], Awaitable[None]],
                 rid: str, limits: Limits) -> None:
        self._receive, self._send, self.rid, self.limits = receive, send, rid, limits
        self.closed = False
        self.loop = asyncio.get_running_loop()
        self.last_rx = self.loop.time()
        self.sending_since: float | None = None  # when the send in progress began
        self.timer: asyncio.TimerHandle | None = None
        self.due = math.inf  # when `timer` fires
        self.expiry: asyncio.Task[None] | None = None  # the close the watchdog started (kept referenced)

    # ---------------------------------------------------------------------------------- receive
    async def receive(self) -> Message:
        while not self.closed:
            message = await self._receive()
            self.last_rx = self.loop.time()
            if message["type"] != "websocket.receive":
                return message
            text = message.get("text")
            data = text if text is not None else message.get("bytes") or b""
            limit = self.limits.max_frame_bytes
            if len(data) > limit or (text is not None and 4 * len(text) > limit and len(text.encode()) > limit):
                await self.close(CLOSE_TOO_BIG, f"frame over {limit} bytes")
                return {"type": "websocket.disconnect", "code": CLOSE_TOO_BIG}
            problem = "binary frame; send JSON text frames" if text is None else frame_problem(text)
            if problem is None:
                return message
            await self._transmit({"type": "websocket.send", "text": error_frame(INVALID_FRAME, problem, self.rid)})
        return {"type": "websocket.disconnect", "code": 1000}

    # ------------------------------------------------------------------------------------- send
    async def send(self, message: Message) -> None:
        if self.closed:
            return  # we closed the socket; the app's own close/sends come too late
        if message["type"] == "websocket.accept":
            self.last_rx = self.loop.time()
            self._arm(self.last_rx + self.limits.session_ttl_s)
        elif message["type"] == "websocket.send" and (message.get("text") or "").startswith(_ERROR_FRAME):
            message = {"type": "websocket.send", "text": self._own_error_frame(message["text"])}
        await self._transmit(message)

    async def _transmit(self, message: Message) -> None:
        now = self.loop.time()
        self.sending_since = now
        if self.due > now + self.limits.send_timeout_s:
            self._arm(now + self.limits.send_timeout_s)
        try:
            await self._send(message)
        except OSError:  # uvicorn's ClientDisconnected: the connection we hung up on is gone
            if not self.closed:
                raise
        finally:
            self.sending_since = None

    def _own_error_frame(self, text: str) -> str:
        """OpenEnv's error frame with the request id; an escaped exception's text replaced by a reference."""
        frame = json.loads(text)
        data = frame.setdefault("data", {})
        data["request_id"] = self.rid
        if data.get("code") == _SESSION_ERROR:
            log.error("internal error ref=%s (the session ended): %s", self.rid, data.get("message"))
            data["message"] = f"internal error (ref {self.rid}); the server log has the details"
        return json.dumps(frame, ensure_ascii=False)

    # ------------------------------------------------------------------------------------ close
    async def close(self, code: int, reason: str) -> None:
        """Close the ASGI way; a client that has not taken the close frame within `send_timeout_s` is hung up on."""
        if self.closed:
            return
        self.closed = True
        try:
            async with asyncio.timeout(self.limits.send_timeout_s):
                await self._send({"type": "websocket.close", "code": code, "reason": reason})
        except TimeoutError:  # the client is not reading: the close frame is stuck behind what it has not taken
            self._hang_up(code, reason)
        except OSError:  # uvicorn's ClientDisconnected: the connection is already gone
            pass

    def _hang_up(self, code: int, reason: str) -> None:
        """For a client that is not reading: log the close and reset the connection (module docstring). uvicorn's
        transport is reached through the protocol object whose bound method `send` is (true of each of uvicorn's
        WebSocket protocols; ASGI has no abort). The reset wakes the app's stuck send, which then ends like a
        hang-up: OpenEnv frees the env and the Guard the slot. Under another ASGI server there is nothing to
        reset: the session ends when that server drops the connection."""
        self.closed = True
        log.warning("session request_id=%s closed with %d: %s", self.rid, code, reason)
        transport = getattr(getattr(self._send, "__self__", None), "transport", None)
        # a transport whose close completed must not be aborted (asyncio fails on it); one still holding data is
        # stuck, even if uvicorn already closed it (its keepalive does when a ping gets no answer)
        if transport is not None and (not transport.is_closing() or transport.get_write_buffer_size()):
            transport.abort()

    # --------------------------------------------------------------------------------- watchdog
    def _arm(self, when: float) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.due = when
        self.timer = self.loop.call_at(when, self._watch)

    def _watch(self) -> None:
        self.timer, self.due = None, math.inf
        if self.closed:
            return
        now, ttl, send_timeout = self.loop.time(), self.limits.session_ttl_s, self.limits.send_timeout_s
        stuck = self.sending_since is not None and now >= self.sending_since + send_timeout
        idle = now >= self.last_rx + ttl
        if stuck:
            self._hang_up(CLOSE_SLOW_READER, f"took no data for {send_timeout:g}s")
        elif idle and self.sending_since is not None:  # a send is waiting: the ASGI close would queue behind it
            self._hang_up(CLOSE_IDLE, f"idle for {ttl:g}s; session expired")
        elif idle:
            self.expiry = self.loop.create_task(self.close(CLOSE_IDLE, f"idle for {ttl:g}s; session expired"))
        else:
            due = self.last_rx + ttl
            if self.sending_since is not None:
                due = min(due, self.sending_since + send_timeout)
            self._arm(max(due, now + 0.01))  # timers may fire a clock tick early

    def stop(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
