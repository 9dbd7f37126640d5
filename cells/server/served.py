"""`ServedEnv`: the environment as the server runs it, in the serving loop (app.py) or in an env worker
(workers.py), both of which import it from here.

`ServedEnv` is `DriftCallOpenEnv` whose unexpected exceptions (bugs) are logged with their traceback and reach
the client as `internal error (ref ...)`, never as their text; environment usage errors pass through.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from cells.server.middleware import REQUEST_ID, REQUEST_ID_UNSET

log = logging.getLogger("driftcall.server")


def served_env_cls() -> type:
    from cells.openenv_env import DriftCallOpenEnv
    from cells.step_10_env import EnvError

    class ServedEnv(DriftCallOpenEnv):
        """DriftCallOpenEnv as served: an unexpected exception (a bug) is logged with its traceback and
        reaches the client as `internal error (ref ...)`, never as its text; usage errors pass through."""

        SHARES_RESULTS = True  # every observation is serialised at once (OpenEnv's frame, or a worker's pickle)

        # reset/step (in the serving loop) and an env worker's calls all go through these three
        def reset_fields(self, *args: Any, **kwargs: Any) -> Any:
            return self._guarded(super().reset_fields, *args, **kwargs)

        def step_fields(self, *args: Any, **kwargs: Any) -> Any:
            return self._guarded(super().step_fields, *args, **kwargs)

        def step_text_fields(self, *args: Any, **kwargs: Any) -> Any:
            return self._guarded(super().step_text_fields, *args, **kwargs)

        # Defining the async variants makes OpenEnv call them on the event loop instead of handing each
        # step to the session's worker thread: a step is ~0.5 ms of pure Python under the GIL, so the
        # thread hop only added GIL hand-offs (bench server: several times lower steps/s at 64 sessions).
        # Steps stay serialised per session: OpenEnv's WebSocket loop handles one message at a time.
        async def reset_async(self, *args: Any, **kwargs: Any) -> Any:
            return self.reset(*args, **kwargs)

        async def step_async(self, *args: Any, **kwargs: Any) -> Any:
            return self.step(*args, **kwargs)

        @staticmethod
        def _guarded(fn: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except EnvError:
                raise
            except Exception as exc:
                raise internal_error(exc) from exc

    return ServedEnv


def internal_error(exc: BaseException) -> RuntimeError:
    """What a client is told of a bug: `internal error (ref <request id>)`; the traceback goes to the log under
    the same reference (an env worker runs each call under the request id of its session: workers.py)."""
    ref = REQUEST_ID.get()
    if ref == REQUEST_ID_UNSET:  # outside a request (an env used in process): a fresh reference
        ref = os.urandom(6).hex()
    log.error("internal error ref=%s", ref, exc_info=exc)
    return RuntimeError(f"internal error (ref {ref}); the server log has the details")


def warmed_served_env_cls(stage: int) -> type:
    """`ServedEnv` after one reset, which warms the caches (drift catalogue, templates), so the first session
    does not pay for them; the in-loop server and each env worker start with it."""
    served = served_env_cls()
    served(stage).reset(seed=0)
    return served


def freeze_heap() -> None:
    """Move everything imported so far (OpenEnv pulls gradio: ~330k objects) out of the garbage collector's
    reach, so full collections under load scan only what episodes allocate (bench server: ~10% less CPU
    per step at 64 sessions)."""
    import gc

    gc.collect()
    gc.freeze()
