"""Deterministic synthetic `EvalRecord`s for tests and plot/report previews (no environment needed)."""

from __future__ import annotations

from typing import Any

from cells.evaluation.records import EvalRecord
from cells.step_02_profiles import EVAL_SEEDS
from cells.step_04_datatypes import DRIFT_KINDS, LANGUAGES, rng_for


def make_record(policy: str = "p", seed: int = 0, *, success: bool = True, **overrides: Any) -> EvalRecord:
    """One valid record; `success` sets r_task; anything else via keyword overrides."""
    fields: dict[str, Any] = {
        "policy": policy, "seed": seed, "stage": 1, "language": "en", "trial": 0, "success": success,
        "reward": 0.9 if success else 0.1, "r_task": 1.0 if success else 0.0, "r_drift": None,
        "r_constraints": 1.0, "r_format": 1.0, "r_penalty": 0.0, "confidence": 0.5, "parse_failures": 0,
        "turns_used": 6,
    }
    fields.update(overrides)
    if "drift_kinds" in overrides and "drift_patterns" not in overrides:
        fields["drift_patterns"] = tuple(f"{k}.p0" for k in fields["drift_kinds"])
    if "drift_patterns" in fields and "drift_latencies" not in overrides:
        fields["drift_latencies"] = tuple(1 for _ in fields["drift_patterns"])
    if fields.get("drift_patterns") and "r_drift" not in overrides:
        fields["r_drift"] = 1.0
    return EvalRecord(**fields)


def synthetic_records(policy: str, *, skill: float, drift_penalty: float = 0.2, n_seeds: int = 6,
                      trials: int = 3, stages: tuple[int, ...] = (1, 2, 3),
                      languages: tuple[str, ...] = LANGUAGES, base_seed: int = EVAL_SEEDS.start) -> list[EvalRecord]:
    """A plausible evaluation set: success probability `skill` (minus `drift_penalty` when a drift
    fires; stages 2-3 fire drifts), calibrated-ish confidences, a few parse failures and offences.
    Identical (seed, stage, language, trial) keys for every policy, so sets can be paired; seeds are
    consecutive from `base_seed` (by default the held-out evaluation range, like real records)."""
    out: list[EvalRecord] = []
    for stage in stages:
        for lang in languages:
            for i in range(n_seeds):
                seed = base_seed + i
                for trial in range(trials):
                    rng = rng_for("synthetic", policy, seed, stage, lang, trial)
                    n_drift = 0 if stage == 1 else stage - 1
                    kinds = tuple(rng.choice(DRIFT_KINDS) for _ in range(n_drift))
                    p = max(0.0, min(1.0, skill - (drift_penalty if n_drift else 0.0)))
                    ok = rng.random() < p
                    conf = round(max(0.0, min(1.0, p + rng.uniform(-0.15, 0.15))), 2)
                    lat = tuple(rng.randint(0, 3) if rng.random() < skill else None for _ in kinds)
                    handled = sum(x is not None for x in lat)
                    out.append(EvalRecord(
                        policy=policy, seed=seed, stage=stage, language=lang, trial=trial, success=ok,
                        reward=round((0.6 if ok else 0.1) + 0.3 * rng.random(), 4), r_task=1.0 if ok else 0.0,
                        r_drift=handled / n_drift if n_drift else None,
                        r_constraints=round(rng.random(), 3), r_format=round(rng.random(), 3),
                        r_penalty=-0.25 if rng.random() < 0.1 else 0.0, confidence=conf,
                        parse_failures=rng.choice((0, 0, 0, 1)), turns_used=rng.randint(4, 8 + 4 * (stage - 1)),
                        drift_patterns=tuple(f"{k}.v{j}" for j, k in enumerate(kinds)), drift_kinds=kinds,
                        drift_latencies=lat, offences=("repeat_call",) if rng.random() < 0.1 else (),
                        terminated_by="submit" if rng.random() < 0.9 else "timeout",
                    ))
    return out


def _probe_player(mean: float, success: float, booked: float, harmed: float,
                  offences: dict[str, tuple[int, float]], verdict: str | None) -> dict[str, Any]:
    """One player of a probe report: `offences` maps a code to (count, share of episodes)."""
    return {"episodes": 10, "mean_reward": mean, "success_rate": success, "booked_share": booked,
            "harmed_share": harmed, "offence_counts": {c: n for c, (n, _) in offences.items()},
            "offence_episode_share": {c: s for c, (_, s) in offences.items()},
            "offence_rates": {c: n / 10 for c, (n, _) in offences.items()}, "verdict": verdict}


def synthetic_reports(*, n_seeds: int = 3, trials: int = 2, resamples: int = 200, seed: int = 0) -> dict[str, Any]:
    """A full `ctx.reports` dict (baseline, final, reference, paired, probe) from synthetic records."""
    from cells.evaluation.report import build_eval_report, compare_reports

    kw = {"n_seeds": n_seeds, "trials": trials}
    base = synthetic_records("model-baseline", skill=0.35, **kw)
    final = synthetic_records("model-trained", skill=0.75, drift_penalty=0.1, **kw)
    ref = [r for name, skill in (("random", 0.02), ("naive", 0.55), ("expert", 0.95))
           for r in synthetic_records(name, skill=skill, drift_penalty=0.4 if name == "naive" else 0.05, **kw)]
    rk = {"bootstrap_resamples": resamples, "seed": seed}
    probe = {"policies": {  # the shape step 20 writes per player (its example episodes left out)
        "honest_failure": _probe_player(0.12, 0.3, 0.7, 0.0, {}, None),
        "spam_probe": _probe_player(0.01, 0.0, 0.0, 0.0, {"schema_probing": (40, 1.0)}, "PASS"),
        "book_twice": _probe_player(-0.178, 0.0, 1.0, 0.3, {"double_booking": (10, 1.0), "wrong_booking": (3, 0.3)},
                                    "PASS"),
        "give_up": _probe_player(0.0, 0.0, 0.0, 0.0, {}, "PASS"),
    }, "all_exploits_pass": True, "honest_failure_mean_reward": 0.0, "n_episodes": 10, "unknown_offences": []}
    return {
        "baseline": build_eval_report(base, **rk), "final": build_eval_report(final, **rk),
        "reference": build_eval_report(ref, **rk), "paired": compare_reports(base, final, **rk), "probe": probe,
    }
