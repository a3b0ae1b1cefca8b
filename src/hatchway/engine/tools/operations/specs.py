"""tools.yaml entries as the function tools the model sees."""

from __future__ import annotations

from typing import Any

from hatchway.config.agent_files import AgentTools, ResolvedPolicy
from hatchway.config.agents import ArgSpec, ToolDefinition
from hatchway.engine.items import ToolSpec

_JSON_TYPES = {"list": "array"}
_CONFIRMATION_NOTE = (
    " Hatchway asks the user to confirm before this runs: call it once with what the user asked "
    "(several items may go in one call); do not ask for confirmation yourself."
)


def argument_schema(arg: ArgSpec) -> dict[str, Any]:
    """One argument's JSON Schema."""
    kind = _JSON_TYPES.get(arg.type, arg.type)
    schema: dict[str, Any] = {"type": kind}
    if kind == "array":
        schema["items"] = {}
    text = " — ".join(part for part in (arg.label, arg.description) if part)
    if text:
        schema["description"] = text
    return schema


def tool_spec(name: str, tool: ToolDefinition, policy: ResolvedPolicy) -> ToolSpec:
    """The model's view of one tool: description, argument schema, ``required`` from ``requires``."""
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {arg: argument_schema(spec) for arg, spec in tool.args_schema.items()},
    }
    if policy.requires:
        parameters["required"] = list(policy.requires)
    description = tool.description.strip()
    if policy.require_confirmation:
        description += _CONFIRMATION_NOTE
    return ToolSpec(name=name, description=description.strip(), parameters=parameters)


def tool_specs(agent_tools: AgentTools) -> list[ToolSpec]:
    """Every enabled tool of the agent, in file order."""
    return [tool_spec(name, tool, agent_tools.policy(name)) for name, tool in agent_tools.enabled().items()]
