"""`python -m cells splits`: a finished run's models on held-out episodes stratified by drift split, paired."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from cells.evaluation import split_pool, split_report, stats
from cells.evaluation.records import EvalRecord, load_records_jsonl, save_records_jsonl
from cells.experiments import drift_split as splits
from cells.step_02_profiles import get_profile


def _finished_run(tmp_path, profile):
    """A miniature finished run: the profile's untrained tiny model saved as warm start and SFT control."""
    from cells.modeling.tiny import build_or_load_tiny

    run = tmp_path / "cpu-rl"
    (run / "training" / "warm_start").mkdir(parents=True)
    (run / "profile.json").write_text(json.dumps(dataclasses.asdict(profile)))
    base, tok, _ = build_or_load_tiny(profile.tiny, run / "tiny_model", profile.seed)
    for where in (run / "training" / "warm_start" / "model", run / "training" / "sft_control" / "model"):
        base.save_pretrained(where)
    return run, base, tok


def test_split_evaluation_pairs_every_model_on_each_pattern_set_and_writes_its_block(tmp_path, monkeypatch):
    profile = get_profile("cpu-rl")  # a run reloads its preset by name
    run, base, tok = _finished_run(tmp_path, profile)
    with pytest.raises(splits.SplitEvalError, match="export"):
        splits.evaluate_split(run, per_set=2)
    (run / "export").mkdir()
    monkeypatch.setattr("cells.step_24_export.load_export", lambda path: (base, tok))  # the export's own loader is
    # tested in test_step_24_export.py; here the same weights stand in for the trained model
    result = splits.evaluate_split(run, per_set=2)
    assert result["split"] == "latin" and result["trained_with_split"] == "latin"
    assert list(result["sets"]) == ["demonstrated", "reinforced", "unseen"]
    for block in result["sets"].values():
        assert set(block["success"]) == {"warm_start", "trained", "sft_control"}
        assert all(e["n"] == 2 for e in block["success"].values())
        assert set(block["paired"]) == {"trained - warm_start", "trained - sft_control"}
        assert all(p["n_pairs"] == 2 and p["diff"]["value"] == 0.0 for p in block["paired"].values())  # same weights
        assert 0.0 <= block["fired_in_set"] <= 1.0
    assert json.loads((run / "eval_splits.json").read_text()) == result
    saved = split_pool.load_split_run(run)  # what `--pool` reads: every episode, tagged with its set and model
    assert (saved.split, saved.per_set, saved.seed) == ("latin", 2, profile.seed)
    assert saved.recipe == splits.recipe_knobs(profile) and saved.recipe["grpo_keep"] == profile.grpo_keep
    assert {w: sorted(m) for w, m in saved.records.items()} == dict.fromkeys(result["sets"], sorted(
        ["sft_control", "trained", "warm_start"]))
    assert all(len(recs) == 2 for models in saved.records.values() for recs in models.values())
    for block in result["sets"].values():
        assert set(block["calibration"]["trained"]) == {"n", "ece", "brier"} and block["turns"]["trained"]["n"] == 2
        assert sum(g["n"] for g in block["by_language"]["warm_start"].values()) == 2
    docs = splits.write_docs(result, run, tmp_path / "results.md")
    text = docs.read_text()
    assert "<!-- splits:cpu-rl:begin" in text and "| reinforced |" in text and "GRPO − warm start" in text
    (run / "profile.json").write_text(json.dumps(dataclasses.asdict(get_profile("cpu-learn"))))  # the oracle
    with pytest.raises(splits.SplitEvalError, match="without a drift_split"):
        splits.evaluate_split(run, per_set=2)


def test_a_generated_split_adds_its_held_out_instances_per_kind_and_reports_per_family(tmp_path):
    """The plan, the envs, the tables and the pooling of a generated split's sets, played by the expert (a model
    plays them through the same `env_for_case`: the test above)."""
    from cells.agent.policies import ExpertPolicy
    from cells.drift.families import instance
    from cells.evaluation.runner import run_scripted
    from cells.step_06_drift import drift_split

    split, profile = drift_split("latin-gen"), get_profile("cpu-gen")
    plan, latin = splits.split_plan(split, 2), splits.split_plan(drift_split("latin"), 2)
    assert list(plan) == ["demonstrated", "reinforced", "unseen", "gen-unseen-a", "gen-unseen-b", "gen-unseen-c"]
    assert {w: plan[w] for w in latin} == latin  # the hand-written sets are the base split's, case for case
    result: dict = {"run": "cpu-gen", "split": "latin-gen", "trained_with_split": "latin-gen", "per_set": 2,
                    "seed": profile.seed, "records": split_pool.RECORDS_FILE, "sets": {}}
    played = []
    for which in ("unseen", "gen-unseen-a", "gen-unseen-b", "gen-unseen-c"):
        records = run_scripted(split_pool.tag(which, "trained"), ExpertPolicy, plan[which], turn_budgets=None)
        assert all(splits.fired_in(split, which, r) for r in records) and all(r.success for r in records)
        if which != "unseen":
            assert all(c.drifts == f"latin-gen:{which}" for c in plan[which])
            assert {instance(p).family for r in records for p in r.drift_patterns} <= {
                instance(p).family for p in split.held_out(which[-1])}
        table = splits.set_table({"warm_start": records, "trained": records}, profile)
        assert sum(g["n"] for g in table["by_family"]["trained"].values()) >= 2
        result["sets"][which] = {**table, "fired_in_set": 1.0}
        played += records + [dataclasses.replace(r, policy=split_pool.tag(which, "warm_start")) for r in records]
    text = splits.splits_markdown(result)
    assert "| gen-unseen-b |" in text and "success per drift family" in text
    run = tmp_path / "cpu-gen"
    run.mkdir()
    save_records_jsonl(played, run / split_pool.RECORDS_FILE)
    (run / split_pool.EVAL_FILE).write_text(json.dumps({k: v for k, v in result.items() if k != "sets"}))
    pooled = split_pool.pool([split_pool.load_split_run(run)])
    assert set(pooled["sets"]) == set(result["sets"]) and "by_family" in pooled["sets"]["gen-unseen-c"]


# --- pooling saved split records over training seeds (no model: records are plain data) ---------------------

SETS = ("demonstrated", "reinforced", "unseen")
LANGS = ("hi", "ta", "kn", "en", "hinglish")


def _cases(n, offset=0):
    return [(1000 + offset + i, 2 + i % 2, LANGS[i % len(LANGS)]) for i in range(n)]


def _rec(policy, case, success, confidence=0.5, kinds=("schema",), turns=6):
    seed, stage, language = case
    return EvalRecord(policy=policy, seed=seed, stage=stage, language=language, trial=0, success=success,
                      reward=1.0 if success else 0.0, r_task=1.0 if success else 0.0,
                      r_drift=0.0 if kinds else None, r_constraints=0.0, r_format=0.0, r_penalty=0.0,
                      confidence=confidence, parse_failures=0, turns_used=turns,
                      drift_patterns=tuple(f"p_{k}" for k in kinds), drift_kinds=kinds,
                      drift_latencies=(None,) * len(kinds))


def _write_run(root, name, seed, outcomes, cases, split="latin", trained_with="latin", confidence=None,
               recipe=None, compute=None):
    """A run dir holding only what `splits` saves: eval_splits.json and records_splits.jsonl.
    `outcomes[set][model]` lists successes in case order; `confidence[model]` maps success -> confidence;
    `recipe` is the run's recorded knobs (absent, as in archives from before they were recorded, when None)."""
    run = root / name
    run.mkdir(parents=True)
    meta = {"run": name, "split": split, "trained_with_split": trained_with, "per_set": len(cases), "seed": seed,
            "records": split_pool.RECORDS_FILE, "sets": {}, **({"recipe": recipe} if recipe is not None else {}),
            **({"compute": compute} if compute is not None else {})}
    (run / split_pool.EVAL_FILE).write_text(json.dumps(meta))
    conf = confidence or {}
    records = [_rec(split_pool.tag(which, m), case, ok, conf.get(m, lambda s: 0.5)(ok),
                    kinds=("schema",) if i % 3 else ("policy", "pricing"))
               for which, models in outcomes.items() for m, oks in models.items()
               for i, (case, ok) in enumerate(zip(cases, oks, strict=True))]
    save_records_jsonl(records, run / split_pool.RECORDS_FILE)
    return run


def _outcomes(n, warm, trained, control=None):
    """Per set, the first `k` cases succeed for each model (k from the fraction given per set)."""
    def first(frac):
        return [i < round(frac * n) for i in range(n)]
    return {w: {"warm_start": first(warm[w]), "trained": first(trained[w]),
                **({"sft_control": first(control[w])} if control else {})} for w in SETS}


GOOD = {"warm": {"demonstrated": 0.9, "reinforced": 0.4, "unseen": 0.4},
        "trained": {"demonstrated": 0.9, "reinforced": 0.6, "unseen": 0.45},
        "control": {"demonstrated": 0.9, "reinforced": 0.45, "unseen": 0.4}}
CALIBRATED = {"trained": lambda ok: 1.0 if ok else 0.0, "warm_start": lambda ok: 0.9, "sft_control": lambda ok: 0.9}


def _three_runs(tmp_path, n=40, **kw):
    out = _outcomes(n, GOOD["warm"], GOOD["trained"], GOOD["control"])
    return [_write_run(tmp_path, f"cpu-rl{s}", 1234 + i, out, _cases(n), confidence=CALIBRATED, **kw)
            for i, s in enumerate(("", "-s1235", "-s1236"))]


def test_stratified_bootstrap_gives_a_constant_difference_exactly_and_keeps_each_seed_in_every_resample():
    cases = _cases(10)
    same = {f"s{i}": ([_rec("a", c, False) for c in cases], [_rec("b", c, True) for c in cases]) for i in range(3)}
    res = stats.stratified_paired_difference(same, resamples=500, seed=3)
    assert res["diff"] == {"value": 1.0, "low": 1.0, "high": 1.0, "n": 30} and res["strata"] == dict.fromkeys(same, 10)
    # one seed all +1, one all 0: resampling within seeds can never move the pooled mean off 0.5
    mixed = {"gain": same["s0"], "flat": ([_rec("a", c, True) for c in cases], [_rec("b", c, True) for c in cases])}
    res = stats.stratified_paired_difference(mixed, resamples=500, seed=3)
    assert (res["diff"]["value"], res["diff"]["low"], res["diff"]["high"]) == (0.5, 0.5, 0.5)
    assert res["p_value"] < 0.01
    noisy = {k: (b, [_rec("b", c, i % 3 == 0) for i, c in enumerate(cases)]) for k, (b, _) in same.items()}
    first, again = (stats.stratified_paired_difference(noisy, resamples=300, seed=7) for _ in range(2))
    assert first == again and first["diff"]["value"] == pytest.approx(0.4)
    assert first["diff"]["low"] < 0.4 < first["diff"]["high"]


def test_success_by_group_counts_an_episode_once_per_fired_kind_and_per_language():
    cases = _cases(6)
    recs = [_rec("m", c, i < 4, kinds=("schema", "pricing") if i % 2 else ("schema",)) for i, c in enumerate(cases)]
    by_kind = stats.success_by_group(recs, "drift_kind")
    assert by_kind == {"pricing": {"n": 3, "successes": 2, "rate": 2 / 3}, "schema": {"n": 6, "successes": 4,
                                                                                     "rate": 4 / 6}}
    by_lang = stats.success_by_group(recs, "language")
    assert sum(v["n"] for v in by_lang.values()) == 6 and by_lang["hi"] == {"n": 2, "successes": 1, "rate": 0.5}
    assert stats.turns_per_success(recs) == {"n": 6, "successes": 4, "turns_per_success": 9.0,
                                             "mean_turns_success": 6.0}
    table = splits.set_table({"warm_start": recs, "trained": recs}, get_profile("cpu-rl"))
    assert table["by_kind"]["trained"] == by_kind and table["by_language"]["warm_start"] == by_lang
    assert set(table["calibration"]["trained"]) == {"n", "ece", "brier"}


def test_pool_over_seeds_reads_records_pairs_within_seeds_and_writes_json(tmp_path):
    runs = _three_runs(tmp_path / "runs")
    oracle = _write_run(tmp_path / "runs", "cpu-learn", 1234, _outcomes(40, *(dict.fromkeys(SETS, 0.95),) * 2),
                        _cases(40), trained_with=None)
    pooled = splits.pool_splits(runs, oracle, out=tmp_path / "pooled.json")
    assert json.loads((tmp_path / "pooled.json").read_text()) == pooled
    rein = pooled["sets"]["reinforced"]
    assert rein["success"]["trained"]["pooled"]["n"] == 120 and set(rein["success"]["trained"]["per_run"]) == {
        "cpu-rl", "cpu-rl-s1235", "cpu-rl-s1236"}
    gain = rein["paired"]["trained - warm_start"]
    assert gain["pooled"]["diff"]["value"] == pytest.approx(0.2) and gain["pooled"]["strata"] == dict.fromkeys(
        ["cpu-rl", "cpu-rl-s1235", "cpu-rl-s1236"], 40)
    assert all(v["diff"]["value"] == pytest.approx(0.2) for v in gain["per_run"].values())
    assert 0 < gain["pooled"]["diff"]["low"] < 0.2 < gain["pooled"]["diff"]["high"]
    assert pooled["oracle"]["paired"] and rein["oracle"]["trained"]["value"] == 0.95
    assert rein["oracle_paired"]["oracle trained - trained"]["diff"]["value"] == pytest.approx(0.35)
    cal = pooled["calibration_withheld"]
    assert cal["sets"] == ["reinforced", "unseen"] and cal["pooled"]["trained"]["ece"] == 0.0
    assert cal["pooled"]["warm_start"]["n"] == 240 and cal["pooled"]["warm_start"]["ece"] > 0.4
    statuses = {t["id"]: t["status"] for t in pooled["targets"]}
    assert statuses == {"reinforced_vs_warm_start": "PASS", "reinforced_vs_sft_control": "PASS",
                        "reinforced_vs_raft_control": "NO DATA", "demonstrated_regression": "PASS",
                        "reinforced_above_raft": "NO DATA", "reinforced_gap_to_oracle": "MISS", "ece_withheld": "PASS"}
    gap = next(t for t in pooled["targets"] if t["id"] == "reinforced_gap_to_oracle")
    assert gap["measured"].startswith("36.4% of 55.0 points (warm start 40.0%, GRPO 60.0%, oracle 95.0%)")
    assert pooled == splits.pool_splits(runs, oracle, out=tmp_path / "again.json")  # seeded: identical
    published_json = splits.pooled_json(pooled["split"])
    assert published_json.name == "splits_pooled_latin.json"  # one published pool per split
    published = published_json.read_text(encoding="utf-8") if published_json.is_file() else None
    assert splits.main(["--pool", *map(str, runs), "--oracle", str(oracle), "--out", str(tmp_path / "gen.json")]) == 0
    assert json.loads((tmp_path / "gen.json").read_text()) == pooled  # another experiment's pooling, kept apart
    assert (published_json.read_text(encoding="utf-8") if published_json.is_file() else None) == published
    with pytest.raises(SystemExit):
        splits.main(["--out", str(tmp_path / "x.json")])


def test_pooled_success_per_withheld_pattern_counts_only_the_sets_own_patterns(tmp_path):
    """A reinforced episode that also fires a demonstrated pattern counts under its reinforced pattern only."""
    cases = _cases(4)
    own, other = "restaurant_min_order_raised", "airline_passenger_count_required"  # reinforced; demonstrated
    runs = []
    for i, name in enumerate(("a", "b")):
        out = _outcomes(4, dict.fromkeys(SETS, 0.5), dict.fromkeys(SETS, 1.0))
        run = _write_run(tmp_path, name, 1234 + i, out, cases)
        recs = [dataclasses.replace(r, drift_patterns=(own, other), drift_kinds=("tnc", "schema"),
                                    drift_latencies=(1, 1)) if r.policy.startswith("reinforced/") else r
                for r in load_records_jsonl(run / split_pool.RECORDS_FILE)]
        save_records_jsonl(recs, run / split_pool.RECORDS_FILE)
        runs.append(run)
    pooled = splits.pool_splits(runs, out=tmp_path / "pooled.json")
    rein = pooled["sets"]["reinforced"]["by_pattern"]
    assert rein["trained"] == {own: {"n": 8, "successes": 8, "rate": 1.0}}
    assert rein["warm_start"] == {own: {"n": 8, "successes": 4, "rate": 0.5}}
    assert "by_pattern" not in pooled["sets"]["demonstrated"]  # the demonstrated set is what the warm start does
    text = split_report.pooled_markdown(pooled, splits.MODEL_WORDS)
    assert f"| reinforced · {own} | 8 | 50% | 100% |" in text and f"· {other}" not in text
    assert "oracle after GRPO" not in text and "oracle_by_pattern" not in pooled["sets"]["reinforced"]
    # with an oracle, its success per withheld pattern (its own episodes): what the ceiling is made of
    oracle = _write_run(tmp_path, "oracle", 1234, {w: {"trained": [True, True, True, False]} for w in SETS}, cases,
                        trained_with=None)
    recs = [dataclasses.replace(r, drift_patterns=(own, other), drift_kinds=("tnc", "schema"), drift_latencies=(1, 1))
            if r.policy.startswith("reinforced/") else r for r in load_records_jsonl(oracle / split_pool.RECORDS_FILE)]
    save_records_jsonl(recs, oracle / split_pool.RECORDS_FILE)
    with_oracle = splits.pool_splits(runs, oracle, out=tmp_path / "pooled.json")
    assert with_oracle["sets"]["reinforced"]["oracle_by_pattern"] == {own: {"n": 4, "successes": 3, "rate": 0.75}}
    text = split_report.pooled_markdown(with_oracle, splits.MODEL_WORDS)
    assert f"| reinforced · {own} | 8 | 50% | 100% | 75% of 4 |" in text and "| oracle after GRPO |" in text


def test_pool_refuses_other_cases_other_splits_and_runs_without_records(tmp_path):
    runs = _three_runs(tmp_path / "runs")
    out = _outcomes(40, GOOD["warm"], GOOD["trained"])
    other = _write_run(tmp_path / "runs", "cpu-rl-s9", 9, out, _cases(40, offset=1))
    with pytest.raises(split_pool.CaseListMismatchError, match="different demonstrated cases"):
        splits.pool_splits([*runs[:2], other], out=tmp_path / "p.json")
    mixed = _write_run(tmp_path / "runs", "cpu-rl-x", 9, out, _cases(40), split="other", trained_with="other")
    with pytest.raises(split_pool.SplitMismatchError, match="split 'other'"):
        splits.pool_splits([runs[0], mixed], out=tmp_path / "p.json")
    with pytest.raises(split_pool.SplitMismatchError, match="--oracle"):
        splits.pool_splits(runs, runs[1], out=tmp_path / "p.json")  # a split-trained run is no oracle
    (runs[2] / split_pool.RECORDS_FILE).unlink()
    with pytest.raises(split_pool.MissingSplitRecordsError,
                       match=r"python -m cells splits --run-dir .*cpu-rl-s1236 --per-set 40 --split latin"):
        splits.pool_splits(runs, out=tmp_path / "p.json")
    assert not (tmp_path / "p.json").exists()


def _pooled_for_targets(diffs, per_seed, ece_after=0.03, ece_before=0.1, success=None, oracle=None):
    """A minimal pooled result: `diffs[(set, pair)]` = (value, low) pooled; `per_seed` each seed's (value, low),
    or its value alone (low then half the value); `success` {model: reinforced pooled success}, `oracle` the
    oracle's."""
    seeds = [x if isinstance(x, tuple) else (x, x / 2) for x in per_seed]
    sets: dict = {w: {"paired": {}} for w in SETS}
    for (which, pair), (value, low) in diffs.items():
        sets[which]["paired"][pair] = {"pooled": {"diff": {"value": value, "low": low, "high": value + 0.1}},
                                       "per_run": {f"r{i}": {"diff": {"value": v, "low": lo, "high": v + 0.1}}
                                                   for i, (v, lo) in enumerate(seeds)}}
    sets["reinforced"]["success"] = {m: {"pooled": {"value": v}} for m, v in (success or {}).items()}
    if oracle is not None:
        sets["reinforced"]["oracle"] = {"trained": {"value": oracle}}
    return {"sets": sets, "calibration_withheld": {"pooled": {"trained": {"ece": ece_after},
                                                              "warm_start": {"ece": ece_before}}}}


@pytest.mark.parametrize(("gain", "low", "per_seed", "status"), [
    (0.1 - 1e-12, 0.01, (0.1, 0.1, 0.1), "PASS"),  # at +10 points (a mean of 0/1 pairs lands a hair below)
    (0.09, 0.01, (0.09, 0.09, 0.09), "MISS"),  # below
    (0.2, 0.05, (0.3, 0.3, (0.1, 0.0)), "MISS"),  # one seed's interval touches 0
    (0.2, 0.05, (0.3, 0.3, -0.01), "MISS"),  # one seed negative
    (0.2, 0.05, (0.2, 0.2), "MISS"),  # two seeds of three
])
def test_reinforced_target_needs_ten_points_pooled_and_a_ci_above_zero_at_each_seed(gain, low, per_seed, status):
    pooled = _pooled_for_targets({("reinforced", "trained - warm_start"): (gain, low)}, per_seed)
    rows = {t["id"]: t for t in split_pool.targets(pooled)}
    assert rows["reinforced_vs_warm_start"]["status"] == status
    assert rows["reinforced_vs_sft_control"]["status"] == "NO DATA"
    assert ("2 of 3 seeds" in rows["reinforced_vs_warm_start"]["note"]) == (len(per_seed) == 2)


@pytest.mark.parametrize(("value", "low", "statuses"), [
    (0.0, -0.029, ("PASS", "MISS")),  # level, the lower bound inside -3 points
    (0.01, -0.031, ("MISS", "MISS")),  # ahead, but the interval reaches below -3 points
    (-0.005, 0.01, ("MISS", "PASS")),  # (a degenerate interval) below 0 pooled
    (0.05, 0.01, ("PASS", "PASS")),  # the goal beyond: the interval above 0
])
def test_the_raft_targets_read_the_pooled_difference_and_its_lower_bound(value, low, statuses):
    pooled = _pooled_for_targets({("reinforced", "trained - raft_control"): (value, low)}, (value,) * 3)
    rows = {t["id"]: t for t in split_pool.targets(pooled)}
    assert (rows["reinforced_vs_raft_control"]["status"], rows["reinforced_above_raft"]["status"]) == statuses


@pytest.mark.parametrize(("warm", "grpo", "oracle", "status"), [
    (0.4, 0.6, 0.8, "PASS"), (0.4, 0.59, 0.8, "MISS"), (0.9, 0.9, 0.9, "MISS"), (0.4, 0.6, None, "NO DATA")])
def test_the_gap_to_the_oracle_target_needs_half_of_it_closed(warm, grpo, oracle, status):
    pooled = _pooled_for_targets({}, (0.1,) * 3, success={"warm_start": warm, "trained": grpo}, oracle=oracle)
    row = next(t for t in split_pool.targets(pooled) if t["id"] == "reinforced_gap_to_oracle")
    assert row["status"] == status


@pytest.mark.parametrize(("regression", "after", "before", "statuses"), [
    (-0.02, 0.05, 0.06, ("PASS", "PASS")),  # at both thresholds
    (-0.03, 0.051, 0.06, ("MISS", "MISS")),  # beyond both
    (0.0, 0.04, 0.04, ("PASS", "MISS")),  # calibrated, but no better than the warm start
])
def test_regression_and_calibration_targets(regression, after, before, statuses):
    pooled = _pooled_for_targets({("demonstrated", "trained - warm_start"): (regression, -0.1),
                                  ("reinforced", "trained - sft_control"): (0.05, 0.01)}, (0.05,) * 3, after, before)
    rows = {t["id"]: t for t in split_pool.targets(pooled)}
    assert (rows["demonstrated_regression"]["status"], rows["ece_withheld"]["status"]) == statuses
    assert rows["reinforced_vs_sft_control"]["status"] == "PASS"


def test_pool_refuses_seeds_of_other_recipes_and_names_every_knob_the_oracle_changes_beyond_the_split(tmp_path):
    from cells.experiments.drift_split import recipe_knobs
    from cells.step_02_profiles import with_knobs

    recipe = get_profile("cpu-rl")
    seed_recipes = [recipe_knobs(dataclasses.replace(recipe, seed=1234 + i)) for i in range(3)]
    out, cases = _outcomes(20, GOOD["warm"], GOOD["trained"], GOOD["control"]), _cases(20)
    cost = [{"model": "trained", "seconds": 10.0, "measure": "cpu", "episodes": 40, "examples": 24,
             "tokens_trained": 2000}]
    runs = [_write_run(tmp_path, f"cpu-rl-s{i}", 1234 + i, out, cases, recipe=r, compute=cost)
            for i, r in enumerate(seed_recipes)]
    other = _write_run(tmp_path, "cpu-rl-lr", 1237, out, cases,
                       recipe=recipe_knobs(with_knobs(recipe, ["learning_rate=0.002"])))
    with pytest.raises(split_pool.RecipeMismatchError, match=r"learning_rate: 0\.001 vs 0\.002"):
        splits.pool_splits([*runs[:2], other], out=tmp_path / "p.json")

    def oracle(name, profile, recorded=True):
        return _write_run(tmp_path, name, 1234, out, cases, trained_with=None,
                          recipe=recipe_knobs(profile) if recorded else None)

    same = splits.pool_splits(runs, oracle("same", with_knobs(recipe, ['drift_split=""'])), out=tmp_path / "p.json")
    assert same["oracle"]["recipe_differences"] == {}
    learn = splits.pool_splits(runs, oracle("learn", get_profile("cpu-learn")), out=tmp_path / "p.json")
    differs = learn["oracle"]["recipe_differences"]
    assert differs["grpo_keep"] == ["success_contrast", "all"] and "drift_split" not in differs
    assert differs["sft_field_drills"] == [0.15, 0.0] and "profile" not in differs and "seed" not in differs
    unrecorded = splits.pool_splits(runs, oracle("old", recipe, recorded=False), out=tmp_path / "p.json")
    assert unrecorded["oracle"]["recipe_differences"] is None
    for pooled, says in ((same, "recipe is the seeds' but for the split"),
                         (learn, "`grpo_keep` ('success_contrast' in the seeds', 'all')"),
                         (unrecorded, "recipe is not recorded")):
        text = split_report.pooled_markdown(pooled, splits.MODEL_WORDS)
        assert says in text, text[:600]
    assert "| cpu-rl-s1 | after GRPO | 10 (cpu) | 40 | 24 | 2,000 |" in text  # what each seed's training bought


def test_pooled_docs_draw_a_png_and_rewrite_their_block_in_place(tmp_path):
    pooled = splits.pool_splits(_three_runs(tmp_path / "runs", n=20), out=tmp_path / "pooled.json")
    docs, png = tmp_path / "docs" / "results.md", tmp_path / "docs" / "results" / "splits_pooled.png"
    docs.parent.mkdir()
    docs.write_text("# Results\n\nbefore\n\n<!-- splits:pooled:latin:begin old -->\nstale\n"
                    "<!-- splits:pooled:latin:end -->\n\nafter\n")
    splits.write_pooled_docs(pooled, docs, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    first = docs.read_text()
    splits.write_pooled_docs(pooled, docs, png)
    assert docs.read_text() == first and first.count("splits:pooled:latin:begin") == 1 and "stale" not in first
    assert first.startswith("# Results\n\nbefore\n\n<!-- splits:pooled:latin:begin") and first.endswith("\n\nafter\n")
    assert "![success per pattern set, pooled over seeds](results/splits_pooled.png)" in first
    # another split's pool gets its own block: publishing it leaves this one as it was
    other_png = png.with_name("splits_pooled_other.png")
    splits.write_pooled_docs({**pooled, "split": "latin-gen"}, docs, other_png)
    both = docs.read_text()
    assert both.startswith(first.rstrip("\n")) and both.count("splits:pooled:latin-gen:begin") == 1
    assert "(results/splits_pooled_other.png)" in both and other_png.is_file()
    docs.write_text(first)
    readme = tmp_path / "README.md"
    readme.write_text("# X\n\n<!-- splits:glance:begin -->\n<!-- splits:glance:end -->\n\nrest\n")
    splits.write_pooled_docs(pooled, docs, png, readme=readme)
    glance = readme.read_text()
    assert glance.endswith("\n\nrest\n") and "at commit" not in glance and "over 3 training seeds" in glance
    assert "| reinforced | 40.0% [" in glance and "| +20.0% [" in glance and "3 of 7 of the experiment's targets" in glance
    per_seed = next(line for line in glance.splitlines() if line.startswith("GRPO − warm start on reinforced"))
    assert [part.split(" [")[0] for part in per_seed.split(": ", 1)[1].split("; ")] == [
        f"seed {r['seed']} +20.0%" for r in pooled["runs"]]
    for text in ("| reinforced | +20.0% [", "GRPO − warm start", "GRPO − SFT-only control", "| reinforced | cpu-rl-s1235 |",
                 "| reinforced · pricing |", "| unseen · hinglish |", "| PASS |", "--pool", "ECE pooled"):
        assert text in first, text
    per_set_ece = " / ".join(split_report._f(pooled["sets"][w]["calibration"]["trained"]["ece"]) for w in pooled["sets"])
    assert "| ECE per set |" in first and f" | {per_set_ece} | " in first  # calibration on each set, e.g. unseen
    # a generated split's hold-outs: one line of the glance (it stays short), rows of the docs block
    generated = {**pooled, "split": "latin-gen", "sets": {**pooled["sets"], "gen-unseen-b": pooled["sets"]["unseen"]}}
    generated["targets"] = split_pool.targets(generated)
    glance = splits.glance_block(generated)
    assert "| gen-unseen-b |" not in glance and "Generated hold-outs after GRPO: gen-unseen-b 45.0% [" in glance
    assert "| gen-unseen-b |" in split_report.pooled_markdown(generated, splits.MODEL_WORDS)
    assert "unseen (hand-written): after GRPO ≥ 60% pooled" in split_report.pooled_markdown(generated, splits.MODEL_WORDS)


def test_archived_records_pool_exactly_as_the_runs_and_are_byte_stable(tmp_path):
    runs = _three_runs(tmp_path / "runs")
    oracle = _write_run(tmp_path / "runs", "cpu-learn", 1234, _outcomes(40, *(dict.fromkeys(SETS, 0.95),) * 2),
                        _cases(40), trained_with=None)
    kept, kept_oracle = splits.archive_runs(runs, oracle, root=tmp_path / "archive")
    assert [p.name for p in kept] == ["cpu-rl", "cpu-rl-s1235", "cpu-rl-s1236"] and kept_oracle.name == "cpu-learn"
    for d in (*kept, kept_oracle):
        assert sorted(f.name for f in d.iterdir()) == [split_pool.EVAL_FILE, split_pool.ARCHIVED_RECORDS_FILE]
    assert (kept[0] / split_pool.ARCHIVED_RECORDS_FILE).stat().st_size < (
        runs[0] / split_pool.RECORDS_FILE).stat().st_size / 5
    from_runs = splits.pool_splits(runs, oracle, out=tmp_path / "a.json")
    from_archive = splits.pool_splits(kept, kept_oracle, out=tmp_path / "b.json")
    assert from_archive["sets"] == from_runs["sets"] and from_archive["targets"] == from_runs["targets"]
    assert [r["dir"] for r in from_archive["runs"]] == [str(p) for p in kept]
    first = (kept[1] / split_pool.ARCHIVED_RECORDS_FILE).read_bytes()
    assert split_pool.archive_split_run(runs[1], tmp_path / "archive") == kept[1]  # again: same bytes
    assert (kept[1] / split_pool.ARCHIVED_RECORDS_FILE).read_bytes() == first
    assert split_pool.archive_split_run(kept[1], tmp_path / "archive") == kept[1]  # onto itself: untouched
    moved = split_pool.archive_split_run(kept[1], tmp_path / "elsewhere")  # an archive of an archive
    assert (moved / split_pool.ARCHIVED_RECORDS_FILE).read_bytes() == first
    (runs[2] / split_pool.RECORDS_FILE).unlink()
    with pytest.raises(split_pool.MissingSplitRecordsError, match="python -m cells splits --run-dir"):
        splits.archive_runs([runs[2]], None, root=tmp_path / "archive2")


def test_the_split_glance_says_in_words_who_beats_whom_on_reinforced_patterns():
    """Generated from the pooled paired intervals: GRPO beats a model only where the whole interval is above 0."""
    def diff(value, low, high):
        return {"pooled": {"diff": {"value": value, "low": low, "high": high}}}

    pooled = {"sets": {"reinforced": {"paired": {"trained - warm_start": diff(0.12, 0.10, 0.14),
                                                 "trained - sft_control": diff(0.01, -0.02, 0.04),
                                                 "trained - raft_control": diff(-0.10, -0.13, -0.07)}}}}
    sentence = split_report._verdict_sentence(pooled, "reinforced", splits.MODEL_WORDS)
    assert sentence == ("On reinforced episodes, pooled: GRPO beats the warm start; the RAFT control beats GRPO; "
                        "GRPO and the SFT-only control are within noise (paired 95% intervals).")
    assert split_report._verdict_sentence({"sets": {}}, "reinforced", splits.MODEL_WORDS) == ""


@pytest.mark.parametrize(("unseen", "oracle", "statuses"), [
    (0.6, None, ("PASS", "MISS")),  # at the target; no oracle, so the goal beyond cannot pass
    (0.59, 0.9, ("MISS", "MISS")),
    (0.8, 0.9, ("PASS", "PASS")),  # at 80% and 10 points from the oracle
    (0.8, 0.95, ("PASS", "MISS")),  # 15 points from the oracle
])
def test_a_generated_splits_pool_adds_the_transfer_targets_on_hand_written_unseen_patterns(unseen, oracle, statuses):
    pooled = _pooled_for_targets({("unseen", "trained - warm_start"): (0.05, 0.01)}, (0.05,) * 3)
    assert not any(t["id"].startswith("unseen_") for t in split_pool.targets(pooled))  # not a generated split
    pooled["sets"]["gen-unseen-a"] = {"paired": {}}
    pooled["sets"]["unseen"]["success"] = {"trained": {"pooled": {"value": unseen}}}
    if oracle is not None:
        pooled["sets"]["unseen"]["oracle"] = {"trained": {"value": oracle}}
    rows = {t["id"]: t for t in split_pool.targets(pooled)}
    assert rows["unseen_vs_warm_start"]["status"] == "PASS"
    assert (rows["unseen_success"]["status"], rows["unseen_near_oracle"]["status"]) == statuses


# --- the generalisation curve of a generated split: runs differing only in drift_train_instances ---------------

CURVE_SETS = ("demonstrated", "reinforced", "unseen", "gen-unseen-a", "gen-unseen-b", "gen-unseen-c")


def _curve_run(root, name, seed, instances, unseen, n=20, **knobs):
    """A latin-gen run trained on `instances` generated instances: warm start 30% on every unseen set, GRPO
    `unseen`; demonstrated and reinforced 80%."""
    def first(frac):
        return [i < round(frac * n) for i in range(n)]
    outcomes = {w: {"warm_start": first(0.3 if "unseen" in w else 0.8), "trained": first(unseen if "unseen" in w
                                                                                           else 0.8)}
                for w in CURVE_SETS}
    recipe = {"profile": "cpu-gen", "seed": seed, "drift_split": "latin-gen", "drift_train_instances": instances,
              "lora_r": 64, **knobs}
    return _write_run(root, name, seed, outcomes, _cases(n), split="latin-gen", trained_with="latin-gen",
                      recipe=recipe)


def test_the_generalisation_curve_orders_points_by_training_instances_and_pairs_within_seeds(tmp_path):
    from cells.evaluation import split_curve
    from cells.step_06_drift import drift_split

    runs = [_curve_run(tmp_path, "gen-2001", 2001, -1, 0.6), _curve_run(tmp_path, "gen-n0-2001", 2001, 0, 0.3),
            _curve_run(tmp_path, "gen-n0-2002", 2002, 0, 0.4), _curve_run(tmp_path, "gen-n100-2002", 2002, 100, 0.5)]
    oracle = _write_run(tmp_path, "gen-oracle", 2001, {w: {"trained": [True] * 18 + [False] * 2} for w in CURVE_SETS},
                        _cases(20), split="latin-gen", trained_with=None)
    result = splits.curve_splits(runs, oracle, out=tmp_path / "curve.json")
    assert json.loads((tmp_path / "curve.json").read_text()) == result
    everything = len(drift_split("latin-gen").training_ids())
    assert [p["instances"] for p in result["points"]] == [0, 100, everything]
    assert result["sets"] == ["unseen", "gen-unseen-a", "gen-unseen-b", "gen-unseen-c", "reinforced", "demonstrated"]
    zero, hundred, full = result["points"]
    assert [r["seed"] for r in zero["runs"]] == [2001, 2002]
    assert zero["sets"]["unseen"]["trained"]["value"] == pytest.approx(0.35)  # both seeds' episodes pooled
    assert zero["sets"]["unseen"]["warm_start"]["value"] == pytest.approx(0.3)
    # paired within the seeds present at both points: 100 instances ran at 2002 only, everything at 2001 only
    assert hundred["sets"]["unseen"]["vs_fewest"]["value"] == pytest.approx(0.1)
    assert full["sets"]["gen-unseen-b"]["vs_fewest"]["value"] == pytest.approx(0.3)
    assert full["sets"]["reinforced"]["vs_fewest"]["value"] == 0.0
    assert result["oracle"]["sets"]["unseen"]["value"] == pytest.approx(0.9)
    text = split_curve.curve_markdown(result, "results/curve.png")
    assert "3 of the 4 points the experiment asks for" in text and "![generalisation curve](results/curve.png)" in text
    assert f"| {everything} | 2001 | 60.0 [" in text and "| oracle (every instance demonstrated, gen-oracle) | | 90.0 [" in text
    assert f"| {everything} | 2001 | +30.0 [" in text  # the paired table, GRPO against 0 instances
    docs, png = tmp_path / "docs" / "results.md", tmp_path / "docs" / "results" / "curve.png"
    docs.parent.mkdir()
    docs.write_text("# Results\n")
    splits.write_curve_docs(result, docs, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    block = docs.read_text()
    assert block.count("<!-- splits:curve:latin-gen:begin") == 1 and "python -m cells splits --curve " in block
    assert "--oracle " + str(oracle) in block


def test_a_curve_point_counts_the_instances_its_run_had_when_evaluated_not_todays_catalogue(tmp_path):
    """The catalogue grows (a new site adds instances); a run evaluated before keeps its recorded count, and the
    evaluation records today's count for a new run."""
    from cells.evaluation import split_curve
    from cells.experiments.drift_split import trained_instance_count
    from cells.step_02_profiles import get_profile
    from cells.step_06_drift import drift_split

    everything = len(drift_split("latin-gen").training_ids())
    old = _curve_run(tmp_path, "gen-old", 2001, -1, 0.6)
    meta = json.loads((old / split_pool.EVAL_FILE).read_text())
    assert split_curve.train_instances(split_pool.load_split_run(old)) == everything  # none recorded: counted today
    (old / split_pool.EVAL_FILE).write_text(json.dumps({**meta, "train_instances": everything - 4}))
    assert split_curve.train_instances(split_pool.load_split_run(old)) == everything - 4
    gen = get_profile("cpu-gen")
    assert gen.drift_split == "latin-gen" and trained_instance_count(gen) == len(
        drift_split("latin-gen").training_ids(gen.drift_train_instances))
    assert trained_instance_count(get_profile("cpu-smoke")) is None  # no generated split


def test_the_curve_refuses_runs_that_differ_beyond_the_instances_hand_written_splits_and_a_lone_run(tmp_path):
    from cells.evaluation import split_curve

    base = _curve_run(tmp_path, "a", 2001, 0, 0.3)
    other = _curve_run(tmp_path, "b", 2001, -1, 0.6, learning_rate=0.002)
    with pytest.raises(split_pool.RecipeMismatchError, match="learning_rate"):
        splits.curve_splits([base, other], out=tmp_path / "c.json")
    with pytest.raises(split_pool.SplitPoolError, match="every run given has 0 instances"):
        splits.curve_splits([base], out=tmp_path / "c.json")
    seeds = [base, _curve_run(tmp_path, "a2", 2002, 0, 0.4)]  # two seeds of one point: no curve yet
    with pytest.raises(split_pool.SplitPoolError, match="every run given has 0 instances: --curve needs runs at two"):
        splits.curve_splits(seeds, out=tmp_path / "c.json")
    latin = _write_run(tmp_path, "latin", 1234, _outcomes(20, *(dict.fromkeys(SETS, 0.5),) * 2), _cases(20),
                       recipe={"drift_train_instances": -1})
    with pytest.raises(split_pool.SplitMismatchError, match="hand-written split"):
        split_curve.train_instances(split_pool.load_split_run(latin))
    fewer = _curve_run(tmp_path, "fewer", 2002, 100, 0.5, n=10)
    with pytest.raises(split_pool.CaseListMismatchError, match="same --per-set"):
        splits.curve_splits([base, fewer], out=tmp_path / "c.json")


def _shape(hidden, layers=3):
    """A recipe's flat record of a tiny-model shape (`tiny.<field>`), the preset's but `hidden` and `layers`."""
    tiny = dataclasses.replace(get_profile("cpu-gen").tiny, hidden_size=hidden, num_hidden_layers=layers)
    return {f"tiny.{k}": v for k, v in dataclasses.asdict(tiny).items()}


def test_model_sizes_order_runs_by_parameters_pair_within_seeds_and_refuse_other_differences(tmp_path):
    from cells.evaluation import split_curve
    from cells.modeling.tiny import tiny_parameters

    small = _curve_run(tmp_path, "gen-2001", 2001, -1, 0.3, **_shape(96))
    wide = _curve_run(tmp_path, "gen-wide-2001", 2001, -1, 0.5, **_shape(128, 4))
    result = splits.curve_splits([wide, small], out=tmp_path / "sizes.json", axis="sizes")
    sizes = [tiny_parameters(dataclasses.replace(get_profile("cpu-gen").tiny, hidden_size=h, num_hidden_layers=n))
             for h, n in ((96, 3), (128, 4))]
    assert [p["parameters"] for p in result["points"]] == sizes and sizes[0] < sizes[1]
    from cells.errors import DriftCallError
    from cells.modeling.tiny import MissingTokenizerError

    with pytest.raises(MissingTokenizerError, match="--write") as missing:  # a vocabulary no tokenizer is written for
        tiny_parameters(dataclasses.replace(get_profile("cpu-gen").tiny, vocab_size=12_345))
    assert isinstance(missing.value, DriftCallError) and isinstance(missing.value, FileNotFoundError)
    assert result["axis"] == "sizes" and result["required_points"] is None
    assert result["points"][1]["sets"]["unseen"]["vs_fewest"]["value"] == pytest.approx(0.2)  # paired, seed 2001
    text = split_curve.curve_markdown(result, "results/sizes.png")
    assert "against the tiny model's parameters" in text and "points the experiment asks for" not in text
    assert f"| {sizes[1]:,} | 2001 | 50.0 [" in text and f"paired difference against {sizes[0]:,} parameters" in text
    docs, png = tmp_path / "docs" / "results.md", tmp_path / "docs" / "results" / "sizes.png"
    docs.parent.mkdir()
    docs.write_text("# Results\n")
    splits.write_curve_docs(result, docs, png)
    block = docs.read_text()
    assert block.count("<!-- splits:sizes:latin-gen:begin") == 1 and "python -m cells splits --sizes " in block
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    other = _curve_run(tmp_path, "gen-wide-lr", 2001, -1, 0.5, learning_rate=0.002, **_shape(128, 4))
    with pytest.raises(split_pool.RecipeMismatchError, match=r"learning_rate.*change only the model's shape"):
        splits.curve_splits([small, other], out=tmp_path / "s.json", axis="sizes")
    more_data = _curve_run(tmp_path, "gen-wide-n0", 2001, 0, 0.5, **_shape(128, 4))  # the instances differ too
    with pytest.raises(split_pool.RecipeMismatchError, match="drift_train_instances"):
        splits.curve_splits([small, more_data], out=tmp_path / "s.json", axis="sizes")
    with pytest.raises(split_pool.SplitPoolError, match="records no tiny-model shape"):
        split_curve.model_parameters(split_pool.load_split_run(_curve_run(tmp_path, "hub", 2001, -1, 0.5)))


def test_a_knob_an_older_record_lacks_reads_as_its_declared_default_when_recipes_are_compared():
    from cells.profiles.profile import declared_default

    older = {"lora_r": 64, "seed": 1}
    assert split_pool.recipe_differences(older, older | {"grpo_advantage_on": declared_default("grpo_advantage_on")}) \
        == {}
    assert split_pool.recipe_differences(older, older | {"grpo_advantage_on": "success"}) == {
        "grpo_advantage_on": ["reward", "success"]}
    assert split_pool.recipe_differences(older, older | {"not_a_knob": 1}) == {"not_a_knob": [None, 1]}


def test_the_splits_command_draws_the_curve_from_saved_records(tmp_path, capsys):
    from cells.step_06_drift import drift_split

    runs = [_curve_run(tmp_path, "n0", 2001, 0, 0.3), _curve_run(tmp_path, "all", 2001, -1, 0.6)]
    out = tmp_path / "curve.json"
    assert splits.main(["--curve", *map(str, runs), "--out", str(out)]) == 0
    everything = len(drift_split("latin-gen").training_ids())
    assert [p["instances"] for p in json.loads(out.read_text())["points"]] == [0, everything]
    assert "[curve] 0 instances: unseen 30.0%" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        splits.main(["--curve", str(runs[0]), "--pool", str(runs[1])])
    with pytest.raises(SystemExit):
        splits.main(["--curve", str(runs[0]), "--sizes", str(runs[1])])
