"""The running gateway: settings, storage, caches and upstream clients, built once per process."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hatchway.config.settings import AgentConfig, Settings
from hatchway.engine.background import BackgroundTasks
from hatchway.engine.context import RunContext
from hatchway.engine.loop import LoopSettings
from hatchway.engine.providers.routing import ModelRouter, ResolvedModel
from hatchway.engine.tools.base import Toolset
from hatchway.engine.tools.mcp.auth import VaultCredentials
from hatchway.engine.tools.mcp.binding import PluginBinding
from hatchway.engine.tools.mcp.calls import McpToolCaller
from hatchway.engine.tools.mcp.credentials import McpCredentials
from hatchway.engine.tools.mcp.pool import McpServerPool
from hatchway.engine.tools.operations.binding import OperationBinding
from hatchway.engine.tools.operations.store import OperationStore
from hatchway.engine.tools.subagents import contribute_subagents
from hatchway.errors import Conflict, ModelNotFound, Unavailable
from hatchway.observability.metrics import Metrics
from hatchway.observability.retention import keep_purging_logs
from hatchway.observability.telemetry import Telemetry
from hatchway.observability.tracing import Tracing
from hatchway.store.cache import Cache, MemoryCache
from hatchway.store.db import Database
from hatchway.store.logs import LogWriter, RequestLogStore
from hatchway.store.orgs import OrgStore
from hatchway.store.responses import ResponseStore, keep_leases
from hatchway.vault import Vault, load_master_key

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

    from hatchway.jobs import ResponseQueue

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

OperationCallerFactory = Callable[["Gateway", AgentConfig, RunContext], Awaitable[McpToolCaller]]
"""Builds an MCP caller for an agent's plugin outside a run (``POST /v1/operations/{id}/confirm``)."""

AGENT_PREFIX = "agent:"
RUN_LOST = (
    "The gateway process running this response stopped (crash or restart) before it finished; "
    "create the response again."
)


def make_cache(settings: Settings) -> Cache:
    """Redis when ``redis_url`` is set (shared by replicas), else in-process."""
    if settings.redis_url:
        from hatchway.store.redis_cache import RedisCache

        return RedisCache(settings.redis_url, prefix=settings.redis_prefix)
    return MemoryCache()


def make_queue(settings: Settings) -> ResponseQueue | None:
    """The job queue of background responses when ``redis_url`` is set; None runs them in-process."""
    if not settings.redis_url:
        return None
    from hatchway.jobs import ResponseQueue

    return ResponseQueue(settings)


class Gateway:
    """Owns every long-lived resource; the API and the CLI both go through it."""

    def __init__(
        self,
        settings: Settings,
        *,
        cache: Cache | None = None,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        self.settings = settings
        self.db = Database(settings.database_url)
        self.cache: Cache = cache or make_cache(settings)
        self.orgs = OrgStore(self.db)
        self.logs = RequestLogStore(self.db)
        self.log_writer = LogWriter(self.db)
        self.telemetry = Telemetry(Metrics(), Tracing.from_settings(settings, tracer_provider))
        """Prometheus series (a registry of this gateway's own) and, when configured, OTel spans."""
        self.log_writer.observers.append(self.telemetry.observe_record)
        self.vault = Vault(self.db, load_master_key(settings.master_key_file))
        self.models = ModelRouter(settings, secret_lookup=self.vault.system_secret)
        self.mcp_pool = McpServerPool(cache=self.cache)
        """Live MCP sessions, shared by every request; closed with the gateway."""
        self.mcp_credentials: McpCredentials = VaultCredentials(
            self.vault, self.cache, allow_private_hosts=settings.allow_private_mcp_urls
        )
        self.replica_id = f"replica_{uuid.uuid4().hex[:16]}"
        """Names this process as the owner of the responses it runs (see ``store/responses.py``)."""
        self.responses = ResponseStore(
            self.db, owner=self.replica_id, lease_seconds=settings.response_lease_seconds
        )
        self.tasks = BackgroundTasks()
        """Background responses and live streams; cancelled (and recorded as interrupted) on close."""
        self.jobs = make_queue(settings)
        """Where background responses go when Redis is configured (any replica or worker runs them)."""
        self.operations = OperationStore(self.db, lease_seconds=settings.operations.execution_lease_seconds)
        plugins = PluginBinding(settings)
        self.plan_contributors: list[PlanContributor] = [
            plugins,
            OperationBinding(settings, self.operations),
            contribute_subagents,
        ]
        """Each feature appends one; ``plan_run`` calls them in order (the MCP plugin first: later
        contributors may use ``plan.mcp``). Plugin and agent tool files from hatchway.yaml are parsed
        here, so a broken one stops the start (ConfigError)."""
        self.operation_callers: OperationCallerFactory | None = plugins.agent_caller
        """How ``operation_caller`` reaches an agent's servers (the MCP pool, through its plugin)."""
        self._agents = {a.name: a for a in settings.agents}
        self._started = False

    async def start(self) -> None:
        """Apply migrations and start background writers."""
        await self.db.migrate()
        await self.operations.recover(at_start=True)  # crashed executions → INTERRUPTED, never re-run
        self.log_writer.start()
        await self.responses.fail_expired(RUN_LOST)
        self.tasks.spawn("responses:leases", keep_leases(self.responses, self.tasks, RUN_LOST))
        self.tasks.spawn(
            "logs:retention",
            keep_purging_logs(
                self.db,
                self.cache,
                retention_days=self.settings.log_retention_days,
                interval_seconds=self.settings.log_purge_interval_seconds,
            ),
        )
        self._started = True

    async def close(self) -> None:
        await self.tasks.close()
        await self.mcp_pool.aclose()
        await self.log_writer.close()
        await asyncio.to_thread(self.telemetry.tracing.shutdown)  # flushes spans over HTTP: off the loop
        await self.models.aclose()
        if self.jobs is not None:
            await self.jobs.close()
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

    async def operation_caller(self, agent_name: str, ctx: RunContext) -> McpToolCaller:
        """An MCP caller for ``agent_name``'s plugin, to execute a confirmed operation outside a run."""
        agent = self._agents.get(agent_name)
        if agent is None:
            raise Conflict(
                f"The agent '{agent_name}' is no longer configured; its operations cannot be executed.",
                code="agent_not_configured",
            )
        if self.operation_callers is None:
            raise Unavailable("Executing operations needs the MCP client pool, which is not running.")
        return await self.operation_callers(self, agent, ctx)

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
        self.telemetry.instrument(plan, ctx)  # last: it wraps what the contributors bound
        return plan
