"""DriftCall training machinery (steps 15-17 call into it).

- `warm_start`: SFT on expert conversations, loss on assistant tokens only.
- `grpo_stage`: a GRPO stage top-down: `run_grpo_stage` (steps 15-17) and `build_stage_trainer`.
- `curriculum`: the stage engine under it (one cosine schedule over all stages, resume, stage stop).
- `checkpoints`: adapter-only checkpoints + `driftcall_meta.json` sidecar, `latest_checkpoint`.
- `metrics`: `metrics.csv` writer callback and reader.

Nothing is re-exported here so that `import cells.training.checkpoints` stays light;
`curriculum`, `metrics` and `warm_start` import transformers/trl.
"""
