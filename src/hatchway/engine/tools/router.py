"""Decides who owns each tool call of a round: the client, or one of the gateway's toolsets."""

from __future__ import annotations

from dataclasses import dataclass, field

from hatchway.engine.context import RunContext
from hatchway.engine.items import FunctionCall, ToolSpec
from hatchway.engine.tools.base import ToolResult, Toolset
from hatchway.errors import InvalidRequest


@dataclass
class ToolRouter:
    """Tool names → toolsets for one run; names the client declared stay the client's."""

    toolsets: list[Toolset] = field(default_factory=list)
    client_tools: list[ToolSpec] = field(default_factory=list)
    _owners: dict[str, Toolset] = field(default_factory=dict)
    _specs: list[ToolSpec] = field(default_factory=list)

    async def prepare(self, ctx: RunContext) -> list[ToolSpec]:
        """List every toolset's tools once per run and return all specs the model will see."""
        client_names = {t.name for t in self.client_tools}
        self._owners.clear()
        self._specs = []
        for toolset in self.toolsets:
            for spec in await toolset.list_tools(ctx):
                if spec.name in client_names:
                    raise InvalidRequest(
                        f"tools: the client-declared tool '{spec.name}' has the same name as a gateway tool; "
                        "rename it",
                        param="tools",
                    )
                if spec.name in self._owners:
                    continue
                self._owners[spec.name] = toolset
                self._specs.append(spec)
        return [*self._specs, *self.client_tools]

    def owns(self, call: FunctionCall) -> bool:
        """Whether one of the gateway's toolsets has the tool ``call`` names."""
        return call.name in self._owners

    def is_client_call(self, call: FunctionCall) -> bool:
        return call.name not in self._owners and any(t.name == call.name for t in self.client_tools)

    def server_label(self, call: FunctionCall) -> str | None:
        toolset = self._owners.get(call.name)
        return toolset.server_label(call.name) if toolset is not None else None

    async def call(self, call: FunctionCall, ctx: RunContext) -> ToolResult:
        toolset = self._owners.get(call.name)
        if toolset is None:
            return ToolResult.error(
                "unknown_tool", f"No tool named '{call.name}' is available.", tool=call.name
            )
        return await toolset.call_tool(call, ctx)
