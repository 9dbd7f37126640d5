"""Step 10 - environment: `DriftCallEnv`, the RL environment the agent lives in (docs/design.md#7-environment).

One episode: `reset(seed)` draws a goal (step 7), builds the vendor world (step 5) and a drift
schedule (step 6); each `step(action)` validates, advances the turn, fires due drifts, delivers
pending notices, dispatches, records and checks the budget. At termination the `Episode` is
built and `Rewards` (step 8) computed exactly once. `step_text(raw)` parses a model completion
first (the action grammar in `cells/actions.py`): a parse failure costs a turn, is recorded, and the observation says
what format is expected; three consecutive failures end the episode. Any string is data, never
a crash: the parser and the data model refuse deep nesting, out-of-range numbers, NaN/Infinity,
lone surrogates and control characters with a reason, and nothing is recorded until an action is
valid, so a rejected output changes only the counted turn (tests/test_step_10_hostile.py).

The agent never sees the drift schedule or the drift log: observations carry only the turn,
budget, the goal utterance (turn 0), the latest user message, the last tool result and the
tool docs as they were at reset. `state` is the judge view with everything.

The OpenEnv interface over the same core is in `cells/openenv_env.py`.

Reads `ctx.profile`; writes `ctx.env_factory` (a `functools.partial` building envs per stage).
Run alone: `python -m cells run --profile cpu-smoke --steps 10` (< 1 s: resets one episode per stage).
Benchmark: `python -m cells bench env`.
"""

from __future__ import annotations

import dataclasses
import functools
import pickle
import re
import threading
from typing import TYPE_CHECKING, Any

from cells.actions import ACTION_FORMAT_HELP, ActionParseError, parse_action
from cells.errors import DriftCallError
from cells.step_02_profiles import DRIFT_SOURCES, TURN_BUDGETS
from cells.step_04_datatypes import (
    LANGUAGES,
    ActionRecord,
    ActionType,
    DriftCallAction,
    DriftCallObservation,
    DriftCallState,
    DriftEvent,
    Episode,
    GoalSpec,
    Rewards,
    ScheduledDrift,
    TerminatedBy,
    ToolDoc,
    ToolResult,
    ToolStatus,
    UserMessage,
    stable_id,
)
from cells.step_05_vendors import (
    World,
    default_tool_docs,
    describe_schema,
    dispatch,
    new_world,
    require_argument,
)
from cells.step_06_drift import (
    DriftPool,
    apply_drift,
    attach_notice,
    build_schedule,
    drift_split,
    due_drifts,
    forced_schedule,
    pattern_by_id,
    reinforcement_pool,
)
from cells.step_07_tasks import acknowledge, generate, reply

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable

    from cells.context import Context

STAGE_TURN_BUDGETS: dict[int, int] = dict(zip((1, 2, 3), TURN_BUDGETS, strict=True))  # env defaults; profiles may differ
MAX_CONSECUTIVE_INVALID = 3
DEFAULT_LANGUAGE_WEIGHTS: dict[str, float] = dict.fromkeys(LANGUAGES, 1.0)
# Goals kept per process by `remembered_goal`: GRPO plays each seed once per generation in a row and the benches
# replay a few hundred seeds, so a recent seed's goal is usually asked for again (~1 KB each, ~1 MB in all)
GOAL_MEMO_SIZE = 1024
_goal_memo: dict[tuple[Any, ...], bytes] = {}
_goal_memo_lock = threading.Lock()


def remembered_goal(seed: int, stage: int, language_weights: dict[str, float]) -> GoalSpec:
    """Step 7's `generate`, remembered for the last `GOAL_MEMO_SIZE` (seed, stage, language weights): a goal is a
    pure function of them, and drawing one was ~80% of a reset. Kept pickled: a bytes object is invisible to the
    garbage collector (process-wide memos of live objects once made full collections scan thousands of objects
    more: tests/test_step_10_env.py), and each episode gets its own copy (~7 us to load against ~140 us to draw).
    The oldest entry goes first."""
    try:
        key = (seed, stage, tuple(sorted(language_weights.items())))
        kept = _goal_memo.get(key)
    except TypeError:  # unorderable or unhashable weights: generate says what is wrong with them
        return generate(seed=seed, stage=stage, language_weights=language_weights)
    if kept is not None:
        goal: GoalSpec = pickle.loads(kept)
        return goal
    goal = generate(seed=seed, stage=stage, language_weights=language_weights)
    kept = pickle.dumps(goal, protocol=pickle.HIGHEST_PROTOCOL)
    with _goal_memo_lock:  # rollout threads may reset envs at once; a lookup needs no lock
        if len(_goal_memo) >= GOAL_MEMO_SIZE:
            del _goal_memo[next(iter(_goal_memo))]
        _goal_memo[key] = kept
    return goal


@functools.cache  # a pure function of the domain: one tuple per domain, the same object every reset
def reset_tool_docs(domain: str) -> tuple[ToolDoc, ...]:
    """The tools an episode of a `domain` goal offers: that domain's tools plus payment.get_token, documented as at
    reset (the vendors' default flags: no drift fires before turn 2), so a prompt needs no world to list them.
    The same object at every reset of the domain, so a serving env encodes them once, not at every reset."""
    docs = default_tool_docs((domain, "payment"))
    return tuple(t for t in docs if t.name.split(".")[0] == domain or t.name == "payment.get_token")


_SURROGATES = re.compile("[\ud800-\udfff]")


def loggable_text(text: object, limit: int = 2000) -> str:
    """A rejected output as it is kept in the episode: at most `limit` chars, always UTF-8 encodable
    (lone surrogates become U+FFFD), so episodes and observations stay valid JSON."""
    raw = text if isinstance(text, str) else repr(text)
    return _SURROGATES.sub("\ufffd", raw[:limit])


class EnvError(DriftCallError, RuntimeError):
    """Base of the environment's usage errors; raising one never changes the episode."""


class EnvNotResetError(EnvError):
    """step/state/episode called before reset()."""


class EpisodeDoneError(EnvError):
    """step called after the episode ended; call reset() for a new one."""


class EpisodeNotDoneError(EnvError):
    """episode()/rewards() asked for before the episode ended."""


class InvalidActionError(EnvError):
    """step() was given something that is not a DriftCallAction."""


@dataclasses.dataclass
class _Live:
    """Mutable bookkeeping of the running episode (only the env touches it)."""

    episode_id: str
    seed: int
    goal: GoalSpec
    world: World
    schedule: tuple[ScheduledDrift, ...]
    tools: tuple[ToolDoc, ...]
    max_turns: int
    turn: int = 0
    fired: tuple[DriftEvent, ...] = ()
    notices: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)  # domain -> pending notice
    actions: list[ActionRecord] = dataclasses.field(default_factory=list)
    results: list[ToolResult] = dataclasses.field(default_factory=list)
    user_messages: list[UserMessage] = dataclasses.field(default_factory=list)
    parse_failures: int = 0
    consecutive_invalid: int = 0
    terminated_by: TerminatedBy | None = None
    episode: Episode | None = None
    rewards: Rewards | None = None
    audio: list[Any] = dataclasses.field(default_factory=list)  # AudioTrace per spoken user line (voice on)


class DriftCallEnv:
    """Seeded multilingual concierge environment with mid-episode API drift."""

    def __init__(
        self,
        stage: int = 1,
        language_weights: dict[str, float] | None = None,
        max_turns: int | None = None,
        *,
        goal_fn: Any = None,
        forced_pattern: str | None = None,
        voice: Any = None,
        drift_pool: DriftPool | None = None,
        drift_source: str = "handwritten",
    ) -> None:
        if stage not in STAGE_TURN_BUDGETS:
            raise ValueError(f"stage must be 1, 2 or 3, got {stage!r}")
        if max_turns is not None and max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.stage = stage
        self.language_weights = dict(language_weights or DEFAULT_LANGUAGE_WEIGHTS)
        self.max_turns = max_turns or STAGE_TURN_BUDGETS[stage]
        self._goal_fn = goal_fn or remembered_goal
        # step 6's `DriftPool`: the patterns schedules draw from (a split's demonstrated ones for the warm start's
        # data, demonstrated and reinforced for GRPO); None: the whole catalogue
        self.drift_pool = drift_pool
        # which drifts schedules draw from (step 2's DRIFT_SOURCES): the hand-written catalogue, the generated
        # families' instances, or both (step 6's `build_schedule`)
        if drift_source not in DRIFT_SOURCES:
            raise ValueError(f"drift_source must be one of {DRIFT_SOURCES}, got {drift_source!r}")
        self.drift_source = drift_source
        self._forced: str | None = None
        if forced_pattern is not None:
            self.force_drift(forced_pattern)
        # A step-9 `VoiceBoundary` (evaluation only, never training): what the user says reaches the agent as
        # its TTS -> ASR transcript; the Episode keeps what was said, `audio_traces()` what was heard.
        self.voice = voice
        self._live: _Live | None = None

    # ----------------------------------------------------------------------------- lifecycle
    def reset(self, seed: int | None = None, episode_id: str | None = None) -> DriftCallObservation:
        """Start an episode. Same seed → same goal, world, schedule and (same actions) trajectory."""
        seed = 0 if seed is None else int(seed)
        goal = self._goal_fn(seed=seed, stage=self.stage, language_weights=self.language_weights)
        world = new_world(goal, seed)
        schedule = build_schedule(self.stage, seed, goal, self.drift_pool, self.drift_source)
        if self._forced is not None:
            schedule = forced_schedule(self._forced)
        tools = reset_tool_docs(goal.domain)
        self._live = _Live(
            episode_id=episode_id or stable_id("EP", seed, self.stage, self.max_turns, self._forced),
            seed=seed, goal=goal, world=world, schedule=schedule, tools=tools, max_turns=self.max_turns,
        )
        self._live.user_messages.append(UserMessage(0, goal.seed_utterance, goal.language, kind="goal"))
        return self._observation(goal_utterance=self._heard(goal.seed_utterance, goal.language), now=goal.now)

    def force_drift(self, pattern_id: str) -> None:
        """Demo/judge control: schedule `pattern_id` to fire at the next eligible call (from the next reset)."""
        pattern_by_id(pattern_id)  # raises on unknown ids
        self._forced = pattern_id

    def inject_drift(self, pattern_id: str) -> ScheduledDrift:
        """Demo/judge control: schedule `pattern_id` in the running episode; it fires before the
        next call to one of its trigger tools from the next turn on (turn 2 at the earliest, as
        every drift, unless that call is the booking). Returns what was scheduled."""
        live = self._require_running()
        pattern = pattern_by_id(pattern_id)  # raises on unknown ids
        if any(s.pattern_id == pattern_id for s in live.schedule):
            raise ValueError(f"{pattern_id!r} is already scheduled in this episode")
        drift = ScheduledDrift(pattern.id, pattern.kind, pattern.domain, max(2, live.turn + 1))
        live.schedule = (*live.schedule, drift)
        return drift

    def require_argument(self, tool_name: str, name: str, kind: str) -> None:
        """Drill control: in the running episode `tool_name` also requires `name` (of vendor type `kind`), so a
        call without it is refused with `MISSING_REQUIRED_FIELD` naming it. Not a drift: no event, no notice, and
        the tool docs stay as they were (the warm start's field drills; step 5's `require_argument`)."""
        live = self._require_running()
        live.world = require_argument(live.world, tool_name, name, kind)

    def close(self) -> None:
        self._live = None

    def truncate(self) -> None:
        """End a running episode as a timeout: the rollout ran out of context before the turn budget."""
        self._require_running()
        self._finish(TerminatedBy.TIMEOUT)

    # ----------------------------------------------------------------------------- stepping
    def step(self, action: DriftCallAction) -> DriftCallObservation:
        """Take one parsed action."""
        live = self._require_running()
        if not isinstance(action, DriftCallAction):
            raise InvalidActionError(f"step() takes a DriftCallAction, got {type(action).__name__}; "
                                     "use step_text() for raw model output")
        live.turn += 1
        live.consecutive_invalid = 0
        live.actions.append(ActionRecord(live.turn, action))
        result, message = self._dispatch(live, action)
        if result is not None:
            live.results.append(result)
        if message is not None:
            live.user_messages.append(message)
            if self.voice is not None:  # what the agent reads is the transcript; the episode keeps what was said
                message = dataclasses.replace(message, text=self._heard(message.text, message.language))
        if action.action_type in (ActionType.SUBMIT, ActionType.ABORT):
            self._finish(TerminatedBy(action.action_type.value))
        elif live.turn >= live.max_turns:
            self._finish(TerminatedBy.TIMEOUT)
        return self._observation(result=result, message=message)

    def step_text(self, text: str) -> DriftCallObservation:
        """Parse a raw model completion and step; a parse failure costs a turn and is recorded."""
        live = self._require_running()
        try:
            action = parse_action(text)
        except ActionParseError as err:
            live.turn += 1
            live.parse_failures += 1
            live.consecutive_invalid += 1
            live.actions.append(ActionRecord(live.turn, None, raw_text=loggable_text(text), parse_error=err.reason))
            hint = UserMessage(live.turn, f"Invalid action: {err.reason} {ACTION_FORMAT_HELP}", "en", "format_hint")
            if live.consecutive_invalid >= MAX_CONSECUTIVE_INVALID:
                self._finish(TerminatedBy.INVALID_ACTIONS)
            elif live.turn >= live.max_turns:
                self._finish(TerminatedBy.TIMEOUT)
            return self._observation(message=hint, parse_error=err.reason)
        return self.step(action)

    def _dispatch(self, live: _Live, action: DriftCallAction) -> tuple[ToolResult | None, UserMessage | None]:
        kind = action.action_type
        if kind is ActionType.TOOL_CALL:
            self._fire_due_drifts(live, action.tool_name or "")
            result, live.world = dispatch(live.world, action.tool_name or "", dict(action.tool_args), live.turn)
            return self._with_notice(live, result), None
        if kind is ActionType.PROBE_SCHEMA:
            schema = describe_schema(live.world, action.tool_name or "")
            version = live.world.schema_versions.get(action.tool_name or "", 0)
            return ToolResult(f"{action.tool_name}.describe_schema", ToolStatus.OK, schema, version, 5, live.turn), None
        if kind is ActionType.CLARIFY:
            return None, reply(live.goal, action.message or "", live.turn)
        if kind is ActionType.SPEAK:
            return None, acknowledge(live.goal, action.message or "", live.turn)
        return None, None  # submit / abort end the episode

    def _fire_due_drifts(self, live: _Live, tool_name: str) -> None:
        fired_ids = frozenset(e.pattern_id for e in live.fired)
        for drift in due_drifts(live.schedule, fired_ids, tool_name, live.turn):
            live.world, event, notice = apply_drift(live.world, drift.pattern_id, live.turn)
            live.fired = (*live.fired, event)
            if notice is not None:
                live.notices[event.domain] = dict(notice)

    @staticmethod
    def _with_notice(live: _Live, result: ToolResult) -> ToolResult:
        """Attach a pending terms notice, once, to the next result in its domain."""
        notice = live.notices.pop(result.tool_name.split(".")[0], None)
        return result if notice is None else attach_notice(result, notice)

    def _heard(self, text: str, language: str) -> str:
        """`text` as the agent receives it: itself, or through the voice boundary when one is set."""
        if self.voice is None:
            return text
        trace = self.voice.hear(text, language)
        assert self._live is not None
        self._live.audio.append(trace)
        return str(trace.transcript)

    def audio_traces(self) -> tuple[Any, ...]:
        """The running or last episode's `AudioTrace`s (user lines spoken and heard), in turn order; () with voice off."""
        return tuple(self._live.audio) if self._live is not None else ()

    # ----------------------------------------------------------------------------- outputs
    def _observation(self, *, result: ToolResult | None = None, message: UserMessage | None = None,
                     goal_utterance: str | None = None, now: str | None = None,
                     parse_error: str | None = None) -> DriftCallObservation:
        live = self._live
        assert live is not None
        done = live.terminated_by is not None
        return DriftCallObservation(
            turn=live.turn,
            budget_remaining=live.max_turns - live.turn,
            goal_utterance=goal_utterance,
            now=now,
            user_message=message,
            last_result=None if result is None else result.for_agent(),
            available_tools=live.tools,
            parse_error=parse_error,
            done=done,
            reward=live.rewards.reward if done and live.rewards is not None else None,
        )

    def _finish(self, reason: TerminatedBy) -> None:
        from cells.step_08_rewards import compute_rewards

        live = self._live
        assert live is not None
        live.terminated_by = reason
        live.episode = Episode(
            episode_id=live.episode_id, seed=live.seed, stage=self.stage, goal=live.goal,
            max_turns=live.max_turns, turns_used=live.turn, actions=tuple(live.actions),
            results=tuple(live.results), drifts=live.fired, user_messages=tuple(live.user_messages),
            bookings=live.world.bookings, parse_failures=live.parse_failures, terminated_by=reason,
            schedule=live.schedule,
        )
        live.rewards = compute_rewards(live.episode)  # the one scoring of this episode
        live.episode = dataclasses.replace(live.episode, rewards=live.rewards)

    def _require_running(self) -> _Live:
        if self._live is None:
            raise EnvNotResetError("call reset(seed) before step()")
        if self._live.terminated_by is not None:
            raise EpisodeDoneError(f"episode {self._live.episode_id} ended ({self._live.terminated_by.value}); "
                                   "call reset() to start another")
        return self._live

    @property
    def done(self) -> bool:
        return self._live is not None and self._live.terminated_by is not None

    @property
    def goal(self) -> GoalSpec:
        if self._live is None:
            raise EnvNotResetError("no goal before reset()")
        return self._live.goal

    def progress(self) -> tuple[str | None, int, bool]:
        """(episode id, turns used, done) of the running or last episode; (None, 0, False) before reset.
        The agent-visible part of `state`, without copying the rest (a server answers it on every step)."""
        live = self._live
        if live is None:
            return None, 0, False
        return live.episode_id, live.turn, live.terminated_by is not None

    @property
    def state(self) -> DriftCallState:
        """Judge view: everything, including the schedule and fired drifts."""
        live = self._live
        if live is None:
            raise EnvNotResetError("no state before reset()")
        return DriftCallState(
            episode_id=live.episode_id, seed=live.seed, stage=self.stage, goal=live.goal, turn=live.turn,
            max_turns=live.max_turns, schema_versions=dict(live.world.schema_versions),
            vendor_flags={d: dict(f) for d, f in live.world.flags.items()}, schedule=live.schedule,
            fired=live.fired, actions=tuple(live.actions), results=tuple(live.results),
            bookings=live.world.bookings, parse_failures=live.parse_failures, done=self.done,
            terminated_by=live.terminated_by,
        )

    def episode(self) -> Episode:
        if self._live is None or self._live.episode is None:
            raise EpisodeNotDoneError("the episode has not ended yet (submit, abort, budget or invalid outputs)")
        return self._live.episode

    def rewards(self) -> Rewards:
        if self._live is None or self._live.rewards is None:
            raise EpisodeNotDoneError("rewards exist only after the episode ends")
        return self._live.rewards


def make_env_factory(stage: int, language_weights: dict[str, float] | None = None, **kwargs: Any
                     ) -> Callable[[], DriftCallEnv]:
    """A zero-argument callable building fresh envs for `stage` (what trainers and rollouts take)."""
    return functools.partial(DriftCallEnv, stage, language_weights, **kwargs)


def stage_env_factories(profile: Any) -> dict[int, Callable[[], DriftCallEnv]]:
    """One env factory per curriculum stage (GRPO's episodes), with that stage's language weights and turn budget,
    the profile's `drift_source` and with a `drift_split` the split's `reinforcement_pool` (demonstrated and
    reinforced patterns; of a generated split, its first `drift_train_instances` training instances too)."""
    pool = grpo_drift_pool(profile)
    return {s: make_env_factory(s, profile.languages_for_stage(s), max_turns=profile.turn_budget(s), drift_pool=pool,
                                drift_source=profile.drift_source)
            for s in STAGE_TURN_BUDGETS}


def grpo_drift_pool(profile: Any) -> DriftPool | None:
    """The profile's `drift_split`'s `reinforcement_pool` (None without a split: every pattern)."""
    if not profile.drift_split:
        return None
    return reinforcement_pool(drift_split(profile.drift_split), profile.grpo_reinforced_share,
                              profile.drift_train_instances)


def run(ctx: Context) -> Context:
    """Store an env factory per stage and print what each stage's episodes look like (step 11 plays them)."""
    ctx.env_factory = stage_env_factories(ctx.profile)
    for stage, factory in ctx.env_factory.items():
        env = factory()
        obs = env.reset(seed=ctx.profile.seed)
        schedule = [s.pattern_id for s in env.state.schedule]
        print(f"[env] stage {stage}: budget {env.max_turns} turns, {len(obs.available_tools)} tools; seed "
              f"{ctx.profile.seed}: {env.goal.domain}/{env.goal.language}, drifts scheduled {schedule}")
    return ctx
