"""The served app: OpenEnv's `create_app` over `DriftCallOpenEnv`, JSON error handlers, the `Guard`.

    app = build_app(stage=2, token="...", judge_token="...")   # an ASGI app for uvicorn
    serve(host="127.0.0.1", port=8000, stage=2)                 # tokens from DRIFTCALL_TOKEN / _JUDGE_TOKEN

What OpenEnv gives (create_app): the routes, the WebSocket session protocol at `/ws` (one env per
connection, messages handled one at a time, so steps within a session are serialised, each session's
env on its own single worker thread), the schemas. What we add: `Guard` (middleware.py), error handlers
that answer every failure with the JSON envelope (never a stack trace), typed 4xx for environment
usage errors (OpenEnv would answer 500), and `ServedEnv`, which turns an unexpected exception in
reset/step into an opaque reference for the client after logging the traceback here. With
`env_workers` > 0 the sessions' `ServedEnv`s run in worker processes and the server holds a
`WorkerEnv` handle per session (workers.py). `ServedEnv` itself lives in served.py, which both import.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import logging
import os
from typing import Any

from cells.errors import DriftCallError
from cells.server.middleware import (
    REQUEST_ID,
    ROUTES,
    Guard,
    Limits,
    envelope,
    http_protocol,
)
from cells.server.served import freeze_heap, warmed_served_env_cls  # the in-loop env and the heap freeze

TOKEN_ENV, JUDGE_TOKEN_ENV, STAGE_ENV = "DRIFTCALL_TOKEN", "DRIFTCALL_JUDGE_TOKEN", "DRIFTCALL_STAGE"
MIN_TOKEN_CHARS = 16
log = logging.getLogger("driftcall.server")


class ServerConfigError(DriftCallError, ValueError):
    """The server would start insecure or misconfigured; the message says what to set."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_tokens(host: str, token: str | None, judge_token: str | None, insecure_local: bool) -> None:
    """Refuse to start without an agent token, unless `--insecure-local` on a loopback host."""
    if insecure_local and not is_loopback(host):
        raise ServerConfigError(f"--insecure-local is for loopback hosts only, not {host!r}")
    if not token and not insecure_local:
        raise ServerConfigError(f"set {TOKEN_ENV} (>= {MIN_TOKEN_CHARS} chars), or pass --insecure-local on a "
                                "loopback host")
    for name, value in ((TOKEN_ENV, token), (JUDGE_TOKEN_ENV, judge_token)):
        if value and len(value) < MIN_TOKEN_CHARS:
            raise ServerConfigError(f"{name} must be at least {MIN_TOKEN_CHARS} characters, got {len(value)}")
    if token and judge_token and token == judge_token:
        raise ServerConfigError(f"{JUDGE_TOKEN_ENV} must differ from {TOKEN_ENV}: the judge view shows the schedule")


def worker_env_cls() -> type:
    """`WorkerEnv`: the OpenEnv `Environment` the server holds per session when envs run in worker
    processes; a handle on a `ServedEnv` there (cells/server/workers.py)."""
    from openenv.core.env_server import Environment

    from cells.openenv_env import (
        JUDGE_VIEW,
        DriftCallObservationModel,
        DriftCallStateModel,
        JudgeViewMirror,
        check_reset_args,
        env_metadata,
        to_core_action,
    )
    from cells.server.workers import TEXT_STEP, EnvWorkerPool

    class WorkerEnv(Environment):
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self, pool: EnvWorkerPool) -> None:
            super().__init__()
            self.pool = pool
            self.worker, self.key = pool.open_session()
            self.live: tuple[str | None, int, bool] = (None, 0, False)  # episode id, turns used, done
            self.judge = JudgeViewMirror()  # filled by judge sessions' replies
            self.closed = False

        # The in-loop env's own checks, here, before anything is pickled for the worker: what the in-loop layout
        # refuses is refused with the same error (so the same status and frame), and what is sent always pickles
        # (arguments nested ~1,000 deep made pickle raise RecursionError). The worker checks again: cheap.
        async def reset_async(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Any:
            check_reset_args(seed, episode_id, kwargs)
            return self._observe(await self._call("reset", {"seed": seed, "episode_id": episode_id, **kwargs}))

        async def step_async(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Any:
            if action.action_type is not None:  # a structured action; text is parsed by the env, in the worker
                to_core_action(action)
            elif action.text is not None:  # raw model output, the common step: only the text crosses
                return self._observe(await self._call(TEXT_STEP, action.text))
            return self._observe(await self._call("step", dict(action.__dict__)))

        async def _call(self, op: str, payload: Any) -> Any:
            return await self.pool.call(self.worker, self.key, op, payload, JUDGE_VIEW.get(), REQUEST_ID.get())

        def _observe(self, reply: Any) -> Any:
            fields, episode_id, turns, done, change = reply
            if change is not None:
                self.judge.apply(change)
            self.live = (episode_id, turns, done)
            return DriftCallObservationModel.model_construct(**fields)

        def reset(self, *args: Any, **kwargs: Any) -> Any:
            raise TypeError("WorkerEnv runs through reset_async (OpenEnv awaits it)")

        def step(self, *args: Any, **kwargs: Any) -> Any:
            raise TypeError("WorkerEnv runs through step_async (OpenEnv awaits it)")

        @property
        def state(self) -> Any:
            episode_id, turns, done = self.live
            judge = self.judge.view() if JUDGE_VIEW.get() and episode_id is not None else None
            return DriftCallStateModel(episode_id=episode_id, step_count=turns, stage=self.pool.stage, done=done,
                                       judge=judge)

        def get_metadata(self) -> Any:
            return env_metadata(self.pool.stage)

        def close(self) -> None:
            if not self.closed:
                self.closed = True
                self.pool.close_session(self.worker, self.key)

    return WorkerEnv


def build_app(stage: int = 1, *, token: str | None, judge_token: str | None = None,
              limits: Limits | None = None, env_workers: int = 0) -> Guard:
    """The ASGI app `serve` runs (tests run it under uvicorn too). `env_workers` > 0 runs the sessions'
    envs in that many worker processes (`cells/server/workers.py`); 0 runs them on the event loop."""
    pool = None
    if env_workers:
        from cells.server.workers import EnvWorkerPool

        pool = EnvWorkerPool(stage, env_workers)  # they start up while this process imports OpenEnv
    try:
        return _build_app(stage, token, judge_token, limits or Limits(), pool)
    except BaseException:
        if pool is not None:
            pool.close()
        raise


def _build_app(stage: int, token: str | None, judge_token: str | None, limits: Limits, pool: Any) -> Guard:
    from openenv.core.env_server import ConcurrencyConfig, create_app

    from cells.openenv_env import (
        JUDGE_VIEW,
        DriftCallActionModel,
        DriftCallObservationModel,
        DriftCallStateModel,
    )

    if pool is not None:
        factory = functools.partial(worker_env_cls(), pool)
    else:
        factory = functools.partial(warmed_served_env_cls(stage), stage)
    app = create_app(
        factory, DriftCallActionModel, DriftCallObservationModel,
        env_name="driftcall", state_cls=DriftCallStateModel, mode="simulation",
        # the Guard enforces the cap (429) and the idle TTL; OpenEnv's reaper would free the env of a
        # connected WebSocket while its loop still runs, so it stays off
        concurrency_config=ConcurrencyConfig(max_concurrent_envs=limits.max_sessions, session_timeout=None),
    )
    app.title, app.version = "DriftCall environment (OpenEnv)", "0.1.0"
    # serve (and document in /openapi.json) only what the Guard lets through: not OpenEnv's MCP and task
    # routes (this env has neither) nor the docs pages (they load scripts from a CDN)
    app.router.routes = [r for r in app.router.routes if getattr(r, "path", None) in ROUTES]
    install_error_handlers(app)
    if pool is not None:
        stop_with_the_app(app, pool)
        pool.wait_ready()
    guard = Guard(app, token=token, judge_token=judge_token, limits=limits, judge_flag=JUDGE_VIEW)
    guard.env_pool = pool
    return guard


def stop_with_the_app(app: Any, pool: Any) -> None:
    """Close the env workers at the app's lifespan shutdown, while the serving loop still runs (so their
    sockets closing is not taken for workers that died); `close_app` covers apps run without lifespan."""
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(application: Any) -> Any:
        async with inner(application) as state:
            yield state
        pool.close()

    app.router.lifespan_context = lifespan


def close_app(app: Any) -> None:
    """Stop the env workers of an app `build_app` made (a no-op for the in-loop layout, and once the app's
    lifespan shutdown has run)."""
    pool = getattr(app, "env_pool", None)
    if pool is not None:
        pool.close()


def install_error_handlers(app: Any) -> None:
    """Every error as the JSON envelope; environment usage errors as 409/422 instead of OpenEnv's 500."""
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import Response
    from starlette.exceptions import HTTPException

    from cells.openenv_env import ResetArgumentError
    from cells.step_10_env import EnvError, InvalidActionError

    def respond(status: int, code: str, message: str, **extra: Any) -> Response:
        # the Guard adds the x-request-id header to every response
        return Response(envelope(status, code, message, **extra), status_code=status, media_type="application/json")

    async def on_http(_: Any, exc: HTTPException) -> Response:
        detail = exc.detail
        if isinstance(detail, list):  # OpenEnv's 422 for an invalid action: pydantic errors
            return respond(exc.status_code, "invalid_action", "action does not match the action schema",
                           details=_errors(detail))
        return respond(exc.status_code, f"http_{exc.status_code}", str(detail)[:300])

    async def on_validation(_: Any, exc: RequestValidationError) -> Response:
        return respond(422, "invalid_request", "request does not match the schema", details=_errors(exc.errors()))

    async def on_env(_: Any, exc: EnvError) -> Response:
        if isinstance(exc, (InvalidActionError, ResetArgumentError)):
            return respond(422, "invalid_action" if isinstance(exc, InvalidActionError) else "invalid_reset", str(exc))
        return respond(409, "episode_state", f"{exc} (HTTP /reset and /step use a fresh env per call; play episodes "
                                             "over the WebSocket at /ws)")

    async def on_bug(_: Any, exc: Exception) -> Response:
        log.error("internal error request_id=%s", REQUEST_ID.get(), exc_info=exc)
        return respond(500, "internal_error", "internal error; the server log has the details")

    app.add_exception_handler(HTTPException, on_http)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(EnvError, on_env)
    app.add_exception_handler(Exception, on_bug)


def _errors(errors: Any) -> list[dict[str, Any]]:
    """pydantic errors without the echoed input or exception objects: location, message, type."""
    out = []
    for err in list(errors)[:20]:
        if isinstance(err, dict):
            out.append({"loc": [str(x) for x in err.get("loc", ())], "msg": str(err.get("msg", ""))[:200],
                        "type": str(err.get("type", ""))})
    return out


def default_env_workers(cpus: int | None = None) -> int:
    """`serve`'s layout when no `--env-workers` is given: one env worker process on a host with two or more CPU
    cores, where the sessions' envs then step beside the serving loop (`bench server`: at the default 64-session
    cap only this layout meets both targets; docs/serving.md); none on a single core, where a worker would only
    take turns with the loop on that core and add its hop to every step."""
    cpus = os.cpu_count() if cpus is None else cpus
    return 1 if (cpus or 1) >= 2 else 0


def serve(host: str = "127.0.0.1", port: int = 8000, stage: int = 1, *, limits: Limits | None = None,
          insecure_local: bool = False, log_level: str = "info", env_workers: int | None = None) -> None:
    """Run the server with uvicorn until interrupted (tokens from the environment); `env_workers` None:
    `default_env_workers()`."""
    import uvicorn

    token, judge_token = os.environ.get(TOKEN_ENV) or None, os.environ.get(JUDGE_TOKEN_ENV) or None
    check_tokens(host, token, judge_token, insecure_local)
    limits = limits or Limits()
    env_workers = default_env_workers() if env_workers is None else env_workers
    app = build_app(stage, token=token, judge_token=judge_token, limits=limits, env_workers=env_workers)
    freeze_heap()
    try:
        uvicorn.run(app, **uvicorn_options(limits), host=host, port=port, log_level=log_level)
    finally:
        close_app(app)


def uvicorn_options(limits: Limits) -> dict[str, Any]:
    """What every launch (serve, tests, bench) passes to uvicorn."""
    return {
        "ws_max_size": 4 * limits.max_frame_bytes,  # transport cap; the Guard's frame limit answers first
        "ws_per_message_deflate": False,  # no decompression bombs, less CPU per frame
        # asyncio's own loop, never uvloop (uvicorn's "auto" picks it when installed, e.g. by uvicorn[standard]):
        # the loop CI tests and `bench server` measures. With uvloop installed, two bench runs put the counter
        # floor at 7,500-7,800 steps/s and DriftCall's worker layout at 0.51 of it (0.70-0.77 in four runs
        # without, the same hour): under "auto" the figures depended on what else was installed
        "loop": "asyncio",
        # h11 (uvicorn's default without httptools) with malformed requests answered in the envelope, and the
        # sans-I/O websockets protocol (its default), whose transport the Session resets for a client that does not
        # read: named, so what is tested does not depend on what else is installed
        "http": http_protocol(), "ws": "websockets-sansio",
        "access_log": False, "lifespan": "on", "timeout_graceful_shutdown": 2,
    }


def __getattr__(name: str) -> Any:
    """`cells.server.app:app` (the manifest's entry): built from the environment on first access."""
    if name == "app":
        token, judge_token = os.environ.get(TOKEN_ENV) or None, os.environ.get(JUDGE_TOKEN_ENV) or None
        check_tokens("127.0.0.1", token, judge_token, insecure_local=False)
        app = build_app(int(os.environ.get(STAGE_ENV, "1")), token=token, judge_token=judge_token)
        globals()["app"] = app
        return app
    raise AttributeError(name)
