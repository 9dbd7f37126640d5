"""The 16 vendor tools as typed, documented Python methods, generated from the tool registry.

TRL's `environment_factory` exposes an environment's public methods as tools: each method's name, type hints
and Google-style docstring become the JSON schema the chat template shows the model
(`transformers.utils.get_json_schema`), and a parsed tool call is dispatched by the method's `__name__`.
`vendor_tool_method(tool)` builds that method for one registry `Tool` (cells/vendors/registry.py, the one home
of every tool's arguments and docs), with the arguments as documented at reset (the vendors' default flags):

- `__name__` is the registry name (`"airline.search"`): the model calls the tool by the name the env records
  and the action grammar uses; the class attribute is `airline_search` (a Python identifier);
- `__signature__`, `__annotations__` and `__doc__` document the reset-time arguments: required ones without a
  default, optional ones `= None`; an argument named like a Python keyword gets a trailing underscore in the
  signature (`from_`: Python refuses `from` as a parameter name) and either spelling reaches the vendor as `from`;
- the function itself takes `**arguments`, so what the model sends reaches the vendor as sent, documented or
  not. A drift that renames an argument or makes a new one required (`passenger_count`, a field drill's
  `require_argument`) is expressible through the native call although the documented signature is the reset
  one, and the vendor judges it (`MISSING_REQUIRED_FIELD`, `UNKNOWN_FIELD`) exactly as for a text action.
"""

from __future__ import annotations

import inspect
import keyword
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cells.step_05_vendors import DEFAULT_FLAGS, TOOLS

if TYPE_CHECKING:  # pragma: no cover
    from cells.vendors.registry import Arg, Tool

# Registry argument types (`cells.vendors.registry.TYPES`) as Python hints; the JSON schema TRL renders follows
# from these (dates and times are strings whose format the argument's doc states).
PYTHON_TYPES: dict[str, Any] = {
    "str": str, "int": int, "date": str, "datetime": str, "list[str]": list[str], "list[object]": list[dict],
}


def attribute_name(tool_name: str) -> str:
    """The class attribute a registry tool is bound to: `airline.search` -> `airline_search`."""
    return tool_name.replace(".", "_")


def parameter_name(arg_name: str) -> str:
    """An argument's name in the Python signature: itself, or with a trailing `_` when it is a keyword."""
    return f"{arg_name}_" if keyword.iskeyword(arg_name) else arg_name


def vendor_arguments(arguments: dict[str, Any], declared: tuple[Arg, ...]) -> dict[str, Any]:
    """The arguments as the vendor names them: a keyword-renamed parameter (`from_`) back to its API name, in
    the order the model sent them; everything else as sent."""
    renamed = {parameter_name(a.name): a.name for a in declared if parameter_name(a.name) != a.name}
    return {renamed.get(k, k) if renamed.get(k, k) not in arguments else k: v for k, v in arguments.items()}


def _docstring(tool: Tool, args: tuple[Arg, ...]) -> str:
    description = " ".join(inspect.cleandoc(tool.fn.__doc__ or tool.name).split())
    lines = [description, "", "Args:"]
    for arg in args:
        alias = f" (the API's `{arg.name}`)" if parameter_name(arg.name) != arg.name else ""
        lines.append(f"    {parameter_name(arg.name)}: {arg.doc}{alias}")
    lines += ["", "Returns:", "    The tool's result, as the environment renders it for the agent."]
    return "\n".join(lines)


def _signature(args: tuple[Arg, ...]) -> inspect.Signature:
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for arg in sorted(args, key=lambda a: not a.required):  # Python: parameters with defaults come last
        hint = PYTHON_TYPES[arg.type] if arg.required else PYTHON_TYPES[arg.type] | None
        default = inspect.Parameter.empty if arg.required else None
        params.append(inspect.Parameter(parameter_name(arg.name), inspect.Parameter.KEYWORD_ONLY,
                                        default=default, annotation=hint))
    return inspect.Signature(params, return_annotation=str)


def vendor_tool_method(tool: Tool) -> Callable[..., str]:
    """The method for one registry tool: documented with its reset-time arguments, sending whatever arguments
    it is given to the vendor through the environment (`self._call_vendor(name, arguments)`)."""
    args = tool.args(DEFAULT_FLAGS[tool.domain])
    name = tool.name

    def method(self: Any, **arguments: Any) -> str:
        return str(self._call_vendor(name, vendor_arguments(arguments, args)))

    signature = _signature(args)
    method.__name__ = name
    method.__qualname__ = attribute_name(name)
    method.__doc__ = _docstring(tool, args)
    method.__signature__ = signature  # type: ignore[attr-defined]  # what inspect and get_json_schema read
    method.__annotations__ = {p.name: p.annotation for p in list(signature.parameters.values())[1:]}
    method.__annotations__["return"] = str
    return method


def vendor_tool_methods() -> dict[str, Callable[..., str]]:
    """Every registry tool's method, keyed by its class attribute name, in registry order."""
    return {attribute_name(tool.name): vendor_tool_method(tool) for tool in TOOLS.values()}
