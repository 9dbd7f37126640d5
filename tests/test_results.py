"""`python -m cells results`: the README results section is generated from a run directory, never typed."""

from __future__ import annotations

import json

import pytest

from cells.commands import results
from cells.evaluation.report import build_eval_report, compare_reports, save_report_json
from cells.evaluation.synthetic import synthetic_records
from cells.training.metrics import COLUMNS


def _fake_run(tmp_path, *, with_probe_share: float = 0.0):
    """A run directory holding what a finished CPU run writes, built by the real report code."""
    run = tmp_path / "runs" / "cpu-learn"
    (run / "training" / "warm_start").mkdir(parents=True)
    untrained = synthetic_records("untrained", skill=0.0, n_seeds=2, trials=1)
    warm = synthetic_records("baseline", skill=0.5, n_seeds=2, trials=1)
    trained = synthetic_records("trained", skill=0.9, n_seeds=2, trials=1)
    expert = synthetic_records("expert", skill=1.0, n_seeds=2, trials=1)
    kw = {"bootstrap_resamples": 200, "seed": 3}
    save_report_json(build_eval_report(untrained, **kw), run / "eval_untrained.json")
    save_report_json(build_eval_report(warm, **kw), run / "eval_baseline.json")
    save_report_json(build_eval_report(trained, **kw), run / "eval_final.json")
    save_report_json(build_eval_report(expert, **kw), run / "eval_reference.json")
    save_report_json(compare_reports(warm, trained, **kw), run / "eval_paired.json")
    save_report_json(compare_reports(untrained, warm, **kw), run / "eval_paired_warm_start.json")
    probe = {"policies": {"trained": {"offence_episode_share": {"repeated_call": with_probe_share}}}}
    (run / "probe.json").write_text(json.dumps(probe))
    (run / "profile.json").write_text(json.dumps({"name": "cpu-learn", "seed": 1234, "warm_start_full": True,
                                                  "copy_pretrain_stop_loss": 0.5}))
    (run / "memory.json").write_text(json.dumps({"step_12_model": 900.0, "step_15_train_stage1": 1234.5}))
    (run / "timings.json").write_text(json.dumps({"step_15_train_stage1": 600.0, "step_16_train_stage2": 300.0}))
    warm_json = {"training": {"examples": 100, "tokens": 70000, "trained_tokens": 9000, "steps": 13,
                              "seconds": 6.0, "tokens_per_s": 11666.7},
                 "copy_pretrain": {"steps": 1725, "seconds": 134.0, "final_loss": 0.38, "converged": True,
                                   "copy_accuracy": {"uniform": 0.99, "name_list": 0.815}},
                 "checkpoints": [{"step": 5, "seconds": 2.0, "valid_share": 0.5,
                                  "success_by_stage": {"1": {"success_rate": 0.25, "episodes": 5}}}]}
    (run / "training" / "warm_start" / "warm_start.json").write_text(json.dumps(warm_json))
    header = ",".join(COLUMNS)
    rows = [",".join({"stage": str(st), "step": str(i), "zero_std_group_frac": str(z)}.get(c, "")
                     for c in COLUMNS) for i, (st, z) in enumerate([(1, 1.0), (2, 0.5), (2, 0.25), (3, 0.0)], 1)]
    (run / "training" / "metrics.csv").write_text("\n".join([header, *rows]) + "\n")
    return run, warm, trained


def test_section_numbers_come_from_the_run_files(tmp_path):
    run, warm, _ = _fake_run(tmp_path)
    text = results.results_section(run)
    begin, end = results.markers("cpu-learn")
    assert text.startswith(begin) and text.endswith(end)
    paired = json.loads((run / "eval_paired.json").read_text())
    diff = paired["metrics"]["success"]["diff"]
    assert f"{100 * diff['value']:+.1f} pts [{100 * diff['low']:+.1f}, {100 * diff['high']:+.1f}]" in text
    stage1 = [r for r in warm if r.stage == 1]
    share = sum(r.success for r in stage1) / len(stage1)
    assert f"{100 * share:.1f}%" in text  # stage-1 success after the warm start
    assert "stage 2 37.5%" in text and "stage 3 0.0%" in text  # zero-variance means per stage from metrics.csv
    assert "15.0 min in all" in text and "100 fresh expert conversations" in text
    assert "The SFT effect" in text and "The GRPO effect" in text
    assert "Copy pretraining before the warm start" in text and "1,725 steps" in text and "reached the stop" in text
    assert "copied exactly: uniform 99.0%, name_list 81.5%" in text
    assert "Peak resident memory of the run: 1,234 MiB" in text  # the largest step's peak (1,234.5 rounds down)
    assert "Learning targets (set for cpu-learn)" in text and "after warm start" in text
    assert text.splitlines()[1].startswith("_Written by `python -m cells results --run-dir ")  # command, commit, date
    profile = json.loads((run / "profile.json").read_text())
    (run / "profile.json").write_text(json.dumps({**profile, "sft_episodes": 60, "sft_search_drills": 0.67}))
    assert "100 examples (60 fresh expert conversations + 40 search drills)" in results.results_section(run)
    (run / "profile.json").write_text(json.dumps({**profile, "sft_episodes": 50, "sft_search_drills": 0.8,
                                                  "sft_recovery_drills": 0.3}))
    assert "100 examples (50 fresh expert conversations + 40 search drills + 10 recovery drills)" in (
        results.results_section(run))
    (run / "profile.json").write_text(json.dumps({**profile, "sft_episodes": 50, "sft_search_drills": 0.6,
                                                  "sft_recovery_drills": 0.3, "sft_year_turn_drills": 0.1}))
    assert ("100 examples (50 fresh expert conversations + 30 search drills + 5 year-turn drills + 15 recovery "
            "drills)") in results.results_section(run)
    (run / "profile.json").write_text(json.dumps({**profile, "sft_episodes": 50, "sft_search_drills": 0.6,
                                                  "sft_recovery_drills": 0.2, "sft_field_drills": 0.2}))
    assert ("100 examples (50 fresh expert conversations + 30 search drills + 10 field drills + 10 recovery "
            "drills)") in results.results_section(run)
    (run / "profile.json").write_text(json.dumps({**profile, "sft_episodes": 50, "sft_search_drills": 0.6,
                                                  "sft_field_drills": 0.2, "sft_item_field_drills": 0.1}))
    assert ("100 examples (50 fresh expert conversations + 30 search drills + 10 field drills + 5 item-field "
            "drills + 5 recovery drills)") in results.results_section(run)


def test_a_reused_warm_start_is_named_with_its_own_minutes(tmp_path):
    run, _, _ = _fake_run(tmp_path)
    fresh = results.results_section(run)
    assert "--fresh" in fresh and "warm start + GRPO stage 1 10.0" in fresh and "reused here" not in fresh
    # a resumed invocation: step 15 loaded the saved warm start (its SFT took 6 s in warm_start.json) in 1 s
    (run / "timings.json").write_text(json.dumps({"step_15_train_stage1": 1.0, "step_16_train_stage2": 299.0}))
    text = results.results_section(run)
    assert "--fresh" not in text and f"--run-dir {run}" in text
    assert "reused here" in text and "SFT 6 s, copy pretraining 2.2 min" in text
    assert "GRPO stage 1 0.0; GRPO stage 2 5.0" in text and "warm start + GRPO" not in text
    assert "5.0 min in all" in text and "7.3 min (its data generation" in text  # 300 s + 6 s + 134 s


def test_the_command_names_a_seed_and_run_dir_that_are_not_the_presets(tmp_path):
    run, _, _ = _fake_run(tmp_path)
    assert "`python -m cells run --profile cpu-learn --fresh`" in results.results_section(run)  # preset seed 1234
    other = run.with_name("cpu-learn-seed2")
    run.rename(other)
    profile = json.loads((other / "profile.json").read_text())
    (other / "profile.json").write_text(json.dumps({**profile, "seed": 2}))
    text = results.results_section(other)
    assert f"`python -m cells run --profile cpu-learn --seed 2 --run-dir {other} --fresh`" in text
    assert "Profile `cpu-learn` (seed 2)" in text


def test_the_control_says_the_minutes_it_was_sized_to_and_those_it_took(tmp_path):
    run, _, _ = _fake_run(tmp_path)
    assert "SFT-only control: not run" in results.results_section(run)
    final = json.loads((run / "eval_final.json").read_text())
    control = {"grpo_seconds": 1200.0, "token_budget": 4_900_000, "seconds": 2880.0, "tokens": 5_000_000,
               "trained_tokens": 1_000_000}
    (run / "eval_sft_control.json").write_text(json.dumps({**final, "control": control}))
    for name in ("eval_paired_control.json", "eval_paired_grpo_vs_control.json"):
        (run / name).write_text((run / "eval_paired.json").read_text())
    text = results.results_section(run)
    assert "sized to GRPO's 20.0 minutes at the warm start's recorded tokens/s (4,900,000 tokens" in text
    assert "it took 48.0 min here (5,000,000 tokens, 1,000,000 trained)" in text
    assert "GRPO − control:" in text


def test_targets_say_met_or_not_from_measurements(tmp_path):
    run, _, _ = _fake_run(tmp_path, with_probe_share=0.05)
    reports = results.load_reports(run)
    zero_var = results.zero_variance_by_stage(run / "training" / "metrics.csv")
    by_name = {t.name: t for t in results.targets(reports, zero_var)}
    probe = by_name["worst offence class in the trained model's probe episodes"]
    assert probe.ok is False and "repeated_call: 5.0%" in probe.measured
    zero = by_name["zero-variance GRPO groups, stages 2-3"]
    assert zero.ok is False  # stage 2 averaged 37.5% > 30%
    s1 = reports["baseline"]["policies"]["baseline"]["by_stage"]["1"]["success"]["value"]
    assert by_name["held-out stage-1 success after the warm start"].ok is (s1 >= 0.60)


def test_the_wall_time_target_is_judged_only_for_a_run_that_trained_everything(tmp_path):
    run, _, _ = _fake_run(tmp_path)
    warm = json.loads((run / "training" / "warm_start" / "warm_start.json").read_text())
    one_piece = results.one_piece_target({"step_15_train_stage1": 3000.0, "step_16_train_stage2": 500.0}, warm)
    assert one_piece.ok is True and one_piece.measured == "58.3 min"
    assert results.one_piece_target({"step_15_train_stage1": 3000.0, "step_16_train_stage2": 700.0}, warm).ok is False
    # step 15 shorter than the warm start's own SFT (6 s): it only reloaded, so the minutes are not the run's
    reused = results.one_piece_target({"step_15_train_stage1": 1.0, "step_16_train_stage2": 299.0}, warm)
    assert reused.ok is None and "reused warm start" in reused.measured
    assert results.one_piece_target(None, warm).ok is None
    assert "| one command, wall time | <= 60 min | 15.0 min | met |" in results.results_section(run)


def test_write_replaces_only_the_marked_section_and_draws_the_plot(tmp_path):
    run, _, _ = _fake_run(tmp_path)
    readme = tmp_path / "README.md"
    begin, end = results.markers("cpu-learn")
    other = "\n".join(results.markers("cpu-smoke"))
    readme.write_text(f"# Title\n\nbefore\n\n{begin}\nold numbers\n{end}\n\n{other}\n\nafter\n")
    results.write_readme_results(run, readme, tmp_path / "docs" / "results")
    text = readme.read_text()
    assert "old numbers" not in text and text.startswith("# Title\n\nbefore\n") and text.endswith("\n\nafter\n")
    assert f"\n{other}\n" in text  # another profile's section is left alone
    assert (tmp_path / "docs" / "results" / f"cpu-learn_{results.PLOT_NAME}").stat().st_size > 1000
    assert f"](docs/results/cpu-learn_{results.PLOT_NAME})" in text
    again = readme.read_text()
    results.write_readme_results(run, readme, tmp_path / "docs" / "results")
    assert readme.read_text() == again  # rerunning on the same run changes nothing


def test_errors_name_what_is_missing(tmp_path):
    with pytest.raises(results.ResultsError, match=r"profile\.json is missing"):
        results.results_section(tmp_path)
    with pytest.raises(results.ResultsError, match="no results markers for 'cpu-learn'"):
        results.replace_section("# no markers\n", "x", "cpu-learn")


def test_copy_diagnostics_count_issued_tokens_and_right_slots():
    from cells.agent.play import play_episode
    from cells.commands.diagnose import copy_diagnostics
    from cells.step_07_tasks import eval_seeds
    from cells.step_10_env import DriftCallEnv
    from cells.step_11_agent import EXPLOIT_POLICIES, ExpertPolicy

    def played(policy, n=6):
        out = []
        for seed in eval_seeds(n, 1, "en"):
            env = DriftCallEnv(1, {"en": 1.0})
            play_episode(env, policy(), seed)
            out.append(env.episode())
        return out

    expert = copy_diagnostics(played(ExpertPolicy))
    assert expert["write_calls"] >= 6 and expert["write_calls_with_issued_token"] == expert["write_calls"]
    assert expert["searches_with_goal_slots_right"] == expert["searches"] == 6
    assert expert["episodes_with_booking"] == expert["episodes"] == 6
    invent = copy_diagnostics(played(EXPLOIT_POLICIES["invent"]))
    assert invent["write_calls"] > 0 and invent["write_calls_with_issued_token"] < invent["write_calls"]


def test_copy_diagnostics_count_search_dates_by_one_and_two_digit_day():
    """The expert writes every date right; a player that writes a one-digit day's digit where its zero goes
    (`2026-05-02` as `2026-05-22`, the warm start's commonest date error) is counted wrong there only."""
    import re

    from cells.agent.play import play_episode
    from cells.commands.diagnose import copy_diagnostics, date_slot_kind, offence_row
    from cells.step_07_tasks import eval_seeds
    from cells.step_08_rewards import rewards_of
    from cells.step_10_env import DriftCallEnv
    from cells.step_11_agent import ExpertPolicy

    assert date_slot_kind("2026-05-02") == "one_digit_day" and date_slot_kind("2026-05-22T10:30") == "two_digit_day"
    assert date_slot_kind("HYD") is None and date_slot_kind(2) is None

    def doubled_day(text):  # every one-digit day's digit written where its zero goes
        return re.sub(r"(\d{4}-\d{2}-)0(\d)", r"\1\2\2", text)

    class DoubledDayPolicy(ExpertPolicy):
        def act(self, observation, history=None):
            return doubled_day(super().act(observation, history))

    def played(policy):
        episodes = []
        for seed in eval_seeds(24, 1, "en"):
            env = DriftCallEnv(1, {"en": 1.0})
            play_episode(env, policy(), seed)
            episodes.append(env.episode())
        return episodes

    doubled_episodes = played(DoubledDayPolicy)
    expert, doubled = copy_diagnostics(played(ExpertPolicy)), copy_diagnostics(doubled_episodes)
    assert expert["one_digit_day_slots"] > 0 and expert["two_digit_day_slots"] > 0
    assert expert["one_digit_day_slots_right"] == expert["one_digit_day_slots"]
    assert expert["two_digit_day_slots_right"] == expert["two_digit_day_slots"]
    assert doubled["one_digit_day_slots"] == expert["one_digit_day_slots"]
    assert doubled["one_digit_day_slots_right"] == 0
    assert doubled["two_digit_day_slots_right"] == doubled["two_digit_day_slots"] == expert["two_digit_day_slots"]
    # what `diagnose --probe` shows for such a booking: the wrong slot, expected against written
    rows = [offence_row(ep, rewards_of(ep)) for ep in doubled_episodes]
    wrong = [r for r in rows if r is not None and r["failure"].startswith("booked, wrong")]
    assert wrong and all(r["wrong_slots"] for r in wrong)
    for slot in (s for r in wrong for s in r["wrong_slots"].values()):
        assert slot["actual"] == doubled_day(slot["expected"]) != slot["expected"]


def test_refusal_summary_counts_the_same_call_sent_again_after_a_refused_booking():
    """The naive player answers a refused booking with one identical retry; the expert never does."""
    from cells.agent.play import play_episode
    from cells.commands.diagnose import refusal_cases, refusal_summary
    from cells.step_10_env import DriftCallEnv
    from cells.step_11_agent import ExpertPolicy, NaivePolicy

    cases = refusal_cases(30)
    assert [c.stage for c in cases[:4]] == [2, 3, 2, 3]

    def summary(policy):
        return refusal_summary(play_episode(DriftCallEnv(c.stage, {c.language: 1.0}), policy(), c.seed)[0]
                               for c in cases)

    expert, naive = summary(ExpertPolicy), summary(NaivePolicy)
    assert expert["episodes"] == naive["episodes"] == 30
    assert expert["refused"] >= 5 and expert["repeated"] == 0 and expert["booked"] >= expert["refused"] - 2
    assert naive["refused"] >= 5 and naive["repeated"] == naive["refused"] and naive["booked"] < naive["refused"]
    for counts in (expert, naive):
        assert sum(c["refused"] for c in counts["by_code"].values()) == counts["refused"]
        assert "TIMEOUT" not in counts["by_code"]  # a timeout's fix is the identical call: no refusal


def test_development_summary_counts_success_per_stage_and_each_wrong_binding_fact():
    """`diagnose --dev` reads development cases (clear of the probe's and --refusals' cases): the expert succeeds in
    all of them; a player booking one unit short fails every booked one, and the fact it got wrong is named."""
    from cells.agent.play import play_episode
    from cells.commands.diagnose import DEVELOPMENT_CASES_FROM, development_summary, refusal_cases
    from cells.step_07_tasks import eval_seeds
    from cells.step_10_env import DriftCallEnv
    from cells.step_11_agent import EXPLOIT_POLICIES, ExpertPolicy
    from cells.step_20_probe import probe_cases

    cases = probe_cases(24, start=DEVELOPMENT_CASES_FROM)
    taken = {c.seed for c in probe_cases(1_000)} | {c.seed for c in refusal_cases(1_000)}
    taken |= {s for stage in (1, 2, 3) for lang in ("hi", "ta", "kn", "en", "hinglish") for s in eval_seeds(50, stage, lang)}
    assert not {c.seed for c in cases} & taken

    def summary(policy):
        played = [play_episode(DriftCallEnv(c.stage, {c.language: 1.0}), policy(), c.seed) for c in cases]
        return development_summary(played)

    expert, short = summary(ExpertPolicy), summary(EXPLOIT_POLICIES["wrong_quantity"])
    assert expert["played"] == 24 and expert["success"] == 1.0 and expert["failures"] == 0
    assert expert["success_by_stage"] == {"1": 1.0, "2": 1.0, "3": 1.0} and expert["wrong_facts"] == {}
    assert short["success"] == 0.0 and short["failures"] == 24
    booked_wrong = sum(n for f, n in short["by_failure"].items() if f.startswith("booked, wrong"))
    assert booked_wrong >= 12 and sum(short["wrong_facts"].values()) >= booked_wrong
    assert set(short["wrong_facts"]) <= {"airline.passengers", "airline.passenger_names", "restaurant.party_size",
                                         "hotel.rooms", "cab.pickup_time"} | {
        k for k in short["wrong_facts"] if ".constraint:" in k}


def test_section_reports_what_the_model_did_after_refusals_when_present(tmp_path):
    run, _, _ = _fake_run(tmp_path)
    assert "--refusals" not in results.results_section(run)
    (run / "diagnose_refusals.json").write_text(json.dumps({
        "episodes": 300, "refused": 170, "repeated": 7, "booked": 150,
        "by_code": {"MISSING_REQUIRED_FIELD": {"refused": 80, "repeated": 0, "booked": 75},
                    "BOOKING_WINDOW_CLOSED": {"refused": 14, "repeated": 6, "booked": 7}}}))
    text = results.results_section(run)
    assert "on 300 drifted probe-range episodes" in text and "after 7 of 170 refusals" in text
    assert "MISSING_REQUIRED_FIELD 0 of 80 (booked 75); BOOKING_WINDOW_CLOSED 6 of 14 (booked 7)" in text
    assert "--warm-start" not in text
    (run / "diagnose_refusals_warm_start.json").write_text(json.dumps({
        "episodes": 300, "refused": 168, "repeated": 12, "booked": 138,
        "by_code": {"BOOKING_WINDOW_CLOSED": {"refused": 12, "repeated": 6, "booked": 6}}}))
    text = results.results_section(run)
    warm = text.index("`python -m cells diagnose --refusals --warm-start`: the warm start on 300")
    trained = text.index("`python -m cells diagnose --refusals`: the trained model on 300")
    assert warm < trained  # what the model inherited, then what GRPO left
    assert "after 12 of 168 refusals" in text[warm:trained] and "after 7 of 170 refusals" in text[trained:]


def test_section_reports_the_diagnosis_when_present(tmp_path):
    run, _, _ = _fake_run(tmp_path)
    (run / "diagnose.json").write_text(json.dumps({"episodes": 60, "write_calls": 153,
                                                   "write_calls_with_issued_token": 0, "episodes_with_token": 60,
                                                   "searches": 62, "searches_with_goal_slots_right": 24,
                                                   "episodes_with_booking": 0, "one_digit_day_slots": 15,
                                                   "one_digit_day_slots_right": 11, "two_digit_day_slots": 30,
                                                   "two_digit_day_slots_right": 29, "year_turn_slots": 3,
                                                   "year_turn_slots_right": 1}))
    text = results.results_section(run)
    assert "0 of 153 booking/order calls" in text and "24 of 62 searches" in text
    assert ("the dates in them right: 11 of 15 one-digit days, 29 of 30 two-digit days, 1 of 3 at the year's "
            "turn") in text


def test_copy_diagnostics_count_dates_at_the_years_turn_again():
    """A date in the next calendar year is counted under its day kind and again as `year_turn`; a player that writes
    this year for it (the dfb6f13 warm start's error: `2026-01-09` for `2027-01-09`) is wrong there."""
    from cells.agent.play import play_episode
    from cells.commands.diagnose import DAY_KINDS, copy_diagnostics
    from cells.step_02_profiles import TRAIN_SEEDS
    from cells.step_07_tasks import crosses_year, generate
    from cells.step_10_env import DriftCallEnv
    from cells.step_11_agent import ExpertPolicy

    class ThisYearPolicy(ExpertPolicy):
        def act(self, observation, history=None):
            return super().act(observation, history).replace('"2027-', '"2026-')

    seeds = [s for s in map(TRAIN_SEEDS.seed, range(400)) if crosses_year(generate(s, 1, {"en": 1.0}))][:3]
    assert len(seeds) == 3

    def played(policy):
        episodes = []
        for seed in seeds:
            env = DriftCallEnv(1, {"en": 1.0})
            play_episode(env, policy(), seed)
            episodes.append(env.episode())
        return copy_diagnostics(episodes)

    expert, this_year = played(ExpertPolicy), played(ThisYearPolicy)
    assert expert["year_turn_slots"] >= 3 and expert["year_turn_slots_right"] == expert["year_turn_slots"]
    assert sum(expert.get(f"{kind}_slots", 0) for kind in DAY_KINDS) >= expert["year_turn_slots"]  # counted twice
    assert this_year["year_turn_slots"] == expert["year_turn_slots"] and this_year["year_turn_slots_right"] == 0


def _scripted_failures(policy, stage=1, n=4):
    from cells.agent.play import play_episode
    from cells.commands.diagnose import failure_row
    from cells.step_07_tasks import eval_seeds
    from cells.step_08_rewards import rewards_of
    from cells.step_10_env import DriftCallEnv

    rows = []
    for seed in eval_seeds(n, stage, "en"):
        env = DriftCallEnv(stage, {"en": 1.0})
        play_episode(env, policy(), seed)
        rows.append(failure_row(env.episode(), rewards_of(env.episode())))
    return rows


def test_failure_rows_say_why_the_task_failed_from_the_reward_breakdown():
    from cells.commands.diagnose import failure_summary
    from cells.step_11_agent import EXPLOIT_POLICIES

    wrong = _scripted_failures(EXPLOIT_POLICIES["wrong_fast"])
    assert all(r["failure"].startswith("booked, wrong ") for r in wrong)  # one required slot off, named
    assert all(r["terminated_by"] == "submit" and r["template"] and r["domain"] for r in wrong)
    quit_ = _scripted_failures(EXPLOIT_POLICIES["give_up"])
    assert {r["failure"] for r in quit_} == {"nothing booked"} and {r["terminated_by"] for r in quit_} == {"abort"}
    summary = failure_summary(wrong + quit_)
    assert summary["failures"] == 8 and summary["by_failure"]["nothing booked"] == 4
    assert sum(summary["by_domain"].values()) == 8 and summary["by_end"] == {"submit": 4, "abort": 4}


def test_section_summarises_the_trained_models_failures_when_diagnosed(tmp_path):
    from cells.commands.diagnose import failure_summary
    from cells.step_11_agent import EXPLOIT_POLICIES

    run, _, _ = _fake_run(tmp_path)
    assert "Where the trained model still fails" not in results.results_section(run)
    rows = _scripted_failures(EXPLOIT_POLICIES["give_up"], n=3)
    (run / "diagnose_failures.json").write_text(json.dumps(failure_summary(rows)))
    text = results.results_section(run)
    assert "its 3 failed held-out episodes replayed greedily" in text and "why nothing booked 3" in text


def test_an_invented_id_is_read_against_the_string_shown_most_like_it():
    from types import SimpleNamespace

    from cells.commands.diagnose import invented_id_reading, nearest_shown

    shown = SimpleNamespace(turn=2, response={"flights": [{"flight_id": "IX-898"}, {"flight_id": "AI-4417"}]})
    episode = SimpleNamespace(results=(shown,))
    assert nearest_shown(episode, 3, "IX-8980") == ("IX-898", 0.923)
    assert nearest_shown(episode, 2, "IX-8980") == (None, 0.0)  # a result counts only from the next turn
    miscopy = {"code": "invented_id", "turn": 3, "evidence": {"tool": "airline.book", "value": "IX-8980"}}
    assert invented_id_reading(episode, miscopy)["reading"] == "miscopy"
    other = {"code": "invented_id", "turn": 3, "evidence": {"tool": "airline.book", "value": "SG-5521"}}
    assert invented_id_reading(episode, other)["reading"] == "unlike any shown"


def test_section_lists_the_trained_models_probe_offences_when_diagnosed(tmp_path):
    from cells.agent.play import play_episode
    from cells.commands.diagnose import offence_row, probe_offence_summary
    from cells.step_07_tasks import eval_seeds
    from cells.step_08_rewards import rewards_of
    from cells.step_10_env import DriftCallEnv
    from cells.step_11_agent import EXPLOIT_POLICIES, ExpertPolicy

    rows = []
    for policy in (EXPLOIT_POLICIES["invent"], ExpertPolicy):
        for seed in eval_seeds(2, 1, "en"):
            env = DriftCallEnv(1, {"en": 1.0})
            play_episode(env, policy(), seed)
            rows.append(offence_row(env.episode(), rewards_of(env.episode())))
    assert rows[2:] == [None, None]  # the expert commits no offence
    summary = probe_offence_summary(rows, 4)
    assert summary["offending_episodes"] == 2 and summary["by_code"]["invented_id"] == 2
    assert all(i["value"] and i["reading"] in ("miscopy", "unlike any shown") for i in summary["invented_ids"])
    run, _, _ = _fake_run(tmp_path)
    assert "offences in the probe" not in results.results_section(run)
    (run / "diagnose_probe.json").write_text(json.dumps(summary))
    text = results.results_section(run)
    assert "its 4 probe episodes replayed greedily): 2 of them had an offence; episodes per class: " in text
    assert "invented_id 2" in text and f"`{summary['invented_ids'][0]['value']}` (nothing shown before it)" in text
    # the invented ids never reach a booking: both tasks fail, and the section says why
    assert [r["failure"] for r in rows[:2]] == ["nothing booked", "nothing booked"]
    assert summary["by_failure"] == {"nothing booked": 2} and "Why their tasks failed: nothing booked 2." in text


def test_command_line_parses_and_runs_results_control_and_diagnose(tmp_path, capsys):
    from cells.__main__ import main

    run, _, _ = _fake_run(tmp_path)
    assert main(["results", "--run-dir", str(run), "--print"]) == 0
    begin, _ = results.markers("cpu-learn")
    assert capsys.readouterr().out.startswith(begin)
    # a run without a warm-started model: both say so in one line and exit 2 (the project's own errors)
    assert main(["control", "--run-dir", str(run)]) == 2
    assert main(["diagnose", "--run-dir", str(run)]) == 2
    assert "no full warm start" in capsys.readouterr().err
    assert main(["diagnose", "--failures", "--run-dir", str(run)]) == 2
    assert "is missing: run the pipeline through step 24 first (`--steps 1-17,24`" in capsys.readouterr().err
    assert main(["diagnose", "--probe", "--run-dir", str(run)]) == 2
    assert "export is missing: run the pipeline through step 24 first" in capsys.readouterr().err
    assert main(["diagnose", "--run-dir", str(run), "--refusals", "--episodes", "5"]) == 2  # diagnose's own flags
    assert "export is missing: run the pipeline through step 24 first" in capsys.readouterr().err
    assert main(["diagnose", "--run-dir", str(run), "--refusals", "--warm-start"]) == 2
    assert "no full warm start" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # --warm-start only changes which model --refusals plays
        main(["diagnose", "--run-dir", str(run), "--warm-start"])
    assert "--warm-start goes with --refusals" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # only diagnose takes flags its subcommand does not declare
        main(["control", "--run-dir", str(run), "--refusals"])


def test_a_pretrained_model_run_labels_its_baseline_and_reports_generation_speed(tmp_path):
    run, _, _ = _fake_run(tmp_path)
    (run / "profile.json").write_text(json.dumps({"name": "cpu-gemma", "seed": 1234, "warm_start_full": False}))
    baseline = json.loads((run / "eval_baseline.json").read_text())
    baseline["generation"] = {"episodes": 15, "generated_tokens": 2880, "seconds": 240.0, "tokens_per_s": 12.0,
                              "peak_memory_mb": 3100.0}
    (run / "eval_baseline.json").write_text(json.dumps(baseline))
    text = results.results_section(run)
    assert "pretrained (adapter off)" in text and "after warm start + GRPO" in text
    assert "| baseline (adapter off) | 15 | 2,880 | 240 | 12.0 |" in text
    assert "Issue 10's targets" not in text  # set for the tiny CPU profiles only


def test_the_glance_block_reads_the_sections_of_the_results_file(tmp_path):
    run, _, _ = _fake_run(tmp_path)
    docs = tmp_path / "results.md"
    docs.write_text("# Results\n\n" + results.results_section(run) + "\n")
    block = results.glance_block(docs.read_text())
    lines = block.splitlines()
    assert len(lines) <= 15 and lines[0].startswith("<!-- results:glance:begin") and lines[-1].endswith(":end -->")
    assert "at commit" not in block  # the README names no commit
    row = next(line for line in lines if "cpu-learn" in line)
    stages = results._tables_after(docs.read_text(), "Held-out success by stage")
    all_row = dict(zip(stages[0], next(r for r in stages[1:] if r[0] == "all"), strict=True))
    assert f"| {all_row['after warm start'].split(' [')[0]} |" in row  # the docs' number, not retyped
    assert "15.0 min" in row  # the wall time of the section's header sentence


def test_without_run_files_the_command_keeps_the_section_and_rewrites_the_glance(tmp_path, capsys):
    run, _, _ = _fake_run(tmp_path)
    docs, readme = tmp_path / "results.md", tmp_path / "README.md"
    docs.write_text(results.results_section(run) + "\n")
    readme.write_text("# Title\n\n" + "\n".join(results.docblocks.markers(results.GLANCE, results.COMMAND)) + "\nend\n")
    kept = docs.read_text()
    assert results.main(["--run-dir", str(tmp_path / "nothing"), "--readme", str(docs), "--glance", str(readme)]) == 0
    assert docs.read_text() == kept and "kept the existing section" in capsys.readouterr().out
    assert "| [`cpu-learn`](docs/results.md) |" in readme.read_text() and readme.read_text().endswith("\nend\n")


@pytest.mark.parametrize(("cell", "words"), [
    ("-1.7 pts [-8.3, +5.0]", "GRPO does not add to the warm start on drifted episodes: the paired 95% interval spans 0"),
    ("+11.7 pts [+5.0, +20.0]", "GRPO adds to the warm start on drifted episodes: the paired 95% interval lies above 0"),
    ("-9.0 pts [-15.0, -2.0]", "GRPO loses against the warm start on drifted episodes"),
])
def test_the_glance_says_in_words_what_the_headline_runs_grpo_column_shows(cell, words):
    """The sentence under the glance is generated from the table's own cell, so it cannot go stale."""
    row = ["[`cpu-learn`](docs/results.md)", "0.0%", "90.0%", "90.0%", "—", "100.0%", cell, "34.0 min"]
    assert words in results._headline_sentence(["cpu-learn", "cpu-smoke"], [row])
    assert results._headline_sentence(["cpu-smoke"], [row]) == ""  # no headline run, no sentence


class _MisnamingTheField:
    """The expert, except that the call it resends after a refusal naming a missing field carries the field under
    a garbled key (`sur`), as the tiny warm start writes a name it never saw; or, `cut`, the right call cut short
    (it names the field but does not parse)."""

    name = "misnaming"
    cut = False

    def __init__(self) -> None:
        from cells.step_11_agent import ExpertPolicy

        self.expert = ExpertPolicy()
        self.named: tuple[str, str] | None = None  # (tool, field_name) of the last refusal naming a field

    def reset(self, observation, goal=None) -> None:
        self.expert.reset(observation, goal)
        self.named = None

    def act(self, observation, history=None) -> str:
        from cells.actions import parse_action
        from cells.agent.policies.base import tool_args

        text = self.expert.act(observation, history)
        result = observation.last_result
        if result is not None and result.response.get("error_code") == "MISSING_REQUIRED_FIELD":
            self.named = (result.tool_name, str(result.response["field_name"]))
        action = parse_action(text)
        if self.named is None or action.tool_name != self.named[0]:
            return text
        if self.cut:
            return text[:-3]
        listed, nested, field = self.named[1].partition("[].")
        if not nested:
            return tool_args(action.tool_name, {("sur" if k == listed else k): v for k, v in action.tool_args.items()})
        items = [{("sur" if k == field else k): v for k, v in item.items()} for item in action.tool_args[listed]]
        return tool_args(action.tool_name, {**action.tool_args, listed: items})


@pytest.mark.parametrize("pattern", ["gen/required_item_field/airline/passenger_list/meal_preferences",
                                     "gen/required_argument/airline/from/origin"])
def test_named_field_summary_tells_a_copied_name_from_a_garbled_one_and_an_unchanged_retry(pattern):
    """`diagnose --reach` counts, after a refusal naming a missing field (nested or top level), whether the next call
    carries that name: the expert copies it, a player writing another key is caught with the key it wrote, the
    naive player's identical retry adds nothing."""
    from cells.agent.play import play_episode
    from cells.commands.diagnose import REACH_CASES_FROM, named_field_summary
    from cells.evaluation.runner import env_for_case
    from cells.evaluation.splits import split_cases
    from cells.step_02_profiles import PROBE_SEEDS
    from cells.step_06_drift import drift_split
    from cells.step_11_agent import ExpertPolicy, NaivePolicy

    (_, cases), = split_cases(drift_split("latin-gen"), 6, PROBE_SEEDS, start=REACH_CASES_FROM, pattern=pattern).items()

    def summary(policy):
        return named_field_summary(play_episode(env_for_case(c), policy(), c.seed)[0] for c in cases)

    cut = type("CuttingTheCall", (_MisnamingTheField,), {"cut": True})
    expert, garbled, naive = summary(ExpertPolicy), summary(_MisnamingTheField), summary(NaivePolicy)
    assert expert["refused"] == expert["resent"] == expert["copied"] >= 4 and expert["written_instead"] == {}
    assert expert["unparsable"] == garbled["unparsable"] == naive["unparsable"] == 0
    assert garbled["refused"] == garbled["resent"] == expert["refused"] and garbled["copied"] == 0
    assert garbled["written_instead"] == {"sur": garbled["refused"]}
    assert naive["refused"] >= 4 and naive["copied"] == 0 and naive["written_instead"] == {}
    broken = summary(cut)  # the name written, the call unparsable: never resent, so not copied
    assert broken["refused"] == broken["unparsable"] == broken["unparsable_naming_it"] == expert["refused"]
    assert broken["resent"] == broken["copied"] == 0
