"""cells/trl_env: the environment_factory class for TRL's stock GRPOTrainer, its tools, template and parser.

Parity: the same scripted expert actions, played as tool-method calls on `DriftCallToolEnv` and as
`DriftCallEnv.step` actions, give byte-identical episodes, rewards and agent-visible observations, on every
stage, language and goal domain. What TRL's tool-call parser cannot express is named by strict xfails.
"""

from __future__ import annotations

import copy
import inspect
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cells.actions import format_action, parse_action
from cells.agent.policies import ExpertPolicy
from cells.agent.policies.base import GoalReader
from cells.agent.prompt import initial_messages, render_observation
from cells.step_04_datatypes import GOAL_DOMAINS, LANGUAGES, ActionType, DriftCallAction
from cells.step_05_vendors import DEFAULT_FLAGS, TOOLS
from cells.step_10_env import DriftCallEnv
from cells.trl_env import DriftCallToolEnv, ToolEnvError, driftcall_reward, finish_episode, seed_dataset
from cells.trl_env.chat_template import CONVERSATION_TOOLS
from cells.trl_env.tools import PYTHON_TYPES, attribute_name, parameter_name
from cells.vendors.registry import TYPES

CONVERSATION_METHODS = ("speak", "clarify", "probe_schema", "submit", "abort")


def trl_tools(env: DriftCallToolEnv) -> dict:
    """The tools as TRL 1.16's GRPOTrainer collects them: public functions of the class, bound, keyed by
    `__name__` (its `sync_tool_dict`)."""
    methods = [getattr(env, name) for name, _ in inspect.getmembers(type(env), predicate=inspect.isfunction)
               if name not in ("reset", "get_reward") and not name.startswith("_")]
    return {m.__name__: m for m in methods}


def call_as_tool(env: DriftCallToolEnv, action: DriftCallAction) -> str:
    """Play one action the way TRL does: by tool name, with the arguments as keywords."""
    tools = trl_tools(env)
    kind = action.action_type
    if kind is ActionType.TOOL_CALL:
        return tools[action.tool_name](**action.tool_args)
    if kind is ActionType.PROBE_SCHEMA:
        return tools["probe_schema"](domain=action.tool_name)
    if kind is ActionType.SUBMIT:
        return tools["submit"](message=action.message, confidence=action.confidence)
    if kind is ActionType.ABORT:
        return tools["abort"](**({} if action.message is None else {"message": action.message}))
    return tools[kind.value](message=action.message)


def expert_actions(stage: int, seed: int, weights: dict[str, float] | None = None):
    """The expert's actions on one episode through DriftCallEnv.step, with the env that played them."""
    env = DriftCallEnv(stage, weights)
    obs = env.reset(seed=seed)
    policy = ExpertPolicy()
    policy.reset(obs, GoalReader.from_goal(env.goal))
    actions, observations = [], []
    while not obs.done:
        action = parse_action(policy.act(obs))
        obs = env.step(action)
        actions.append(action)
        observations.append(render_observation(obs))
    return env, actions, observations


def assert_parity(stage: int, seed: int, weights: dict[str, float] | None = None) -> DriftCallEnv:
    env, actions, observations = expert_actions(stage, seed, weights)
    tool_env = DriftCallToolEnv(stage=stage, language_weights=weights)
    tool_env.reset(seed=seed)
    for action, seen in zip(actions, observations, strict=True):
        assert call_as_tool(tool_env, action).startswith(seen)  # the tool message is what the rollout shows
    mirrored = tool_env.driftcall_env
    assert mirrored.episode().to_json() == env.episode().to_json()
    assert finish_episode(tool_env, None) == env.rewards().reward
    return env


# ----------------------------------------------------------------------------------------------- the tools


def test_the_tools_are_the_registry_tools_and_the_conversation_actions():
    tools = trl_tools(DriftCallToolEnv())
    assert set(tools) == set(TOOLS) | set(CONVERSATION_METHODS)
    assert set(CONVERSATION_TOOLS) < set(CONVERSATION_METHODS)  # submit/abort end a rollout as plain text


def test_every_registry_type_has_a_python_type():
    assert set(PYTHON_TYPES) == set(TYPES)


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_a_tool_schema_is_the_registry_declaration_at_reset(name):
    """TRL renders `get_json_schema(method)`: name, description, arguments, required ones and their docs all
    come from the registry tool with the vendors' default flags (never written by hand)."""
    from transformers.utils import get_json_schema

    tool = TOOLS[name]
    schema = get_json_schema(getattr(DriftCallToolEnv(), attribute_name(name)))["function"]
    declared = tool.args(DEFAULT_FLAGS[tool.domain])
    assert schema["name"] == name
    assert schema["description"] == tool.doc(DEFAULT_FLAGS[tool.domain]).description
    assert list(schema["parameters"]["properties"]) == [parameter_name(a.name) for a in
                                                        sorted(declared, key=lambda a: not a.required)]
    assert schema["parameters"].get("required", []) == [parameter_name(a.name) for a in declared if a.required]
    for arg in declared:
        assert schema["parameters"]["properties"][parameter_name(arg.name)]["description"].startswith(arg.doc)


def test_a_keyword_argument_is_documented_with_an_underscore_and_reaches_the_vendor_under_its_name():
    """Python refuses `from` as a parameter: the signature says `from_`; either spelling is the API's `from`."""
    env = DriftCallToolEnv(stage=1)
    assert "from_" in inspect.signature(env.airline_search).parameters
    for spelling in ("from", "from_"):
        env.reset(seed=11)
        env.airline_search(**{spelling: "HYD"}, to="BLR", date="2026-05-02")
        sent = env.driftcall_env.state.actions[-1].action.tool_args
        assert sent == {"from": "HYD", "to": "BLR", "date": "2026-05-02"}


# ----------------------------------------------------------------------------------------------- parity


@pytest.mark.parametrize("stage", (1, 2, 3))
@pytest.mark.parametrize("language", LANGUAGES)
def test_parity_on_every_domain(stage, language):
    """Every (stage, language, goal domain): the first seeds covering each domain."""
    weights = {language: 1.0}
    seen: set[str] = set()
    for seed in range(200):
        env = assert_parity(stage, seed, weights)
        assert env.goal.language == language
        seen.add(env.goal.domain)
        if seen == set(GOAL_DOMAINS):
            break
    assert seen == set(GOAL_DOMAINS)


@settings(max_examples=60, deadline=None)
@given(stage=st.sampled_from((1, 2, 3)), seed=st.integers(0, 2**31 - 1))
def test_parity_on_any_seed(stage, seed):
    assert_parity(stage, seed)


def test_reset_returns_the_turn_0_prompt():
    """The reset text, folded as the single user message TRL appends it to, is the two turn-0 messages of
    DriftCall's own prompt: the system prompt (tools as at reset, the caller's time), then the utterance."""
    env = DriftCallToolEnv(stage=2)
    text = env.reset(seed=42)
    system, user = initial_messages(env.driftcall_env.goal)
    assert text == f"{system['content']}\n\n{user['content']}"
    assert "Now: " in system["content"] and "payment.get_token" in system["content"]


def test_a_dataset_row_picks_seed_and_stage():
    env = DriftCallToolEnv(stage=1)
    env.reset(seed=7, stage=3, prompt=[{"role": "user", "content": ""}])
    assert env.driftcall_env.stage == 3 and env.driftcall_env.state.seed == 7


def test_reset_without_a_seed_says_how_to_give_one():
    with pytest.raises(ToolEnvError, match="seed_dataset"):
        DriftCallToolEnv().reset(prompt=[])


def test_seed_dataset_is_stable_and_in_its_range():
    from cells.step_02_profiles import EVAL_SEEDS, TRAIN_SEEDS

    train, again, held_out = seed_dataset(5, stage=2), seed_dataset(5, stage=2), seed_dataset(5, 2, split="eval")
    assert train["seed"] == again["seed"] and len(set(train["seed"])) == 5
    assert all(s in TRAIN_SEEDS for s in train["seed"]) and all(s in EVAL_SEEDS for s in held_out["seed"])
    assert train["stage"] == [2] * 5 and train["prompt"][0] == [{"role": "user", "content": ""}]


# ----------------------------------------------------------------------------------------------- the reward


def _played_until_submit(stage: int = 1, seed: int = 3):
    env, actions, _ = expert_actions(stage, seed)
    tool_env = DriftCallToolEnv(stage=stage)
    tool_env.reset(seed=seed)
    for action in actions[:-1]:
        call_as_tool(tool_env, action)
    return env, actions[-1], tool_env


def test_a_last_turn_without_a_tool_call_is_played_by_the_env_parser():
    """TRL ends the rollout at a turn that calls no tool; `{"action":"submit",...}` there submits."""
    env, submit, tool_env = _played_until_submit()
    completion = [{"role": "assistant", "content": format_action(submit)}]
    assert driftcall_reward([completion], [tool_env]) == [env.rewards().reward]
    assert tool_env.driftcall_env.episode().to_json() == env.episode().to_json()


def test_a_rollout_that_stops_early_is_a_timeout_scored_by_the_judge():
    from cells.step_08_rewards import compute_rewards

    _, _, tool_env = _played_until_submit()
    completion = [{"role": "assistant", "content": "I am not sure what to do"}]
    reward = driftcall_reward([completion], [tool_env])[0]
    episode = tool_env.driftcall_env.episode()
    assert episode.terminated_by.value == "timeout" and episode.parse_failures == 1
    assert reward == compute_rewards(episode).reward


def test_an_unexecuted_tool_call_is_not_played():
    _, _, tool_env = _played_until_submit()
    before = len(tool_env.driftcall_env.state.actions)
    completion = [{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
        "name": "speak", "arguments": {"message": "x"}}}]}]
    driftcall_reward([completion], [tool_env])
    assert len(tool_env.driftcall_env.episode().actions) == before


def test_the_reward_needs_the_environments():
    with pytest.raises(ToolEnvError, match="environment_factory"):
        driftcall_reward([[]])


def test_calls_after_the_end_change_nothing():
    env, submit, tool_env = _played_until_submit()
    assert tool_env.submit(message=submit.message, confidence=submit.confidence).endswith("without calling a tool")
    assert tool_env.speak(message="hello?").startswith("[done]")
    assert tool_env.driftcall_env.episode().to_json() == env.episode().to_json()


# ----------------------------------------------------------------------------------------------- drift


def _seed_with(stage: int, pattern: str) -> int:
    for seed in range(2000):
        env = DriftCallEnv(stage)
        env.reset(seed=seed)
        if any(s.pattern_id == pattern for s in env.state.schedule):
            return seed
    raise AssertionError(f"no seed schedules {pattern}")


def test_a_newly_required_argument_reaches_the_vendor_through_the_native_call():
    """`airline_passenger_count_required`: the expert's booking without `passenger_count` is refused naming it,
    its retry with it (sent as a keyword TRL passes) is accepted, and the judge counts the drift handled."""
    seed = _seed_with(2, "airline_passenger_count_required")
    env = assert_parity(2, seed)
    episode = env.episode()
    assert [d.pattern_id for d in episode.drifts] == ["airline_passenger_count_required"]
    books = [a.action for a in episode.actions if a.action and a.action.tool_name == "airline.book"]
    assert "passenger_count" in books[-1].tool_args and env.rewards().r_drift == 1.0


def test_an_argument_missing_from_the_documented_signature_reaches_the_vendor():
    """A required argument the reset docs never declared (a field drill's `require_argument`) is sent as a
    keyword the signature does not name, and the vendor judges it."""
    from transformers.utils import get_json_schema

    env = DriftCallToolEnv(stage=1)
    env.reset(seed=5)
    env.driftcall_env.require_argument("payment.get_token", "device_id", "str")
    assert "device_id" not in get_json_schema(env.payment_get_token)["function"]["parameters"]["properties"]
    refused = env.payment_get_token()
    assert "MISSING_REQUIRED_FIELD" in refused and "device_id" in refused
    accepted = env.payment_get_token(device_id="phone-1")
    assert '"status":"ok"' in accepted
    assert env.driftcall_env.state.actions[-1].action.tool_args == {"device_id": "phone-1"}


# ----------------------------------------------------------------------------------------------- TRL's parser


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from cells.trl_env import tiny_tool_model

    return tiny_tool_model(cache_dir=str(tmp_path_factory.mktemp("tiny")))[1]


def parsed(tokenizer, text: str) -> dict:
    """A generated turn as TRL 1.16 parses it (`trl.chat_template_utils.parse_response`)."""
    from trl.chat_template_utils import parse_response

    prefix = tokenizer.apply_chat_template([{"role": "user", "content": "u"}], add_generation_prompt=True,
                                           tokenize=True, return_dict=False)
    ids = tokenizer(text + "<end_of_turn>", add_special_tokens=False)["input_ids"]
    return parse_response(tokenizer, ids, prefix=prefix, tools=list(trl_tools(DriftCallToolEnv()).values()))


def test_trl_accepts_the_template(tokenizer):
    from trl.chat_template_utils import is_chat_template_prefix_preserving, supports_tool_calling

    assert supports_tool_calling(tokenizer) and is_chat_template_prefix_preserving(tokenizer)


def test_trl_renders_the_prompt_our_rollouts_start_from(tokenizer):
    """The ids TRL generates from (`apply_chat_template` of the row's message holding reset's text) are the ids
    DriftCall's rollout starts from (the tiny model's own template, system and user message)."""
    from cells.modeling.tiny import CHAT_TEMPLATE

    env = DriftCallToolEnv(stage=2)
    text = env.reset(seed=9)
    trl_ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                            tokenize=True, return_dict=True)["input_ids"]
    ours = tokenizer.apply_chat_template(initial_messages(env.driftcall_env.goal), add_generation_prompt=True,
                                         tokenize=False, chat_template=CHAT_TEMPLATE)
    assert trl_ids == tokenizer(ours, add_special_tokens=False)["input_ids"]


def test_a_tool_result_follows_a_turn_as_in_our_rollouts(tokenizer):
    """What TRL appends after a generated `<end_of_turn>` (its `_get_tool_suffix_ids` rendering) is what
    DriftCall's rollout appends: the newline, the user turn with the observation, the generation prompt."""
    from cells.agent.turns import ChatPieces
    from cells.modeling.tiny import CHAT_TEMPLATE

    call = {"type": "function", "function": {"name": "payment.get_token", "arguments": {}}}
    head = [{"role": "user", "content": "dummy"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
    tool = [{"role": "tool", "name": "payment.get_token", "content": "[tool_result] {}"}]
    prefix = tokenizer.apply_chat_template(head, tokenize=False)
    full = tokenizer.apply_chat_template(head + tool, tokenize=False, add_generation_prompt=True)
    own = copy.deepcopy(tokenizer)
    own.chat_template = CHAT_TEMPLATE  # the tiny model's own template, as DriftCall's rollouts render
    ours = ChatPieces(own)
    messages = [{"role": "user", "content": "dummy"}, {"role": "assistant", "content": "x"}]
    end = tokenizer.convert_tokens_to_ids("<end_of_turn>")
    assert own.decode(ours.between_turns(messages, [end], "[tool_result] {}")) == full[len(prefix):]


@pytest.mark.parametrize("stage", (1, 2, 3))
def test_every_expert_turn_parses_into_its_tool_call_or_stays_the_final_text(tokenizer, stage):
    """TRL's parser, on the action text the tiny model is trained to write: a tool call, speak, clarify or
    probe_schema is a tool call with the same name and arguments; submit and abort stay plain text (the
    rollout's last turn, which `driftcall_reward` plays). The template renders each call back to that text."""
    for seed in range(8):
        _, actions, _ = expert_actions(stage, seed)
        for action in actions:
            text = format_action(action)
            message = parsed(tokenizer, text)
            if action.action_type in (ActionType.SUBMIT, ActionType.ABORT):
                assert "tool_calls" not in message and message["content"] == text
                continue
            (call,) = message["tool_calls"]
            name = action.tool_name if action.action_type is ActionType.TOOL_CALL else action.action_type.value
            arguments = {"domain": action.tool_name} if action.action_type is ActionType.PROBE_SCHEMA else (
                action.tool_args if action.action_type is ActionType.TOOL_CALL else {"message": action.message})
            assert call["function"] == {"name": name, "arguments": arguments}
            rendered = tokenizer.apply_chat_template(
                [{"role": "user", "content": "u"}, {"role": "assistant", "content": "", "tool_calls": [call]}],
                tokenize=False)
            assert rendered.endswith(text + "<end_of_turn>")


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(list('{}[]":,\\ abc01.-')) | st.characters(exclude_categories=("Cs",)), max_size=120))
def test_any_generated_text_parses_without_raising(tokenizer, text):
    """Sampled turns of a barely trained model are anything: TRL's parse never raises on them."""
    message = parsed(tokenizer, '{"action":"tool_call","tool":"cab.book","args":{' + text)
    assert message["role"] == "assistant"
    message = parsed(tokenizer, text)
    assert message["role"] == "assistant"


# What TRL's tool-call parsing cannot express, each with what the factory does instead (docs/trl.md).
@pytest.mark.xfail(strict=True, reason="TRL's tool call has no field for a rationale outside the arguments; the "
                                       "response template drops it (it is never scored)")
def test_limit_a_rationale_survives(tokenizer):
    text = '{"action":"speak","message":"ok","rationale":"why"}'
    assert parsed(tokenizer, text)["tool_calls"][0]["function"]["arguments"] == {"message": "ok", "rationale": "why"}


@pytest.mark.xfail(strict=True, reason="TRL casts string arguments to the documented type (`rooms: int`), so "
                                       "the vendor never sees the string the env's grammar would refuse")
def test_limit_a_mistyped_argument_reaches_the_vendor_as_written(tokenizer):
    text = '{"action":"tool_call","tool":"hotel.book","args":{"rooms":"2"}}'
    assert parsed(tokenizer, text)["tool_calls"][0]["function"]["arguments"] == {"rooms": "2"}


@pytest.mark.xfail(strict=True, reason="TRL's parser keeps the last action of a turn and calls it; the env's "
                                       "grammar refuses two actions in one turn as one invalid turn")
def test_limit_two_actions_in_a_turn_are_one_invalid_turn(tokenizer):
    text = '{"action":"speak","message":"a"}{"action":"speak","message":"b"}'
    assert len(parsed(tokenizer, text).get("tool_calls", [])) == 0


def test_the_differences_in_tool_calls_are_the_documented_ones(tokenizer):
    """The behaviour the xfails above name, asserted as what happens (so a TRL change shows up here)."""
    calls = parsed(tokenizer, '{"action":"speak","message":"a"}{"action":"speak","message":"b"}')["tool_calls"]
    assert [c["function"]["arguments"]["message"] for c in calls] == ["b"]  # the last action of the turn
    hotel = parsed(tokenizer, '{"action":"tool_call","tool":"hotel.book","args":{"rooms":"2"}}')
    assert hotel["tool_calls"][0]["function"]["arguments"] == {"rooms": 2}
    assert json.loads(format_action(parse_action('{"action":"speak","message":"ok","rationale":"why"}')))[
        "rationale"] == "why"  # the env's grammar keeps it
