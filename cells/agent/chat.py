"""Chat-template rendering that the rollout, the warm start and the model boot must agree on.

- `render_initial_prompt(tokenizer, goal)`: the turn-0 prompt text, exactly the two messages of
  `cells.agent.prompt.initial_messages` (system prompt, the user's utterance) with the generation prompt on:
  the text every rollout starts from and the GRPO dataset rows carry (step 14), and what step 12 measures.
- `render_segments(tokenizer, messages)`: a conversation split into `(text, is_assistant)` segments by
  incremental rendering. For the assistant message at index i,

      before = render(messages[:i], add_generation_prompt=True)   # ends with "<start_of_turn>model\\n"
      after  = render(messages[:i + 1])                           # ... "{content}<end_of_turn>\\n"

  the text between the previous render and `before` is environment/user text, and `after[len(before):]` is the
  assistant turn. The warm start tokenizes these segments (`cells.training.warm_start`); step 12 runs them on a
  fixed conversation to refuse a template that is not prefix-preserving (a later render rewrites earlier text,
  so rollout tokens and training tokens would differ).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cells.agent.prompt import initial_messages
from cells.errors import DriftCallError

ASSISTANT_ROLES = ("assistant", "model")


class ChatTemplateError(DriftCallError, ValueError):
    """A conversation or a chat template that cannot be rendered incrementally; the message says which."""


def render_initial_prompt(tokenizer: Any, goal: Any) -> str:
    """Turn-0 prompt: exactly two messages, the system prompt (pinned prompt + action format + the caller's
    time and the tool docs at reset) and `goal.seed_utterance`, with the generation prompt on. Same text the rollout starts from."""
    return str(tokenizer.apply_chat_template(initial_messages(goal), tokenize=False, add_generation_prompt=True))


def _render(tokenizer: Any, messages: Sequence[dict[str, Any]], generation_prompt: bool) -> str:
    return str(tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=generation_prompt))


def render_segments(tokenizer: Any, messages: Sequence[dict[str, Any]]) -> list[tuple[str, bool]]:
    """Split a conversation into (text, is_assistant) segments by incremental rendering.

    Trailing non-assistant messages are dropped (they carry no loss).
    """
    if not messages or messages[0].get("role") in ASSISTANT_ROLES:
        raise ChatTemplateError("a conversation must start with a system or user message")
    segments: list[tuple[str, bool]] = []
    done = ""
    for i, message in enumerate(messages):
        if message.get("role") not in ASSISTANT_ROLES:
            continue
        before = _render(tokenizer, messages[:i], True)
        after = _render(tokenizer, messages[: i + 1], False)
        if not before.startswith(done) or not after.startswith(before):
            raise ChatTemplateError(
                f"chat template is not prefix-preserving at message {i}: rendering more messages changed "
                "earlier text, so rollout tokens and training tokens would differ; fix the template"
            )
        segments.append((before[len(done):], False))
        segments.append((after[len(before):], True))
        done = after
    if not any(is_asst for _, is_asst in segments):
        raise ChatTemplateError("conversation has no assistant message to learn from")
    return segments
