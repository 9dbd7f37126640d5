"""`python -m cells bench server`, run small: every server layout starts, plays its episodes over real
WebSockets without losing a session, and is reported against the floor; CPU counts child processes."""

from __future__ import annotations

import os
import subprocess
import sys

from cells import bench_server


def test_cpu_seconds_of_child_processes_are_counted_apart() -> None:
    own_before, children_before = bench_server._cpu_s(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "import time\nt = time.process_time()\n"
                              "while time.process_time() - t < 0.6: pass\nprint('spun', flush=True)\n"
                              "time.sleep(30)"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "spun\n"  # 0.6 s of CPU, still alive
        own, children = bench_server._cpu_s(os.getpid())
        assert children - children_before >= 0.5 and own - own_before < 0.5
    finally:
        child.kill()
        child.wait()


def test_small_bench_runs_every_layout_and_loses_no_session(capsys: object) -> None:
    results = bench_server.bench_server(stage=1, seconds=0.4, max_steps=400, concurrency=(1, 4), rounds=2,
                                        think_ms=5.0, env_workers=1)
    by = {(r.server, r.sessions, bool(r.think_s)): r for r in results}
    assert {r.server for r in results} == set(bench_server.KINDS)
    for kind in bench_server.KINDS:
        for sessions in (1, 4):
            r = by[(kind, sessions, False)]
            assert r.steps > 0 and r.lost == 0 and r.cpu_s > 0 and r.client_cpu_s > 0, r
            assert (r.worker_cpu_s > 0) == (kind == "driftcall+workers"), r  # only that layout has children
            rounds = r.round_steps_per_s  # pooled steps/s is a time-weighted mean of the rounds'
            assert len(rounds) == 2 and min(rounds) - 1e-6 <= r.steps_per_s <= max(rounds) + 1e-6, r
            # p50/p99 are of every step of both rounds: within the rounds' own, and the sample at that rank
            assert len(r.round_p99_ms) == 2 and min(r.round_p99_ms) <= r.p99_ms <= max(r.round_p99_ms), r
            assert len(r.latencies_ms) == r.steps and list(r.latencies_ms) == sorted(r.latencies_ms), r
            assert r.p99_ms == r.latencies_ms[int(0.99 * r.steps)] and r.p50_ms == r.latencies_ms[r.steps // 2], r
        assert by[(kind, 4, True)].lost == 0
    bench_server.print_results(results, env_us=100.0)
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "driftcall+workers" in out and "every target met by:" in out and "CPU cores busy" in out
    assert "in each round" in out and "p99 ms in each round" in out


def test_pooled_p99_is_of_every_step_not_the_worst_round() -> None:
    """One round stalled (1.9% of its steps at 40 ms), the other clean: pooled, under 1% of the steps."""
    def round_(ms: list[float]) -> bench_server.Result:
        lat = tuple(sorted(ms))
        return bench_server.Result("floor", 64, len(lat), 1.0, bench_server.percentile(lat, 0.5),
                                   bench_server.percentile(lat, 0.99), 0, 0.1, latencies_ms=lat)

    clean, stalled = round_([10.0] * 1000), round_([10.0] * 981 + [40.0] * 19)
    assert (clean.p99_ms, stalled.p99_ms) == (10.0, 40.0)
    pooled = bench_server._merge([clean, stalled])
    assert pooled.round_p99_ms == (10.0, 40.0) and pooled.steps == 2000
    assert pooled.p99_ms == 10.0 and pooled.p50_ms == 10.0  # 19 slow of 2,000
    assert bench_server._merge([clean, stalled, stalled]).p99_ms == 40.0  # 38 of 3,000: more than 1%


def _result(server: str, sessions: int, steps_per_s: float, p99_ms: float, think_s: float = 0.0):
    return bench_server.Result(server, sessions, steps=int(steps_per_s), seconds=1.0, p50_ms=p99_ms / 2,
                               p99_ms=p99_ms, lost=0, cpu_s=0.5, think_s=think_s, client_cpu_s=0.1)


def test_p99_target_is_checked_under_saturating_and_paced_load(capsys: object) -> None:
    """A layout whose p99 at the top session count misses 20 ms under either load meets no target set."""
    def run(saturating_p99: float, paced_p99: float) -> bool:
        results = [_result(kind, 64, 5000.0 if kind.startswith("floor") else 4000.0, 10.0)
                   for kind in bench_server.KINDS if kind != "driftcall+workers"]
        results += [_result("driftcall+workers", 64, 4000.0, saturating_p99),
                    *(_result(kind, 64, 250.0, 2.0, 0.2) for kind in bench_server.KINDS if kind != "driftcall+workers"),
                    _result("driftcall+workers", 64, 250.0, paced_p99, 0.2)]
        return bench_server.print_results(results)

    assert run(10.0, 2.0)  # both layouts at 0.80 of the floor, every p99 under 20 ms
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "PASS  driftcall+workers: p99 < 20 ms at 64 saturating sessions" in out
    assert "PASS  driftcall+workers: p99 < 20 ms at 64 paced sessions" in out
    run(21.0, 2.0)
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "FAIL  driftcall+workers: p99 < 20 ms at 64 saturating sessions" in out
    assert "every target met by: driftcall\n" in out  # the in-loop layout still meets them
    run(10.0, 25.0)
    assert "FAIL  driftcall+workers: p99 < 20 ms at 64 paced sessions" in capsys.readouterr().out  # type: ignore[attr-defined]
