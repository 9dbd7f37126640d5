"""Warm-start data: fresh expert episodes, tokenized once, batched by length without a padding mask.

- `generate_conversations(plan, seed)`: the expert plays fresh training seeds for each
  `(stage, count, language_weights)` of the plan (the profile's languages per stage reach the data);
  the episodes are interleaved by stage, so a prefix of the list is already a stage mix.
- Drills: the start of a further fresh expert episode, cut right after the one turn it teaches, behind a system
  prompt cut to its last line, the caller's time (`cells.agent.prompt.format_now`); the utterance keeps its
  distance to the cut turn, and the time line its distance to the utterance, as in the full prompt. Why: the
  turn a drill teaches is one of many in a full conversation, and a drill shows it several times more often per
  second of training. Each kind is a profile knob (drills per conversation):
  - search drills (`search_drills`): up to its search call (`GOAL_SEARCH_TOOLS`): the spoken slot (month, city,
    cab place) mapped to its canonical value;
  - booking drills (`booking_drills`): up to its first booking or order call (`GOAL_WRITE_TOOLS`): the choice a
    booking carries (the first flight inside the user's window, the class the user named, a portion per diner,
    the names the user gave), with the search result it chooses from;
  - recovery drills (`recovery_drills`; the warm start asks for them in the drifted stages 2-3 only): an episode
    that succeeded although a booking or order call was refused with the options still `available`
    (`BOOKING_WINDOW_CLOSED`, `VEHICLE_CLASS_UNAVAILABLE`, `ROOM_TYPE_UNAVAILABLE`), up to the expert's next call
    to that tool (its rule applied to what is still available). Only these refusals: the others need one argument
    fixed, which full conversations already teach; few expert episodes meet such a refusal, so each drill scans
    up to `CHOICE_DRILL_SEEDS_PER` seeds;
  - year-turn drills (`year_turn_drills`): search drills on goals dated in the next calendar year
    (`cells.step_07_tasks.crosses_year`: a January date asked for in December, the year unsaid), rare among
    goals, so each scans up to `YEAR_TURN_SEEDS_PER` seeds, most ruled out by their clock alone
    (`may_cross_year`);
  - field drills (`field_drills`): the goal's search or booking tool requires an argument it never declares, a
    fact of the goal (`new_field_choices`, set through the env's drill control `DriftCallEnv.require_argument`,
    so the tool docs do not name it). The expert's usual call is refused with the vendor's own
    `MISSING_REQUIRED_FIELD` naming the argument and follows again with it appended (`ExpertMeetingANewField`),
    cut after that repaired call. The refused call carries `NO_LOSS_KEY` (it is learnt from every conversation
    anyway), so the drill trains only the repair, and it passes only if the named field, valued from the
    conversation, is added. They stay at goal domains where no withheld pattern's recovery is such an error
    (`field_drill_domains`), so a drift split's withheld patterns stay unseen in the demonstrations.
  - item-field drills (`item_field_drills`): the same repair one level down. The goal's booking or order call
    must carry a field in each element of a list argument (`passengers[].loyalty_ids`, an empty list, named from
    `ITEM_FIELD_DRILL_NAMES`: 480 composed names, or a made-up or two-word name per drill, the knob
    `sft_item_field_drill_names`; none sharing a word with a drift family's value), set through
    the same drill control; the expert's call is refused naming `list[].field` (no loss on it) and resent with
    the field in every element (`ExpertMeetingAnItemField`), cut there, kept only if the vendor took the
    repair; or, with `sft_item_field_drill_until=report`, played to the expert's last message to the user and kept
    only if the episode succeeded. Only at list arguments where the drift split demonstrates the family's nested field
    (`item_field_drill_targets`): the airline's `passengers` under `latin-gen`, never the restaurant's withheld
    `items`. Why: the family is drawn in ~1.7% of drifted demonstrations, too few for the warm start to learn the
    repair where it is shown (docs/experiments/2026-12-07-nested-site-raft-1241.md).
- `tokenize_conversation(tokenizer, messages)`: token ids and labels by incremental chat-template rendering
  (`cells.agent.chat.render_segments`), the way the GRPO rollout sees an episode. Environment/user text gets
  label -100; an assistant turn's tokens are trained up to and including the first stop token
  (`<end_of_turn>` / eos), which is where generation stops in a rollout; template glue after it (the newline)
  is not. An assistant message carrying `NO_LOSS_KEY` (a field drill's refused call) is context: label -100. Each
  segment is tokenized separately, as the rollout does. A template that is not prefix-preserving (a later render
  rewrites earlier text) raises `ChatTemplateError`.
- `tokenize_all(tokenizer, conversations)`: `tokenize_conversation` per conversation, with a progress bar. Rendering
  the chat template prefix by prefix (Jinja) is most of that time and cannot be batched, so from `PARALLEL_MIN`
  conversations on, chunks go to forked worker processes, one per core (results identical and in order); step 15
  prints how long it took.
- `RightPadCollator`: pads on the right, labels -100 on padding, attention mask all ones. Why all ones:
  with right padding and causal attention a real token at position t only attends to positions <= t,
  which are all real, so a padding mask changes nothing for the tokens that carry a label. An all-ones
  mask lets transformers hand SDPA `is_causal=True` (its fused kernel) instead of an explicit 4-D mask, an exact
  gain. Padding outputs are computed and thrown away; length-grouped batches
  (`train_sampling_strategy="group_by_length"`) keep that waste small.

How each drill kind was chosen, with the runs and figures: docs/experiments/ (2026-12-06-preset-notes.md).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cells.agent.chat import ASSISTANT_ROLES, render_segments
from cells.errors import DriftCallError
from cells.progress import progress_bar
from cells.vendors.error_codes import ErrorCode

if TYPE_CHECKING:  # pragma: no cover
    from cells.step_06_drift import DriftPool

IGNORE_INDEX = -100


class WarmStartError(DriftCallError, ValueError):
    """No conversations to warm-start on, or no saved full warm start to load (a bad conversation or chat
    template raises `ChatTemplateError`)."""


@dataclass(frozen=True)
class TokenizedConversation:
    """One conversation as the model trains on it: labels are -100 on non-assistant tokens."""

    input_ids: tuple[int, ...]
    labels: tuple[int, ...]

    @property
    def n_trained(self) -> int:
        return sum(1 for t in self.labels if t != IGNORE_INDEX)


DRILL_SEED_OFFSET = 50_000_000  # drills of a plan item start this far into its seed block (conversations: at 0)
BOOKING_SEED_OFFSET = 60_000_000  # and its booking drills this far (one seed a drill, as search drills)
RECOVERY_SEED_OFFSET = 75_000_000  # and its recovery drills this far (they scan ~15 seeds a drill)
YEAR_TURN_SEED_OFFSET = 90_000_000  # and its year-turn drills this far (~40 seeds a drill)
FIELD_SEED_OFFSET = 30_000_000  # and its field drills this far (~3 seeds a drill: only some goal domains qualify)
ITEM_FIELD_SEED_OFFSET = 40_000_000  # and its item-field drills this far (~7 seeds a drill: airline goals only)
NO_LOSS_KEY = "no_loss"  # set on an assistant message that is shown as context but not trained on


@dataclass(frozen=True)
class EpisodePlanItem:
    """`count` fresh expert episodes of curriculum `stage`, goals drawn with `language_weights`, plus
    `round(count * <kind>_drills)` drills of each kind on further fresh seeds (see the module docstring)."""

    stage: int
    count: int
    language_weights: tuple[tuple[str, float], ...]
    seed: int  # first training-seed index of this item (disjoint blocks per stage)
    search_drills: float = 0.0
    max_turns: int | None = None  # the profile's turn budget for the stage (None: the env's default)
    recovery_drills: float = 0.0
    year_turn_drills: float = 0.0
    booking_drills: float = 0.0
    drift_pool: DriftPool | None = None  # the patterns the expert's episodes draw drifts from (None: every one)
    field_drills: float = 0.0
    drift_source: str = "handwritten"  # which drifts the expert's episodes meet (step 2's DRIFT_SOURCES)
    item_field_drills: float = 0.0
    item_field_names: str = "composed"  # where item-field drills' names come from (`item_field_drill_name`)
    item_field_until: str = "repair"  # where item-field drills end: the resent call, or the expert's report

    @property
    def drills(self) -> int:
        return round(self.count * self.search_drills)

    @property
    def bookings(self) -> int:
        return round(self.count * self.booking_drills)

    @property
    def recoveries(self) -> int:
        return round(self.count * self.recovery_drills)

    @property
    def year_turns(self) -> int:
        return round(self.count * self.year_turn_drills)

    @property
    def fields(self) -> int:
        return round(self.count * self.field_drills)

    @property
    def item_fields(self) -> int:
        return round(self.count * self.item_field_drills)

    @property
    def examples(self) -> int:
        """Conversations plus every kind of drill."""
        return (self.count + self.drills + self.bookings + self.recoveries + self.year_turns + self.fields
                + self.item_fields)


Messages = list[dict[str, str]]


def is_search_call(text: str) -> bool:
    """Whether an (expert, hence valid) action text calls a domain's search tool."""
    from cells.actions import parse_action
    from cells.step_04_datatypes import GOAL_SEARCH_TOOLS

    return parse_action(text).tool_name in GOAL_SEARCH_TOOLS.values()


def is_booking_call(text: str) -> bool:
    """Whether an (expert, hence valid) action text calls a domain's booking or order tool."""
    from cells.actions import parse_action
    from cells.step_04_datatypes import GOAL_WRITE_TOOLS

    return parse_action(text).tool_name in GOAL_WRITE_TOOLS.values()


def drill_until(env: Any, seed: int, is_last: Callable[[str], bool]) -> Messages | None:
    """The expert's episode on `seed` up to and including its first action text that `is_last` accepts, behind a
    system prompt of only the caller's time; None when the episode ends before such an action."""
    from cells.agent.play import conversation
    from cells.agent.policies.expert import ExpertPolicy

    messages = conversation(env, ExpertPolicy(), seed, stop_after=is_last)
    if not is_last(messages[-1]["content"]):
        return None
    return behind_time_line(env, messages)


def search_drill(env: Any, seed: int) -> Messages | None:
    """`drill_until` the expert's search call (None when it ends the episode without searching)."""
    return drill_until(env, seed, is_search_call)


def booking_drill(env: Any, seed: int) -> Messages | None:
    """`drill_until` the expert's first booking or order call (None when it books nothing)."""
    return drill_until(env, seed, is_booking_call)


YEAR_TURN_SEEDS_PER = 60  # seeds scanned per year-turn drill at most (~40 needed: 2.5% of goals cross the year)


def year_turn_drill(env: Any, seed: int) -> Messages | None:
    """`search_drill` on a seed whose goal crosses the year (`crosses_year`; tested on the seed's clock, then on its
    goal, before the expert plays), else None."""
    from cells.step_07_tasks import crosses_year, generate, may_cross_year

    if not may_cross_year(seed) or not crosses_year(generate(seed=seed, stage=env.stage,
                                                                language_weights=env.language_weights)):
        return None
    return search_drill(env, seed)


def behind_time_line(env: Any, messages: Messages) -> Messages:
    """`messages` with the system prompt cut to its last line, the caller's time (`format_now`) of `env`'s goal."""
    from cells.agent.prompt import format_now

    return [{"role": "system", "content": format_now(env.goal.now)}, *messages[1:]]


CHOICE_DRILL_SEEDS_PER = 40  # seeds scanned per recovery drill at most (~15 needed: 6.4-6.7% of drifted seeds)


def choice_recovery_turn(episode: Any) -> int | None:
    """The turn of the next call to the same tool after the episode's first booking or order call refused with a
    list of the options still `available`; None without such a refusal or such a call."""
    from cells.rewards.text_match import next_call_to
    from cells.step_04_datatypes import GOAL_WRITE_TOOLS

    writes = set(GOAL_WRITE_TOOLS.values())
    refusal = next((r for r in episode.results if r.tool_name in writes and not r.ok and "available" in r.response),
                   None)
    after = None if refusal is None else next_call_to(episode, refusal.tool_name, refusal.turn)
    return None if after is None else after[0]


def recovery_drill(env: Any, seed: int, min_reward: float) -> Messages | None:
    """The expert's successful episode on `seed` up to its next call to the tool that refused it with the options
    still `available` (the new choice; a word to the user about a drift may come first), behind a system prompt of
    only the caller's time; None when no such refusal happened or the episode earned less than `min_reward`."""
    from cells.agent.play import play_episode, successful_conversation
    from cells.agent.policies.expert import ExpertPolicy

    episode, _ = play_episode(env, ExpertPolicy(), seed)  # cheap test first: most seeds meet no such refusal
    turn = choice_recovery_turn(episode)
    messages = None if turn is None else successful_conversation(env, seed, min_reward)
    if turn is None or messages is None:
        return None
    # messages: system, utterance, then turn k's action at index 2k and the observation after it at 2k + 1
    return behind_time_line(env, messages[:2 * turn + 1])


FIELD_ERROR = ErrorCode.MISSING_REQUIRED_FIELD.value  # the vendors' error naming a missing argument
FIELD_DRILL_SEEDS_PER = 12  # seeds scanned per field drill at most (~3 needed: the goal's domain must qualify)


def field_drill_domains(pool: DriftPool | None) -> tuple[str, ...]:
    """Goal domains where a field drill may drop an argument: all but those of a catalogue pattern outside `pool`
    (withheld from the demonstrations) whose evidence is a `FIELD_ERROR`, so no drill shows a withheld recovery."""
    from cells.step_04_datatypes import GOAL_DOMAINS
    from cells.step_06_drift import load_catalogue

    withheld = {p.domain for p in load_catalogue()
                if pool is not None and p.id not in pool.allowed and FIELD_ERROR in p.evidence.error_codes}
    return tuple(d for d in GOAL_DOMAINS if d not in withheld)


def _vendor_type(value: Any) -> str | None:
    """The vendors' argument type of a scalar slot value (`cells.vendors.registry.TYPES`); None for any other."""
    from cells.vendors.world import DATE

    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return "int"
    if isinstance(value, str):
        return "date" if DATE.fullmatch(value) else "str"
    return None


def new_field_choices(goal: Any) -> tuple[tuple[str, str, str, Any], ...]:
    """`(tool, argument, type, value)` a field drill may make the goal's search or booking tool require: each goal
    slot of scalar value that the tool does not declare at all (so its usual call never carries it), and that no
    other tool of the domain declares with another type (the airline's `passengers` is a count in the goal, a
    list of passenger objects at `airline.book`). The value is the slot's, so the repair copies a fact the episode holds."""
    from cells.step_04_datatypes import GOAL_SEARCH_TOOLS, GOAL_WRITE_TOOLS
    from cells.vendors.dispatch import TOOLS
    from cells.vendors.world import DEFAULT_FLAGS

    flags = DEFAULT_FLAGS[goal.domain]
    declared = {a.name: a.type for t in TOOLS.values() if t.domain == goal.domain for a in t.args(flags)}
    choices = []
    for tool in (GOAL_SEARCH_TOOLS[goal.domain], GOAL_WRITE_TOOLS[goal.domain]):
        own = {a.name for a in TOOLS[tool].args(flags)}
        for name, value in sorted(goal.slots.items()):
            kind = _vendor_type(value)
            if kind is not None and name not in own and declared.get(name, kind) == kind:
                choices.append((tool, name, kind, value))
    return tuple(choices)


class ExpertMeetingANewField:
    """The expert, in an episode whose `target` tool requires `field` although the tool's docs never name it: its
    first call to `target` goes out as usual, and the turn after, that same call with `field` = `value` appended
    after the others. `refused` holds that first call; `resent` is set once the repair is out, `named` when the
    vendor answered the first call with `FIELD_ERROR` naming `field`.

    Why a field the usual call lacks: a variant that dropped one of the call's own required arguments and resent
    the whole call taught "send the tool's usual call", which repairs nothing where the usual call itself lacks the
    field (its warm start resent `cab.book` unchanged after the "add `city`" error; docs/experiments/). Here only
    reading the error's `field_name`, and the fact it names from the conversation, gets the call through."""

    name = "expert_meeting_a_new_field"

    def __init__(self, target: str, field: str, value: Any) -> None:
        from cells.agent.policies.expert import ExpertPolicy

        self.expert = ExpertPolicy()
        self.target, self.field, self.value = target, field, value
        self.refused: str | None = None
        self.resent = self.named = False

    def reset(self, observation: Any, goal: Any = None) -> None:
        self.expert.reset(observation, goal)
        self.refused = None
        self.resent = self.named = False

    def act(self, observation: Any, history: Any = None) -> str:
        from cells.actions import parse_action
        from cells.agent.policies.base import tool_args

        if self.refused is not None and not self.resent:
            result = observation.last_result
            self.named = result is not None and result.response.get("error_code") == FIELD_ERROR \
                and result.response.get("field_name") == self.field
            self.resent = True
            return tool_args(self.target, {**parse_action(self.refused).tool_args, self.field: self.value})
        text = self.expert.act(observation, history)
        if self.refused is None and parse_action(text).tool_name == self.target:
            self.refused = text
        return text


def field_drill(env: Any, seed: int, domains: Sequence[str]) -> Messages | None:
    """The expert's episode on `seed` in which its search or booking tool requires a goal slot it never takes
    (`new_field_choices`; the seed picks which), up to the call repaired with that slot after the vendor named it
    (`ExpertMeetingANewField`), behind a system prompt of only the caller's time; the refused call, the expert's
    usual one and learnt from every conversation, is marked `NO_LOSS_KEY`, so the drill trains the repair. None
    when the goal's domain is not in `domains`, it has no such slot, the call never came, or the vendor's answer
    was not that error (a timeout, or a drift's own required field first)."""
    from cells.agent.play import conversation
    from cells.step_04_datatypes import stable_int
    from cells.step_07_tasks import generate

    goal = generate(seed=seed, stage=env.stage, language_weights=env.language_weights)
    choices = new_field_choices(goal)
    if goal.domain not in domains or not choices:
        return None
    tool, field, kind, value = choices[stable_int(seed, "field drill") % len(choices)]
    policy = ExpertMeetingANewField(tool, field, value)
    messages = conversation(env, policy, seed, stop_after=lambda _: policy.resent,
                            after_reset=lambda running: running.require_argument(tool, field, kind))
    if not policy.named:
        return None
    # messages end: the refused call, the vendor's error, the repaired call
    messages[-3] = {**messages[-3], NO_LOSS_KEY: True}
    return behind_time_line(env, messages)


# The nested fields an item-field drill may require (`composed`): a head word and a kind word, `loyalty_ids`, 480.
# No word of any drift family's value is among them (a test checks), so a drill shows no family instance, and no
# word of a held-out value even inside another name. Chosen many in the hope that the repair would be copied out of
# the error; measured, the warm start learns them as 480 names and copies none it did not see
# (docs/experiments/2026-12-07-copying-field-names.md).
ITEM_FIELD_DRILL_HEADS = ("loyalty", "baggage", "document", "insurance", "visa", "allergy", "upgrade", "voucher",
                          "companion", "priority", "gift", "emergency", "lounge", "wheelchair", "infant", "pet",
                          "frequent", "sports", "medical", "dietary", "language", "nationality", "passport",
                          "birth", "gender", "title", "consent", "marketing", "referral", "coupon", "blanket",
                          "pillow", "window", "aisle", "boarding", "transfer", "luggage", "family", "student",
                          "senior")
ITEM_FIELD_DRILL_KINDS = ("ids", "tags", "notes", "flags", "labels", "details", "options", "remarks", "entries",
                          "docs", "info", "lists")
ITEM_FIELD_DRILL_NAMES = tuple(f"{head}_{kind}" for head in ITEM_FIELD_DRILL_HEADS for kind in ITEM_FIELD_DRILL_KINDS)
# `invented` names: two made-up words of consonant-vowel syllables (`tavoru_mekis`), one per seed, so nothing about
# the name can be learnt but copying it out of the error (the composed names' warm start wrote 0 of 16 names of
# new words).
SYLLABLE_ONSETS, SYLLABLE_VOWELS, SYLLABLE_CODAS = "bdfghjklmnprstvz", "aeiou", ("", "", "", "n", "s", "r")
INVENTED_WORD_SYLLABLES = (2, 3)


def ascii_words(text: str) -> list[str]:
    """The runs of ASCII letters in `text`, lower-cased: the words drill names are made of and checked against."""
    import re

    return re.findall(r"[a-z]+", text.lower())


@functools.cache
def family_value_words() -> frozenset[str]:
    """Every lower-case word of every drift family instance's values: what no drill name may contain."""
    from cells.drift.families import all_instances

    return frozenset(w for inst in all_instances() for v in inst.values.values() for w in ascii_words(str(v)))


def invented_field_name(seed: int, avoid: frozenset[str]) -> str:
    """A made-up `word_word` field name from `seed` (deterministic), neither word in `avoid`."""
    from cells.step_04_datatypes import stable_int

    words: list[str] = []
    salt = 0
    while len(words) < 2:
        pick = stable_int(seed, "invented field name", salt)
        salt += 1
        n = INVENTED_WORD_SYLLABLES[pick % len(INVENTED_WORD_SYLLABLES)]
        pick //= len(INVENTED_WORD_SYLLABLES)
        word = ""
        for _ in range(n):
            for letters in (SYLLABLE_ONSETS, SYLLABLE_VOWELS):
                word += letters[pick % len(letters)]
                pick //= len(letters)
        word += SYLLABLE_CODAS[pick % len(SYLLABLE_CODAS)]
        if word not in avoid and word not in words:
            words.append(word)
    return "_".join(words)


# `words` names: two words of the project's own text per drill (`evening_selection`). The invented names' warm start
# copied new names made of the token pieces its drill names had shown and no name holding a piece they never had
# (`_id`, `option`, `request`: pieces the JSON it writes is full of); words of the text the tokenizer learnt from
# carry those pieces (docs/experiments/2026-12-07-copying-field-names.md).
DRILL_WORD_LETTERS = (2, 12)


@functools.cache
def drill_name_words() -> tuple[str, ...]:
    """The words a `words` drill name is drawn from, sorted: every lower-case ASCII word of `DRILL_WORD_LETTERS`
    letters in the fixtures' strings (`cells.modeling.tiny.fixture_strings`, the text the tiny tokenizer is trained
    on besides transcripts), less every word of a drift family's value (`family_value_words`)."""
    from cells.modeling.tiny import fixture_strings

    low, high = DRILL_WORD_LETTERS
    words = {w for text in fixture_strings() for w in ascii_words(text) if low <= len(w) <= high}
    return tuple(sorted(words - family_value_words()))


def word_field_name(seed: int, words: Sequence[str]) -> str:
    """Two distinct words of `words` joined by `_`, picked from `seed` (deterministic)."""
    from cells.step_04_datatypes import stable_int

    first = stable_int(seed, "word field name", 0) % len(words)
    second = stable_int(seed, "word field name", 1) % (len(words) - 1)
    return f"{words[first]}_{words[second + (second >= first)]}"


def item_field_drill_name(seed: int, source: str) -> str:
    """The nested field an item-field drill on `seed` requires: one of `ITEM_FIELD_DRILL_NAMES` (`composed`), an
    `invented_field_name` (`invented`) or a `word_field_name` of `drill_name_words` (`words`), the profile's
    `sft_item_field_drill_names`."""
    from cells.step_04_datatypes import stable_int

    if source == "composed":
        return ITEM_FIELD_DRILL_NAMES[stable_int(seed, "item field drill name") % len(ITEM_FIELD_DRILL_NAMES)]
    if source == "invented":
        return invented_field_name(seed, family_value_words())
    if source == "words":
        return word_field_name(seed, drill_name_words())
    raise WarmStartError(f"unknown item-field drill name source {source!r}: composed, invented or words")


ITEM_FIELD_DRILL_SEEDS_PER = 20  # seeds scanned per item-field drill at most (~7 needed: airline goals only)


def item_field_drill_targets(pool: DriftPool | None) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """(write tool, list argument, goal domains) where an item-field drill may require a nested field: each list
    argument of a `require_item_field` family site with an instance in `pool` (None: every site), so a drill
    only shows the repair at a (tool, list) the split already demonstrates."""
    from cells.drift.families import all_instances, family_of

    seen: dict[tuple[str, str], tuple[str, ...]] = {}
    for inst in all_instances():
        if family_of(inst.family).mechanism != "require_item_field":
            continue
        if pool is None or inst.id in pool.allowed:
            seen.setdefault((inst.tool, inst.field.removesuffix("[]")), inst.applies_to)
    return tuple((tool, listed, domains) for (tool, listed), domains in sorted(seen.items()))


def item_field_drill_share(drift_split: str, train_instances: int, per_conversation: float) -> float:
    """The item-field drills per conversation a profile gets: its knob (`per_conversation`), or 0 where its split
    (`drift_split`, at `train_instances`) demonstrates no nested field (the curve's point of 0 generated instances,
    a hand-written split), so a preset keeps the knob on at every point of its curve."""
    from cells.step_06_drift import demonstration_pool
    from cells.step_06_drift import drift_split as split_named

    if not per_conversation or not drift_split:
        return per_conversation
    return per_conversation if item_field_drill_targets(demonstration_pool(split_named(drift_split),
                                                                           train_instances)) else 0.0


class ExpertMeetingAnItemField:
    """The expert, watched in an episode whose `target` tool requires nested field `where` (`list[].field`): it
    repairs the refusal itself (`repair.item_field`). `refused_at` is the action the vendor refused naming `where`
    (None until then), `repaired` is set once the expert's next call to `target` is out."""

    name = "expert_meeting_an_item_field"

    def __init__(self, target: str, where: str) -> None:
        from cells.agent.policies.expert import ExpertPolicy

        self.expert = ExpertPolicy()
        self.target, self.where = target, where
        self.actions = 0
        self.refused_at: int | None = None
        self.repaired = False

    def reset(self, observation: Any, goal: Any = None) -> None:
        self.expert.reset(observation, goal)
        self.actions, self.refused_at, self.repaired = 0, None, False

    def act(self, observation: Any, history: Any = None) -> str:
        from cells.actions import parse_action

        result = observation.last_result
        if self.refused_at is None and result is not None and result.response.get("error_code") == FIELD_ERROR \
                and result.response.get("field_name") == self.where:
            self.refused_at = self.actions - 1
        text = self.expert.act(observation, history)
        if self.refused_at is not None and parse_action(text).tool_name == self.target:
            self.repaired = True
        self.actions += 1
        return text


def item_field_drill(env: Any, seed: int, targets: Sequence[tuple[str, str, tuple[str, ...]]],
                     names: str = "composed", until: str = "repair", min_reward: float = 0.5) -> Messages | None:
    """The expert's episode on `seed` in which its booking or order call must carry a nested field it never sends
    (one of `targets` that applies to the goal, a name from `names`, `item_field_drill_name`; the seed picks both),
    behind a system prompt of only the caller's time, the refused call marked `NO_LOSS_KEY`; it ends at the
    repaired call (`until="repair"`) or at the expert's last message to the user (`"report"`). None when no target
    applies to the goal, the call never came or was not refused naming the field (a timeout first), the vendor
    refused the repair too, or (`report`) the episode earned less than `min_reward`."""
    from cells.agent.play import conversation
    from cells.step_02_profiles import knob_choices
    from cells.step_04_datatypes import GOAL_WRITE_TOOLS, stable_int
    from cells.step_07_tasks import generate
    from cells.vendors.generic import ITEM_SEP

    if until not in (ends := knob_choices("sft_item_field_drill_until")):
        raise WarmStartError(f"unknown item-field drill end {until!r}: one of {', '.join(ends)}")
    goal = generate(seed=seed, stage=env.stage, language_weights=env.language_weights)
    mine = [(tool, listed) for tool, listed, domains in targets
            if goal.domain in domains and tool == GOAL_WRITE_TOOLS[goal.domain]]
    if not mine:
        return None
    tool, listed = mine[stable_int(seed, "item field drill") % len(mine)]
    name = item_field_drill_name(seed, names)
    where = f"{listed}{ITEM_SEP}{name}"
    policy = ExpertMeetingAnItemField(tool, where)
    messages = conversation(env, policy, seed, stop_after=None if until == "report" else lambda _: policy.repaired,
                            after_reset=lambda running: running.require_argument(tool, where, "list[str]"))
    if policy.refused_at is None or not policy.repaired:
        return None
    if until == "report":
        refusals = [r for r in env.episode().results if r.response.get("field_name") == where]
        if len(refusals) != 1 or env.rewards().reward < min_reward:
            return None
    else:
        answer = env.step_text(messages[-1]["content"]).last_result
        if answer is None or answer.response.get("field_name") == where:
            return None
    # messages: system, utterance, then action k at index 2 + 2k and the observation after it at 3 + 2k
    refused = 2 + 2 * policy.refused_at
    messages[refused] = {**messages[refused], NO_LOSS_KEY: True}
    return behind_time_line(env, messages)


def _expert_chunk(item: EpisodePlanItem, bar: Any, min_reward: float) -> list[Messages]:
    """One plan item's conversations, with its drills (every kind) spread evenly among them."""
    from cells.agent.play import collect_expert, successful_conversation
    from cells.step_10_env import DriftCallEnv

    env = DriftCallEnv(item.stage, dict(item.language_weights), max_turns=item.max_turns, drift_pool=item.drift_pool,
                       drift_source=item.drift_source)
    convs = collect_expert(item.count, item.seed, lambda seed: successful_conversation(env, seed, min_reward),
                           on_found=bar.update)
    drills = collect_expert(item.drills, item.seed + DRILL_SEED_OFFSET, lambda seed: search_drill(env, seed),
                            what="drills", on_found=bar.update)
    bookings = collect_expert(item.bookings, item.seed + BOOKING_SEED_OFFSET, lambda seed: booking_drill(env, seed),
                              what="booking drills", on_found=bar.update)
    recoveries = collect_expert(item.recoveries, item.seed + RECOVERY_SEED_OFFSET,
                                lambda seed: recovery_drill(env, seed, min_reward), what="recovery drills",
                                on_found=bar.update, seeds_per_result=CHOICE_DRILL_SEEDS_PER)
    year_turns = collect_expert(item.year_turns, item.seed + YEAR_TURN_SEED_OFFSET,
                                lambda seed: year_turn_drill(env, seed), what="year-turn drills",
                                on_found=bar.update, seeds_per_result=YEAR_TURN_SEEDS_PER)
    domains = field_drill_domains(item.drift_pool)
    fields = collect_expert(item.fields, item.seed + FIELD_SEED_OFFSET, lambda seed: field_drill(env, seed, domains),
                            what="field drills", on_found=bar.update, seeds_per_result=FIELD_DRILL_SEEDS_PER)
    targets = item_field_drill_targets(item.drift_pool) if item.item_fields else ()
    if item.item_fields and not targets:
        raise WarmStartError("item_field_drills > 0 but the drift split demonstrates no nested required field "
                             "(no `required_item_field` instance in its demonstration pool): set it to 0")
    item_fields = collect_expert(item.item_fields, item.seed + ITEM_FIELD_SEED_OFFSET,
                                 lambda seed: item_field_drill(env, seed, targets, item.item_field_names,
                                                               item.item_field_until, min_reward),
                                 what="item-field drills",
                                 on_found=bar.update, seeds_per_result=ITEM_FIELD_DRILL_SEEDS_PER)
    groups = (convs, drills, bookings, recoveries, year_turns, fields, item_fields)
    keyed = [((i + 0.5) / len(group), m) for group in groups for i, m in enumerate(group)]
    return [m for _, m in sorted(keyed, key=lambda pair: pair[0])]


def generate_conversations(plan: Sequence[EpisodePlanItem], progress: bool = False,
                           min_reward: float = 0.5) -> list[Messages]:
    """Expert conversations (and drills) for every plan item, interleaved by stage (1, 2, 3, 1, ...).

    Same rendering and filter as `cells.agent.play.expert_conversations` (episodes the expert failed,
    reward < `min_reward`, are skipped), with one progress bar over the whole plan.
    """
    bar = progress_bar(sum(i.examples for i in plan), "expert episodes", enabled=progress, leave=False)
    per_item = [_expert_chunk(item, bar, min_reward) for item in plan]
    bar.close()
    longest = max((len(c) for c in per_item), default=0)
    return [convs[i] for i in range(longest) for convs in per_item if i < len(convs)]


PARALLEL_MIN = 2_000  # conversations; below this a worker pool's start-up costs more than it saves
_CHUNK = 250  # conversations per worker task
_POOL_TOKENIZER: Any = None  # set in the parent before forking; the workers inherit it


def stop_token_ids(tokenizer: Any) -> frozenset[int]:
    """Token ids that end an assistant turn: eos plus `<end_of_turn>` when the vocab has it."""
    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    eot = tokenizer.convert_tokens_to_ids("<end_of_turn>")
    if isinstance(eot, int) and eot != tokenizer.unk_token_id:
        ids.add(eot)
    return frozenset(ids)


def tokenize_conversation(tokenizer: Any, messages: Sequence[dict[str, Any]]) -> TokenizedConversation:
    """Token ids and assistant-only labels for one conversation (see the module docstring)."""
    stops = stop_token_ids(tokenizer)
    input_ids: list[int] = []
    labels: list[int] = []
    trained = iter([not m.get(NO_LOSS_KEY) for m in messages if m.get("role") in ASSISTANT_ROLES])
    for text, is_assistant in render_segments(tokenizer, messages):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if is_assistant and next(trained):
            cut = next((j + 1 for j, t in enumerate(ids) if t in stops), len(ids))
            labels.extend(ids[:cut] + [IGNORE_INDEX] * (len(ids) - cut))
        else:
            labels.extend([IGNORE_INDEX] * len(ids))
        input_ids.extend(ids)
    return TokenizedConversation(tuple(input_ids), tuple(labels))


def _tokenize_chunk(conversations: Sequence[Sequence[dict[str, Any]]]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    out = []
    for conv in conversations:
        tc = tokenize_conversation(_POOL_TOKENIZER, conv)
        out.append((tc.input_ids, tc.labels))
    return out


def tokenization_workers(n_conversations: int) -> int:
    """Worker processes for `n_conversations`: one per core from `PARALLEL_MIN` on, where `fork` exists."""
    import multiprocessing
    import os

    if n_conversations < PARALLEL_MIN or "fork" not in multiprocessing.get_all_start_methods():
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores)


def tokenize_all(tokenizer: Any, conversations: Sequence[Sequence[dict[str, Any]]], progress: bool = False,
                 workers: int | None = None) -> Any:
    """A `datasets.Dataset` with `input_ids`, `labels` and `length` columns (one row per conversation, in order).

    `workers` (default `tokenization_workers`): forked processes tokenizing chunks in parallel; 1 = this process."""
    import multiprocessing

    from datasets import Dataset

    global _POOL_TOKENIZER
    if not conversations:
        raise WarmStartError("no conversations to warm-start on; generate expert trajectories first")
    workers = tokenization_workers(len(conversations)) if workers is None else workers
    chunks = [conversations[i:i + _CHUNK] for i in range(0, len(conversations), _CHUNK)]
    rows: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    bar = progress_bar(len(conversations), "tokenize", enabled=progress, leave=False)
    _POOL_TOKENIZER = tokenizer
    try:
        if workers > 1:
            with multiprocessing.get_context("fork").Pool(workers) as pool:
                for done in pool.imap(_tokenize_chunk, chunks):
                    rows.extend(done)
                    bar.update(len(done))
        else:
            for chunk in chunks:
                rows.extend(_tokenize_chunk(chunk))
                bar.update(len(chunk))
    finally:
        _POOL_TOKENIZER = None
        bar.close()
    return Dataset.from_dict({"input_ids": [list(i) for i, _ in rows], "labels": [list(lab) for _, lab in rows],
                              "length": [len(i) for i, _ in rows]})


class RightPadCollator:
    """Right-pad a batch of `input_ids`/`labels`; attention mask all ones (see the module docstring)."""

    def __init__(self, pad_token_id: int) -> None:
        self.pad_token_id = int(pad_token_id)
        self.tokens = 0  # real (unpadded) tokens collated so far: the numerator of training tokens/s
        self.labelled = 0  # of those, tokens with a label
        self.padded = 0  # padded batch cells (B * T) so far: tokens - padded is the padding waste

    def __call__(self, examples: Sequence[dict[str, Any]]) -> dict[str, Any]:
        import torch

        width = max(len(e["input_ids"]) for e in examples)
        input_ids = torch.full((len(examples), width), self.pad_token_id, dtype=torch.long)  # (B, T)
        labels = torch.full((len(examples), width), IGNORE_INDEX, dtype=torch.long)  # (B, T)
        for row, example in enumerate(examples):
            n = len(example["input_ids"])
            input_ids[row, :n] = torch.as_tensor(example["input_ids"], dtype=torch.long)
            labels[row, :n] = torch.as_tensor(example["labels"], dtype=torch.long)
            self.tokens += n
        self.labelled += int((labels != IGNORE_INDEX).sum())
        self.padded += input_ids.numel()
        return {"input_ids": input_ids, "labels": labels, "attention_mask": torch.ones_like(input_ids)}


SFT_STAGE_SEED_STRIDE = 100_000_000  # SFT seeds of stage s start at profile.seed + (s-1) * stride


def sft_plan_item(profile: Any, n: int, stage: int, seed_block: int, offset: int = 0) -> EpisodePlanItem:
    """The warm start's recipe for `n` expert conversations of `stage` (that stage's `language_weights` and turn
    budget, `profile.sft_search_drills` search, `profile.sft_booking_drills` booking and
    `profile.sft_year_turn_drills` year-turn drills, `profile.sft_field_drills` field drills and
    `profile.sft_item_field_drills` item-field drills per conversation,
    and in the drifted stages 2-3 `profile.sft_recovery_drills` recovery drills) on SFT seed block `seed_block`: the
    warm start uses blocks 0-2 (stages 1-3); the SFT-only control (`cells.experiments.control`) and the warm start's
    development gate (`cells.training.warm_start_gate`, at `offset` seeds into its block) later ones, same recipe."""
    from cells.step_06_drift import demonstration_pool, drift_split

    # stage 1 has no drift: its expert is refused a write in 0.6% of episodes, too few to draw drills from
    recovery = profile.sft_recovery_drills if stage > 1 else 0.0
    pool = (demonstration_pool(drift_split(profile.drift_split), profile.drift_train_instances)
            if profile.drift_split else None)
    return EpisodePlanItem(stage, n, tuple(profile.language_weights[stage - 1]),
                           profile.seed + seed_block * SFT_STAGE_SEED_STRIDE + offset, profile.sft_search_drills,
                           profile.turn_budget(stage), recovery, profile.sft_year_turn_drills,
                           profile.sft_booking_drills, pool, profile.sft_field_drills, profile.drift_source,
                           item_field_drill_share(profile.drift_split, profile.drift_train_instances,
                                                  profile.sft_item_field_drills),
                           profile.sft_item_field_drill_names, profile.sft_item_field_drill_until)


def stage_split(n: int, stages: tuple[int, ...]) -> list[tuple[int, int]]:
    """`n` conversations split evenly over `stages` as `(stage, count)`; earlier stages take the remainder."""
    if not stages:
        raise ValueError("sft_stages must name at least one curriculum stage")
    base, extra = divmod(n, len(stages))
    return [(stage, base + (1 if i < extra else 0)) for i, stage in enumerate(stages)]
