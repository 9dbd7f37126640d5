"""`python -m cells control`: the SFT-only control continues a run's warm start for GRPO's minutes and pairs it."""

from __future__ import annotations

import dataclasses
import json
import os
import time

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from cells.experiments import control
from cells.step_02_profiles import TRAIN_SEEDS, get_profile
from cells.training.metrics import COLUMNS
from cells.training.sft_data import WarmStartError


def _case_dict(case) -> dict:
    """A case as a saved spec holds it: its `drifts` only where it names some (EvalSpec.to_dict)."""
    return {k: v for k, v in dataclasses.asdict(case).items() if k != "drifts" or v}


def _metrics_csv(path, step_times, stages=None, resampled=None, cpu=None):
    header = ",".join(COLUMNS)
    rows = []
    for i, t in enumerate(step_times, 1):
        extra = {"step_time": t, **({"groups/resampled": resampled[i - 1]} if resampled else {}),
                 **({"step_cpu": cpu[i - 1]} if cpu else {})}
        values = {"stage": str(stages[i - 1] if stages else 1), "step": str(i),
                  "extra": json.dumps(extra).replace('"', '""')}
        rows.append(",".join(f'"{values[c]}"' if c == "extra" else values.get(c, "") for c in COLUMNS))
    path.write_text("\n".join([header, *rows]) + "\n")


def test_grpo_seconds_sums_step_cpu_times_or_for_older_runs_step_times(tmp_path):
    _metrics_csv(tmp_path / "old.csv", [1.5, 2.0, 0.5])
    assert control.grpo_seconds(tmp_path / "old.csv") == (pytest.approx(4.0), "wall")
    _metrics_csv(tmp_path / "new.csv", [1.5, 2.0, 0.5], cpu=[3.0, 3.5, 1.0])
    assert control.grpo_seconds(tmp_path / "new.csv") == (pytest.approx(7.5), "cpu")
    with pytest.raises(control.ControlError, match="no GRPO steps"):
        control.grpo_seconds(tmp_path / "absent.csv")
    warm = {"tokens_per_s": 100.0, "tokens_per_cpu_s": 50.0}
    assert control.control_token_budget(10.0, warm, "cpu") == 500 and control.control_token_budget(10.0, warm) == 1000
    assert control.control_token_budget(10.0, {"tokens_per_s": 100.0}, "cpu") == 1000  # a warm start without CPU time


def test_control_data_never_reuses_warm_start_seeds():
    from cells.training.sft_data import SFT_STAGE_SEED_STRIDE

    profile = get_profile("cpu-smoke")
    convs = control.control_conversations(profile, 6)
    assert len(convs) == 6
    first = profile.seed + control.CONTROL_SEED_BLOCK * SFT_STAGE_SEED_STRIDE
    warm_start_blocks = range(profile.seed, profile.seed + 3 * SFT_STAGE_SEED_STRIDE)
    assert first not in warm_start_blocks and TRAIN_SEEDS.seed(first) >= 0


def test_control_data_follow_the_warm_starts_recipe_with_its_drills():
    """Same recipe as step 15 (both kinds of drills, turn budgets), so the control's length per example is the warm
    start's."""
    from cells.training.sft_data import generate_conversations, sft_plan_item

    profile = get_profile("cpu-learn")
    assert (profile.sft_search_drills, profile.sft_booking_drills, profile.sft_recovery_drills,
            profile.sft_year_turn_drills) == (1.0, 0.6, 0.45, 0.15)
    convs = control.control_conversations(profile, 30)  # ten conversations per stage, each with its drills
    warm_recipe = generate_conversations([sft_plan_item(profile, 10, 2, control.CONTROL_SEED_BLOCK + 1)])
    # search, booking, recovery, year-turn drills
    assert sum(m[0]["content"].startswith("Now: ") for m in warm_recipe) == 10 + 6 + 4 + 2
    assert [m for m in convs if m in warm_recipe] == warm_recipe  # stage 2's share is exactly step 15's recipe
    assert len(convs) == 28 + 32 + 32  # stage 1 draws no recovery drills
    # here ten conversations round (half to even) 4.5 recovery drills to 4 and 1.5 year-turn drills to 2; at the
    # profile's scale: a conversation, a search drill, 0.6 booking drills, 0.15 year-turn drills, and 0.45 recovery
    # drills in two stages of three
    assert control.examples_per_conversation(profile) == pytest.approx(1 + 1 + 0.6 + 0.15 + 0.45 * 2 / 3, rel=1e-3)


def test_control_is_cut_to_its_token_budget():
    from datasets import Dataset

    warm = {"tokens": 40_000, "examples": 100, "tokens_per_s": 5_000.0}
    budget = control.control_token_budget(2.0, warm)
    assert budget == 10_000
    assert control.conversations_for_budget(budget, warm, epochs=1, batch_size=8) == 28  # 25 + 10% margin
    assert control.conversations_for_budget(budget, warm, epochs=2, batch_size=8) == 56  # tokens counted both passes
    assert control.conversations_for_budget(budget, warm, epochs=1, batch_size=8, per_conversation=3.0) == 10  # + 20 drills
    data = Dataset.from_dict({"length": [400] * 28})
    assert len(control.take_token_budget(data, budget, batch_size=8)) == 25
    assert len(control.take_token_budget(data, 100, batch_size=8)) == 8  # at least one batch


def test_refuses_a_run_without_a_full_warm_start(tmp_path):
    (tmp_path / "profile.json").write_text(json.dumps(dataclasses.asdict(get_profile("cpu-smoke"))))
    with pytest.raises(WarmStartError, match="no full warm start"):
        control.run_control(tmp_path)


def _finished_run(tmp_path, step_times=(2.0,)):
    """A miniature finished run (cpu-smoke model, 2 held-out cases, GRPO steps of `step_times` seconds in stage 1);
    returns the run dir and its evaluation cases."""
    from cells.evaluation.records import save_records_jsonl
    from cells.evaluation.report import save_report_json
    from cells.evaluation.runner import EvalCase, evaluate, make_spec, report_for
    from cells.modeling.tiny import build_or_load_tiny
    from cells.step_07_tasks import eval_seeds

    profile = get_profile("cpu-smoke")
    run = tmp_path / "run"
    (run / "training" / "warm_start").mkdir(parents=True)
    (run / "profile.json").write_text(json.dumps(dataclasses.asdict(profile)))
    base, tok, _ = build_or_load_tiny(profile.tiny, run / "tiny_model", profile.seed)
    tok.padding_side = "left"
    base.save_pretrained(run / "training" / "warm_start" / "model")
    (run / "training" / "warm_start" / "warm_start.json").write_text(json.dumps(
        {"training": {"examples": 100, "tokens": 40_000, "trained_tokens": 5_000, "steps": 13, "seconds": 8.0,
                      "tokens_per_s": 5_000.0}}))
    _metrics_csv(run / "training" / "metrics.csv", list(step_times))
    cases = tuple(EvalCase(s, 1, "en") for s in eval_seeds(2, 1, "en"))
    spec = make_spec(profile, cases)
    for name, file in (("baseline", "baseline"), ("trained", "final")):
        greedy, sampled = evaluate(name, spec, model=base, tokenizer=tok)
        report = report_for(greedy, sampled, profile)
        report["eval_spec"] = spec.to_dict()
        save_report_json(report, run / f"eval_{file}.json")
        save_records_jsonl(greedy, run / f"records_{file}.jsonl")
    return run, cases


@pytest.mark.slow
def test_control_trains_evaluates_and_pairs_on_the_runs_own_spec(tmp_path):
    """A miniature finished run (cpu-smoke model, 2 held-out cases, one 2-second GRPO step), then the control."""
    profile = get_profile("cpu-smoke")
    run, cases = _finished_run(tmp_path)  # 2 s of GRPO at 5,000 tok/s -> a 10,000-token budget

    out = control.run_control(run)

    saved = json.loads((run / "eval_sft_control.json").read_text())
    assert saved["eval_spec"]["cases"] == [_case_dict(c) for c in cases]  # the run's own seeds
    assert saved["control"]["token_budget"] == 10_000 and saved["control"]["steps"] > 0
    assert saved["control"]["tokens"] <= 10_000 or saved["control"]["examples"] == profile.sft_batch_size
    assert out["control_vs_warm_start"]["final_policy"] == "sft_control"
    assert out["grpo_vs_control"]["baseline_policy"] == "sft_control"
    assert out["grpo_vs_control"]["n_pairs"] == len(cases)
    assert (run / "eval_paired_grpo_vs_control.json").is_file()
    assert (run / "training" / "sft_control" / "model" / "model.safetensors").is_file()


def test_a_runs_warm_start_is_read_with_the_tokenizer_it_was_trained_on(tmp_path):
    """The tiny tokenizer is learnt from the project's text: after a fixture edit the cache builds another one, so
    the run's readers (control, diagnose, splits) take the tokenizer saved with the warm start."""
    from cells.modeling.tiny import build_or_load_tiny, corpus_texts
    from cells.training.warm_start import load_run_warm_start

    profile = get_profile("cpu-smoke")
    run = tmp_path / "run"
    (run / "profile.json").parent.mkdir(parents=True)
    (run / "profile.json").write_text(json.dumps(dataclasses.asdict(profile)))
    texts = tuple(t.replace("a", "q") for t in corpus_texts())  # as if a fixture had changed since the run
    base, trained_with, _ = build_or_load_tiny(profile.tiny, tmp_path / "then", profile.seed, texts=texts)
    base.save_pretrained(run / "training" / "warm_start" / "model")
    trained_with.save_pretrained(run / "training" / "warm_start" / "model")
    _, now, _ = build_or_load_tiny(profile.tiny, run / "tiny_model", profile.seed)
    assert now.get_vocab() != trained_with.get_vocab()
    _, _, tokenizer = load_run_warm_start(run)
    assert tokenizer.get_vocab() == trained_with.get_vocab() and tokenizer.padding_side == "left"


# --- control (b): rejection-sampling SFT on the model's own successes (cells/experiments/raft.py) ---


def test_raft_example_labels_exactly_the_models_own_tokens():
    from cells.agent.rollout import TrajectoryTokens
    from cells.experiments.raft import raft_example

    traj = TrajectoryTokens(prompt_ids=(1, 2, 3), completion_ids=(4, 5, 6, 7, 8), assistant_mask=(1, 1, 0, 0, 1),
                            turn_spans=((0, 2), (4, 5)), text="")
    example = raft_example(traj)
    assert example["input_ids"] == [1, 2, 3, 4, 5, 6, 7, 8] and example["length"] == 8
    assert example["labels"] == [-100, -100, -100, 4, 5, -100, -100, 8]  # prompt and inserted tokens masked


def _played(tmp_path, policy_cls, seeds=(11, 12)):
    """Stage-1 episodes played by one scripted policy per seed, as tokens of the cpu-smoke tokenizer."""
    from cells.agent.policies import ExpertPolicy, GoalReader
    from cells.agent.rollout import rollout_batch
    from cells.modeling.tiny import build_or_load_tiny
    from cells.step_10_env import DriftCallEnv

    _, tok, _ = build_or_load_tiny(get_profile("cpu-smoke").tiny, tmp_path / "tiny", 1234)

    class Scripted:  # rollout_batch shares one policy object: one player per episode, keyed by its utterance
        def __init__(self):
            self.by_utterance = {}
            for seed in seeds:
                env = DriftCallEnv(1)
                obs = env.reset(seed=seed)
                player = policy_cls() if policy_cls is ExpertPolicy else None
                if player is not None:
                    player.reset(obs, GoalReader.from_goal(env.goal))
                self.by_utterance[env.goal.seed_utterance] = player

        def act(self, obs, history):
            player = self.by_utterance[history[1]["content"]]
            return str(player.act(obs)) if player is not None else "no idea, sorry"

    result = rollout_batch([DriftCallEnv(1) for _ in seeds], list(seeds), policy=Scripted(), tokenizer=tok)
    return result, tok


def test_raft_keeps_only_successful_episodes_and_sft_trains_on_them(tmp_path):
    """Expert episodes succeed, a player that only babbles fails: only the expert's become examples, and TRL's
    SFT trains on exactly their assistant tokens."""
    from cells.agent.policies import ExpertPolicy
    from cells.experiments import raft
    from cells.modeling.tiny import build_or_load_tiny
    from cells.step_08_rewards import rewards_of

    good, tok = _played(tmp_path, ExpertPolicy)
    bad, _ = _played(tmp_path, None)
    assert all(rewards_of(e).r_task >= 1 for e in good.episodes)
    assert all(rewards_of(e).r_task < 1 for e in bad.episodes)
    episodes = [bad.episodes[0], good.episodes[0], bad.episodes[1], good.episodes[1]]
    trajectories = [bad.trajectories[0], good.trajectories[0], bad.trajectories[1], good.trajectories[1]]
    examples = raft.kept_examples(episodes, trajectories)
    assert examples == [raft.raft_example(t) for t in good.trajectories]
    labelled = sum(sum(1 for x in e["labels"] if x != -100) for e in examples)
    assert labelled == sum(sum(t.assistant_mask) for t in good.trajectories) > 0

    profile = get_profile("cpu-smoke")
    model, _, _ = build_or_load_tiny(profile.tiny, tmp_path / "tiny", profile.seed)
    before = [p.detach().clone() for p in model.parameters()]
    result = raft.train_round(model, tok, profile, examples, tmp_path / "raft", 1e-3, seed=0)
    assert result.steps == 1 and result.trained_tokens == labelled
    assert any(not bool((a == b).all()) for a, b in zip(before, model.parameters(), strict=True))
    assert (tmp_path / "raft" / "model" / "model.safetensors").is_file()

    # GRPO's LoRA instead: only the adapter moves, with the same labelled tokens; merged, the base carries it
    from cells.step_12_model import attach_adapter

    base, _, _ = build_or_load_tiny(profile.tiny, tmp_path / "tiny", profile.seed)
    frozen = {k: v.detach().clone() for k, v in base.state_dict().items()}
    lora = attach_adapter(base, dataclasses.replace(profile, lora_r=4, lora_alpha=8))
    result = raft.train_round(lora, tok, profile, examples, tmp_path / "raft_lora", 1e-2, seed=0)
    assert result.steps == 1 and result.trained_tokens == labelled and not result.full_model
    assert (tmp_path / "raft_lora" / "adapter" / "adapter_model.safetensors").is_file()
    merged = lora.merge_and_unload().state_dict()
    assert set(merged) == set(frozen)
    assert any(not bool((merged[k] == frozen[k]).all()) for k in frozen if "proj" in k)  # the adapter's update
    assert all(bool((merged[k] == frozen[k]).all()) for k in frozen if "proj" not in k)  # nothing else moved


def test_raft_rounds_stop_once_the_measured_budget_is_spent():
    """A round starts while at least half the last round's cost is left: within half a round of the budget."""
    from cells.experiments.raft import spend

    now = [0.0]

    def clock():
        return now[0]

    def round_of(seconds):
        def play():
            now[0] += seconds
        return play

    assert spend(10.0, round_of(3.0), clock) == [3.0, 3.0, 3.0]  # 1 s left < 1.5: stop at 9
    assert spend(10.5, round_of(3.0), clock) == [3.0] * 4  # 1.5 s left: one more, 12 (1.5 over, as close)
    assert spend(2.0, round_of(5.0), clock) == [5.0]  # a positive budget plays at least one round
    assert spend(0.0, round_of(1.0), clock) == []  # a stage GRPO never trained: none


def test_raft_matches_grpos_compute_per_stage_and_counts_its_episodes(tmp_path):
    from cells.experiments.raft import CLOCKS, cosine_lr
    from cells.training.metrics import grpo_compute_seconds, grpo_episodes, read_metrics_csv

    _metrics_csv(tmp_path / "m.csv", [1.0, 2.0, 3.0, 4.0], stages=[1, 2, 2, 3], resampled=[0, 1, 0, 2],
                 cpu=[2.0, 4.0, 6.0, 8.0])
    assert grpo_compute_seconds(tmp_path / "m.csv") == ({1: 2.0, 2: 10.0, 3: 8.0}, "cpu")
    assert sum(grpo_compute_seconds(tmp_path / "m.csv")[0].values()) == control.grpo_seconds(tmp_path / "m.csv")[0]
    assert CLOCKS["cpu"] is time.process_time and CLOCKS["wall"] is time.perf_counter
    profile = dataclasses.replace(get_profile("cpu-learn"), prompts_per_step=2, num_generations=8)
    assert grpo_episodes(tmp_path / "m.csv", profile) == (4 * 2 + 3) * 8  # resampled groups are played too
    rows = read_metrics_csv(tmp_path / "m.csv")  # rows already read count as the file does
    assert (grpo_episodes(rows, profile), grpo_compute_seconds(rows)) == (88, ({1: 2.0, 2: 10.0, 3: 8.0}, "cpu"))
    # with grpo_iterations = 2 every other step reuses its batch and logs no episodes: the logged counts are summed
    reused = [{**row, "extra": {**row["extra"], **({"episodes/played": 24.0} if i % 2 == 0 else {})}}
              for i, row in enumerate(rows)]
    assert grpo_episodes(reused, profile) == 2 * 24
    assert cosine_lr(1.0, 0.0, 10.0) == 1.0 and cosine_lr(1.0, 5.0, 10.0) == pytest.approx(0.5)
    assert cosine_lr(1.0, 12.0, 10.0) == pytest.approx(0.0)


def test_raft_seeds_lie_in_grpos_stage_blocks_past_what_grpo_plays():
    from cells.experiments.raft import RAFT_SEED_OFFSET, raft_first_seed

    for stage in (1, 2, 3):
        grpo_first = TRAIN_SEEDS.seed((stage - 1) * 100_000_000)
        assert raft_first_seed(stage) == grpo_first + RAFT_SEED_OFFSET
        assert raft_first_seed(stage) < TRAIN_SEEDS.seed(stage * 100_000_000)  # still inside the stage's block


def test_control_flag_raft_routes_to_the_raft_control(monkeypatch, tmp_path):
    from cells.__main__ import main
    from cells.experiments import raft

    called = []
    monkeypatch.setattr(raft, "run_raft",
                        lambda run_dir, evaluate, lora: called.append(("raft-lora" if lora else "raft", run_dir, evaluate)))
    monkeypatch.setattr(control, "run_control", lambda run_dir, evaluate: called.append(("sft", run_dir, evaluate)))
    assert main(["control", "--run-dir", str(tmp_path), "--raft"]) == 0
    assert main(["control", "--run-dir", str(tmp_path)]) == 0
    assert main(["control", "--run-dir", str(tmp_path), "--raft", "--train-only"]) == 0
    assert main(["control", "--run-dir", str(tmp_path), "--train-only"]) == 0
    assert main(["control", "--run-dir", str(tmp_path), "--raft", "--lora", "--train-only"]) == 0
    assert called == [("raft", tmp_path, True), ("sft", tmp_path, True), ("raft", tmp_path, False),
                      ("sft", tmp_path, False), ("raft-lora", tmp_path, False)]
    with pytest.raises(SystemExit, match="--lora goes with --raft"):
        main(["control", "--run-dir", str(tmp_path), "--lora"])


def test_raft_refuses_a_run_without_grpo_metrics_or_an_evaluation(tmp_path):
    from cells.errors import DriftCallError
    from cells.experiments.raft import RaftError, run_raft

    with pytest.raises(RaftError, match=r"profile\.json is missing"):
        run_raft(tmp_path)
    (tmp_path / "profile.json").write_text(json.dumps(dataclasses.asdict(get_profile("cpu-smoke"))))
    with pytest.raises(RaftError, match=r"metrics\.csv is missing: the run has no GRPO steps") as err:
        run_raft(tmp_path)
    assert isinstance(err.value, control.ControlError) and isinstance(err.value, DriftCallError)
    (tmp_path / "training").mkdir()
    _metrics_csv(tmp_path / "training" / "metrics.csv", [1.0])
    with pytest.raises(RaftError, match=r"eval_baseline\.json is missing: .*run steps 18-19.*--train-only"):
        run_raft(tmp_path)


@pytest.mark.slow
def test_train_only_controls_save_their_models_and_records_without_an_evaluation(tmp_path):
    """Both controls on a run that never played steps 18-19: trained, saved with their record, nothing evaluated;
    `diagnose --reach --control` can then play them."""
    import itertools

    from cells.commands.diagnose import control_model_path
    from cells.experiments.raft import run_raft

    run, _ = _finished_run(tmp_path)
    for path in [*run.glob("eval_*"), *run.glob("records_*")]:
        path.unlink()
    with pytest.raises(control.ControlError, match="run steps 18-19 first"):
        control.run_control(run)
    ticks = itertools.count(0.0, 10.0)
    out = {**run_raft(run, round_groups=1, clock=lambda: next(ticks), evaluate=False),
           **control.run_control(run, evaluate=False),
           "lora": run_raft(run, round_groups=1, clock=lambda: next(ticks), evaluate=False, lora=True)["raft"]}
    assert out["raft"]["episodes"] == get_profile("cpu-smoke").num_generations and out["control"]["steps"] > 0
    for name, key in (("raft_control", "raft"), ("sft_control", "control"), ("raft_lora_control", "lora")):
        assert (control_model_path(run, name) / "model.safetensors").is_file()
        assert json.loads((run / "training" / name / "control.json").read_text()) == json.loads(json.dumps(out[key]))
    profile = get_profile("cpu-smoke")
    assert out["raft"]["trains"] == "every weight" and out["lora"]["learning_rate_peak"] == profile.learning_rate
    assert out["lora"]["trains"] == {"lora_r": profile.lora_r, "lora_alpha": profile.lora_alpha}
    # merged into one plain model file, loaded as the other controls are (no adapter keys left)
    from safetensors import safe_open

    with safe_open(str(control_model_path(run, "raft_lora_control") / "model.safetensors"), "pt") as saved:
        names = saved.keys()  # a safetensors handle lists its tensors, it does not iterate
        assert names and not [k for k in names if "lora" in k]
    assert not list(run.glob("eval_*")) and not list(run.glob("records_*"))


@pytest.mark.slow
def test_raft_samples_trains_evaluates_and_pairs_on_the_runs_own_spec(tmp_path):
    """The miniature finished run (one 2-second GRPO step in stage 1), then RAFT with one group a round."""
    import itertools
    import math

    from cells.experiments.raft import raft_first_seed, run_raft

    profile = get_profile("cpu-smoke")
    run, cases = _finished_run(tmp_path)

    ticks = itertools.count(0.0, 10.0)  # a clock on which every phase takes 10 s: one round spends GRPO's 2 s
    out = run_raft(run, round_groups=1, clock=lambda: next(ticks))

    saved = json.loads((run / "eval_raft_control.json").read_text())
    assert saved["eval_spec"]["cases"] == [_case_dict(c) for c in cases]  # the run's own seeds
    tally = saved["control"]
    assert tally["kind"] == "raft" and tally["grpo_seconds"] == pytest.approx(2.0)
    assert tally["grpo_episodes"] == profile.prompts_per_step * profile.num_generations
    # one round of one group: on that clock it outlasts GRPO's 2 s, so no second round starts
    assert tally["rounds"] == 1 and tally["episodes"] == profile.num_generations
    assert tally["stages"]["1"]["first_seed"] == raft_first_seed(1) and tally["seconds"] > 0
    assert 0 <= tally["kept"] <= tally["episodes"]
    assert out["raft_vs_warm_start"]["final_policy"] == "raft_control"
    assert out["grpo_vs_raft"]["baseline_policy"] == "raft_control" and out["grpo_vs_raft"]["n_pairs"] == len(cases)
    for name in ("eval_paired_raft.json", "eval_paired_grpo_vs_raft.json", "records_raft_control.jsonl"):
        assert (run / name).is_file()
    paired = json.loads((run / "eval_paired_raft.json").read_text())
    assert math.isfinite(paired["metrics"]["success"]["diff"]["value"])
    assert (run / "training" / "raft_control" / "model" / "model.safetensors").is_file()
    assert (run / "training" / "raft_control" / "model" / "tokenizer.json").is_file()


def test_splits_plays_the_raft_control_beside_the_others_when_it_exists(tmp_path, monkeypatch):
    from cells.experiments import drift_split as splits
    from cells.modeling.tiny import build_or_load_tiny

    profile = get_profile("cpu-smoke")
    run = tmp_path / "run"
    (run / "export").mkdir(parents=True)
    (run / "profile.json").write_text(json.dumps(dataclasses.asdict(profile)))
    base, tok, _ = build_or_load_tiny(profile.tiny, run / "tiny_model", profile.seed)
    base.save_pretrained(run / "training" / "warm_start" / "model")
    monkeypatch.setattr("cells.step_24_export.load_export", lambda path: (base, tok))  # trained: the same weights
    assert set(splits.run_models(run)[1]) == {"warm_start", "trained"}
    base.save_pretrained(run / "training" / "raft_control" / "model")
    assert set(splits.run_models(run)[1]) == {"warm_start", "trained", "raft_control"}
    assert splits.MODEL_WORDS["raft_control"] == "RAFT control"


def test_diagnose_reach_plays_a_control_on_the_same_development_cases(tmp_path):
    """`diagnose --reach --control raft`: the run's RAFT control plays the development cases the trained model and
    the warm start play (the recipe is compared with its controls there, not on held-out seeds)."""
    import shutil

    from cells.commands.diagnose import (
        REACH_CASES_FROM,
        DiagnoseError,
        diagnose_field_names,
        diagnose_reach,
        field_name_cases,
        main,
    )
    from cells.evaluation.splits import split_cases
    from cells.step_02_profiles import PROBE_SEEDS
    from cells.step_06_drift import drift_split

    raft_cases = [c for cases in split_cases(drift_split("latin"), 20, PROBE_SEEDS, start=REACH_CASES_FROM).values()
                  for c in cases]

    run, _ = _finished_run(tmp_path)
    with pytest.raises(DiagnoseError, match="control --raft --run-dir"):
        diagnose_reach(run, "latin", episodes=1, samples=1, control="raft_control")
    shutil.copytree(run / "training" / "warm_start" / "model", run / "training" / "raft_control" / "model")
    raft = diagnose_reach(run, "latin", episodes=2, samples=1, control="raft_control")
    warm = diagnose_reach(run, "latin", episodes=2, samples=1, warm_start=True)
    assert raft["model"] == "raft_control" and warm["model"] == "warm start"
    for which in ("demonstrated", "reinforced", "unseen"):  # the same weights on the same cases: the same greedy play
        assert raft[which]["cases"] == 2 and raft[which]["greedy_success"] == warm[which]["greedy_success"]
    assert json.loads((run / "diagnose_reach_raft_control.json").read_text(encoding="utf-8")) == raft
    # a generated split: the base split's sets case for case, then each kind of held-out generated instance
    gen = diagnose_reach(run, "latin-gen", episodes=2, samples=1, warm_start=True)
    assert list(gen)[3:] == ["demonstrated", "reinforced", "unseen", "gen-unseen-a", "gen-unseen-b", "gen-unseen-c"]
    assert all(gen[w]["successes_per_case"] == warm[w]["successes_per_case"] for w in ("reinforced", "unseen"))
    assert all(gen[w]["cases"] == 2 and "by_pattern" not in gen[w] for w in ("gen-unseen-a", "gen-unseen-c"))
    # one generated instance: cases admitting it, under the set the split places it in, saved under a flat name
    held = "gen/required_item_field/airline/passenger_list/assistance_needs"
    one = diagnose_reach(run, "latin-gen", episodes=2, samples=1, warm_start=True, pattern=held)
    assert list(one)[3:] == ["gen-unseen-c"] and one["pattern"] == held and "by_pattern" not in one["gen-unseen-c"]
    named = one["gen-unseen-c"]["greedy_counts"]  # what the greedy play did after the vendor named the field
    assert set(named) == {"refused", "unparsable", "unparsable_naming_it", "resent", "copied", "written_instead"}
    assert named["copied"] <= named["resent"] <= named["refused"] <= 2
    saved = run / "diagnose_reach_warm_start_gen-required_item_field-airline-passenger_list-assistance_needs.json"
    assert json.loads(saved.read_text(encoding="utf-8")) == one
    with pytest.raises(DiagnoseError, match="nor a generated instance"):
        diagnose_reach(run, "latin-gen", episodes=1, samples=1, warm_start=True, pattern="gen/no_such_family/x/y/z")
    # --field-names: the same undrifted airline bookings per name, each passenger required to carry it
    names = diagnose_field_names(run, ["loyalty_ids", "tavoru_mekis"], episodes=2, control="raft_control")
    assert names["cases"] == 2 and list(names["names"]) == ["loyalty_ids", "tavoru_mekis"]
    for row in names["names"].values():
        assert row["refused"] <= 2 and row["copied"] <= row["resent"] <= row["refused"] and 0 <= row["success"] <= 1
    assert json.loads((run / "diagnose_field_names_raft_control.json").read_text(encoding="utf-8")) == names
    assert {c.seed for c in field_name_cases(3)}.isdisjoint(c.seed for c in raft_cases)
    with pytest.raises(DiagnoseError, match="field names such as"):
        diagnose_field_names(run, ["passengers[].x"], episodes=1, warm_start=True)
    with pytest.raises(DiagnoseError, match="control --run-dir"):
        diagnose_reach(run, "latin", episodes=1, samples=1, control="sft_control")
    with pytest.raises(SystemExit):
        main(["--run-dir", str(run), "--reach", "--control", "raft", "--warm-start"])
    with pytest.raises(SystemExit):  # --pattern picks --reach's cases; --field-names has its own
        main(["--run-dir", str(run), "--field-names", "loyalty_ids", "--pattern", "cab_city_required"])
