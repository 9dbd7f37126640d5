"""The `Profile`: every knob the pipeline reads, each declared once with its help, its scope and (where it has
them) its allowed values, as TRL's `GRPOConfig` declares its fields. `python -m cells profiles` prints them and
`--docs` writes docs/profiles.md from these declarations. Cross-field rules are checked in `__post_init__` and raise
`ProfileError` naming the rule, the values and the fix. The presets live in `cells/profiles/presets.py`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from cells.errors import DriftCallError

LANGUAGES: tuple[str, ...] = ("hi", "ta", "kn", "en", "hinglish")  # the one home (steps 2 and 4 re-export it)
# Turns an episode may take, per curriculum stage (drift needs turns to notice and adapt): the env's defaults
# (step 10) and every profile's unless it sets its own. An episode needs at least a token, a search, a booking
# and a submit, hence the minimum.
TURN_BUDGETS: tuple[int, int, int] = (8, 12, 16)
MIN_TURN_BUDGET = 4


class ProfileError(DriftCallError, ValueError):
    """An unknown profile name or an inconsistent set of knobs."""


# Which drifts an environment schedules (`DriftCallEnv(drift_source=...)`, the `drift_source` knob): the hand-written
# catalogue (cells/data/drifts.yaml), instances of the generated drift families (cells/data/drift_families.yaml), or
# both (each hand-written pattern and each family equally likely).
DRIFT_SOURCES: tuple[str, ...] = ("handwritten", "generated", "both")


def _stage_index(stage: int) -> int:
    """The index of curriculum stage 1, 2 or 3 in a per-stage knob; `ProfileError` for any other stage."""
    if stage not in (1, 2, 3):
        raise ProfileError(f"stage must be 1, 2 or 3, got {stage}")
    return stage - 1


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
    "adapter": "the GRPO LoRA's shape: read by the GRPO stages, and by the warm start only when it trains the LoRA "
               "(`warm_start_full` false); a full warm start is reused across it",
    "evaluation": "how much is evaluated: never changes what training produces",
    "run": "bookkeeping (where the run writes, how often it saves): never changes what training produces",
}


def knob(default: Any = dataclasses.MISSING, *, help: str, scope: str = "training",
         default_factory: Any = dataclasses.MISSING, shown: str | None = None, report: bool = True,
         choices: tuple[str, ...] = (), at_most: int | None = None) -> Any:
    """A `Profile` field documented where it is declared, as TRL's `GRPOConfig` does (`field(metadata=...)`):
    `help` says what it sets, `scope` which outputs it shapes (`KNOB_SCOPES`), `shown` replaces its default in
    the printed table, `report=False` leaves it out of the report's configuration table (step 22). `choices`
    (the values it may take) and `at_most` (an int knob's cap, its floor being 0) are checked by every
    `Profile` and read by the code that uses the knob (`knob_choices`, `knob_cap`): declared once, here."""
    if scope not in KNOB_SCOPES:
        raise ProfileError(f"knob scope {scope!r} is not one of {sorted(KNOB_SCOPES)}")
    metadata = {"help": help, "scope": scope, "shown": shown, "report": report, "choices": choices,
                "at_most": at_most}
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
                                        help="the local model's shape (when model_id is None); `--set 'tiny={\"hidden_size\": 128}'` "
                                             "changes the named fields of the preset's")
    load_in_4bit: bool = knob(False, help="NF4 weights (Unsloth or bitsandbytes) on a GPU; ignored on the CPU")
    use_unsloth: bool = knob(False, help="boot through Unsloth when it imports (GPU); else transformers + peft, "
                                         "same adapter")
    lora_r: int = knob(16, scope="adapter", help="LoRA rank (peft `r`, Unsloth `r`)")
    lora_alpha: int = knob(32, scope="adapter", help="LoRA scale numerator: the update is scaled by alpha / r")
    lora_dropout: float = knob(0.0, scope="adapter", help="dropout on the LoRA input (0: Unsloth's fast path)")
    lora_targets: tuple[str, ...] = knob(("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
                                         scope="adapter", shown="all 7 attention and MLP projections",
                                         help="modules the LoRA wraps")
    lora_modules_to_save: tuple[str, ...] = knob(
        (), scope="adapter",
        help="modules trained in full inside the adapter (peft `modules_to_save`, e.g. [\"embed_tokens\"]: the tied "
             "embeddings and LM head, which a LoRA of the projections never moves); GRPO's KL reference, TRL's frozen "
             "`ref` copy of the adapter at each stage's start, copies them too")
    # --- generation / rollout (steps 11, 14) ---
    max_prompt_tokens: int = knob(1280, help="turn-0 prompt incl. tool docs; sizes Unsloth's max_seq_length")
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
    # A group still without signal after a few fresh draws comes from a policy that solves all or none of them,
    # and each replay costs a whole group's rollout: hence a small cap.
    grpo_resample_rounds: int = knob(
        0, scope="grpo", at_most=8,
        help="dynamic sampling: a group whose G rewards are all equal (no gradient) is replaced by a fresh episode and "
             "played again, up to this many times per step (0: off)")
    # "success" is DAPO's accuracy filter on the judge's r_task: a group whose episodes all succeed or all fail has a
    # gradient from partial credit and penalties only, none towards booking what the user asked for.
    grpo_resample_on: str = knob(
        "reward", scope="grpo", choices=("reward", "success"),
        help="what dynamic sampling replaces: `reward`, a group whose G rewards are all equal; `success`, a group "
             "whose G episodes all succeed or all fail (r_task)")
    # "group" lets a group whose rewards differ only by partial credit get advantages as large as one with a
    # success; "batch" keeps the groups' relative weight; "none" is Dr. GRPO's choice.
    grpo_scale_rewards: str = knob(
        "group", scope="grpo", choices=("group", "batch", "none"),
        help="how advantages are scaled (TRL's `scale_rewards`): `group`, by each group's reward std; `batch`, by "
             "the std over the step's episodes; `none`, not at all")
    # Reinforce-Rej (arXiv 2504.11343) and DAPO (arXiv 2503.14476) compute the advantage on a binary correctness
    # reward. On DriftCall's shaped reward a success among failures that differ by penalties and format is scaled by
    # the failures' spread too: its advantage shrinks where the recovery is rare (`diagnose --signal`).
    grpo_advantage_on: str = knob(
        "reward", scope="grpo", choices=("reward", "success"),
        help="what the group-relative advantage compares: `reward`, the episodes' rewards; `success`, their task "
             "success (0/1, r_task), so within a group only succeeding against failing counts")
    grpo_success_advantage: float = knob(
        0.0, scope="grpo", help="added to the advantage of every episode that succeeded (r_task), after scaling: a "
                                "RAFT-like pull towards the policy's own successes inside GRPO's loss (0: off)")
    # Reinforce-Rej (arXiv 2504.11343): GRPO's edge over rejection sampling comes from dropping the groups whose
    # samples all succeed or all fail; they cost a backward pass and rank failures by penalties, not by success.
    grpo_keep: str = knob(
        "all", scope="grpo", choices=("all", "success_contrast"),
        help="which groups reach the update: `all`; `success_contrast`, only groups with a success and a failure "
             "(r_task), the others dropped before the log-prob passes and the backward pass")
    # GiGPO (arXiv 2505.10978): a seeded group repeats environment states exactly, so a step's credit can be
    # measured among the episodes that stood in the same state, where one reward per episode spreads it over
    # every turn.
    grpo_step_advantage: float = knob(
        0.0, scope="grpo", help="weight of the step-level advantage added to each turn's tokens: episodes of a group "
                                "with the same tokens before the turn are compared by reward (0: off)")
    grpo_reference: bool = knob(
        True, scope="grpo", help="a KL term to the warm-started reference (beta from step 13, retargeted when "
                                 "`adaptive_kl`); False: beta 0, no reference forward pass and no adaptive KL")
    grpo_clip_high: float = knob(
        0.2, scope="grpo", help="the upper clip of the policy ratio (TRL's `epsilon_high`; DAPO's clip-higher "
                                "raises it above the lower 0.2 so rare good tokens can grow faster)")
    # GRPO's paper (Shao et al. 2024, arXiv 2402.03300) takes mu optimiser steps per generated batch; on 2 CPU cores
    # a rollout costs several update passes, so reusing it buys updates more cheaply than playing new episodes.
    grpo_iterations: int = knob(
        1, scope="grpo", help="optimiser steps on each generated batch (TRL's `num_iterations`, GRPO's mu): above 1 "
                              "the old policy's log-probs are computed once per batch and the clipped ratio binds; "
                              "`steps_per_stage` counts optimiser steps, so a stage plays 1/mu the episodes")
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
        "handwritten", choices=DRIFT_SOURCES,
        help="which drifts the warm start's expert episodes and GRPO's episodes meet: `handwritten` (the catalogue), "
             "`generated` (instances of the drift families) or `both`; with a generated `drift_split` (e.g. "
             "`latin-gen`) only its training instances")
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
    sft_item_field_drills: float = knob(
        0.0, help="per expert conversation: a further fresh episode whose booking or order call must carry a field "
                  "in each element of a list argument (`passengers[].x`, an empty list; `sft_data."
                  "ITEM_FIELD_DRILL_NAMES`); the usual call is refused naming it (no loss on it) and resent with it in "
                  "every element, cut there: the nested required-field repair, shown only at list arguments where "
                  "the drift split demonstrates the nested-field family (none where it demonstrates none). 0 = off")
    sft_item_field_drill_names: str = knob(
        "composed", choices=("composed", "invented", "words"),
        help="the item-field drills' names: `composed`, 480 names of a head and a kind word (`wheelchair_remarks`); "
             "`invented`, two made-up words per drill (`tavoru_mekis`), so only copying the name from the error "
             "repairs the call; `words`, two words of the project's own text per drill (`evening_selection`), so "
             "the copy meets the token pieces the model's JSON is made of")
    sft_item_field_drill_until: str = knob(
        "repair", choices=("repair", "report"),
        help="where an item-field drill ends: `repair`, at the resent call; `report`, at the expert's last message "
             "to the user (the whole episode, kept only if it succeeded), so a repair is shown leading to a "
             "success and not only to a call")
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
    # A warm start that comes out weak leaves GRPO little to reinforce (`cells/training/warm_start_gate.py`).
    sft_extend_rounds: int = knob(
        0, at_most=4, help="the warm start's development gate: after the planned SFT, up to this many more rounds "
                           "of SFT while greedy success on `warm_start_dev_cases` development cases is below "
                           "`sft_extend_target` and still rising (0: off)")
    sft_extend_share: float = knob(0.25, help="each gate round's fresh conversations, as a share of sft_episodes")
    sft_extend_target: float = knob(0.8, help="development success at which the gate stops extending SFT")
    warm_start_dev_cases: int = knob(60, help="development cases (probe range) the gate plays after each round")
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
                                    "CPU speech recognition takes seconds a line")
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
    precision: str = knob("fp32", choices=("fp32", "bf16", "fp16"), help="the weights' and activations' float type")
    knobs_set: tuple[str, ...] = knob(
        (), scope="run", help="the `python -m cells run --set KNOB=VALUE` changes the run was made with, in order "
                              "(reapplied when the run is reloaded: its controls and diagnoses use them)")

    def __post_init__(self) -> None:
        self._check_declared_values()
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
        if self.sft_extend_rounds and (not self.warm_start_full or self.warm_start_dev_cases < 1):
            raise ProfileError(f"profile {self.name!r}: sft_extend_rounds needs warm_start_full (a saved full warm "
                               f"start to continue) and warm_start_dev_cases >= 1, got {self.warm_start_full} and "
                               f"{self.warm_start_dev_cases}")
        for name in ("grpo_success_advantage", "grpo_step_advantage", "grpo_clip_high", "sft_extend_share"):
            if getattr(self, name) < 0:
                raise ProfileError(f"profile {self.name!r}: {name} must be >= 0, got {getattr(self, name)}")
        if self.grpo_iterations < 1:
            raise ProfileError(f"profile {self.name!r}: grpo_iterations must be >= 1 (optimiser steps per generated "
                               f"batch), got {self.grpo_iterations}")
        if self.drift_train_instances < -1:
            raise ProfileError(f"profile {self.name!r}: drift_train_instances must be >= -1 (-1: all), got "
                               f"{self.drift_train_instances}")
        if not 0.0 <= self.grpo_reinforced_share <= 1.0:
            raise ProfileError(f"profile {self.name!r}: grpo_reinforced_share must be in [0, 1], got "
                               f"{self.grpo_reinforced_share}")
        for knob in ("sft_search_drills", "sft_booking_drills", "sft_recovery_drills", "sft_year_turn_drills",
                     "sft_field_drills", "sft_item_field_drills"):
            if getattr(self, knob) < 0:
                raise ProfileError(f"profile {self.name!r}: {knob} must be >= 0 (drills per expert conversation), "
                                   f"got {getattr(self, knob)}")

    def _check_declared_values(self) -> None:
        """Every knob declared with `choices` holds one of them; every knob declared with `at_most` is in range."""
        for f in dataclasses.fields(self):
            value, choices, cap = getattr(self, f.name), f.metadata["choices"], f.metadata["at_most"]
            if choices and value not in choices:
                raise ProfileError(f"profile {self.name!r}: {f.name} must be one of {choices}, got {value!r}")
            if cap is not None and not 0 <= value <= cap:
                raise ProfileError(f"profile {self.name!r}: {f.name} must be in [0, {cap}], got {value}")

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


def _declared(name: str) -> dataclasses.Field[Any]:
    for f in dataclasses.fields(Profile):
        if f.name == name:
            return f
    raise ProfileError(f"no knob {name!r}; `python -m cells profiles` lists them")


def knob_choices(name: str) -> tuple[str, ...]:
    """The values knob `name` may take, as declared (`knob(choices=...)`)."""
    return tuple(_declared(name).metadata["choices"])


def knob_cap(name: str) -> int:
    """The largest value int knob `name` may take, as declared (`knob(at_most=...)`)."""
    cap = _declared(name).metadata["at_most"]
    if cap is None:
        raise ProfileError(f"knob {name!r} declares no cap")
    return int(cap)


def knob_differences(old: dict[str, Any], new: dict[str, Any], ignore: frozenset[str] = frozenset(),
                     absent: Any = None) -> dict[str, tuple[Any, Any]]:
    """{knob: (old value, new value)} for every knob but `ignore` whose value differs (compared as canonical JSON,
    the serialisation knob digests hash, so a tuple and its JSON list agree); a knob one side lacks differs and
    reads `absent` there."""
    from cells.codec import canonical_json

    def same(k: str) -> bool:
        return k in old and k in new and canonical_json(old[k]) == canonical_json(new[k])

    return {k: (old.get(k, absent), new.get(k, absent)) for k in sorted(set(old) | set(new))
            if k not in ignore and not same(k)}


def declared_default(name: str) -> Any:
    """The declared default of knob `name` (`default_factory` called), or `dataclasses.MISSING` for a name that is
    not a knob with a default: what the code did before a knob existed, for records written before it."""
    field = {f.name: f for f in dataclasses.fields(Profile)}.get(name)
    if field is None:
        return dataclasses.MISSING
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


def knobs_in_scope(*scopes: str) -> frozenset[str]:
    """The `Profile` fields declared with one of `scopes` (`KNOB_SCOPES`)."""
    return frozenset(f.name for f in dataclasses.fields(Profile) if f.metadata["scope"] in scopes)
