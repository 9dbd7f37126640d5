"""Step 24 (export) and step 25 (conclusion): a real peft model exported, reloaded and compared; the
Hub push is optional and never fails the run; the conclusion table reads the reports it is given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tiny import tiny_model, tiny_tokenizer

from cells import step_24_export as s24
from cells import step_25_conclusion as s25
from cells.evaluation.synthetic import synthetic_reports
from cells.pipeline import MissingInputError, make_context, run_step
from cells.training.warm_start import WarmStartResult


def _trained_context(tmp_path: Path):
    """A cpu-smoke Context holding a tiny warm-started base (saved, as step 15 does) under a LoRA whose
    weights are not the identity (as after GRPO)."""
    import torch

    tok = tiny_tokenizer()
    base = tiny_model(tok, seed=3, lora=False)
    saved = tmp_path / "training" / "warm_start" / "model"
    base.save_pretrained(str(saved))
    model = tiny_model(tok, seed=3, lora=True)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    ctx = make_context("cpu-smoke", tmp_path)
    ctx.model, ctx.tokenizer = model, tok
    ctx.trainer_state["warm_start"] = WarmStartResult(saved, 1, 1, 1, 1, (), full_model=True)
    ctx.trainer_state["stage3"] = object()
    ctx.reports.update(synthetic_reports())
    return ctx


def test_export_reloads_to_the_same_model_and_the_same_greedy_actions(tmp_path, monkeypatch):
    import torch

    monkeypatch.delenv("HF_TOKEN", raising=False)
    ctx = _trained_context(tmp_path)
    ctx = s24.run(ctx)
    out = tmp_path / "export"
    meta = json.loads((out / s24.SIDECAR).read_text(encoding="utf-8"))
    assert meta["reload_check"]["same_greedy_actions"] and meta["reload_check"]["turns"] > 0
    assert meta["base_model"] == "base" and meta["profile"] == "cpu-smoke" and meta["hub"].startswith("skipped")
    assert set(meta["metrics"]) >= {"success", "paired_success_diff", "probe_all_exploits_pass"}
    assert not (out / "adapter" / "ref").exists()  # only the trained adapter, not TRL's reference copy
    for rel, digest in meta["files"].items():
        assert s24._sha256(out / rel) == digest
    reloaded, tok = s24.load_export(out)
    ids = torch.tensor([tok("book a flight from HYD", add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        assert torch.equal(reloaded(ids).logits, ctx.model(ids).logits)


def test_export_without_a_trained_adapter_is_refused(tmp_path):
    ctx = make_context("cpu-smoke", tmp_path)
    with pytest.raises(MissingInputError, match="step 12"):
        run_step(ctx, 24)
    ctx.model, ctx.tokenizer = object(), object()
    with pytest.raises(s24.ExportError, match="nothing to export"):
        s24.export_model(ctx, tmp_path / "export")
    with pytest.raises(s24.ExportError, match="not a DriftCall export"):
        s24.load_export(tmp_path)


def test_hub_push_is_skipped_without_a_token_and_a_failure_never_raises(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("DRIFTCALL_HUB_REPO", "someone/driftcall")
    assert s24.push_to_hub(tmp_path).startswith("skipped")
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no network here: the push fails, and says so
    assert s24.push_to_hub(tmp_path).startswith("failed (")


def test_conclusion_table_reads_every_report(tmp_path, capsys):
    ctx = make_context("cpu-smoke", tmp_path)
    ctx.reports.update(synthetic_reports())
    ctx.artifacts["report_md"] = tmp_path / "report.md"
    s25.run(ctx)
    text = ctx.reports["conclusion"]
    (name, block), = ctx.reports["final"]["policies"].items()
    assert f"| {name} model | {block['n_episodes']} | {block['success']['value']:.3f}" in text
    assert "model before GRPO (adapter off)" in text and "(scripted)" in text
    diff = ctx.reports["paired"]["metrics"]["success"]["diff"]
    assert f"| success | {diff['value']:.3f} [{diff['low']:.3f}, {diff['high']:.3f}]" in text
    assert "report_md" in text and "[conclusion]" in capsys.readouterr().out


def test_conclusion_with_nothing_evaluated_still_renders(tmp_path):
    ctx = make_context("cpu-smoke", tmp_path)
    text = s25.conclusion_markdown(ctx)
    assert "| player |" in text and "Paired" not in text and "probe" not in text


def test_diagnose_failures_replays_the_export_on_the_cases_step_19_failed(tmp_path, monkeypatch):
    """`python -m cells diagnose --failures`: the exported model, replayed on the records' failed cases."""
    from cells.commands.diagnose import diagnose_failures
    from cells.evaluation.records import record_from_episode, save_records_jsonl
    from cells.evaluation.runner import EvalCase, play_greedy
    from cells.step_07_tasks import eval_seeds
    from cells.step_08_rewards import rewards_of

    monkeypatch.delenv("HF_TOKEN", raising=False)
    ctx = s24.run(_trained_context(tmp_path))
    (tmp_path / "profile.json").write_text(json.dumps({"name": "cpu-smoke"}))
    cases = tuple(EvalCase(s, 2, "en") for s in eval_seeds(2, 2, "en"))
    played = play_greedy(ctx.model, ctx.tokenizer, cases, ctx.profile).episodes
    records = [record_from_episode("trained", 0, ep, rewards_of(ep)) for ep in played]
    assert not any(r.success for r in records)  # a random LoRA on a random base: every case fails
    save_records_jsonl(records, tmp_path / "records_final.jsonl")
    summary = diagnose_failures(tmp_path)
    assert summary["failures"] == 2 and [r["seed"] for r in summary["episodes"]] == [c.seed for c in cases]
    assert all(r["failure"] and r["stage"] == 2 for r in summary["episodes"])
    assert json.loads((tmp_path / "diagnose_failures.json").read_text(encoding="utf-8"))["failures"] == 2
    save_records_jsonl([], tmp_path / "records_final.jsonl")  # nothing failed: nothing to replay
    assert diagnose_failures(tmp_path)["failures"] == 0
    (tmp_path / "export" / s24.SIDECAR).unlink()
    save_records_jsonl(records, tmp_path / "records_final.jsonl")
    with pytest.raises(s24.ExportError, match="not a DriftCall export"):
        diagnose_failures(tmp_path)


def test_diagnose_probe_replays_the_export_on_the_probe_cases(tmp_path, monkeypatch):
    """`python -m cells diagnose --probe`: the exported model, replayed on step 20's cases, must commit the
    offences `probe.json` recorded for it; a probe of another model, or of none, is refused."""
    from cells.commands.diagnose import DiagnoseError, diagnose_probe
    from cells.step_20_probe import _play_model, known_offence_codes, probe_cases, summarise

    monkeypatch.delenv("HF_TOKEN", raising=False)
    ctx = s24.run(_trained_context(tmp_path))
    (tmp_path / "profile.json").write_text(json.dumps({"name": "cpu-smoke"}))
    trained = summarise("trained", _play_model(ctx.model, ctx.tokenizer, probe_cases(3, generated=True), ctx.profile),
                        known_offence_codes())
    probe = {"n_episodes": 3, "policies": {"trained": trained}}
    (tmp_path / "probe.json").write_text(json.dumps(probe))
    summary = diagnose_probe(tmp_path)
    assert summary["episodes"] == 3
    assert summary["by_code"] == {c: round(v * 3) for c, v in trained["offence_episode_share"].items()}
    saved = json.loads((tmp_path / "diagnose_probe.json").read_text(encoding="utf-8"))
    assert saved["offending_episodes"] == summary["offending_episodes"] == len(saved["rows"])
    trained["offence_episode_share"] = {"invented_id": 1.0}
    (tmp_path / "probe.json").write_text(json.dumps(probe))
    with pytest.raises(DiagnoseError, match="not the model step 20 probed"):
        diagnose_probe(tmp_path)
    (tmp_path / "probe.json").write_text(json.dumps({"n_episodes": 3, "policies": {}}))
    with pytest.raises(DiagnoseError, match="no trained-model row"):
        diagnose_probe(tmp_path)


def test_diagnose_refusals_plays_the_export_on_drifted_cases_clear_of_the_probes(tmp_path, monkeypatch):
    """`python -m cells diagnose --refusals`: the exported model on drifted probe-range cases the probe never plays."""
    from cells.commands.diagnose import DiagnoseError, diagnose_refusals, refusal_cases
    from cells.step_20_probe import probe_cases

    assert not {c.seed for c in refusal_cases(200)} & {c.seed for c in probe_cases(1_000)}
    monkeypatch.delenv("HF_TOKEN", raising=False)
    s24.run(_trained_context(tmp_path))
    (tmp_path / "profile.json").write_text(json.dumps({"name": "cpu-smoke"}))
    summary = diagnose_refusals(tmp_path, episodes=2)
    assert summary["episodes"] == 2 and summary["refused"] >= summary["repeated"] >= 0
    assert json.loads((tmp_path / "diagnose_refusals.json").read_text(encoding="utf-8")) == summary
    with pytest.raises(DiagnoseError, match="--episodes must be >= 1"):
        diagnose_refusals(tmp_path, episodes=0)
    from cells.commands.diagnose import DEV_FILES, diagnose_development

    dev = diagnose_development(tmp_path, episodes=3)  # the export, on development cases
    assert dev["played"] == 3 and dev["model"] == "trained" and set(dev["success_by_stage"]) == {"1", "2", "3"}
    assert json.loads((tmp_path / DEV_FILES[False]).read_text(encoding="utf-8"))["failures"] == dev["failures"]
    from cells.commands.diagnose import REACH_FILES, diagnose_reach
    from cells.step_06_drift import drift_split

    with pytest.raises(DiagnoseError, match="without a drift_split"):
        diagnose_reach(tmp_path, episodes=1)
    reach = diagnose_reach(tmp_path, "latin", episodes=2, samples=2)
    for which in ("demonstrated", "reinforced", "unseen"):
        block = reach[which]
        assert block["cases"] == 2 and block["samples"] == 2 and len(block["successes_per_case"]) == 2
        assert block["pass_at_2"] >= block["sampled_success"] and 0 <= block["greedy_success"] <= 1
    assert json.loads((tmp_path / REACH_FILES[False]).read_text(encoding="utf-8")) == reach
    rows = reach["reinforced"]["by_pattern"]
    assert sum(r["cases"] for r in rows.values()) >= 2 and set(rows) <= drift_split("latin").ids("reinforced")
    one = diagnose_reach(tmp_path, "latin", episodes=1, samples=2, pattern="cab_city_required")
    assert set(one) == {"model", "split", "pattern", "reinforced"} and list(one["reinforced"]["by_pattern"]) == [
        "cab_city_required"] and (tmp_path / "diagnose_reach_cab_city_required.json").is_file()
    with pytest.raises(DiagnoseError, match=r"neither in the drift catalogue .* nor a generated instance"):
        diagnose_reach(tmp_path, "latin", episodes=1, pattern="no_such_drift")
    hot = diagnose_reach(tmp_path, "latin", episodes=1, samples=2, temperature=1.5)
    assert hot["reinforced"]["temperature"] == 1.5 and (tmp_path / "diagnose_reach_t1.5.json").is_file()
    with pytest.raises(DiagnoseError, match="--temperature"):
        diagnose_reach(tmp_path, "latin", episodes=1, samples=2, temperature=0.0)
