import dataclasses
import itertools

import pytest

from cells.seeding import SeedRangeError
from cells.step_02_profiles import (
    EVAL_SEEDS,
    PROBE_SEEDS,
    PROFILES,
    SEED_RANGES,
    TRAIN_SEEDS,
    Profile,
    ProfileError,
    get_profile,
    load_run_profile,
)


def test_presets_exist_and_are_valid():
    assert set(PROFILES) == {"cpu-smoke", "cpu-voice", "cpu-learn", "cpu-rl", "cpu-gen", "cpu-gemma",
                             "cpu-gemma-unsloth", "colab-t4", "colab-a100"}
    # cpu-gen is cpu-rl on generated drift: its split and drift source only, so the two runs compare
    assert dataclasses.replace(get_profile("cpu-gen"), name="cpu-rl", drift_split="latin",
                               drift_source="handwritten") == get_profile("cpu-rl")
    # cpu-rl is cpu-learn with a drift split and the split recipe (dynamic sampling on success, only groups with a
    # success contrast in the update, field drills, a LoRA of rank 64), so the two runs compare
    assert dataclasses.replace(get_profile("cpu-rl"), name="cpu-learn", drift_split="", grpo_reinforced_share=0.5,
                               grpo_resample_rounds=0, grpo_resample_on="reward", grpo_keep="all",
                               sft_field_drills=0.0, lora_r=16, lora_alpha=32) == get_profile("cpu-learn")
    assert get_profile("cpu-rl").sft_field_drills == 0.15
    assert get_profile("cpu-smoke").is_cpu and not get_profile("colab-t4").is_cpu
    assert get_profile("cpu-gemma").is_cpu and get_profile("cpu-gemma").model_id is not None  # pretrained, on CPU
    assert get_profile("colab-a100").num_generations == 8
    assert get_profile("colab-t4").precision == "fp16"


def test_unknown_profile_lists_valid_names():
    with pytest.raises(ProfileError) as err:
        get_profile("gpu-huge")
    for name in PROFILES:
        assert name in str(err.value)


@pytest.mark.parametrize("change, fragment", [
    ({"num_generations": 1}, "num_generations"),
    ({"prompts_per_step": 0}, "prompts_per_step must be >= 1"),
    ({"steps_per_stage": (1, 2)}, "steps_per_stage"),
    ({"language_weights": ((("xx", 1.0),),) * 3}, "languages"),
    ({"precision": "int3"}, "precision"),
    ({"model_id": None, "tiny": None}, "model_id"),
    ({"max_episode_tokens": 10, "max_new_tokens_per_turn": 64}, "max_episode_tokens"),
    ({"copy_pretrain_max_steps": -1}, "copy_pretrain_max_steps must be >= 0"),
    ({"copy_pretrain_max_steps": 10, "warm_start_full": True, "copy_pretrain_stop_loss": 0.0}, "stop_loss"),
    ({"copy_pretrain_max_steps": 10}, "overwrite a pretrained model"),
    ({"grpo_resample_on": "advantage"}, "grpo_resample_on must be one of"),
    ({"grpo_scale_rewards": "std"}, "grpo_scale_rewards must be one of"),
])
def test_post_init_rejects_inconsistent_knobs(change, fragment):
    with pytest.raises(ProfileError, match=fragment):
        dataclasses.replace(Profile(), **change)


def test_languages_for_stage():
    p = get_profile("cpu-smoke")
    assert set(p.languages_for_stage(2)) == {"hi", "ta", "kn", "en", "hinglish"}
    with pytest.raises(ProfileError):
        p.languages_for_stage(4)


def test_seed_ranges_are_disjoint_and_ordered():
    spans = sorted((r.start, r.stop) for r in SEED_RANGES)
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert end <= start
    assert 5 in TRAIN_SEEDS and 5 not in EVAL_SEEDS
    assert EVAL_SEEDS.seed(0) in EVAL_SEEDS and EVAL_SEEDS.seed(0) not in PROBE_SEEDS
    with pytest.raises(SeedRangeError):
        EVAL_SEEDS.seed(EVAL_SEEDS.stop - EVAL_SEEDS.start)


def test_one_prompt_per_step_is_enough():
    assert dataclasses.replace(Profile(), prompts_per_step=1).prompts_per_step == 1


def test_turn_budgets_are_a_profile_knob_that_reaches_every_env_the_pipeline_builds(tmp_path):
    from cells.context import Context
    from cells.evaluation.runner import env_for_case, eval_plan, make_spec
    from cells.step_02_profiles import TURN_BUDGETS
    from cells.step_10_env import STAGE_TURN_BUDGETS, stage_env_factories
    from cells.step_15_train_stage1 import expert_conversations_for
    from cells.step_23_demo import build_demo

    assert tuple(STAGE_TURN_BUDGETS.values()) == TURN_BUDGETS == get_profile("cpu-smoke").turn_budgets
    profile = dataclasses.replace(get_profile("cpu-smoke"), turn_budgets=(5, 9, 11))
    assert [f().max_turns for f in stage_env_factories(profile).values()] == [5, 9, 11]
    spec = make_spec(profile, eval_plan(1, stages=(2,)))
    assert {env_for_case(c, spec.turn_budgets).max_turns for c in spec.cases} == {9}
    ctx = Context(profile=profile, run_dir=tmp_path)

    def budget_warned(context: Context) -> list[bool]:  # the env says "[budget] 2 turn(s) left" two turns before the end
        return [any("[budget]" in m["content"] for m in c) for c in expert_conversations_for(context, 4, 1)]

    assert budget_warned(ctx) == [True] * 4  # stage-1 expert episodes take 4-5 turns: all warned with 5
    assert budget_warned(Context(profile=get_profile("cpu-smoke"), run_dir=tmp_path)) == [False] * 4  # none with 8
    demo = build_demo(ctx)
    demo.session.reset(1, "en", 3, "expert")
    assert demo.session.env.max_turns == 5
    with pytest.raises(ValueError, match="turn_budgets"):
        dataclasses.replace(profile, turn_budgets=(3, 12, 16))
    with pytest.raises(ValueError, match="turn_budgets"):
        dataclasses.replace(profile, turn_budgets=(8, 12))


def test_a_finished_run_is_reloaded_with_its_own_seed_and_model(tmp_path):
    """`control`, `diagnose` and `bench voice` reload a run's profile: a `--seed`/`--model` run must come back as
    it ran, not as its preset (the seed keys the tiny model's cache and every RNG)."""
    from cells.pipeline import make_context
    from cells.step_02_profiles import run as write_profile

    for name in ("seeded", "gemma"):
        (tmp_path / name).mkdir()
    seeded = write_profile(make_context("cpu-learn", tmp_path / "seeded", seed=2)).run_dir
    assert load_run_profile(seeded) == dataclasses.replace(get_profile("cpu-learn"), seed=2)
    assert get_profile("cpu-learn").seed != 2
    other = write_profile(make_context("cpu-gemma", tmp_path / "gemma", model="/models/gemma-3-270m")).run_dir
    assert load_run_profile(other).model_id == "/models/gemma-3-270m"
    assert load_run_profile(other).seed == get_profile("cpu-gemma").seed
    with pytest.raises(ProfileError, match=r"profile\.json is missing"):
        load_run_profile(tmp_path / "never-ran")


def test_set_changes_single_knobs_by_their_declared_types_and_the_run_keeps_them(tmp_path):
    from cells.pipeline import make_context
    from cells.step_02_profiles import run as write_profile
    from cells.step_02_profiles import with_knobs

    base = get_profile("cpu-rl")
    changed = with_knobs(base, ["grpo_resample_on=success", "learning_rate=3e-3", "steps_per_stage=[5, 80, 10]",
                                "adaptive_kl=false", "temperature=1"])
    assert changed == dataclasses.replace(base, grpo_resample_on="success", learning_rate=0.003,
                                          steps_per_stage=(5, 80, 10), adaptive_kl=False, temperature=1.0,
                                          knobs_set=("grpo_resample_on=success", "learning_rate=3e-3",
                                                     "steps_per_stage=[5, 80, 10]", "adaptive_kl=false",
                                                     "temperature=1"))
    assert with_knobs(base, []) is base
    nested = '[[["en", 1.0]], [["hi", 2.0], ["ta", 1.0]], [["kn", 1.0]]]'
    assert with_knobs(base, [f"language_weights={nested}"]).language_weights == (
        (("en", 1.0),), (("hi", 2.0), ("ta", 1.0)), (("kn", 1.0),))
    for bad, fragment in (("learning_rate", "KNOB=VALUE"), ("no_such_knob=1", "no such knob"),
                          ("name=other", "no such knob"), ("knobs_set=[]", "no such knob"),
                          ("num_generations=eight", "expected a int"),
                          ("grpo_resample_on=advantage", "grpo_resample_on must be one of")):
        with pytest.raises(ProfileError, match=fragment):
            with_knobs(base, [bad])
    (tmp_path / "exp").mkdir()
    ctx = make_context("cpu-rl", tmp_path / "exp", seed=7, knobs=["grpo_resample_on=success"])
    assert load_run_profile(write_profile(ctx).run_dir) == dataclasses.replace(
        base, seed=7, grpo_resample_on="success", knobs_set=("grpo_resample_on=success",))


def test_set_tiny_reshapes_the_presets_model_and_the_run_reloads_it(tmp_path):
    from cells.pipeline import make_context
    from cells.step_02_profiles import run as write_profile
    from cells.step_02_profiles import with_knobs

    base = get_profile("cpu-gen")
    wider = '{"hidden_size": 128, "num_hidden_layers": 4}'
    changed = with_knobs(base, [f"tiny={wider}"])
    assert changed.tiny == dataclasses.replace(base.tiny, hidden_size=128, num_hidden_layers=4)
    assert changed.tiny.intermediate_size == base.tiny.intermediate_size  # fields not named keep the preset's
    for bad, fragment in (('tiny={"width": 3}', r"\['width'\] are not fields of TinyModelRecipe"),
                          ('tiny={"hidden_size": 0}', "positive integer"),
                          ('tiny={"hidden_size": "128"}', "positive integer")):
        with pytest.raises(ProfileError, match=fragment):
            with_knobs(base, [bad])
    with pytest.raises(ProfileError, match="boots a Hub model"):
        with_knobs(get_profile("cpu-gemma"), [f"tiny={wider}"])
    (tmp_path / "exp").mkdir()
    ctx = make_context("cpu-gen", tmp_path / "exp", seed=7, knobs=[f"tiny={wider}"])
    assert load_run_profile(write_profile(ctx).run_dir).tiny == changed.tiny


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_a_run_reloads_with_the_knobs_it_was_trained_with_even_after_its_preset_changed(tmp_path, name):
    import json

    preset = get_profile(name)
    (tmp_path / "profile.json").write_text(json.dumps(dataclasses.asdict(preset)))
    assert load_run_profile(tmp_path) == preset  # every preset round-trips through its profile.json
    # trained with an older recipe (another LoRA, a knob added since missing from the file, another eval size)
    older = dataclasses.asdict(preset) | {"lora_r": preset.lora_r * 2 + 1, "pass_k": preset.pass_k + 3}
    del older["grpo_keep"]
    (tmp_path / "profile.json").write_text(json.dumps(older))
    reloaded = load_run_profile(tmp_path)
    assert reloaded.lora_r == preset.lora_r * 2 + 1  # what its models were trained with, not today's preset
    assert reloaded.grpo_keep == "all"  # the declared default: what the code did before the knob existed
    assert reloaded.pass_k == preset.pass_k  # evaluation sizes follow the preset
    assert reloaded.tiny == preset.tiny and reloaded.language_weights == preset.language_weights


# ---------------------------------------------------------------------------------------------- documented knobs
def test_every_knob_is_documented_with_a_scope():
    """Each `Profile` field carries its help and scope (TRL-style field metadata), so the table can be printed."""
    from cells.step_02_profiles import KNOB_SCOPES

    for f in dataclasses.fields(Profile):
        assert f.metadata.get("help", "").strip(), f"{f.name}: declare it with knob(..., help=...)"
        assert f.metadata["scope"] in KNOB_SCOPES, f.name


def test_an_unknown_scope_is_refused():
    from cells.step_02_profiles import knob

    with pytest.raises(ProfileError, match="scope 'eval'"):
        knob(1, help="x", scope="eval")


def test_the_run_dir_scopes_and_the_reports_skipped_knobs_come_from_the_declarations():
    """The knobs the run-dir check drops and the one the report leaves out: pinned, so moving a knob between scopes
    (which changes which run dirs are reused) is a deliberate change to this test."""
    from cells.step_02_profiles import knobs_in_scope
    from cells.step_22_summary import SKIPPED_KNOBS
    from cells.training.checkpoints import ADAPTER_KNOBS, GRPO_ONLY_KNOBS, NOT_TRAINING_KNOBS

    assert NOT_TRAINING_KNOBS == knobs_in_scope("evaluation", "run") == {
        "run_root", "knobs_set", "save_every", "warm_start_eval_per_cell", "eval_episodes_per_cell", "pass_k",
        "probe_episodes_per_policy", "bootstrap_resamples", "voice_eval_per_cell"}
    assert GRPO_ONLY_KNOBS == knobs_in_scope("grpo") == {
        "temperature", "top_p", "prompts_per_step", "gradient_accumulation_steps", "learning_rate", "max_grad_norm",
        "adaptive_kl", "adaptive_kl_target", "adaptive_kl_beta_max", "steps_per_stage", "grpo_failure_candidates",
        "grpo_reinforced_share", "grpo_resample_rounds", "grpo_resample_on",
        "grpo_scale_rewards", "grpo_advantage_on", "grpo_success_advantage", "grpo_keep", "grpo_step_advantage", "grpo_reference",
        "grpo_clip_high", "grpo_iterations"}
    assert ADAPTER_KNOBS == knobs_in_scope("adapter") == {
        "lora_r", "lora_alpha", "lora_dropout", "lora_targets", "lora_modules_to_save"}
    assert sorted(SKIPPED_KNOBS) == ["language_weights"]


def test_the_tables_list_every_preset_and_knob():
    from cells.step_02_profiles import PRESET_NOTES, knobs_markdown, presets_markdown

    assert set(PRESET_NOTES) == set(PROFILES)
    presets, knobs = presets_markdown(), knobs_markdown()
    assert all(f"| `{name}` |" in presets for name in PROFILES)
    assert all(f"| `{f.name}` |" in knobs for f in dataclasses.fields(Profile))


@pytest.mark.parametrize("index", [0, 1])
def test_the_embedded_tables_are_what_the_profiles_command_writes(index):
    """README.md and docs/profiles.md embed `python -m cells profiles --docs`'s blocks; rerun it after a change."""
    from pathlib import Path

    from cells.evaluation.docblocks import block_body
    from cells.step_02_profiles import PROFILE_DOCS, knobs_markdown, presets_markdown

    path, name, _ = PROFILE_DOCS[index]
    written = block_body((Path(__file__).resolve().parents[1] / path).read_text(encoding="utf-8"), name)
    assert written is not None, f"{path} lost its {name} markers"
    expected = (presets_markdown, knobs_markdown)[index]()
    assert written.split("\n", 2)[2].strip("\n") == expected.strip("\n"), (
        f"{path}'s {name} block is stale: run `python -m cells profiles --docs`")


def test_allowed_values_are_declared_on_the_knob_and_read_from_there():
    """`grpo_resample_on`'s values and `grpo_resample_rounds`' cap live on the knobs: every profile checks them, the
    trainer reads them (`knob_choices`, `knob_cap`) and the docs table says them."""
    from cells.step_02_profiles import knob_cap, knob_choices, knobs_markdown

    assert knob_choices("grpo_resample_on") == ("reward", "success") and knob_cap("grpo_resample_rounds") == 8
    assert knob_choices("precision") == ("fp32", "bf16", "fp16") and knob_choices("learning_rate") == ()
    with pytest.raises(ProfileError, match="grpo_resample_rounds must be in \\[0, 8\\]"):
        dataclasses.replace(Profile(), grpo_resample_rounds=9)
    with pytest.raises(ProfileError, match="declares no cap"):
        knob_cap("learning_rate")
    assert "; one of `reward`, `success` |" in knobs_markdown() and "; at most 8 |" in knobs_markdown()
