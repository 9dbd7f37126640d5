"""Step 24 - export: the trained model as files you can ship, a reload check, and an optional Hub push.

Writes `<run_dir>/export/`:
- `adapter/`: the trained LoRA adapter (peft `save_pretrained`: adapter weights + config);
- `base/` (CPU profiles): the warm-started tiny model the adapter sits on (GPU profiles name their
  Hub base model in the sidecar instead of copying gigabytes);
- `tokenizer/`: the tokenizer with its chat template;
- `driftcall_export.json`: profile, base model, versions, git sha, headline metrics with CIs, and the
  sha256 of every exported file.

Then it reloads the export (`load_export`) and checks that the reloaded model plays the same greedy
actions as the in-memory one on a few held-out seeds (`reload_check` in the sidecar). A Hub push
runs only when both `HF_TOKEN` and `DRIFTCALL_HUB_REPO` are set; without them it is skipped with a
message, and a failed push is reported without failing the run.

Reads `ctx.model`, `ctx.tokenizer` (after training, steps 15-17), `ctx.trainer_state["warm_start"]`,
`ctx.reports` ("final", "paired", "probe"; optional), `ctx.runtime`. Writes `ctx.artifacts["export"]`,
`ctx.reports["export"]`. Run alone (after training in the same run): `python -m cells run --profile
cpu-smoke --steps 12-17,24`. Time: a few seconds on CPU profiles (the reload check plays 3 episodes twice).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cells.errors import DriftCallError

if TYPE_CHECKING:  # pragma: no cover
    from cells.context import Context

EXPORT_SCHEMA = "driftcall.export/1"
SIDECAR = "driftcall_export.json"
RELOAD_CHECK_EPISODES = 3
# What a command that plays a run's trained model says when the run has no export yet. `--steps 1-17,24` is the
# cheap way on a development run: it trains and exports but skips the held-out evaluation (steps 18-23).
MISSING_EXPORT_HINT = "run the pipeline through step 24 first (`--steps 1-17,24` trains and exports, skipping evaluation)"


class ExportError(DriftCallError, RuntimeError):
    """The run has nothing exportable (no trained adapter) or an export directory is incomplete."""


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): _sha256(p) for p in sorted(root.rglob("*")) if p.is_file() and p.name != SIDECAR}


def headline_metrics(reports: dict[str, Any]) -> dict[str, Any]:
    """Success and reward of the trained model, the paired gains with CIs, and the probe verdict."""
    out: dict[str, Any] = {}
    final = list(reports.get("final", {}).get("policies", {}).values())  # step 19 evaluates one model
    trained = final[0] if len(final) == 1 else {}
    if trained:
        out["success"] = trained.get("success")
        out["reward"] = trained.get("components", {}).get("reward")
    metrics = reports.get("paired", {}).get("metrics", {})
    for name in ("success", "reward"):
        if name in metrics:
            out[f"paired_{name}_diff"] = metrics[name].get("diff")
    if "probe" in reports:
        out["probe_all_exploits_pass"] = reports["probe"].get("all_exploits_pass")
    return out


def export_model(ctx: Context, out_dir: Path) -> dict[str, Any]:
    """Write adapter, base (full warm start only), tokenizer and the sidecar; return the sidecar dict."""
    if ctx.model is None or not hasattr(ctx.model, "peft_config"):
        raise ExportError("nothing to export: step 24 needs the trained adapter model from steps 15-17")
    if out_dir.exists():
        shutil.rmtree(out_dir)  # an export is all or nothing: never a mix of two runs
    out_dir.mkdir(parents=True)
    ctx.model.save_pretrained(str(out_dir / "adapter"), selected_adapters=["default"])  # not TRL's "ref" copy
    ctx.tokenizer.save_pretrained(str(out_dir / "tokenizer"))
    warm = ctx.trainer_state.get("warm_start")
    if getattr(warm, "full_model", False):
        shutil.copytree(Path(warm.saved_dir), out_dir / "base", ignore=shutil.ignore_patterns("*.json.lock"))
        base = "base"
    else:
        base = ctx.profile.model_id
    runtime = ctx.runtime
    meta = {
        "schema": EXPORT_SCHEMA, "profile": ctx.profile.name, "profile_knobs": dataclasses.asdict(ctx.profile),
        "base_model": base, "adapter": "adapter", "tokenizer": "tokenizer",
        "versions": dict(runtime.versions) if runtime is not None else {},
        "git_sha": runtime.git_sha if runtime is not None else None,
        "metrics": headline_metrics(ctx.reports), "files": _files(out_dir),
    }
    _write_sidecar(out_dir, meta)
    return meta


def _write_sidecar(out_dir: Path, meta: dict[str, Any]) -> None:
    text = json.dumps(meta, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    (out_dir / SIDECAR).write_text(text + "\n", encoding="utf-8")


def load_export(export_dir: Path | str) -> tuple[Any, Any]:
    """(model, tokenizer) from an export: the base (exported copy, or the profile's model: a Hub id, directory,
    .gguf file or packaged model, `cells.modeling.sources`) with the adapter on top."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from cells.modeling.sources import load_tokenizer_and_model, resolve_model_source

    export_dir = Path(export_dir)
    sidecar = export_dir / SIDECAR
    if not sidecar.is_file():
        raise ExportError(f"{export_dir} has no {SIDECAR}: not a DriftCall export")
    meta = json.loads(sidecar.read_text(encoding="utf-8"))
    tokenizer = AutoTokenizer.from_pretrained(str(export_dir / meta["tokenizer"]))
    local = export_dir / meta["base_model"]
    if local.is_dir():
        base = AutoModelForCausalLM.from_pretrained(str(local), dtype=torch.float32)
    else:
        source = resolve_model_source(meta["base_model"])
        _, base = load_tokenizer_and_model(source, {"dtype": torch.float32 if source.local else "auto"})
    model = PeftModel.from_pretrained(base, str(export_dir / meta["adapter"]))
    model.eval()
    return model, tokenizer


def greedy_actions(model: Any, tokenizer: Any, profile: Any, n: int = RELOAD_CHECK_EPISODES) -> list[list[str]]:
    """The assistant texts of `n` greedy held-out episodes (stage 2, one language each)."""
    from cells.evaluation.runner import EvalCase, play_greedy
    from cells.step_04_datatypes import LANGUAGES
    from cells.step_07_tasks import eval_seeds

    cases = [EvalCase(eval_seeds(1, 2, lang)[0], 2, lang) for lang in LANGUAGES[:n]]
    result = play_greedy(model, tokenizer, cases, profile)
    return [[m["content"] for m in t if m["role"] == "assistant"] for t in result.transcripts]


def push_to_hub(out_dir: Path) -> str:
    """Upload the export when HF_TOKEN and DRIFTCALL_HUB_REPO are set; returns what happened (never raises)."""
    token, repo = os.environ.get("HF_TOKEN"), os.environ.get("DRIFTCALL_HUB_REPO")
    if not token or not repo:
        return "skipped (set HF_TOKEN and DRIFTCALL_HUB_REPO to push)"
    try:
        from huggingface_hub import HfApi

        api = HfApi(token=token)
        api.create_repo(repo, exist_ok=True, private=True)
        api.upload_folder(folder_path=str(out_dir), repo_id=repo, commit_message="DriftCall export")
    except Exception as exc:  # the push is optional: report it, keep the run's results
        return f"failed ({type(exc).__name__}: {exc})"
    return f"pushed to {repo}"


def run(ctx: Context) -> Context:
    """Export, reload, compare greedy actions, optionally push; print one summary line."""
    out_dir = Path(ctx.run_dir) / "export"
    meta = export_model(ctx, out_dir)
    before = greedy_actions(ctx.model, ctx.tokenizer, ctx.profile)
    reloaded, tokenizer = load_export(out_dir)
    after = greedy_actions(reloaded, tokenizer, ctx.profile)
    meta["reload_check"] = {"episodes": len(before), "same_greedy_actions": before == after,
                            "turns": sum(len(t) for t in before)}
    meta["hub"] = push_to_hub(out_dir)
    _write_sidecar(out_dir, meta)
    ctx.reports["export"] = meta
    ctx.artifacts["export"] = out_dir
    size = sum(p.stat().st_size for p in out_dir.rglob("*") if p.is_file()) / 2**20
    print(f"[export] {out_dir} ({size:.1f} MiB; base: {meta['base_model']}); reload reproduces greedy actions: "
          f"{meta['reload_check']['same_greedy_actions']} ({meta['reload_check']['turns']} turns); hub: {meta['hub']}")
    if not meta["reload_check"]["same_greedy_actions"]:
        raise ExportError(f"the exported model plays differently after reload; see {out_dir / SIDECAR}")
    return ctx
