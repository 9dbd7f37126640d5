"""A tool-calling chat template for the tiny model, so TRL's stock `GRPOTrainer` can drive DriftCall's tools with it.

TRL's tool loop needs a chat template that renders `tool_calls` and `tool` messages (`supports_tool_calling`),
renders earlier messages the same whatever follows (`is_chat_template_prefix_preserving`), and a
`response_template` that parses a generated turn into `tool_calls` (transformers' response parsing). The tiny
model's own template (`cells.modeling.tiny.CHAT_TEMPLATE`) has none of these; `with_tool_calling(tokenizer)` gives
its tokenizer `TOOL_CHAT_TEMPLATE` and `ACTION_RESPONSE_TEMPLATE`, chosen so that a tool call IS the action grammar
the tiny model is trained on (`cells/actions.py`):

    {"action":"tool_call","tool":"airline.search","args":{"from":"HYD",...}}  ->  airline.search(from="HYD", ...)
    {"action":"speak","message":"..."}                                          ->  speak(message="...")
    {"action":"clarify","message":"..."} / {"action":"probe_schema","domain":"airline"}   likewise

and a tool result is the next user turn, `[tool_result] ...` as `cells.agent.prompt.render_observation` writes it.
A conversation therefore renders token for token as DriftCall's own rollouts render it (the turn separator `\\n`
opens the next turn instead of closing the last, so the text TRL appends after a generated `<end_of_turn>` is
exactly what our rollout appends), and a warm start trained on DriftCall's format plays through TRL unchanged
(tests/test_trl_env.py). `submit` and `abort` are not parsed as tool calls: a turn that calls no tool ends TRL's
rollout, and the reward function (`driftcall_reward`) plays that last turn through the env's own parser, so a
rollout ends exactly where the episode does. The template does not render the `tools` schemas: the environment's
`reset()` text lists the tools as at reset, in the prompt's format (`cells.agent.prompt`).

What TRL's parser does differently from the env's (`parse_action`), named by tests/test_trl_env.py:
- a `rationale` key is dropped (it is never scored);
- string arguments are cast to the documented type (`"rooms": "2"` reaches the vendor as 2; the env's parser
  would send the string and the vendor would refuse it with INVALID_FIELD_TYPE);
- a turn with two action objects calls the last one (the env refuses it as one invalid turn);
- a call cut off by the token budget is made with the arguments it got that far (the env: a parse failure);
- a turn that is not an action ends the rollout (the env would count a parse failure and go on).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cells.modeling.tiny import END_OF_TURN, START_OF_TURN, TURNS_OPENING
from cells.step_04_datatypes import ActionType

# Actions besides tool calls that keep the conversation going: parsed as tool calls of the same name.
CONVERSATION_TOOLS: tuple[str, ...] = (ActionType.SPEAK.value, ActionType.CLARIFY.value, ActionType.PROBE_SCHEMA.value)
# Every action the template renders as `{"action": name, ...}` (submit and abort included: a native tool-calling
# model may call them as methods, and the conversation then renders in the same grammar).
_NAMED_ACTIONS = [a.value for a in ActionType if a is not ActionType.TOOL_CALL]

TOOL_CHAT_TEMPLATE = (
    TURNS_OPENING
    + "{{ ('' if loop.first else '\n') + '" + START_OF_TURN + "' + role + '\n' + (first_prefix if loop.first else '') }}"
    "{%- if message['content'] is string -%}{{ message['content'] }}{%- endif -%}"
    "{%- for call in message.get('tool_calls') or [] -%}"
    "{%- set fn = call['function'] if 'function' in call else call -%}"
    "{%- set args = fn['arguments'] if fn['arguments'] is string else fn['arguments'] | tojson(separators=(',', ':')) -%}"
    "{%- if fn['name'] in " + repr(_NAMED_ACTIONS) + " -%}"
    "{{ '{\"action\":' + fn['name'] | tojson + (',' + args[1:-1] if args | length > 2 else '') + '}' }}"
    "{%- else -%}"
    "{{ '{\"action\":\"tool_call\",\"tool\":' + fn['name'] | tojson + ',\"args\":' + args + '}' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{{ '" + END_OF_TURN + "' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{ ('\n' if loop_messages else '') + '" + START_OF_TURN + "model\n' }}"
    "{%- endif -%}"
)

# One JSON value, recursively (the `regex` module's recursion): strings, numbers, literals, objects, arrays.
_STRING = r'"(?:[^"\\]|\\.)*"'
_JSON_VALUE = (
    r"(?P<value>" + _STRING + r"|-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null"
    r"|\{\s*(?:" + _STRING + r"\s*:\s*(?&value)\s*(?:,\s*" + _STRING + r"\s*:\s*(?&value)\s*)*)?\}"
    r"|\[\s*(?:(?&value)\s*(?:,\s*(?&value)\s*)*)?\])"
)
# A `"key": value` pair at the top level of the call's body; `rationale` is never an argument (it is not scored).
_PAIR = r'"(?P<key>(?!rationale")(?:[^"\\]|\\.)+)"\s*:\s*' + _JSON_VALUE

ACTION_RESPONSE_TEMPLATE: dict[str, Any] = {
    "defaults": {"role": "assistant"},
    "start_anchor": START_OF_TURN + "model\n",
    "fields": {
        "tool_calls": {
            # a tool call's body is its `args` object; a conversation action's is the rest of the action object
            "open_pattern": (r'\{"action":"tool_call","tool":"(?P<name>[^"\\]+)","args":\{'
                             r'|\{"action":"(?P<name>' + "|".join(CONVERSATION_TOOLS) + r')",'),
            "close_pattern": END_OF_TURN,
            "repeats": True,
            "content": "xml-inline",
            "content_args": {"tag_pattern": _PAIR, "value_parser": {"name": "json", "args": {"allow_non_json": True}}},
            "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}},
        },
        "content": {"close_pattern": END_OF_TURN, "content": "text"},
    },
}


def with_tool_calling(tokenizer: Any) -> Any:
    """`tokenizer` (the tiny model's) with `TOOL_CHAT_TEMPLATE` and `ACTION_RESPONSE_TEMPLATE` set; returns it."""
    tokenizer.chat_template = TOOL_CHAT_TEMPLATE
    tokenizer.response_template = ACTION_RESPONSE_TEMPLATE
    return tokenizer


def tiny_tool_model(profile: str = "cpu-smoke", cache_dir: str = "runs/tiny_model", model_dir: str | None = None
                    ) -> tuple[Any, Any]:
    """`(model, tokenizer)` for TRL's tool loop, offline: the profile's tiny Gemma-architecture model (built in
    seconds and cached under `cache_dir`, never pretrained) or, with `model_dir`, a saved one trained with that
    profile's tokenizer (e.g. `runs/cpu-learn/training/warm_start/model`); its tokenizer with tool calling on."""
    import torch
    from transformers import AutoModelForCausalLM

    from cells.modeling.tiny import build_or_load_tiny
    from cells.step_02_profiles import get_profile

    chosen = get_profile(profile)
    if chosen.tiny is None:
        raise ValueError(f"profile {profile!r} has no tiny model recipe; use cpu-smoke or cpu-learn")
    model, tokenizer, _ = build_or_load_tiny(chosen.tiny, Path(cache_dir), chosen.seed)
    if model_dir is not None:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tokenizer.padding_side = "left"
    return model, with_tool_calling(tokenizer)
