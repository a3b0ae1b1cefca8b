"""Binding an agent's tools.yaml tools to its runs: the operations plan contributor.

``OperationBinding`` loads every agent's ``tools`` / ``tool_policies`` files when the gateway is
built (a broken file stops the start with the file and the field path, like a broken plugin) and
keeps one ``OperationService`` per agent. Registered after ``PluginBinding``, it gives each run of
such an agent an ``OperationToolset`` over ``plan.mcp``, the agent plugin's client; the plugin's
own tools are not offered to the model (see ``engine/tools/mcp/binding.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from hatchway.config.agent_files import agent_files_of, load_agent_tools
from hatchway.config.settings import Settings
from hatchway.engine.context import RunContext
from hatchway.engine.tools.operations.service import OperationService
from hatchway.engine.tools.operations.store import OperationStore
from hatchway.engine.tools.operations.toolset import OperationToolset
from hatchway.errors import ConfigError, Unavailable

if TYPE_CHECKING:
    from hatchway.gateway import Gateway, RunPlan


class OperationBinding:
    """Plan contributor: an agent with ``tools:`` gets its tools.yaml tools under their policies."""

    def __init__(self, settings: Settings, store: OperationStore) -> None:
        self.services: dict[str, OperationService] = {}
        for i, agent in enumerate(settings.agents):
            files = agent_files_of(agent, settings)
            if files is None:
                continue
            try:
                tools = load_agent_tools(files)
            except ConfigError as exc:
                raise ConfigError(f"{exc.source} (from hatchway.yaml agents[{i}])", exc.problems) from None
            self.services[agent.name] = OperationService(agent.name, tools, store, settings.operations)

    def service(self, agent: str) -> OperationService | None:
        """The agent's service, None for an agent without tools.yaml."""
        return self.services.get(agent)

    async def __call__(self, gw: Gateway, plan: RunPlan, ctx: RunContext, headers: Mapping[str, str]) -> None:
        service = self.services.get(plan.agent.name) if plan.agent is not None else None
        if service is None:
            return
        if plan.mcp is None:  # PluginBinding always binds an agent's own plugin; this is a wiring bug
            raise Unavailable(f"The agent '{service.agent}' has no MCP client bound; its tools cannot run.")
        plan.toolsets.append(OperationToolset(service, plan.mcp))
