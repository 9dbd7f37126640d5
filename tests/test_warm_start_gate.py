"""The warm start's development gate (cells/training/warm_start_gate.py): SFT continues while development success
is below target and rising; development cases never touch the held-out evaluation seeds."""

from __future__ import annotations

import dataclasses

import pytest

from cells.step_02_profiles import EVAL_SEEDS, PROBE_SEEDS, ProfileError, get_profile
from cells.training import warm_start_gate as gate


@pytest.mark.parametrize("success, previous, round_, expected", [
    (0.85, None, 0, "target reached"), (0.80, 0.5, 1, "target reached"),  # at the target
    (0.60, None, 0, "extend"),  # the first check always extends below target
    (0.61, 0.60, 1, "flattened"), (0.62, 0.60, 1, "extend"),  # gained under / at MIN_GAIN
    (0.70, 0.50, 2, "rounds spent"),
])
def test_the_gate_extends_below_target_while_success_rises(success, previous, round_, expected):
    assert gate.decide(success, previous, 0.8, round_, rounds=2) == expected


def test_development_cases_come_from_the_probe_range_past_every_diagnose_slice():
    from cells.commands.diagnose import DEVELOPMENT_CASES_FROM, REACH_CASES_FROM

    cases = gate.dev_cases(9)
    assert [c.stage for c in cases] == [1, 2, 3] * 3
    assert all(c.seed in PROBE_SEEDS and c.seed not in EVAL_SEEDS for c in cases)
    assert gate.DEV_CASES_FROM > REACH_CASES_FROM > DEVELOPMENT_CASES_FROM


def test_extension_rounds_use_seeds_neither_the_warm_start_nor_the_control_uses():
    from cells.experiments.control import CONTROL_SEED_BLOCK
    from cells.training.sft_data import SFT_STAGE_SEED_STRIDE, sft_plan_item

    profile = get_profile("cpu-rl")
    bases = {(r, s): sft_plan_item(profile, 10, s, gate.EXTENSION_SEED_BLOCK,
                                   offset=(3 * r + s - 1) * gate.ROUND_STAGE_STRIDE).seed
             for r in range(4) for s in (1, 2, 3)}
    assert len(set(bases.values())) == len(bases)  # every round and stage its own seeds
    start = profile.seed + gate.EXTENSION_SEED_BLOCK * SFT_STAGE_SEED_STRIDE
    assert all(start <= seed < start + SFT_STAGE_SEED_STRIDE for seed in bases.values())
    assert gate.EXTENSION_SEED_BLOCK > CONTROL_SEED_BLOCK + 2  # past the control's three stage blocks


def test_the_gate_needs_a_full_warm_start_and_development_cases():
    with pytest.raises(ProfileError, match="sft_extend_rounds needs"):
        dataclasses.replace(get_profile("colab-t4"), sft_extend_rounds=1)
    with pytest.raises(ProfileError, match="sft_extend_rounds needs"):
        dataclasses.replace(get_profile("cpu-learn"), sft_extend_rounds=1, warm_start_dev_cases=0)


@pytest.mark.slow
def test_a_gated_warm_start_extends_until_it_flattens_and_records_its_rounds(tmp_path):
    """cpu-smoke's few SFT steps leave the tiny model at 0% development success: the gate extends once, sees no
    gain, stops, and the rounds reach warm_start.json."""
    import json

    from cells.pipeline import run

    ctx = run("cpu-smoke", steps="1-15", run_dir=tmp_path, knobs=(
        "sft_extend_rounds=2", "sft_extend_share=0.1", "warm_start_dev_cases=3", "sft_extend_target=0.9"))
    rounds = ctx.trainer_state["warm_start_gate"]
    assert [r["decision"] for r in rounds] == ["extend", "flattened"]
    assert rounds[1]["extra_examples"] > 0 and rounds[0]["dev_success"] == rounds[1]["dev_success"] == 0.0
    summary = json.loads((tmp_path / "training" / "warm_start" / "warm_start.json").read_text())
    assert summary["gate"] == rounds
