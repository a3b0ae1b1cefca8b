"""Binding an agent's tools.yaml tools to its runs.

``OperationBinding`` loads every agent's ``tools`` / ``tool_policies`` files when it is built (a
broken file stops the start with the file and the field path, like a broken plugin) and keeps one
``OperationService`` per agent. ``bind`` gives a run of such an agent an ``OperationToolset`` over
the MCP client of the agent's plugin (the plugin's own tools are not offered to the model: see
``engine/tools/mcp/binding.py``).
"""

from __future__ import annotations

from hatchway.config.agent_files import agent_files_of, load_agent_tools
from hatchway.config.settings import AgentConfig, Settings
from hatchway.engine.tools.mcp.calls import McpToolCaller
from hatchway.engine.tools.operations.service import OperationService
from hatchway.engine.tools.operations.store import OperationStore
from hatchway.engine.tools.operations.toolset import OperationToolset
from hatchway.errors import ConfigError, Unavailable


class OperationBinding:
    """An agent with ``tools:`` gets its tools.yaml tools under their policies."""

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

    def bind(self, agent: AgentConfig | None, caller: McpToolCaller | None) -> OperationToolset | None:
        """The run's operations toolset over ``caller`` (the agent plugin's client), or None."""
        service = self.services.get(agent.name) if agent is not None else None
        if service is None:
            return None
        if caller is None:  # the plugin binding always binds an agent's own plugin; a wiring bug
            raise Unavailable(f"The agent '{service.agent}' has no MCP client bound; its tools cannot run.")
        return OperationToolset(service, caller)
