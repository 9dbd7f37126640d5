"""Env worker processes: the sessions' envs run in `--env-workers N` processes; the event loop only serves.

    app = build_app(stage=2, token=T, env_workers=1)   # sessions' envs live in one worker process

Why: a DriftCall step is pure Python under the GIL, so on the event loop it caps the server at one core
(batching 16 sessions' steps together on the loop won back only 7%). With the envs in worker processes
the serving and the env steps of different sessions run in parallel: `python -m cells bench server`
measures both layouts in one run and prints each process's CPU per step (docs/serving.md). The price is a hop per
call: one session stepping alone is slower this way.

How: each `WorkerEnv` (one per session, made by OpenEnv's factory, in any thread) is a key on the
least-loaded worker; the worker holds the real `ServedEnv` for that key, so what runs, what is
validated and what a session sees are the in-loop server's, byte for byte. `WorkerEnv` runs the env's
own argument checks before a call is pickled, so the two layouts refuse alike and every call sent
pickles; each call carries the session's request id, the reference a bug's log line and error give. A step whose
action is raw model output sends its text alone (`TEXT_STEP`), and a reply carries the observation's fields (the
tool docs with reset's only, as on the wire: cells/openenv_env.py). Calls travel as
length-prefixed pickles over a socketpair between the server and the children it started (never a
network socket): an asyncio protocol on the server side (calls made in one loop turn go out in one
write, which never blocks the loop), blocking I/O in the worker, which answers each call as soon as it
is done. Steps within a session stay serialised (OpenEnv's WebSocket loop awaits each reply before
reading the next frame). What the server answers without a round trip: `state` for agents (episode id,
turn, done from the last reply) and `get_metadata`; a judge session's replies carry what changed in the
judge view (`JudgeViewFeed` here, `JudgeViewMirror` on the server: cells/openenv_env.py).
A worker that dies fails its sessions' pending and later calls with `EnvWorkerError` (the client gets
an error frame and can start a new session), and a fresh worker takes its place for new sessions.

Processes, not threads (they share the GIL) nor a `ProcessPoolExecutor` (it has no sticky per-session state).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import logging
import os
import pickle
import socket
import struct
import subprocess
import sys
import threading
import time
from typing import Any

from cells.errors import DriftCallError

log = logging.getLogger("driftcall.server")
_LEN = struct.Struct("!I")
_CLOSE = "close"
TEXT_STEP = "text"  # a step whose action is only `text` (validated by OpenEnv's schema on the server side)
_READY = (0, True, "ready")  # a worker's first frame; call ids start at 1, so the server's reader skips it
MIN_LIFE_TO_REPLACE_S = 5.0  # a worker that dies sooner is crashing at start-up: replacing it would loop
# A worker's allocations are a step's short-lived objects, nearly all freed by reference counting; at Python's
# default (700) a young collection runs every few steps and scans them for cycles that are not there.
WORKER_GC_YOUNG = 20_000


class EnvWorkerError(DriftCallError, RuntimeError):
    """An env worker process exited or cannot be reached; the session it held is gone (reset on a new one)."""


# ------------------------------------------------------------------------------------------ worker side
def _frames(buffer: bytearray) -> list[Any]:
    """Unpickle and remove every complete length-prefixed frame at the start of `buffer`."""
    out, start = [], 0
    while len(buffer) - start >= _LEN.size:
        (size,) = _LEN.unpack_from(buffer, start)
        if len(buffer) - start - _LEN.size < size:
            break
        out.append(pickle.loads(buffer[start + _LEN.size:start + _LEN.size + size]))
        start += _LEN.size + size
    del buffer[:start]
    return out


def _frame(message: Any) -> bytes:
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _LEN.pack(len(body)) + body


def _worker_main(sock: socket.socket, stage: int) -> None:
    """Worker process: answer calls `(call_id, key, op, payload, judge, request_id)` for the envs it holds until EOF,
    each as soon as it is done (one write per batch of calls kept 64 sessions in lock-step: ~12% fewer
    steps/s in an A/B on this machine)."""
    from cells.server.served import freeze_heap, warmed_served_env_cls

    sessions = _WorkerSessions(warmed_served_env_cls(stage), stage)
    freeze_heap()
    gc.set_threshold(WORKER_GC_YOUNG, *gc.get_threshold()[1:])
    sock.sendall(_frame(_READY))
    buffer = bytearray()
    with contextlib.suppress(ConnectionError):  # the server went away mid-reply: stop, as on EOF
        while chunk := sock.recv(1 << 16):
            buffer += chunk
            for call in _frames(buffer):
                if (reply := sessions.answer(*call)) is not None:
                    sock.sendall(_frame(reply))


class _WorkerSessions:
    """The envs one worker holds, by session key."""

    def __init__(self, served: type, stage: int) -> None:
        from cells.openenv_env import DriftCallActionModel, JudgeViewFeed
        from cells.server.middleware import REQUEST_ID

        self.served, self.stage, self.action_cls, self.feed_cls = served, stage, DriftCallActionModel, JudgeViewFeed
        self.request_id = REQUEST_ID  # set around each call: a bug's log line and reference carry the session's id
        self.envs: dict[int, Any] = {}
        self.feeds: dict[int, Any] = {}  # judge sessions' `JudgeViewFeed`s

    def answer(self, call_id: int, key: int, op: str, payload: Any, judge: bool, request_id: str) -> Any:
        if op == _CLOSE:
            env = self.envs.pop(key, None)
            self.feeds.pop(key, None)
            if env is not None:
                env.close()
            return None
        env = self.envs.get(key)
        if env is None:
            env = self.envs[key] = self.served(self.stage)
        token = self.request_id.set(request_id)
        try:
            # the observation's fields and the state's parts, never their pydantic models: the server
            # builds those, and building them here too cost ~10% of a worker's time per step
            if op == TEXT_STEP:  # a raw model output, the common step: the text alone crosses, no action model
                fields = env.step_text_fields(payload)
            elif op == "reset":
                fields = env.reset_fields(**payload)
            else:  # "step": validated on the server side (OpenEnv's schema, then the env's checks in WorkerEnv)
                fields = env.step_fields(self.action_cls.model_construct(**payload))
            episode_id, turns, done = env.progress()
            change = self._feed(key).change(env.core, reset=op == "reset") if judge else None
            return call_id, True, (fields, episode_id, turns, done, change)
        except Exception as exc:  # ServedEnv already logged bugs here and turned them into opaque references
            return call_id, False, _portable(exc)
        finally:
            self.request_id.reset(token)

    def _feed(self, key: int) -> Any:
        feed = self.feeds.get(key)
        if feed is None:
            feed = self.feeds[key] = self.feed_cls()
        return feed


def _portable(exc: Exception) -> Exception:
    """The exception itself when it survives pickling (EnvError and friends), else its type and text."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")


# ------------------------------------------------------------------------------------------ server side
class _Worker:
    """One worker process and the server's end of its socket (connected to the serving loop on first use)."""

    def __init__(self, index: int, stage: int) -> None:
        self.index, self.sessions, self.alive, self.started = index, 0, True, time.monotonic()
        ours, theirs = socket.socketpair()
        # a fresh interpreter (not fork: the server may already run threads; not multiprocessing's spawn,
        # which re-imports the launching script), handed its end of the socket; it exits on EOF, so it
        # never outlives the server
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "cells.server.workers", str(theirs.fileno()), str(stage)],
            pass_fds=(theirs.fileno(),), env={**os.environ, "PYTHONPATH": path},
            start_new_session=True)  # a terminal's Ctrl-C stops the server, which then stops its workers
        theirs.close()
        self.sock = ours
        self.link: _Link | None = None
        self.pending: dict[int, asyncio.Future[Any]] = {}

    def wait_ready(self, timeout_s: float) -> None:
        """Block until the worker says it is ready (before the serving loop owns the socket)."""
        self.sock.settimeout(timeout_s)
        buffer, ready = bytearray(), []
        try:
            while not ready and (chunk := self.sock.recv(1 << 16)):
                buffer += chunk
                ready = _frames(buffer)
        except (TimeoutError, OSError) as exc:
            raise EnvWorkerError(f"env worker {self.index} did not start within {timeout_s:g} s: {exc}") from exc
        finally:
            self.sock.settimeout(None)
        if ready != [_READY]:
            raise EnvWorkerError(f"env worker {self.index} exited during start-up (code {self.process.poll()}); "
                                 "its traceback is in the server log")


class _Link(asyncio.Protocol):
    """The serving loop's end of one worker socket: calls queued in one loop turn go out in one write
    (one wake-up of the worker), replies resolve their callers' futures as they arrive."""

    def __init__(self, pool: EnvWorkerPool, worker: _Worker, loop: asyncio.AbstractEventLoop) -> None:
        self.pool, self.worker, self.loop = pool, worker, loop
        self.transport: asyncio.Transport | None = None
        self.inbox, self.outbox = bytearray(), []

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def queue(self, frame: bytes) -> None:
        if not self.outbox:
            self.loop.call_soon(self.flush)
        self.outbox.append(frame)

    def flush(self) -> None:
        if self.outbox and self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(self.outbox))
        self.outbox.clear()

    def data_received(self, data: bytes) -> None:
        self.inbox += data
        pending = self.worker.pending
        for call_id, ok, payload in _frames(self.inbox):
            future = pending.pop(call_id, None)
            if future is None or future.done():  # the start-up hello, or a caller that went away
                continue
            if ok:
                future.set_result(payload)
            else:
                future.set_exception(payload)

    def connection_lost(self, exc: Exception | None) -> None:
        self.pool._lost(self.worker)


class EnvWorkerPool:
    """N worker processes holding the sessions' envs; `WorkerEnv` is the per-session handle."""

    def __init__(self, stage: int, workers: int) -> None:
        """Start the workers; they import and warm up (~5-10 s) while the caller builds the app; serve only
        after `wait_ready`."""
        if workers < 1:
            raise ValueError(f"env workers must be >= 1, got {workers}")
        self.stage = stage
        self.workers = [_Worker(i, stage) for i in range(workers)]
        self.closing = False
        self._ids = itertools.count(1)
        self._lock = threading.Lock()  # WorkerEnvs are made and closed in OpenEnv's executor threads
        self._loop: asyncio.AbstractEventLoop | None = None
        self._bind_lock: asyncio.Lock | None = None

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Block until every worker has started; on failure stop them all and raise `EnvWorkerError`."""
        try:
            for worker in self.workers:
                worker.wait_ready(timeout_s)
        except BaseException:
            self.close()
            raise

    # sessions --------------------------------------------------------------------------------------
    def open_session(self) -> tuple[_Worker, int]:
        with self._lock:
            worker = min((w for w in self.workers if w.alive), key=lambda w: w.sessions, default=None)
            if worker is None:
                raise EnvWorkerError("no env worker is running; restart the server")
            worker.sessions += 1
            return worker, next(self._ids)

    def close_session(self, worker: _Worker, key: int) -> None:
        with self._lock:
            worker.sessions -= 1
        if self._loop is None or not worker.alive:
            return  # never called over the wire: the worker holds no env for it
        with contextlib.suppress(RuntimeError):  # the loop is closed: the server is shutting down
            self._loop.call_soon_threadsafe(self._write, worker, _frame((0, key, _CLOSE, None, False, "")))

    # calls -----------------------------------------------------------------------------------------
    async def call(self, worker: _Worker, key: int, op: str, payload: Any, judge: bool,
                   request_id: str) -> Any:
        if worker.link is None:
            await self._bind(worker)
        if not worker.alive:
            raise EnvWorkerError(f"env worker {worker.index} exited; this session's episode is lost")
        call_id = next(self._ids)
        try:  # before the future exists: a payload that does not pickle leaves no call pending
            frame = _frame((call_id, key, op, payload, judge, request_id))
        except Exception as exc:  # WorkerEnv sends only what the env's checks passed: this is a bug
            from cells.server.served import internal_error

            raise internal_error(exc) from exc
        future = asyncio.get_running_loop().create_future()
        worker.pending[call_id] = future
        self._write(worker, frame)
        return await future

    def _write(self, worker: _Worker, frame: bytes) -> None:
        if worker.link is not None and worker.alive:
            worker.link.queue(frame)

    async def _bind(self, worker: _Worker) -> None:
        """Connect the worker's socket to the serving loop (the pool is built before the loop runs)."""
        if self._bind_lock is None:
            self._loop, self._bind_lock = asyncio.get_running_loop(), asyncio.Lock()
        async with self._bind_lock:
            if worker.link is None:
                loop = asyncio.get_running_loop()
                _, worker.link = await loop.create_connection(lambda: _Link(self, worker, loop), sock=worker.sock)

    def _lost(self, worker: _Worker) -> None:
        """The worker's socket closed: fail what it held and, unless the pool is closing or the worker died
        young (a crash at start-up would only repeat), start a fresh one for new sessions."""
        worker.alive = False
        for future in worker.pending.values():
            if not future.done():
                future.set_exception(EnvWorkerError(f"env worker {worker.index} exited; this session's episode "
                                                    "is lost (reset on a new session)"))
        worker.pending.clear()
        if self.closing:
            return
        lived_s = time.monotonic() - worker.started
        log.error("env worker %d exited (code %s) after %.0f s; its %d session(s) are lost", worker.index,
                  worker.process.poll(), lived_s, worker.sessions)
        if lived_s < MIN_LIFE_TO_REPLACE_S:
            log.error("env worker %d is not replaced: it died within %g s of starting", worker.index,
                      MIN_LIFE_TO_REPLACE_S)
            return
        with self._lock:
            self.workers[self.workers.index(worker)] = _Worker(worker.index, self.stage)

    def close(self) -> None:
        """Stop every worker (closing our end makes each one read EOF and exit); safe to call twice."""
        self.closing = True
        for worker in self.workers:
            worker.alive = False
            if worker.link is not None and worker.link.transport is not None:
                with contextlib.suppress(RuntimeError):  # the serving loop is already closed
                    worker.link.transport.close()
            worker.sock.close()
        for worker in self.workers:
            try:
                worker.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()


if __name__ == "__main__":  # a worker: `python -m cells.server.workers FD STAGE` (started by `_Worker`)
    _worker_main(socket.socket(fileno=int(sys.argv[1])), int(sys.argv[2]))
