"""Text the tiny CPU tokenizer is trained on, beyond the fixtures: what the model will actually read and write.

System prompts (tool docs for every domain), rendered tool results and user messages, and the
expert's JSON actions, from a few expert episodes per stage and language on training seeds.
Without these the byte-level BPE (trained on fixtures only) split a ~2,500-character turn-0 prompt
into ~1,000-1,170 tokens; step 12's `run` prints the mean turn-0 prompt length it gets now.
"""

from __future__ import annotations

from cells.step_04_datatypes import LANGUAGES, MIN_REWARD

CORPUS_EPISODES_PER_CELL = 2  # per (stage, language): enough to cover every template's wording style


def transcript_corpus(episodes_per_cell: int = CORPUS_EPISODES_PER_CELL) -> tuple[str, ...]:
    """Every message of a few expert conversations per (stage, language), system prompts included."""
    from cells.agent.play import expert_conversations

    texts: list[str] = []
    for stage in (1, 2, 3):
        for offset, language in enumerate(LANGUAGES):
            chats = expert_conversations(episodes_per_cell, stage=stage, seed=10_000 * stage + 100 * offset,
                                         language_weights={language: 1.0}, min_reward=MIN_REWARD)  # every episode
            texts.extend(m["content"] for chat in chats for m in chat)
    return tuple(dict.fromkeys(texts))  # the system prompt repeats; keep order, drop duplicates
