"""The running gateway: settings, storage, caches and upstream clients, built once per process."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from hatchway.config.settings import AgentConfig, Settings
from hatchway.engine.context import RunContext
from hatchway.engine.loop import LoopSettings
from hatchway.engine.providers.routing import ModelRouter, ResolvedModel
from hatchway.engine.tools.base import Toolset
from hatchway.engine.tools.mcp.binding import PluginBinding
from hatchway.engine.tools.mcp.calls import McpToolCaller
from hatchway.engine.tools.mcp.credentials import McpCredentials, NoCredentials
from hatchway.engine.tools.mcp.pool import McpServerPool
from hatchway.errors import ModelNotFound
from hatchway.store.cache import Cache, MemoryCache
from hatchway.store.db import Database
from hatchway.store.logs import LogWriter, RequestLogStore
from hatchway.store.orgs import OrgStore

logger = logging.getLogger(__name__)


@dataclass
class RunPlan:
    """How one request will run: which model, which gateway tools, under which limits."""

    model: ResolvedModel
    toolsets: list[Toolset] = field(default_factory=list)
    loop: LoopSettings = field(default_factory=LoopSettings)
    stream_mode: str = "final_only"
    plugin_source: str | None = None
    """``rule:<name>``, ``inline`` or ``agent:<name>``; None when no plugin is bound."""
    agent: AgentConfig | None = None
    instructions: str | None = None
    public_model: str = ""
    """The name the client asked for (``gpt-4o``, ``agent:contas``…)."""
    mcp: McpToolCaller | None = None
    """Calls tools on the servers of the plugin bound to this run (set by the plugin contributor)."""


PlanContributor = Callable[["Gateway", RunPlan, RunContext, Mapping[str, str]], Awaitable[None]]
"""Adds what one feature binds to a run (MCP plugin tools, operations, subagents) to the plan."""

AGENT_PREFIX = "agent:"


class Gateway:
    """Owns every long-lived resource; the API and the CLI both go through it."""

    def __init__(self, settings: Settings, *, cache: Cache | None = None) -> None:
        self.settings = settings
        self.db = Database(settings.database_url)
        self.cache: Cache = cache or MemoryCache()
        self.orgs = OrgStore(self.db)
        self.logs = RequestLogStore(self.db)
        self.log_writer = LogWriter(self.db)
        self.models = ModelRouter(settings)
        self.mcp_pool = McpServerPool()
        """Live MCP sessions, shared by every request; closed with the gateway."""
        self.mcp_credentials: McpCredentials = NoCredentials()
        """How MCP requests are authenticated (the vault replaces the default)."""
        self.plan_contributors: list[PlanContributor] = [PluginBinding(settings)]
        """Each feature appends one; ``plan_run`` calls them in order (the MCP plugin first: later
        contributors may use ``plan.mcp``). Plugin files from hatchway.yaml are parsed here, so a
        broken one stops the start (ConfigError)."""
        self._agents = {a.name: a for a in settings.agents}
        self._started = False

    async def start(self) -> None:
        """Apply migrations and start background writers."""
        await self.db.migrate()
        self.log_writer.start()
        self._started = True

    async def close(self) -> None:
        await self.mcp_pool.aclose()
        await self.log_writer.close()
        await self.models.aclose()
        await self.cache.close()
        await self.db.close()

    def agent(self, model: str) -> AgentConfig | None:
        """The agent addressed as ``agent:<name>``, None for a plain model; ModelNotFound if unknown."""
        if not model.startswith(AGENT_PREFIX):
            return None
        agent = self._agents.get(model[len(AGENT_PREFIX) :])
        if agent is None:
            raise ModelNotFound(model)
        return agent

    async def plan_run(self, model: str, ctx: RunContext, headers: Mapping[str, str]) -> RunPlan:
        """Resolve the model (or agent) and everything bound to this request."""
        agent = self.agent(model)
        plan = RunPlan(
            model=self.models.resolve(agent.model if agent else model),
            loop=LoopSettings(max_tool_result_chars=self.settings.max_tool_result_chars),
            agent=agent,
            instructions=(agent.instructions or None) if agent else None,
            public_model=model,
        )
        if agent is not None:
            ctx.agent = agent.name
        for contribute in self.plan_contributors:
            await contribute(self, plan, ctx, headers)
        return plan
