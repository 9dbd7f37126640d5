"""`python -m cells bench server`: DriftCall over the wire against OpenEnv's own floor (loopback only).

    python -m cells bench server [--stage 2 --seconds 3 --max-steps 20000 --concurrency 1,64 --env-workers 1]

Five servers, each in its own process under uvicorn with the same options and process set-up (heap
frozen after start-up, as `serve` does), driven by the same client in this process (`_Session`: one
arrival-driven protocol per session on websockets' sans-I/O framing; a step's latency is from its
request's send to its reply's arrival here, before the client parses it):
- `driftcall`: the real server (`cells.server.app.build_app`: Guard, auth, limits, 64-session cap),
  envs on the event loop (`serve --env-workers 0`, the default on one core); clients replay expert
  episodes recorded in process beforehand (so the client costs what a trivial client costs) and check
  every episode ends with the recorded reward.
- `driftcall+workers`: the same server with the sessions' envs in `--env-workers` worker processes
  (`python -m cells serve --env-workers N`; one worker is `serve`'s default on 2+ cores); its CPU figure counts
  the workers too.
- `floor`: a trivial counter env served by the same OpenEnv `create_app`, nothing added: the ceiling
  any OpenEnv env reaches on this machine.
- `floor+guard`: the counter behind our Guard (auth, limits): what the Guard itself costs.
- `driftcall-replay`: the real server with the env replaced by a replay of the same episodes'
  observations (recorded in process at start-up): DriftCall's serving path (Guard, OpenEnv's frames,
  pydantic, JSON) without the env's own work.
Each run is bounded by `--seconds` and `--max-steps` per (server, concurrency). Reported: steps/s,
p50/p99 step latency, the ratio to the floor, and sessions lost (a connection that closed or answered an
error mid-episode). Targets: ratio >= 0.70, p99 < 20 ms at 64 sessions (checked under both
loads: saturating and paced; the p99 of every step measured, rounds pooled, each round's printed too),
nothing lost.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import random
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

# websockets' sans-I/O layer for the client sessions, imported here rather than in the callbacks that run on
# every reply (this module is loaded only by `bench server` and its server processes)
from websockets.client import ClientProtocol
from websockets.frames import Opcode
from websockets.http11 import Response
from websockets.protocol import State
from websockets.uri import parse_uri

HOST = "127.0.0.1"  # loopback only, by construction
COUNTER_EPISODE_STEPS = 6  # about an expert episode's length
TARGET_RATIO, TARGET_P99_MS = 0.70, 20.0
KINDS = ("floor", "floor+guard", "driftcall-replay", "driftcall", "driftcall+workers")
DRIFTCALL = ("driftcall", "driftcall+workers")  # the layouts the targets are checked for
SESSION_GRACE_S = 30.0  # how long past a run's deadline a session may wait for its reply before it counts as lost
CLOSE_TIMEOUT_S = 5.0  # how long a run waits for the server to close its finished sessions' connections


@dataclass(frozen=True)
class Result:
    server: str
    sessions: int
    steps: int
    seconds: float
    p50_ms: float
    p99_ms: float
    lost: int
    cpu_s: float  # the server process's CPU seconds over the run, its env workers' included
    think_s: float = 0.0
    worker_cpu_s: float = 0.0  # of which its child processes (env workers)
    client_cpu_s: float = 0.0  # the client's (this process's) CPU seconds over the run
    round_steps_per_s: tuple[float, ...] = ()  # each round's steps/s, when rounds were pooled
    round_p99_ms: tuple[float, ...] = ()  # each round's p99, when rounds were pooled
    latencies_ms: tuple[float, ...] = field(default=(), repr=False)  # every step's, sorted (what p50/p99 are of)

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds if self.seconds else 0.0

    @property
    def cpu_us_per_step(self) -> float:
        return self.per_step_us(self.cpu_s)

    def per_step_us(self, cpu_s: float) -> float:
        return cpu_s / self.steps * 1e6 if self.steps else float("nan")


# ------------------------------------------------------------------------------------- servers
def _counter_app(guarded: bool, token: str, max_sessions: int) -> Any:
    from openenv.core.env_server import Action, ConcurrencyConfig, Environment, Observation, State, create_app

    class CounterAction(Action):
        n: int = 1

    class CounterObservation(Observation):
        count: int = 0

    class CounterEnv(Environment[CounterAction, CounterObservation, State]):
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self) -> None:
            super().__init__()
            self.count = 0

        def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> CounterObservation:
            self.count = 0
            return CounterObservation(count=0)

        def step(self, action: CounterAction, timeout_s: float | None = None, **kwargs: Any) -> CounterObservation:
            self.count += action.n
            return CounterObservation(count=self.count, done=self.count >= COUNTER_EPISODE_STEPS, reward=0.0)

        @property
        def state(self) -> State:
            return State(step_count=self.count)

    app = create_app(CounterEnv, CounterAction, CounterObservation, env_name="counter",
                     concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=None))
    if not guarded:
        return app
    from cells.server.app import install_error_handlers
    from cells.server.middleware import Guard, Limits

    install_error_handlers(app)
    judge_flag = __import__("contextvars").ContextVar("unused", default=False)
    return Guard(app, token=token, judge_token=None, limits=Limits(max_sessions=max_sessions), judge_flag=judge_flag)


def _serve(kind: str, port: int, stage: int, max_sessions: int, env_workers: int = 0) -> None:
    """Subprocess entry: serve `kind` on loopback until killed."""
    import uvicorn

    from cells.server.app import build_app, freeze_heap, uvicorn_options
    from cells.server.middleware import Limits

    token = os.environ["DRIFTCALL_TOKEN"]
    limits = Limits(max_sessions=max_sessions)
    if kind == "driftcall-replay":
        import cells.openenv_env

        _ReplayCore.record(stage, 200)
        cells.openenv_env.DriftCallEnv = _ReplayCore  # type: ignore[misc]  # this subprocess only
    if kind.startswith("driftcall"):
        app = build_app(stage, token=token, judge_token=None, limits=limits,
                        env_workers=env_workers if kind == "driftcall+workers" else 0)
    else:
        app = _counter_app(kind == "floor+guard", token, max_sessions)
    freeze_heap()  # as `serve` does; the same for every server
    uvicorn.run(app, host=HOST, port=port, log_level="warning", **uvicorn_options(limits))


class _ReplayCore:
    """Stands in for `DriftCallEnv` in the `driftcall-replay` server: answers each reset/step with the
    observation the real env gave for that seed and turn (recorded once in process)."""

    recordings: ClassVar[dict[int, list[Any]]] = {}

    def __init__(self, stage: int, language_weights: Any = None, **kwargs: Any) -> None:
        self.stage, self.pending = stage, []

    @classmethod
    def record(cls, stage: int, n: int) -> None:
        from cells.agent.policies import ExpertPolicy, GoalReader
        from cells.step_10_env import DriftCallEnv

        env = DriftCallEnv(stage)
        for seed in range(n):
            observations = [env.reset(seed=seed)]
            policy = ExpertPolicy()
            policy.reset(observations[0], GoalReader.from_goal(env.goal))
            while not observations[-1].done:
                observations.append(env.step_text(policy.act(observations[-1])))
            cls.recordings[seed] = observations

    def reset(self, seed: int | None = None, episode_id: str | None = None) -> Any:
        self.pending = list(self.recordings[seed or 0])
        return self.pending.pop(0)

    def step_text(self, text: str) -> Any:
        return self.pending.pop(0)

    def close(self) -> None:
        self.pending = []


def _start(kind: str, stage: int, max_sessions: int, token: str, env_workers: int
           ) -> tuple[subprocess.Popen[bytes], int]:
    import httpx

    from cells.distributed import free_port

    port = free_port(HOST)
    code = f"from cells.bench.serving import _serve; _serve({kind!r}, {port}, {stage}, {max_sessions}, {env_workers})"
    proc = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "DRIFTCALL_TOKEN": token})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{kind} server exited with {proc.returncode}")
        try:
            if httpx.get(f"http://{HOST}:{port}/health", timeout=1).status_code == 200:
                return proc, port
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"{kind} server did not start within 60 s")


# -------------------------------------------------------------------------------------- client
def expert_scripts(stage: int, n: int) -> list[tuple[int, list[str | None], float | None]]:
    """(seed, expert action texts, final reward) for `n` seeds, played in process."""
    from cells.agent.play import play_many
    from cells.agent.policies import ExpertPolicy
    from cells.step_10_env import make_env_factory

    results = play_many(make_env_factory(stage), ExpertPolicy, range(n))
    return [(r.seed, list(r.transcript), r.rewards.reward) for r in results]


@dataclass(frozen=True)
class Script:
    """One episode a client session replays: its requests as the WebSocket text frames sent, encoded once
    before any run, and the reward its last observation must carry (None: not checked)."""

    reset: bytes
    steps: tuple[bytes, ...]
    reward: float | None


def encode_scripts(scripts: list[tuple[int, list[str | None], float | None]]) -> list[Script]:
    """`expert_scripts`' episodes as frames (a None action is the counter env's `{"n": 1}`)."""
    def frame(kind: str, data: dict[str, Any]) -> bytes:
        return json.dumps({"type": kind, "data": data}).encode()

    return [Script(frame("reset", {"seed": seed}),
                   tuple(frame("step", {"n": 1} if text is None else {"text": text}) for text in texts), reward)
            for seed, texts, reward in scripts]


# OpenEnv's reply frames are pydantic dumps, fields in declaration order, so an observation starts with this;
# a frame that does not is parsed to tell (an error frame loses the session)
_OBSERVATION_PREFIX = b'{"type":"observation"'


class _Session(asyncio.Protocol):
    """One client session, driven by arrivals: each reply is timed when its bytes reach this process and is
    answered with the next request in the same callback (websockets' sans-I/O protocol does the handshake
    and framing). Episodes run back to back until the deadline or the shared step budget; `done` gets 1 if
    the session was lost (refused, closed, an error frame, or an episode not ending as recorded), else 0;
    `closed` is set once the connection is gone.

    Why not websockets' coroutine client: on a 2-core machine the load generator shares the cores with the
    servers it measures, a coroutine client costs more CPU per step, and each reply waits for the loop to resume
    its coroutine behind the other sessions' work, time it would count as the server's latency."""

    def __init__(self, port: int, token: str, scripts: list[Script], offset: int, deadline: float,
                 budget: list[int], lat: list[float], think_s: float) -> None:
        self.ws = ClientProtocol(parse_uri(f"ws://{HOST}:{port}/ws"), max_size=2**22)
        self.token, self.scripts, self.next_script, self.deadline = token, scripts, offset, deadline
        self.budget, self.lat, self.think_s = budget, lat, think_s
        self.rng = random.Random(offset)  # think-time jitter
        self.loop = asyncio.get_running_loop()
        self.done: asyncio.Future[int] = self.loop.create_future()  # 1: lost, 0: finished as recorded
        self.closed: asyncio.Future[None] = self.loop.create_future()
        self.transport: asyncio.Transport | None = None
        self.script: Script | None = None
        self.turn = -1  # -1: awaiting the reset's reply; k: awaiting step k's
        self.sent_at = 0.0
        self.partial = bytearray()  # a fragmented message's frames so far

    # -------------------------------------------------------------------------------- transport events
    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        request = self.ws.connect()
        request.headers["Authorization"] = f"Bearer {self.token}"
        self.ws.send_request(request)
        self._flush()

    def data_received(self, data: bytes) -> None:
        arrived = time.perf_counter()
        self.ws.receive_data(data)
        for event in self.ws.events_received():
            if isinstance(event, Response):
                if self.ws.state is not State.OPEN:  # refused: 401, 429, ...
                    self.finish(lost=True)
                    return
                self._next_episode()
            elif event.opcode in (Opcode.TEXT, Opcode.CONT):
                self.partial += event.data
                if event.fin:
                    message, self.partial = bytes(self.partial), bytearray()
                    self._on_reply(message, arrived)
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.finish(lost=True)  # a no-op after a normal finish
        if not self.closed.done():
            self.closed.set_result(None)

    # ---------------------------------------------------------------------------------------- episodes
    def _next_episode(self) -> None:
        if time.perf_counter() >= self.deadline or self.budget[0] <= 0:
            self.finish(lost=False)
            return
        self.script = self.scripts[self.next_script % len(self.scripts)]
        self.next_script += 1
        self.turn = -1
        self._send(self.script.reset)

    def _send_step(self) -> None:
        if self.done.done() or self.script is None:
            return
        self.sent_at = time.perf_counter()
        self._send(self.script.steps[self.turn])

    def _on_reply(self, message: bytes, arrived: float) -> None:
        if self.done.done() or self.script is None:
            return
        if self.turn >= 0:
            self.lat.append(arrived - self.sent_at)
            self.budget[0] -= 1
        last = self.turn == len(self.script.steps) - 1
        frame = json.loads(message) if last or not message.startswith(_OBSERVATION_PREFIX) else None
        if frame is not None and frame.get("type") != "observation":
            self.finish(lost=True)
            return
        if last:
            data = frame["data"] if frame is not None else {}
            if not data.get("done") or (self.script.reward is not None and data.get("reward") != self.script.reward):
                self.finish(lost=True)
                return
            self._next_episode()
            return
        self.turn += 1
        if self.think_s:  # a model generating its next turn; uniform jitter keeps sessions out of phase
            self.loop.call_later(self.rng.uniform(0.0, 2.0 * self.think_s), self._send_step)
        else:
            self._send_step()

    def finish(self, lost: bool) -> None:
        """Report whether the session was lost and start the closing handshake (the server answers and
        closes the connection: `closed`); later calls do nothing."""
        if self.done.done():
            return
        self.done.set_result(int(lost))
        if self.transport is None:  # never connected
            self.closed.set_result(None)
        elif self.ws.state is State.OPEN:
            self.ws.send_close()
            self._flush()
        else:  # refused or already closing: nothing left to say
            self.transport.close()

    def abort(self) -> None:
        """Drop the connection if the server has not closed it (a hung server)."""
        if self.transport is not None and not self.closed.done():
            self.transport.abort()

    # ----------------------------------------------------------------------------------------- framing
    def _send(self, text_frame: bytes) -> None:
        self.ws.send_text(text_frame)
        self._flush()

    def _flush(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            for chunk in self.ws.data_to_send():
                if chunk:
                    self.transport.write(chunk)
                else:  # the protocol's end of stream
                    self.transport.close()


def in_process_us_per_step(stage: int, scripts: list[Any], repeats: int = 3) -> float:
    """CPU us per step of the same episodes in process (reset + step_text, the wire's work minus serving)."""
    from cells.step_10_env import DriftCallEnv

    env, steps, best = DriftCallEnv(stage), sum(len(t) for _, t, _ in scripts), float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        for seed, texts, _ in scripts:
            env.reset(seed=seed)
            for text in texts:
                env.step_text(text)
        best = min(best, time.process_time() - t0)
    return best / steps * 1e6


def _cpu_s(pid: int) -> tuple[float, float]:
    """User + system CPU seconds of process `pid` and of its child processes (env workers), from Linux /proc."""
    own = children = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # exited meanwhile
            continue
        ticks = int(fields[11]) + int(fields[12])
        if int(entry) == pid:
            own += ticks
        elif int(fields[1]) == pid:  # fields[1]: the parent's pid
            children += ticks
    tick = os.sysconf("SC_CLK_TCK")
    return own / tick, children / tick


def _run(kind: str, proc: subprocess.Popen[bytes], port: int, token: str, scripts: list[Script], sessions: int,
         seconds: float, max_steps: int, think_s: float = 0.0) -> Result:
    # The client's own garbage collections stop all its sessions at once: a full one (10-16 ms, freeing closed
    # connections' cycles) landed in timed runs and set whichever server's p99 it hit. Collect before the
    # run, none during it: the client stands in for a trainer on other machines, whose pauses are not the
    # server's latency.
    gc.collect()
    gc.disable()
    own0, children0 = _cpu_s(proc.pid)
    client0 = time.process_time()
    try:
        steps, elapsed, lat, lost = asyncio.run(_drive(port, token, scripts, sessions, seconds, max_steps, think_s))
    finally:
        gc.enable()
    client = time.process_time() - client0
    own1, children1 = _cpu_s(proc.pid)
    ms = tuple(sorted(x * 1e3 for x in lat))
    return Result(kind, sessions, steps, elapsed, percentile(ms, 0.5), percentile(ms, 0.99), lost,
                  own1 + children1 - own0 - children0, think_s, children1 - children0, client, latencies_ms=ms)


async def _drive(port: int, token: str, scripts: list[Script], sessions: int, seconds: float, max_steps: int,
                 think_s: float) -> tuple[int, float, list[float], int]:
    """`sessions` client sessions against the server on `port` until `seconds` have passed or `max_steps`
    steps were taken: (steps, seconds elapsed, each step's latency in s, sessions lost). A session still
    without its reply `SESSION_GRACE_S` after the deadline is closed and counted lost. Returns once the
    server has closed every connection (each closing handshake done), so the next run starts with no session
    of this one held."""
    loop = asyncio.get_running_loop()
    lat: list[float] = []
    budget = [max_steps]
    t0 = time.perf_counter()
    clients: list[_Session] = []

    async def connect(k: int) -> None:
        client = _Session(port, token, scripts, k * 7, t0 + seconds, budget, lat, think_s)
        clients.append(client)
        try:
            await loop.create_connection(lambda: client, HOST, port)
        except OSError:
            client.finish(lost=True)

    await asyncio.gather(*(connect(k) for k in range(sessions)))
    await asyncio.wait([c.done for c in clients], timeout=max(0.0, t0 + seconds - time.perf_counter()) + SESSION_GRACE_S)
    elapsed = time.perf_counter() - t0
    for client in clients:
        client.finish(lost=True)  # only those still running: a hung server's sessions
    await asyncio.wait([c.closed for c in clients], timeout=CLOSE_TIMEOUT_S)
    for client in clients:
        client.abort()  # only connections the server left open
    return len(lat), elapsed, lat, sum(c.done.result() for c in clients)


def percentile(sorted_ms: tuple[float, ...], q: float) -> float:
    """The `q` quantile of sorted latencies (nearest rank, the sample at or below which a share `q` falls)."""
    return sorted_ms[min(len(sorted_ms) - 1, int(q * len(sorted_ms)))] if sorted_ms else float("nan")


def bench_server(stage: int = 2, seconds: float = 3.0, max_steps: int = 20_000, concurrency: tuple[int, ...] = (1, 64),
                 rounds: int = 3, think_ms: float = 200.0, env_workers: int = 1) -> list[Result]:
    """Saturation runs (no think time) interleaved over `rounds` so load from other processes hits every
    server alike, then one paced run per server at the highest concurrency (`think_ms` between steps)."""
    scripts = {"driftcall": encode_scripts(expert_scripts(stage, 200))}
    scripts["driftcall-replay"] = scripts["driftcall+workers"] = scripts["driftcall"]
    scripts["floor"] = scripts["floor+guard"] = encode_scripts([(0, [None] * COUNTER_EPISODE_STEPS, None)])
    token = secrets.token_urlsafe(24)
    servers = {kind: _start(kind, stage, max(concurrency), token, env_workers) for kind in KINDS}
    try:
        for kind, (proc, port) in servers.items():  # warm up: first sessions, lazy imports
            _run(kind, proc, port, token, scripts[kind], max(concurrency), 0.5, max_steps // 10)
        runs: list[Result] = []
        for _ in range(rounds):
            for sessions in concurrency:
                for kind, (proc, port) in servers.items():
                    runs.append(_run(kind, proc, port, token, scripts[kind], sessions, seconds, max_steps))
        paced = [_run(kind, proc, port, token, scripts[kind], max(concurrency), seconds, max_steps, think_ms / 1e3)
                 for kind, (proc, port) in servers.items()]
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=10)
    merged = []
    for sessions in concurrency:
        for kind in KINDS:
            merged.append(_merge([r for r in runs if r.server == kind and r.sessions == sessions]))
    return merged + paced


def _merge(runs: list[Result]) -> Result:
    """Rounds pooled: total steps over total time, latency percentiles over every step of every round (the
    p99 is the latency 99% of the steps measured beat); each round's steps/s and p99 are kept alongside."""
    first = runs[0]
    ms = tuple(sorted(x for r in runs for x in r.latencies_ms))
    return Result(first.server, first.sessions, sum(r.steps for r in runs), sum(r.seconds for r in runs),
                  percentile(ms, 0.5), percentile(ms, 0.99), sum(r.lost for r in runs),
                  sum(r.cpu_s for r in runs), first.think_s, sum(r.worker_cpu_s for r in runs),
                  sum(r.client_cpu_s for r in runs), tuple(r.steps_per_s for r in runs), tuple(r.p99_ms for r in runs),
                  ms)


def print_results(results: list[Result], env_us: float | None = None) -> bool:
    """The table, the targets, and PASS/FAIL per DriftCall layout (True when some layout meets them all)."""
    base = {(r.sessions, r.think_s): r for r in results if r.server == "floor"}
    top = max(r.sessions for r in results)
    print(f"{'server':<18} {'sessions':>8} {'think ms':>8} {'steps':>7} {'steps/s':>8} {'p50 ms':>7} {'p99 ms':>7} "
          f"{'server CPU us/step':>18} {'vs floor: steps/s':>17} {'CPU':>5} {'lost':>5}")
    checks: list[tuple[str, str, bool]] = []  # (layout, what, met)
    for r in results:
        floor = base[(r.sessions, r.think_s)]
        ratio = r.steps_per_s / floor.steps_per_s if floor.steps_per_s else float("nan")
        cpu_ratio = floor.cpu_us_per_step / r.cpu_us_per_step if r.cpu_us_per_step else float("nan")
        print(f"{r.server:<18} {r.sessions:>8} {r.think_s * 1e3:>8.0f} {r.steps:>7} {r.steps_per_s:>8,.0f} "
              f"{r.p50_ms:>7.2f} {r.p99_ms:>7.2f} {r.cpu_us_per_step:>18,.0f} {ratio:>17.2f} {cpu_ratio:>5.2f} "
              f"{r.lost:>5}")
        if r.server in DRIFTCALL:
            checks.append((r.server, f"no session lost ({r.sessions} sessions, think {r.think_s * 1e3:g} ms)",
                           r.lost == 0))
            if r.sessions == top and not r.think_s:
                checks.append((r.server, f"steps/s >= {TARGET_RATIO:.0%} of the floor at {top} sessions",
                               ratio >= TARGET_RATIO))
            if r.sessions == top:  # both loads: sessions stepping back to back, and at a rollout's pace
                load = "paced" if r.think_s else "saturating"
                checks.append((r.server, f"p99 < {TARGET_P99_MS:g} ms at {top} {load} sessions",
                               r.p99_ms < TARGET_P99_MS))
    if env_us is not None:
        at_top = {r.server: r for r in results if r.sessions == top and not r.think_s}
        print(f"at {top} sessions, server CPU us/step: floor {at_top['floor'].cpu_us_per_step:,.0f}; DriftCall's serving "
              f"path alone (replay) {at_top['driftcall-replay'].cpu_us_per_step:,.0f}; DriftCall "
              f"{at_top['driftcall'].cpu_us_per_step:,.0f} (envs in worker processes: "
              f"{at_top['driftcall+workers'].cpu_us_per_step:,.0f}), the env in process alone {env_us:,.0f}")
    floor_rounds = next(r.round_steps_per_s for r in results if r.server == "floor" and r.sessions == top
                        and not r.think_s)
    if len(floor_rounds) > 1:  # rounds interleave the servers, so round i of each met the same load
        print(f"at {top} sessions, steps/s vs the floor in each round (how far one run's ratio can move):")
        for r in results:
            if r.sessions == top and not r.think_s and r.server in DRIFTCALL:
                ratios = [mine / floor for mine, floor in zip(r.round_steps_per_s, floor_rounds, strict=True)]
                print(f"  {r.server:<18} " + "  ".join(f"{x:.2f}" for x in ratios))
        # the floor's own tail under the same load: what this machine allows any OpenEnv env; a host stall
        # sets one round's p99 (all 64 sessions wait at once), so the rounds show how far it moved
        print(f"at {top} saturating sessions, p99 ms in each round (pooled: the table's):")
        for r in results:
            if r.sessions == top and not r.think_s and r.server in ("floor", *DRIFTCALL):
                print(f"  {r.server:<18} " + "  ".join(f"{x:5.2f}" for x in r.round_p99_ms))
    print(f"at {top} sessions, CPU us per step by process (client | server | its env workers) and CPU cores busy:")
    for r in results:
        if r.sessions == top and not r.think_s:
            busy = (r.cpu_s + r.client_cpu_s) / r.seconds
            print(f"  {r.server:<18} {r.per_step_us(r.client_cpu_s):>5,.0f} | "
                  f"{r.per_step_us(r.cpu_s - r.worker_cpu_s):>5,.0f} | {r.per_step_us(r.worker_cpu_s):>5,.0f}"
                  f"   {busy:.2f} of {os.cpu_count()}")
    print(f"machine: {os.cpu_count()} CPUs shared with other processes (load average "
          f"{os.getloadavg()[0]:.1f}); server CPU us/step is the load-independent cost")
    for layout, what, ok in checks:
        print(f"  {'PASS' if ok else 'FAIL'}  {layout}: {what}")
    met = [layout for layout in DRIFTCALL if all(ok for name, _, ok in checks if name == layout)]
    print(f"every target met by: {', '.join(met) if met else 'no layout'}")
    return bool(met)


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m cells bench server", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stage", type=int, choices=(1, 2, 3), default=2)
    parser.add_argument("--seconds", type=float, default=3.0, help="per server, concurrency and round")
    parser.add_argument("--max-steps", type=int, default=20_000, help="per server, concurrency and round")
    parser.add_argument("--concurrency", default="1,64", help="comma-separated session counts")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the saturation runs")
    parser.add_argument("--think-ms", type=float, default=200.0, help="paced run: pause before each step")
    parser.add_argument("--env-workers", type=int, default=1, help="worker processes of driftcall+workers")
    args = parser.parse_args(argv)
    if args.env_workers < 1:
        parser.error(f"--env-workers must be >= 1, got {args.env_workers}")
    concurrency = tuple(int(c) for c in args.concurrency.split(","))
    results = bench_server(args.stage, args.seconds, args.max_steps, concurrency, args.rounds, args.think_ms,
                           args.env_workers)
    env_us = in_process_us_per_step(args.stage, expert_scripts(args.stage, 200))
    return 0 if print_results(results, env_us) else 1
