"""Multi-turn rollout driver: N episodes at once, scripted policy or batched model generation.

Each turn every active episode produces one assistant message: a scripted policy is asked
(`policy.act(observation, history) -> str`), or, in lock-step, all active episodes go through ONE
`model.generate` call (left padding, KV cache on, stop at the end-of-turn token). The text goes to
`env.step_text`, and the next observation is rendered as the next user-side message. For models that
support it, model rollouts instead use continuous batching (`cells/agent/continuous.py`): the same
per-episode decisions, without any episode waiting for another's turn to end.

Token sequences are built incrementally, never by re-tokenising the whole conversation: the tokens
the model generated are kept exactly (mask 1), and everything the chat template or the environment
inserts between turns (turn closers, `<start_of_turn>user ... <start_of_turn>model\n`) gets mask 0.
The next turn's generation is fed exactly these ids, so what the trainer scores is what was sampled.

Env protocol (DriftCallEnv and tests/toy_env.py): `reset(seed) -> obs`, `step_text(text) -> obs`,
`obs.done`, `episode()`. The turn-0 prompt is the system prompt plus the goal's `seed_utterance`
(the same two messages as `cells.agent.chat.render_initial_prompt`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from cells.agent.continuous import play_continuously, supports_continuous
from cells.agent.merged import adapters_merged
from cells.agent.sampling import seeded_sampling
from cells.agent.turns import (  # GenerationSpec, ChatPieces: re-exported, the rollout API
    DEFAULT_GENERATION,
    ChatPieces,
    EpisodeRun,
    GenerationSpec,
    advance,
    turn_seed,
)


@dataclass(frozen=True)
class TrajectoryTokens:
    """One episode as tokens: the turn-0 prompt, then everything after it.

    `assistant_mask[i]` is 1 where `completion_ids[i]` was produced by the policy and 0 for template
    or environment tokens; `turn_spans` are `[start, end)` ranges of each assistant turn in
    `completion_ids`; `text` is the decoded completion (special tokens kept).
    """

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    assistant_mask: tuple[int, ...]
    turn_spans: tuple[tuple[int, int], ...]
    text: str

    def __post_init__(self) -> None:
        if len(self.completion_ids) != len(self.assistant_mask):
            raise ValueError(
                f"completion_ids ({len(self.completion_ids)}) and assistant_mask ({len(self.assistant_mask)}) differ"
            )


@dataclass(frozen=True)
class RolloutResult:
    """What `rollout_batch` returns, one entry per env."""

    transcripts: tuple[tuple[dict[str, str], ...], ...]  # chat messages, system + user + turns
    trajectories: tuple[TrajectoryTokens, ...] | None  # None when no tokenizer was given
    episodes: tuple[Any, ...]
    generated_tokens: int
    seconds: float
    decode_steps: int = 0  # model forward calls that sampled a token (lock-step: each turn's longest row)


def default_system_prompt(env: Any, obs: Any) -> str:
    """Pinned prompt + action format + the time and tool docs on the reset observation (`cells.agent.prompt`)."""
    from cells.agent.prompt import system_prompt_for

    tools = getattr(obs, "available_tools", None)
    return system_prompt_for(tools=tuple(tools) if tools else (), now=getattr(obs, "now", None))


def default_goal(env: Any, obs: Any) -> Any:
    """What the rollout opens with: the env's goal, unless the turn-0 observation says otherwise (a voice
    boundary's transcript, or an env without a `goal`): then the utterance the agent actually received."""
    goal = getattr(env, "goal", None)
    heard = getattr(obs, "goal_utterance", None)
    if goal is not None and (heard is None or heard == goal.seed_utterance):
        return goal
    return SimpleNamespace(seed_utterance=heard or "")


def default_render_observation(obs: Any) -> str:
    """`cells.agent.prompt.render_observation` for DriftCall observations; a toy env's `obs.text` otherwise."""
    from cells.agent.prompt import render_observation
    from cells.step_04_datatypes import DriftCallObservation

    if isinstance(obs, DriftCallObservation):
        return render_observation(obs)
    return str(getattr(obs, "text", ""))


def _generate(model: Any, pieces: ChatPieces, batch: list[list[int]], max_new: list[int],
              spec: GenerationSpec, seeds: Sequence[int] | None = None) -> list[list[int]]:
    """One batched `generate` over left-padded `batch`; each row cut after its first stop token.

    `seeds` (one per row): sample each row from its own generator (`seeded_sampling`) instead of the
    global RNG stream."""
    import torch

    pad = pieces.tok.pad_token_id
    width = max(len(ids) for ids in batch)
    device = next(model.parameters()).device
    input_ids = torch.full((len(batch), width), pad, dtype=torch.long, device=device)  # (B, T)
    attention = torch.zeros((len(batch), width), dtype=torch.long, device=device)  # (B, T)
    for row, ids in enumerate(batch):
        input_ids[row, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
        attention[row, width - len(ids):] = 1
    if spec.greedy:
        sample_kwargs: dict[str, Any] = {"do_sample": False}
    elif seeds is not None:
        sample_kwargs = {"do_sample": False, "logits_processor": [seeded_sampling(seeds, spec)]}
    else:
        sample_kwargs = {"do_sample": True, "temperature": spec.temperature, "top_p": spec.top_p, "top_k": 0}
    with torch.no_grad():
        out = model.generate(
            input_ids=input_ids, attention_mask=attention, max_new_tokens=max(max_new), use_cache=True,
            eos_token_id=list(pieces.stop_ids), pad_token_id=pad, **sample_kwargs,
        )  # (B, T + N)
    results = []
    for row, limit in enumerate(max_new):
        new = out[row, width:width + limit].tolist()
        for j, token in enumerate(new):
            if token in pieces.stop_ids:
                new = new[: j + 1]
                break
        results.append(new)
    return results


def _start(envs: Sequence[Any], seeds: Sequence[int], pieces: ChatPieces | None,
           system_prompt_fn: Callable[[Any, Any], str], goal_fn: Callable[[Any, Any], Any],
           after_reset: Callable[[Any], None] | None = None) -> list[EpisodeRun]:
    runs = []
    for env, seed in zip(envs, seeds, strict=True):
        obs = env.reset(seed=seed)
        if after_reset is not None:
            after_reset(env)
        goal = goal_fn(env, obs)
        messages = [{"role": "system", "content": system_prompt_fn(env, obs)},
                    {"role": "user", "content": str(getattr(goal, "seed_utterance", ""))}]
        prompt = pieces.encode(pieces.render(messages, add_generation_prompt=True)) if pieces else []
        runs.append(EpisodeRun(env, messages, prompt, [], [], [], obs, bool(getattr(obs, "done", False))))
    return runs


def rollout_batch(
    envs: Sequence[Any],
    seeds: Sequence[int],
    *,
    policy: Any = None,
    model: Any = None,
    tokenizer: Any = None,
    system_prompt_fn: Callable[[Any, Any], str] = default_system_prompt,
    goal_fn: Callable[[Any, Any], Any] = default_goal,
    render_observation: Callable[[Any], str] = default_render_observation,
    generation: GenerationSpec = DEFAULT_GENERATION,
    sample_seeds: Sequence[int] | None = None,
    after_reset: Callable[[Any], None] | None = None,
    **overrides: Any,
) -> RolloutResult:
    """Run `len(envs)` episodes with `policy` or `model` (one of them) until all are done: a scripted policy in
    lock-step; a model with continuous batching (`cells.agent.continuous`) where the model supports it and
    `continuous_batching` is on (the default), else in lock-step, one batched `generate` per turn.

    `generation` (with `overrides`, any `GenerationSpec` field by name) sets the decoding. An episode also stops
    when its completion would exceed `max_episode_tokens` or after `max_turns` turns; envs that support it are then
    ended with `env.truncate()` (DriftCallEnv: a timeout). `sample_seeds` (one per env): sampled episodes draw
    from their own generators, so an episode's tokens do not depend on the batch it was played in.
    `after_reset(env)` runs once each episode has started, before its first action (a drill control, as in
    `cells.agent.play.conversation`).
    """
    spec = generation.with_overrides(**overrides)
    if (policy is None) == (model is None):
        raise ValueError("pass exactly one of policy= (scripted) or model= (batched generation)")
    if model is not None and tokenizer is None:
        raise ValueError("model rollouts need tokenizer=")
    if sample_seeds is not None and len(sample_seeds) != len(envs):
        raise ValueError(f"sample_seeds has {len(sample_seeds)} entries for {len(envs)} envs")
    pieces = ChatPieces(tokenizer) if tokenizer is not None else None
    t0 = time.perf_counter()
    runs = _start(envs, seeds, pieces, system_prompt_fn, goal_fn, after_reset)
    for run, sample_seed in zip(runs, sample_seeds or (), strict=False):
        run.sample_seed = int(sample_seed)
    with adapters_merged(model):  # a LoRA policy plays merged on the CPU: same function, fewer operations
        if model is not None and spec.continuous_batching and _continuous_supported(model, runs, spec):
            generated, decode_steps = play_continuously(model, tokenizer, pieces, runs, spec,
                                                        sample_seeds is not None, render_observation)
        else:
            generated, decode_steps = _play_in_lock_step(runs, policy, model, tokenizer, pieces, spec,
                                                         sample_seeds is not None, render_observation)
    trajectories = None
    if pieces is not None:
        trajectories = tuple(
            TrajectoryTokens(tuple(r.prompt_ids), tuple(r.completion), tuple(r.mask), tuple(r.spans),
                             tokenizer.decode(r.completion, skip_special_tokens=False))
            for r in runs
        )
    return RolloutResult(
        transcripts=tuple(tuple(r.messages) for r in runs), trajectories=trajectories,
        episodes=tuple(_finished_episode(r.env) for r in runs), generated_tokens=generated,
        seconds=time.perf_counter() - t0, decode_steps=decode_steps,
    )


def _continuous_supported(model: Any, runs: Sequence[EpisodeRun], spec: GenerationSpec) -> bool:
    longest = max((len(r.prompt_ids) for r in runs), default=0) + spec.max_episode_tokens
    return supports_continuous(model, longest)


def _play_in_lock_step(runs: list[EpisodeRun], policy: Any, model: Any, tokenizer: Any, pieces: ChatPieces | None,
                       spec: GenerationSpec, seeded: bool, render_observation: Callable[[Any], str]) -> tuple[int, int]:
    """Turn by turn, every active episode at once: a scripted policy, or one batched `generate` per turn.
    Returns `(model tokens generated, decoding steps)`; a turn's `generate` lasts as long as its longest row."""
    generated = steps = 0
    for _ in range(spec.max_turns):
        active = [r for r in runs if not r.done]
        if not active:
            break
        budgets = [spec.max_episode_tokens - len(r.completion) for r in active]
        if policy is not None:
            texts = [str(policy.act(r.obs, tuple(r.messages))) for r in active]
            ids = [[*pieces.encode(t), pieces.stop_ids[0]] for t in texts] if pieces else [[] for _ in texts]
        else:
            ids = _generate(model, pieces, [r.prompt_ids + r.completion for r in active],
                            [max(1, min(spec.max_new_tokens_per_turn, b)) for b in budgets], spec,
                            [turn_seed(r) for r in active] if seeded else None)
            texts = [tokenizer.decode(t, skip_special_tokens=True) for t in ids]
            generated += sum(len(t) for t in ids)
            steps += max(len(t) for t in ids)
        for run, text, new, budget in zip(active, texts, ids, budgets, strict=True):
            advance(run, text, new, budget, pieces, render_observation)
    return generated, steps


def _finished_episode(env: Any) -> Any:
    """`env.episode()`, first ending the episode (`env.truncate()`) if the token budget stopped it early."""
    if not getattr(env, "done", True) and callable(getattr(env, "truncate", None)):
        env.truncate()
    return env.episode()
