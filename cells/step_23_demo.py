"""Step 23 - demo: an ipywidgets panel to play one episode turn by turn and watch the drift land.

Pick a stage, language, seed and player (the expert, the naive player, and, when step 12 loaded a
model, the model with its adapter off and the trained model), then step one turn at a time or play
to the end. "Inject drift" schedules a catalogue pattern that applies to the goal's domain; it
fires before the next call to one of its trigger tools. The panel shows the conversation (the
user's text in its own script), every tool call with its result, drift events as they fire (the
judge's view: the agent never sees them) and, at the end, the reward breakdown.

`DemoSession` holds the logic (pure Python, used by the tests and the CLI); `DemoPanel` is the thin
widget layer over it. Widgets are imported inside functions, so importing this module is instant.

Reads `ctx.profile` (seed, turn cap), `ctx.model` / `ctx.tokenizer` (optional). Writes
`ctx.reports["demo"]` (the transcript of one expert episode, played headlessly as a self-check)
and, under IPython, displays the panel.
Run alone: `python -m cells run --profile cpu-smoke --steps 23` (< 1 s without a model).
"""

from __future__ import annotations

import contextlib
import html
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cells.errors import DriftCallError

if TYPE_CHECKING:  # pragma: no cover
    from cells.context import Context

SCRIPTED_PLAYERS: tuple[str, ...] = ("expert", "naive")
MODEL_PLAYERS: tuple[str, ...] = ("model (adapter off)", "model (trained)")
RESULT_PREVIEW_CHARS = 600  # long listings are cut in the panel (the episode keeps them whole)


class DemoError(DriftCallError, RuntimeError):
    """The demo was asked for something it cannot do (unknown player, no model, episode over)."""


@dataclass(frozen=True)
class Entry:
    """One line of the panel's log: who spoke and what (kind: goal/user/agent/tool/drift/error/end)."""

    kind: str
    turn: int
    text: str
    language: str | None = None


class ModelPlayer:
    """A model as a turn-by-turn player: same chat messages as training (system prompt + utterance,
    then each observation rendered as the next user message), greedy decoding, one turn per `act`."""

    def __init__(self, model: Any, tokenizer: Any, max_new_tokens: int, adapter: bool = True) -> None:
        self.model, self.tokenizer, self.max_new_tokens, self.adapter = model, tokenizer, max_new_tokens, adapter
        self.name = "model (trained)" if adapter else "model (adapter off)"
        self.messages: list[dict[str, str]] = []

    def reset(self, observation: Any, goal: Any = None) -> None:
        from cells.agent.rollout import default_system_prompt

        self.messages = [{"role": "system", "content": default_system_prompt(None, observation)},
                         {"role": "user", "content": observation.goal_utterance or ""}]

    def act(self, observation: Any, history: Any = None) -> str:
        import torch

        from cells.agent.rollout import ChatPieces, default_render_observation
        from cells.step_18_eval_baseline import adapter_disabled

        if observation.turn > 0:
            self.messages.append({"role": "user", "content": default_render_observation(observation)})
        pieces = ChatPieces(self.tokenizer)
        ids = pieces.encode(pieces.render(self.messages, add_generation_prompt=True))
        device = next(self.model.parameters()).device
        guard = contextlib.nullcontext() if self.adapter else adapter_disabled(self.model)
        with torch.no_grad(), guard:
            out = self.model.generate(input_ids=torch.tensor([ids], device=device), max_new_tokens=self.max_new_tokens,
                                      do_sample=False, eos_token_id=list(pieces.stop_ids),
                                      pad_token_id=self.tokenizer.pad_token_id)  # (1, T + N)
        text = self.tokenizer.decode(out[0, len(ids):].tolist(), skip_special_tokens=True).strip()
        self.messages.append({"role": "assistant", "content": text})
        return text


def player_names(has_model: bool) -> tuple[str, ...]:
    """The players the panel offers: the scripted ones, plus the model ones when a model is loaded."""
    return SCRIPTED_PLAYERS + (MODEL_PLAYERS if has_model else ())


@dataclass
class DemoSession:
    """One demo episode: env, player and the log the panel renders."""

    model: Any = None
    tokenizer: Any = None
    max_new_tokens: int = 96
    turn_budgets: tuple[int, ...] | None = None  # per stage (the profile's); None: the env's defaults
    entries: list[Entry] = field(default_factory=list)
    env: Any = None
    player: Any = None
    observation: Any = None
    _fired: int = 0

    def make_player(self, name: str) -> Any:
        from cells.agent.policies import ExpertPolicy, NaivePolicy

        scripted: dict[str, Callable[[], Any]] = {"expert": ExpertPolicy, "naive": NaivePolicy}
        if name in scripted:
            return scripted[name]()
        if name in MODEL_PLAYERS:
            if self.model is None or self.tokenizer is None:
                raise DemoError(f"{name!r} needs a model: run step 12 (and training) first")
            return ModelPlayer(self.model, self.tokenizer, self.max_new_tokens, adapter=name == MODEL_PLAYERS[1])
        raise DemoError(f"unknown player {name!r}; choose one of {player_names(self.model is not None)}")

    def reset(self, stage: int, language: str, seed: int, player: str) -> None:
        """Start a new episode in `language` (the goal is generated in it) with the named player."""
        from cells.agent.policies import GoalReader
        from cells.step_10_env import DriftCallEnv

        self.player = self.make_player(player)
        budget = None if self.turn_budgets is None else self.turn_budgets[int(stage) - 1]
        self.env = DriftCallEnv(int(stage), {language: 1.0}, max_turns=budget)
        self.observation = self.env.reset(seed=int(seed))
        self.player.reset(self.observation, GoalReader.from_goal(self.env.goal))
        goal = self.env.goal
        self.entries = [Entry("goal", 0, goal.seed_utterance, goal.language)]
        self._fired = 0

    @property
    def done(self) -> bool:
        return self.env is not None and self.env.done

    def applicable_patterns(self) -> tuple[str, ...]:
        """Catalogue patterns that can fire in this episode (they apply to the goal's domain)."""
        from cells.step_06_drift import load_catalogue

        if self.env is None:
            return ()
        domain = self.env.goal.domain
        return tuple(p.id for p in load_catalogue() if domain in p.applies_to)

    def inject(self, pattern_id: str) -> None:
        """Schedule `pattern_id`; it fires before the next call to one of its trigger tools."""
        self._require_running()
        drift = self.env.inject_drift(pattern_id)
        self.entries.append(Entry("drift", self.observation.turn,
                                  f"scheduled {drift.pattern_id} ({drift.drift_type}, {drift.domain}): fires before "
                                  f"the next {drift.domain} call from turn {drift.min_turn}"))

    def step(self) -> None:
        """One agent turn: the player's text, the env's answer, any drift that fired."""
        self._require_running()
        text = self.player.act(self.observation)
        self.observation = obs = self.env.step_text(text)
        self.entries.append(Entry("agent", obs.turn, text))
        fired = self.env.state.fired
        for event in fired[self._fired:]:
            self.entries.append(Entry("drift", event.turn, f"fired {event.pattern_id} ({event.drift_type}, "
                                                           f"{event.domain}): {event.description}"))
        self._fired = len(fired)
        if obs.parse_error:
            self.entries.append(Entry("error", obs.turn, obs.parse_error))
        if obs.last_result is not None:
            r = obs.last_result
            body = json.dumps(r.response, ensure_ascii=False, separators=(",", ":"))
            cut = body if len(body) <= RESULT_PREVIEW_CHARS else body[:RESULT_PREVIEW_CHARS] + " …"
            self.entries.append(Entry("tool", obs.turn, f"{r.tool_name} → {r.status.value} {cut}"))
        if obs.user_message is not None and obs.user_message.kind != "format_hint":
            self.entries.append(Entry("user", obs.turn, obs.user_message.text, obs.user_message.language))
        if obs.done:
            self.entries.append(Entry("end", obs.turn, self.summary()))

    def play(self, max_turns: int = 64) -> None:
        """Step until the episode ends."""
        for _ in range(max_turns):
            if self.done:
                return
            self.step()

    def summary(self) -> str:
        """The reward breakdown in one paragraph (only once the episode has ended)."""
        r = self.env.rewards()
        offences = [o["code"] for o in r.breakdown.get("penalty", {}).get("offences", [])]
        drift = "n/a (no drift fired)" if r.r_drift is None else f"{r.r_drift:.2f}"
        return (f"ended by {self.env.episode().terminated_by.value}: reward {r.reward:.3f} = quality "
                f"{r.breakdown['combine']['quality']:.3f} × penalty {1 + r.r_penalty:.2f} × calibration "
                f"{1 - r.brier:.3f} {r.breakdown['combine']['failed_offence_term']:+.3f} (a failure's offences); "
                f"task {r.r_task:.0f}, drift {drift}, constraints {r.r_constraints:.2f}, "
                f"format {r.r_format:.2f}, confidence {r.confidence:.2f}; offences {offences or 'none'}")

    def spoken_lines(self) -> list[tuple[Entry, str, str]]:
        """`(entry, text, language)` for every line a phone call would voice: the user's, and the agent's
        messages (speak / clarify / submit; tool calls are not spoken), in the user's language."""
        from cells.actions import ActionParseError, parse_action

        if self.env is None:
            raise DemoError("press Reset first")
        language = self.env.goal.language
        out = []
        for entry in self.entries:
            if entry.kind in ("goal", "user"):
                out.append((entry, entry.text, entry.language or language))
            elif entry.kind == "agent":
                try:
                    message = parse_action(entry.text).message
                except ActionParseError:
                    continue
                if message:
                    out.append((entry, message, language))
        return out

    def audio(self) -> list[tuple[Entry, bytes]]:
        """A WAV (espeak-ng, step 9) for each of `spoken_lines()`, synthesised now."""
        from cells.step_09_audio import EspeakTTS, VoiceUnavailableError

        try:
            tts = EspeakTTS()
        except VoiceUnavailableError as exc:
            raise DemoError(str(exc)) from None
        return [(entry, tts.synthesize(text, language)) for entry, text, language in self.spoken_lines()]

    def _require_running(self) -> None:
        if self.env is None:
            raise DemoError("press Reset first")
        if self.env.done:
            raise DemoError("the episode has ended; press Reset for another")


_STYLE = {"goal": "#1f4e79", "user": "#1f4e79", "agent": "#2d6a2d", "tool": "#555", "drift": "#b03a00",
          "error": "#a00", "end": "#000"}
_LABEL = {"goal": "user (goal)", "user": "user", "agent": "agent", "tool": "tool", "drift": "DRIFT",
          "error": "format error", "end": "reward"}


def render_html(entries: list[Entry]) -> str:
    """The log as HTML: one row per entry, user text tagged with its language so it renders in its script."""
    rows = []
    for e in entries:
        lang = f' lang="{html.escape(e.language)}"' if e.language else ""
        rows.append(f'<div style="color:{_STYLE[e.kind]};margin:2px 0"><b>[{e.turn}] {_LABEL[e.kind]}</b>: '
                    f'<span{lang} style="white-space:pre-wrap">{html.escape(e.text)}</span></div>')
    return "<div class='driftcall-demo-log'>" + "".join(rows) + "</div>"


class DemoPanel:
    """The widgets: controls on top, the episode log below; every button drives `DemoSession`."""

    def __init__(self, session: DemoSession, seed: int = 0) -> None:
        import ipywidgets as w

        from cells.step_04_datatypes import LANGUAGES

        self.session = session
        self.stage = w.Dropdown(options=[1, 2, 3], value=2, description="stage")
        self.language = w.Dropdown(options=list(LANGUAGES), value="hi", description="language")
        self.seed = w.IntText(value=seed, description="seed")
        self.player = w.Dropdown(options=list(player_names(session.model is not None)), value="expert",
                                 description="player")
        self.pattern = w.Dropdown(options=[], description="drift")
        self.reset_button = w.Button(description="Reset", button_style="primary")
        self.step_button = w.Button(description="Step")
        self.play_button = w.Button(description="Play to end")
        self.inject_button = w.Button(description="Inject drift", button_style="warning")
        self.speak_button = w.Button(description="Speak turns", tooltip="espeak-ng audio of each user and agent line")
        self.status = w.HTML()
        self.log = w.HTML()
        self.players = w.VBox()  # one audio player per spoken line, built when "Speak turns" is pressed
        self.reset_button.on_click(lambda _: self._guarded(self._reset))
        self.step_button.on_click(lambda _: self._guarded(session.step))
        self.play_button.on_click(lambda _: self._guarded(session.play))
        self.inject_button.on_click(lambda _: self._guarded(lambda: session.inject(self.pattern.value)))
        self.speak_button.on_click(lambda _: self._guarded(self._speak))
        controls = w.VBox([w.HBox([self.stage, self.language, self.seed]), w.HBox([self.player, self.pattern]),
                           w.HBox([self.reset_button, self.step_button, self.play_button, self.inject_button,
                                   self.speak_button])])
        self.widget = w.VBox([controls, self.status, self.log, self.players])
        self._guarded(self._reset)

    def _reset(self) -> None:
        self.session.reset(self.stage.value, self.language.value, self.seed.value, self.player.value)
        self.pattern.options = list(self.session.applicable_patterns())
        self.players.children = ()

    def _speak(self) -> None:
        import ipywidgets as w

        self.players.children = tuple(
            w.HBox([w.HTML(f"<b>[{entry.turn}] {_LABEL[entry.kind]}</b>"),
                    w.Audio(value=wav, format="wav", autoplay=False, loop=False)])
            for entry, wav in self.session.audio())

    def _guarded(self, action: Callable[[], Any]) -> None:
        """Run a button's action; a DemoError becomes the status line (the panel stays usable)."""
        try:
            action()
            s = self.session
            state = "ended" if s.done else f"turn {s.observation.turn}, {s.observation.budget_remaining} left"
            self.status.value = f"<i>{html.escape(s.env.goal.domain)} / {html.escape(s.env.goal.language)}: {state}</i>"
        except DemoError as err:
            self.status.value = f"<b style='color:#a00'>{html.escape(str(err))}</b>"
        self.log.value = render_html(self.session.entries)


def build_demo(ctx: Context) -> DemoPanel:
    """A panel over this run's model (if step 12 loaded one) with the profile's turn cap."""
    session = DemoSession(ctx.model, ctx.tokenizer, ctx.profile.max_new_tokens_per_turn,
                          turn_budgets=ctx.profile.turn_budgets)
    return DemoPanel(session, seed=ctx.profile.seed)


def run(ctx: Context) -> Context:
    """Play one expert episode headlessly as a self-check; under IPython also show the panel."""
    session = DemoSession(turn_budgets=ctx.profile.turn_budgets)
    session.reset(2, "hi", ctx.profile.seed, "expert")
    session.play()
    ctx.reports["demo"] = [e.__dict__ for e in session.entries]
    drifts = sum(e.kind == "drift" for e in session.entries)
    print(f"[demo] expert stage-2 episode: {len(session.entries)} log lines, {drifts} drift event(s); "
          f"{session.entries[-1].text}")
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # pragma: no cover - IPython ships with ipykernel in requirements
        return ctx
    if get_ipython() is not None:
        display(build_demo(ctx).widget)
    return ctx
