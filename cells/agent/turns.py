"""One episode's turns as tokens, shared by both rollout drivers: the lock-step one (`cells.agent.rollout`) and
continuous batching (`cells.agent.continuous`).

`GenerationSpec` (the decoding knobs), `ChatPieces` (the chat template's token pieces, derived by rendering),
`EpisodeRun` (one episode in flight), `turn_seed` (a turn's sampling seed: the episode's seed and the turn number,
never the batch) and `advance` (record an assistant turn, step the env, append the env/template tokens with mask
0). Both drivers make the same per-episode decisions because they call these same functions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cells.seeding import stable_int

Messages = list[dict[str, str]]
_SENTINEL = "\u2063DRIFTCALL_SENTINEL\u2063"


@dataclass(frozen=True)
class GenerationSpec:
    """How a rollout generates: the one declaration of these knobs (`rollout_batch` and `make_rollout_group_fn`
    take a spec, and any of its fields as keyword overrides)."""

    max_new_tokens_per_turn: int = 64  # one assistant turn's cap
    max_episode_tokens: int = 1024  # generated + inserted tokens after the turn-0 prompt; the episode ends there
    temperature: float = 1.0  # sampling temperature (keep it equal to GRPOConfig's: TRL scores at it)
    top_p: float = 1.0
    greedy: bool = False  # argmax decoding (evaluation's trial 0) instead of sampling
    max_turns: int = 64  # a backstop for envs without their own turn budget
    # each episode starts its next turn as soon as its last ends (`cells.agent.continuous`), where the model
    # supports it; False: the lock-step driver, one `generate` per turn for every episode
    continuous_batching: bool = True

    @classmethod
    def for_profile(cls, profile: Any, **overrides: Any) -> GenerationSpec:
        """The profile's generation knobs (turn and episode caps, temperature, top-p), then `overrides`."""
        return cls(max_new_tokens_per_turn=profile.max_new_tokens_per_turn,
                   max_episode_tokens=profile.max_episode_tokens, temperature=profile.temperature,
                   top_p=profile.top_p).with_overrides(**overrides)

    def with_overrides(self, **overrides: Any) -> GenerationSpec:
        """A copy with `overrides` (field names of this class) applied."""
        return dataclasses.replace(self, **overrides) if overrides else self


DEFAULT_GENERATION = GenerationSpec()  # frozen: one shared default is safe


class ChatPieces:
    """Token pieces of the chat template, derived by rendering (works for any chat template)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tok = tokenizer
        end = tokenizer.convert_tokens_to_ids("<end_of_turn>")
        self.stop_ids = tuple(i for i in (end, tokenizer.eos_token_id) if isinstance(i, int) and i >= 0
                              and i != tokenizer.unk_token_id)
        closed = self.render([{"role": "user", "content": "u"}, {"role": "assistant", "content": _SENTINEL}])
        self.close_text = closed.split(_SENTINEL, 1)[1]  # what follows an assistant message, e.g. "<end_of_turn>\n"

    def render(self, messages: Messages, add_generation_prompt: bool = False) -> str:
        out = self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
        return str(out)

    def encode(self, text: str) -> list[int]:
        return list(self.tok(text, add_special_tokens=False)["input_ids"])

    def between_turns(self, messages: Messages, generated: Sequence[int], observation: str) -> list[int]:
        """Ids from the end of the generated turn to the next generation prompt (all env/template tokens)."""
        before = self.render(messages)  # ends with the last assistant turn, closed
        after = self.render([*messages, {"role": "user", "content": observation}], add_generation_prompt=True)
        if not after.startswith(before):
            raise ValueError("chat template is not prefix-stable; cannot build turn tokens incrementally")
        close = self.close_text
        if generated and generated[-1] in self.stop_ids:  # the model already emitted the closer's first token
            stop_text = self.tok.convert_ids_to_tokens(int(generated[-1]))
            close = close[len(stop_text):] if close.startswith(stop_text) else close
        return self.encode(close + after[len(before):])



@dataclass
class EpisodeRun:
    """One episode in flight: its env, chat messages and tokens so far (prompt, completion, mask, turn spans)."""

    env: Any
    messages: Messages
    prompt_ids: list[int]
    completion: list[int]
    mask: list[int]
    spans: list[tuple[int, int]]
    obs: Any
    done: bool = False
    sample_seed: int | None = None  # this episode's sampling seed (seeded rollouts); each turn derives its own


def turn_seed(run: EpisodeRun) -> int:
    """The sampling seed of `run`'s next turn: its episode's seed and the turn number, never the batch."""
    return stable_int("rollout.turn", run.sample_seed, len(run.spans)) % 2**63


def advance(run: EpisodeRun, text: str, new: list[int], budget: int, pieces: ChatPieces | None,
             render_observation: Callable[[Any], str]) -> None:
    """Record one assistant turn, step the env, and append the env/template tokens that follow."""
    if pieces is not None and len(new) > budget:  # scripted text longer than what is left
        run.done = True
        return
    start = len(run.completion)
    run.completion.extend(new)
    run.mask.extend([1] * len(new))
    run.spans.append((start, len(run.completion)))
    run.messages.append({"role": "assistant", "content": text})
    run.obs = run.env.step_text(text)
    if getattr(run.obs, "done", False):
        run.done = True
        return
    observation = render_observation(run.obs)
    if pieces is not None:
        filler = pieces.between_turns(run.messages, new, observation)
        if len(run.completion) + len(filler) >= budget + start:  # no room left for another turn
            run.done = True
            return
        run.completion.extend(filler)
        run.mask.extend([0] * len(filler))
    run.messages.append({"role": "user", "content": observation})
