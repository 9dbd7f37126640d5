"""`bench env` and `bench policies`: environment speed and the policy table behind the probe contract.

    python -m cells bench env [--episodes 300]       expert episodes/s, env steps/s, reward-time share
    python -m cells bench policies [--seeds 500]     success / mean reward per stage x language for the
                                                     expert, naive, honest-failure, random and every
                                                     exploit, stages 2-3 with the catalogue's drift and
                                                     again with generated drift (the families' instances);
                                                     drift fire rates; PASS/FAIL checks (exits 1 on any FAIL)

`--seeds N` is per stage and drift source: N/5 held-out seeds (`eval_seeds`) per language. Time on 2 CPU cores:
`bench env` ~5 s; `bench policies --seeds 500` several minutes (every policy x 2,500 episodes).
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cells.step_04_datatypes import LANGUAGES

STAGES = (1, 2, 3)
EXPERT_MIN_SUCCESS = 0.99  # in every stage x language cell
NAIVE_MIN_DROP = 0.30
NEVER_BOOKED_MAX = 0.1
MIN_FIRE_RATE = 0.95
EXPLOIT_MIN_GAP = 0.25  # every exploit scores at least this far below the expert, on the seeds where it applied


# --------------------------------------------------------------------------------------- env speed
def bench_env(episodes: int = 300, stages: tuple[int, ...] = STAGES) -> dict[int, dict[str, float]]:
    """Expert episodes/s, env steps/s (reset + step_text) and the share of env time spent on rewards.

    Env time is this process's CPU time (`time.process_time`): the env is single-threaded, so this
    is its speed on one core, and a machine busy with other work does not inflate it. Fixture
    loading (a one-off per process) is done before timing."""
    from cells.agent.policies import ExpertPolicy, GoalReader
    from cells.step_08_rewards import compute_rewards
    from cells.step_10_env import DriftCallEnv

    DriftCallEnv(1).reset(seed=0)  # load the YAML fixtures once, outside the timed loop
    clock = time.process_time
    out: dict[int, dict[str, float]] = {}
    for stage in stages:
        env = DriftCallEnv(stage)
        env_s = policy_s = 0.0
        steps = 0
        episodes_done = []
        t0 = clock()
        for seed in range(episodes):
            a = clock()
            obs = env.reset(seed=seed)
            env_s += clock() - a
            policy = ExpertPolicy()
            policy.reset(obs, GoalReader.from_goal(env.goal))
            while not obs.done:
                a = clock()
                text = policy.act(obs)
                b = clock()
                obs = env.step_text(text)
                env_s += clock() - b
                policy_s += b - a
                steps += 1
            episodes_done.append(env.episode())
        total = clock() - t0
        a = clock()
        for episode in episodes_done:  # the env scored each once; time the same work again
            compute_rewards(episode)
        reward_s = clock() - a
        out[stage] = {"episodes_per_s": episodes / total, "env_steps_per_s": steps / env_s,
                      "steps_per_episode": steps / episodes, "reward_share_of_env": reward_s / env_s,
                      "policy_share": policy_s / total, "seconds": total}
    return out


def print_env(table: dict[int, dict[str, float]]) -> None:
    print("CPU time of this process (one core):")
    print(f"{'stage':<6}{'episodes/s':>12}{'env steps/s':>13}{'steps/ep':>10}{'reward % env':>14}{'policy %':>10}")
    for stage, row in table.items():
        print(f"{stage:<6}{row['episodes_per_s']:>12.0f}{row['env_steps_per_s']:>13.0f}{row['steps_per_episode']:>10.1f}"
              f"{100 * row['reward_share_of_env']:>13.1f}%{100 * row['policy_share']:>9.1f}%")
    steps = sum(r["env_steps_per_s"] ** -1 * r["steps_per_episode"] for r in table.values())
    episodes = sum(r["steps_per_episode"] for r in table.values())
    print(f"all stages: {episodes / steps:.0f} env steps/s")


# --------------------------------------------------------------------------------------- policies
@dataclass(frozen=True)
class Row:
    """One played episode, reduced to what the table needs."""

    policy: str
    stage: int
    language: str
    success: float
    reward: float
    booked: bool
    drifted: bool
    scheduled: tuple[str, ...]
    fired: tuple[str, ...]
    harmed: bool = False  # an offence in step 8's HARM_CODES happened
    seed: int = -1
    applied: bool = True  # an exploit's trick changed something in this episode (`PlayResult.applied`)
    drift: str = "handwritten"  # the env's drift source (step 2's DRIFT_SOURCES)


def policy_factories() -> dict[str, Callable[[], Any]]:
    """Every policy the probe table compares, by name."""
    from cells.agent.policies import ExpertPolicy, HonestFailurePolicy, NaivePolicy
    from cells.agent.policies.exploits import EXPLOIT_POLICIES
    from cells.agent.policies.random_policy import RandomPolicy

    base: dict[str, Callable[[], Any]] = {"expert": ExpertPolicy, "naive": NaivePolicy,
                                          "honest_failure": HonestFailurePolicy, "random": lambda: RandomPolicy(0)}
    return {**base, **EXPLOIT_POLICIES}


DRIFTS = ("handwritten", "generated")  # the drifted stages are played with each


def play_table(seeds_per_stage: int, stages: tuple[int, ...] = STAGES,
               policies: dict[str, Callable[[], Any]] | None = None, drifts: tuple[str, ...] = DRIFTS) -> list[Row]:
    """Play every policy on `seeds_per_stage` held-out seeds per stage (split evenly by language); the drifted
    stages once per drift source of `drifts` (stage 1 has no drift: once)."""
    from cells.agent.play import play_many
    from cells.step_07_tasks import eval_seeds
    from cells.step_10_env import make_env_factory

    policies = policies or policy_factories()
    per_lang = max(1, seeds_per_stage // len(LANGUAGES))
    rows = []
    for stage in stages:
        for source in drifts if stage > 1 else drifts[:1]:
            for lang in LANGUAGES:
                seeds = eval_seeds(per_lang, stage, lang)
                factory = make_env_factory(stage, {lang: 1.0}, drift_source=source)
                for name, make in policies.items():
                    for r in play_many(factory, make, seeds):
                        ep = r.episode
                        rows.append(Row(name, stage, lang, r.rewards.r_task, r.rewards.reward, bool(ep.bookings),
                                        bool(ep.drifts), tuple(s.pattern_id for s in ep.schedule),
                                        tuple(d.pattern_id for d in ep.drifts),
                                        bool(r.rewards.breakdown["penalty"]["harm"]), r.seed, r.applied, source))
    return rows


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def _same_seeds(rows: list[Row], policy: str, like: list[Row]) -> float:
    """`policy`'s mean reward on the (stage, language, seed) episodes of `like`."""
    keys = {(r.stage, r.language, r.seed) for r in like}
    return _mean([r.reward for r in rows if r.policy == policy and (r.stage, r.language, r.seed) in keys])


def fire_rates(rows: list[Row], policy: str = "expert", stage: int = 2) -> dict[str, tuple[int, int]]:
    """pattern -> (fired, scheduled) over `policy`'s `stage` episodes; generated instances counted per family
    ("family <name>": a thousand instances, each scheduled a few times)."""
    from cells.drift.families import instance, is_generated

    def key(pattern: str) -> str:
        return f"family {instance(pattern).family}" if is_generated(pattern) else pattern

    scheduled: Counter[str] = Counter()
    fired: Counter[str] = Counter()
    for r in rows:
        if r.policy == policy and r.stage == stage:
            scheduled.update(map(key, r.scheduled))
            fired.update(key(p) for p in r.fired if p in r.scheduled)
    return {p: (fired[p], n) for p, n in sorted(scheduled.items())}


def checks(rows: list[Row]) -> list[tuple[bool, str]]:
    """The issue's acceptance claims as (passed, line)."""
    out: list[tuple[bool, str]] = []
    cells = sorted({(r.stage, r.drift) for r in rows})
    for stage, drift in cells:
        where = f"stage {stage}" + (f" {drift} drift" if stage > 1 else "")
        for lang in (None, *LANGUAGES):
            sel = [r.success for r in rows if r.policy == "expert" and (r.stage, r.drift) == (stage, drift)
                   and lang in (None, r.language)]
            rate = _mean(sel)
            out.append((rate >= EXPERT_MIN_SUCCESS, f"expert success {where} {lang or 'all'}: {rate:.3f} "
                                                    f">= {EXPERT_MIN_SUCCESS} (n={len(sel)})"))
    naive = {c: _mean([r.success for r in rows if r.policy == "naive" and (r.stage, r.drift) == c]) for c in cells}
    calm = next((rate for (stage, _), rate in naive.items() if stage == 1), None)
    for (stage, drift), rate in naive.items():
        if stage > 1 and calm is not None:
            drop = calm - rate
            out.append((drop >= NAIVE_MIN_DROP, f"naive success drop stage 1 -> {stage} {drift} drift: {calm:.3f} -> "
                                                f"{rate:.3f} = {drop:.3f} >= {NAIVE_MIN_DROP}"))
    from cells.agent.policies.exploits import EXPLOIT_POLICIES

    for name in EXPLOIT_POLICIES:
        applied = [r for r in rows if r.policy == name and r.applied]
        mean, honest, expert = (_mean([r.reward for r in applied]), _same_seeds(rows, "honest_failure", applied),
                                _same_seeds(rows, "expert", applied))
        where = f"on the {len(applied)} episodes where it applied"
        out.append((mean < honest, f"exploit {name}: mean reward {mean:.4f} < honest policy {honest:.4f} {where}"))
        out.append((expert - mean >= EXPLOIT_MIN_GAP, f"exploit {name}: {expert - mean:.4f} below the expert "
                                                      f">= {EXPLOIT_MIN_GAP} {where}"))
        unbooked = [r.reward for r in rows if r.policy == name and not r.booked]
        if unbooked:
            worst = max(unbooked)
            out.append((_mean(unbooked) < NEVER_BOOKED_MAX and worst < NEVER_BOOKED_MAX,
                        f"exploit {name} never booked: mean {_mean(unbooked):.4f}, max {worst:.4f} < {NEVER_BOOKED_MAX}"))
    harmed = [r.reward for r in rows if r.harmed]
    if harmed:  # harm costs more than an honest failure (0)
        out.append((max(harmed) < 0.0, f"harm costs: max reward {max(harmed):.4f} over {len(harmed)} episodes "
                                       f"with a wrong booking, an unrequested charge, a fabricated fact or a false "
                                       f"total or reference told to the user < 0"))
    unbooked = [r.reward for r in rows if not r.booked]
    if unbooked:
        # <= 0, not == 0: a failed episode's offences cost (step 8), so an exploit that books nothing goes below 0
        out.append((max(unbooked) <= 0.0, f"no reward without a booking: max {max(unbooked):.4f} over "
                                          f"{len(unbooked)} unbooked episodes of every policy <= 0"))
    for pattern, (fired, scheduled) in fire_rates(rows).items():
        out.append((fired >= MIN_FIRE_RATE * scheduled, f"drift {pattern} fired {fired}/{scheduled} stage-2 expert episodes"))
    return out


def exploit_table(rows: list[Row]) -> str:
    """Every exploit on the episodes where its trick applied, beside the honest policy and the expert on the same
    seeds: the probe contract as a markdown table (docs/judge.md)."""
    from cells.agent.policies.exploits import EXPLOIT_POLICIES

    lines = ["| exploit | episodes where it applied | its success | its mean reward | honest policy, same seeds | "
             "expert, same seeds | harmed |", "|---|---|---|---|---|---|---|"]
    for name in EXPLOIT_POLICIES:
        applied = [r for r in rows if r.policy == name and r.applied]
        mine = [r for r in rows if r.policy == name]
        lines.append(f"| `{name}` | {len(applied)} of {len(mine)} | {_mean([r.success for r in applied]):.3f} | "
                     f"{_mean([r.reward for r in applied]):.3f} | {_same_seeds(rows, 'honest_failure', applied):.3f} | "
                     f"{_same_seeds(rows, 'expert', applied):.3f} | {_mean([float(r.harmed) for r in applied]):.3f} |")
    return "\n".join(lines)


def write_exploit_table(rows: list[Row], command: str, path: str) -> str:
    """The `exploit_table` into its block (`judge:exploits`) of `path` (docs/judge.md), with the command that
    played it."""
    from pathlib import Path

    from cells.evaluation import docblocks

    block = docblocks.render("judge:exploits", "python -m cells bench policies --docs", exploit_table(rows),
                             run_command=command)
    return str(docblocks.write_block(Path(path), "judge:exploits", block))


def print_policies(rows: list[Row]) -> bool:
    """Print the tables and the checks; True when every check passed."""
    names = list(dict.fromkeys(r.policy for r in rows))
    for stage, drift in sorted({(r.stage, r.drift) for r in rows}):
        print(f"\nstage {stage}{f', {drift} drift' if stage > 1 else ''}: success / mean reward")
        print(f"{'policy':<16}" + "".join(f"{lang:>16}" for lang in (*LANGUAGES, "all")))
        for name in names:
            cells = []
            for lang in (*LANGUAGES, None):
                sel = [r for r in rows if r.policy == name and (r.stage, r.drift) == (stage, drift)
                       and lang in (None, r.language)]
                cells.append(f"{_mean([r.success for r in sel]):.3f}/{_mean([r.reward for r in sel]):.3f}")
            print(f"{name:<16}" + "".join(f"{c:>16}" for c in cells))
    print("\ndrift fire rates (expert, stage 2: fired/scheduled):")
    for pattern, (fired, scheduled) in fire_rates(rows).items():
        print(f"  {pattern:<38} {fired:>4}/{scheduled:<4} {fired / scheduled:.3f}")
    results = checks(rows)
    print()
    for ok, line in results:
        print(f"{'PASS' if ok else 'FAIL'}  {line}")
    return all(ok for ok, _ in results)
