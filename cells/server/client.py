"""Client side: OpenEnv's `EnvClient` typed for DriftCall, and `RemoteDriftCallEnv`, an env-like view of
one remote session that `rollout_batch` and `play_episode`-style loops drive like a `DriftCallEnv`.

    with RemoteDriftCallEnv("http://127.0.0.1:8000", token=T, judge_token=J) as env:
        result = rollout_batch([env], [7], model=model, tokenizer=tok)     # result.episodes[0]: an Episode

Observations come back as the core `DriftCallObservation` (what policies and `render_observation`
read). `episode()` / `rewards()` need the judge token, because the `Episode` holds the drift schedule
and the goal's hidden facts; an agent-token client plays and sees the reward on the final observation.
There is no `goal` attribute (the server never sends the goal), so `rollout_batch` starts from the
turn-0 utterance on the observation. `remote_env_factory([url, ...])` spreads envs over several servers
(a trainer's `env_factory`). Importing this module imports OpenEnv (~4 s).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient

from cells.errors import DriftCallError
from cells.openenv_env import (
    DriftCallActionModel,
    DriftCallObservationModel,
    DriftCallStateModel,
    from_observation_payload,
)
from cells.step_04_datatypes import DriftCallAction, DriftCallObservation, Episode, Rewards
from cells.step_10_env import EnvNotResetError, EpisodeNotDoneError


class RemoteEnvError(DriftCallError, RuntimeError):
    """A remote call the client can tell is not allowed (no judge token), or the client loop failed."""


class DriftCallClient(EnvClient[DriftCallActionModel, DriftCallObservationModel, DriftCallStateModel]):
    """OpenEnv's WebSocket client for a DriftCall server (`headers` carries the bearer token)."""

    def _step_payload(self, action: DriftCallActionModel) -> dict[str, Any]:
        return action.model_dump(exclude_defaults=True)

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[DriftCallObservationModel]:
        observation = DriftCallObservationModel(**payload["observation"], done=payload["done"],
                                                reward=payload.get("reward"))
        return StepResult(observation=observation, reward=payload.get("reward"), done=payload["done"])

    def _parse_state(self, payload: dict[str, Any]) -> DriftCallStateModel:
        return DriftCallStateModel(**payload)


_LOOP: asyncio.AbstractEventLoop | None = None
_LOOP_LOCK = threading.Lock()


def _run(coro: Any) -> Any:
    """Run `coro` on the one background event loop all RemoteDriftCallEnvs share (one thread in all,
    not one per env as OpenEnv's `SyncEnvClient` has) and wait for its result."""
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None or not _LOOP.is_running():
            loop, ready = asyncio.new_event_loop(), threading.Event()
            loop.call_soon(ready.set)
            threading.Thread(target=loop.run_forever, name="driftcall-remote-envs", daemon=True).start()
            if not ready.wait(timeout=10):
                raise RemoteEnvError("the client event loop did not start")
            _LOOP = loop
    return asyncio.run_coroutine_threadsafe(coro, _LOOP).result()


class RemoteDriftCallEnv:
    """One server session with the DriftCallEnv surface: reset / step_text / step / truncate / done /
    episode / rewards / close. The WebSocket (one server session) opens at the first reset; once the
    judge view of a finished episode has been read (`episode()` / `rewards()`), the session is released
    so that envs a trainer drops without `close()` do not hold server sessions; the next `reset`
    opens a new one."""

    def __init__(self, base_url: str, *, token: str | None = None, judge_token: str | None = None,
                 message_timeout_s: float = 60.0, wait_for_session_s: float = 30.0) -> None:
        secret = judge_token or token
        headers = {"Authorization": f"Bearer {secret}"} if secret else None
        self.client = DriftCallClient(base_url, headers=headers, message_timeout_s=message_timeout_s)
        self.is_judge = judge_token is not None
        self.wait_for_session_s = wait_for_session_s
        self._obs: DriftCallObservation | None = None
        self._tools: list[dict[str, Any]] = []  # the running episode's tool docs: sent with reset's observation only
        self._judged: tuple[Episode, Rewards] | None = None

    def reset(self, seed: int | None = None, episode_id: str | None = None) -> DriftCallObservation:
        """Start an episode; opens a session first if none is open, waiting while the server is full (429)."""
        kwargs = {k: v for k, v in (("seed", seed), ("episode_id", episode_id)) if v is not None}
        self._judged = None
        deadline, pause = time.monotonic() + self.wait_for_session_s, 0.05
        while True:
            try:
                return self._take(_run(self._await(lambda: self.client.reset(**kwargs))))
            except ConnectionError as exc:
                status = getattr(getattr(exc.__cause__, "response", None), "status_code", None)
                if status != 429 or time.monotonic() + pause > deadline:
                    raise
                time.sleep(pause)  # every session is in use: back off up to the server's Retry-After (1 s)
                pause = min(2 * pause, 1.0)

    def step_text(self, text: str) -> DriftCallObservation:
        """Send one raw model completion (parsed server-side exactly as in process)."""
        return self._step(DriftCallActionModel(text=text))

    def step(self, action: DriftCallAction) -> DriftCallObservation:
        return self._step(DriftCallActionModel(
            action_type=action.action_type.value, tool=action.tool_name, args=dict(action.tool_args),
            message=action.message, confidence=action.confidence, rationale=action.rationale))

    def truncate(self) -> None:
        """End the running episode as a timeout (the rollout ran out of context)."""
        self._step(DriftCallActionModel(truncate=True))

    @property
    def done(self) -> bool:
        return self._obs is not None and self._obs.done

    def state(self) -> DriftCallStateModel:
        """Agent view (episode id, turns, done); with the judge token also `.judge`."""
        return _run(self._await(lambda: self.client.state()))

    def episode(self) -> Episode:
        return self._judge_view()[0]

    def rewards(self) -> Rewards:
        return self._judge_view()[1]

    def close(self) -> None:
        _run(self._await(lambda: self.client.close()))

    def __enter__(self) -> RemoteDriftCallEnv:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @staticmethod
    async def _await(call: Any) -> Any:
        return await call()  # called on the loop, EnvClient methods return awaitables

    def _step(self, action: DriftCallActionModel) -> DriftCallObservation:
        return self._take(_run(self._await(lambda: self.client.step(action))))

    def _take(self, result: StepResult[DriftCallObservationModel]) -> DriftCallObservation:
        obs = result.observation
        payload = {"observation": obs.model_dump(exclude={"done", "reward"}), "done": obs.done, "reward": obs.reward}
        if obs.available_tools is not None:
            self._tools = obs.available_tools
        self._obs = from_observation_payload(payload, self._tools)
        return self._obs

    def _judge_view(self) -> tuple[Episode, Rewards]:
        if self._judged is None:
            if not self.is_judge:
                raise RemoteEnvError("episode()/rewards() need judge_token=: the Episode holds the drift schedule "
                                     "and the goal's hidden facts; agents read the reward on the final observation")
            if self._obs is None:
                raise EnvNotResetError("call reset(seed) first")
            if not self._obs.done:
                raise EpisodeNotDoneError("the episode has not ended yet")
            judge = self.state().judge or {}
            self._judged = (Episode.from_dict(judge["episode"]), Rewards.from_dict(judge["rewards"]))
            _run(self._await(lambda: self.client.disconnect()))  # release the server session (see the class doc)
        return self._judged


def remote_env_factory(urls: Sequence[str], *, token: str | None = None, judge_token: str | None = None,
                       **options: Any) -> Callable[[], RemoteDriftCallEnv]:
    """An env factory whose envs are sessions on DriftCall servers, for `rollout_batch` and the GRPO trainer
    (`env_factory=`), so generation and environments can run on different machines.

    The i-th env made opens its session on `urls[i % len(urls)]`: the G episodes of a group, and the groups
    of a batch, spread over the servers in turn. Each server must serve the stage being trained (`serve
    --stage N`). Training reads every finished `Episode` to score it, so pass `judge_token`; `options` go to
    `RemoteDriftCallEnv` (timeouts)."""
    if not urls:
        raise ValueError("remote_env_factory needs at least one server URL")
    turn, lock = itertools.count(), threading.Lock()

    def make() -> RemoteDriftCallEnv:
        with lock:
            i = next(turn)
        return RemoteDriftCallEnv(urls[i % len(urls)], token=token, judge_token=judge_token, **options)

    return make
