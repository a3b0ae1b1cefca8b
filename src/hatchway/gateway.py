"""The running gateway: settings, storage, caches and upstream clients, built once per process.

Only the API layer and the CLI hold a ``Gateway``; everything below them is given the
collaborators it needs, here, in this order.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from hatchway.access.administration import Administration
from hatchway.access.end_users import EndUsers
from hatchway.access.gatekeeper import Gatekeeper
from hatchway.access.people import People
from hatchway.access.sessions import SsoSessions
from hatchway.audit import AuditTrail
from hatchway.config.plugins import ConfiguredPlugins
from hatchway.config.settings import LimitsSettings, Settings
from hatchway.credentials import VaultCredentials
from hatchway.credentials.grants import UserGrantService
from hatchway.engine.items import Usage
from hatchway.engine.plan import Planner
from hatchway.engine.providers.routing import ModelRouter
from hatchway.engine.run import RunScopes
from hatchway.engine.tools.mcp.binding import PluginBinding
from hatchway.engine.tools.mcp.credentials import McpCredentials
from hatchway.engine.tools.mcp.pinning import ToolPinning
from hatchway.engine.tools.mcp.pool import McpServerPool, PoolBounds, keep_expiring
from hatchway.engine.tools.mcp.questions import InputQuestions
from hatchway.engine.tools.mcp.task_ledger import TaskLedger
from hatchway.engine.tools.mcp.task_ledger import keep_purging as keep_purging_tasks
from hatchway.engine.tools.operations.approvals import ApprovalDesk
from hatchway.engine.tools.operations.binding import OperationBinding
from hatchway.engine.tools.operations.notifications import ApprovalNotifier
from hatchway.engine.tools.operations.store import OperationStore
from hatchway.errors import HatchwayError
from hatchway.limits.limiter import Limiter
from hatchway.observability.audit_logs import AuditLogExport
from hatchway.observability.metrics import Metrics
from hatchway.observability.retention import keep_purging_logs
from hatchway.observability.telemetry import Telemetry
from hatchway.observability.tracing import Tracing
from hatchway.responses.background import Background, make_queue
from hatchway.responses.leases import RUN_LOST, keep_leases
from hatchway.responses.requeue import keep_requeueing
from hatchway.responses.runs import ResponseRunner
from hatchway.responses.service import Responses
from hatchway.responses.store import ResponseStore
from hatchway.store.cache import Cache, MemoryCache
from hatchway.store.db import Database
from hatchway.store.limit_overrides import LimitOverrides, overlaid
from hatchway.store.logs import LogWriter, RequestLogStore
from hatchway.store.orgs import OrgStore
from hatchway.store.spool import RecordSpool, database_key
from hatchway.store.tool_pins import ToolPins
from hatchway.store.usage import UsageStore, spent_since
from hatchway.tasks import TaskRegistry
from hatchway.vault import Vault, load_master_key

if TYPE_CHECKING:
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk.trace import TracerProvider

    from hatchway.access.sso import SignIn

logger = logging.getLogger(__name__)


def make_cache(settings: Settings) -> Cache:
    """Redis when ``redis_url`` is set (shared by replicas), else in-process."""
    if settings.redis_url:
        from hatchway.store.redis_cache import RedisCache

        return RedisCache(settings.redis_url, prefix=settings.redis_prefix)
    return MemoryCache(max_bytes=settings.memory_cache_max_bytes)


def make_spool(settings: Settings) -> RecordSpool | None:
    """The local spool of run records the database could not take (None when ``spool_dir`` is null)."""
    records = settings.run_records
    if records.spool_dir is None:
        return None
    return RecordSpool(
        Path(records.spool_dir), database_key(settings.database_url), max_bytes=records.spool_max_bytes
    )


class Gateway:
    """Owns every long-lived resource; the API and the CLI both go through it."""

    def __init__(
        self,
        settings: Settings,
        *,
        cache: Cache | None = None,
        tracer_provider: TracerProvider | None = None,
        logger_provider: LoggerProvider | None = None,
        mcp_credentials: McpCredentials | None = None,
    ) -> None:
        """``cache``, ``tracer_provider``, ``logger_provider`` and ``mcp_credentials`` replace the
        ones the settings would give (tests inject in-memory span and log exporters, or credentials
        of their own)."""
        self.settings = settings
        self.db = Database(settings.database_url)
        self.cache: Cache = cache or make_cache(settings)
        self.orgs = OrgStore(self.db, cache_seconds=settings.access.key_cache_seconds)
        self.logs = RequestLogStore(self.db)
        self.usage = UsageStore(self.db)
        """Sums of the request log: requests, tokens and spend by key, end user, agent, model."""
        self.plugins = ConfiguredPlugins(settings)
        """The plugin files hatchway.yaml names, parsed once (rules', agents', MCP endpoints')."""
        metrics = Metrics(
            servers=self.plugins.server_ids(),
            known_models=[*(m.name for m in settings.models), *(f"agent:{a.name}" for a in settings.agents)],
            providers=[p.id for p in settings.providers],
        )
        records = settings.run_records
        self.log_writer = LogWriter(
            self.db,
            linger_seconds=records.linger_seconds,
            retry_seconds=records.retry_seconds,
            spool=make_spool(settings),
            tally=metrics,
        )
        """Run records, batched; through a database outage, retried and then spooled to local disk."""
        self.telemetry = Telemetry(metrics, Tracing.from_settings(settings, tracer_provider))
        """Prometheus series (a registry of this gateway's own) and, when configured, OTel spans."""
        self.log_writer.observers.append(self.telemetry.observe_record)
        self.limit_overrides = LimitOverrides(self.db)
        self.limits = Limiter.from_settings(
            settings,
            overrides=self._limits_now,
            spent_since=lambda limit, since, excluded: spent_since(
                self.db, limit.org_id, since, limit.group, limit.name, excluded
            ),
            on_failure=metrics.limits_redis_failed,
            price=self._price_estimate,
        )
        """hatchway.yaml's ``limits:`` (and ``hatchway limits set``'s), checked before a run of the
        run routes starts."""
        self.scopes = RunScopes(self.telemetry, self.log_writer, limits=self.limits)
        """Every run's lifecycle: gauge, span, record and hold on the limits (``engine/run.py``)."""
        self.vault = Vault(self.db, load_master_key(settings.master_key_file))
        self.audit = AuditTrail(self.db, self.vault.master_key, settings.audit)
        """The tamper-evident audit trail; its checkpoints are signed with the vault's master key."""
        self.audit_logs = AuditLogExport.from_settings(settings, logger_provider)
        """The trail's entries as OpenTelemetry log records (``observability/audit_logs.py``)."""
        self.admin = Administration(self.orgs, self.limit_overrides, self.audit, settings.access)
        """Organisations, keys and limits, each change audited (the admin API and the CLI)."""
        sso = settings.access.sso
        self.sessions = SsoSessions(self.db, sso) if sso is not None else None
        """Signed-in people's sessions (``access.sso`` set), in the database: every replica sees a
        sign-out at once."""
        self.sign_in: SignIn | None = None
        """The OpenID Connect client people sign in to the dashboard and the admin API with."""
        if sso is not None:  # authlib and its HTTP client load only for a gateway that signs people in
            from hatchway.access.sso import SignIn

            self.sign_in = SignIn(sso, self.db, self.orgs, secret_lookup=self.vault.system_secret)
        self.access = Gatekeeper(
            self.orgs,
            EndUsers(settings.access.end_users),
            on_denied=self.admin.denied,
            people=People(self.sessions, self.orgs) if self.sessions is not None else None,
        )
        """Who may call what: the key or signed-in person, the route's role, the verified end user
        (``access/``)."""
        self.models = ModelRouter(settings, secret_lookup=self.vault.system_secret)
        pool = settings.mcp_pool
        self.mcp_pool = McpServerPool(
            cache=self.cache,
            max_answer_bytes=settings.max_tool_result_bytes,
            bounds=PoolBounds(
                max_sessions=pool.max_sessions,
                max_sessions_per_org=pool.max_sessions_per_organisation,
                idle_seconds_untrusted=pool.idle_seconds_inline,
                idle_seconds_trusted=pool.idle_seconds,
            ),
        )
        """Live MCP sessions, shared by every request; closed with the gateway."""
        self.user_grants = UserGrantService(
            self.db,
            self.vault,
            public_base_url=settings.public_base_url or "http://127.0.0.1:8080",
            consent_ttl_seconds=settings.oauth_consent_ttl_seconds,
            cache=self.cache,
        )
        """Each end user's OAuth grants toward per-user MCP servers, and the consent links."""
        self.mcp_credentials: McpCredentials = mcp_credentials or VaultCredentials(
            self.vault,
            self.cache,
            allow_private_hosts=settings.allow_private_mcp_urls,
            user_grants=self.user_grants,
        )
        self.operations = OperationStore(
            self.db, lease_seconds=settings.operations.execution_lease_seconds, audit=self.audit
        )
        self.approval_notifier = ApprovalNotifier(self.db, settings.operations.approvals, vault=self.vault)
        """Signed notifications of approvals: the delivery log, sent by every replica's dispatcher."""
        # Plugin and agent tool files from hatchway.yaml are parsed here: a broken one stops the
        # start (ConfigError).
        self.questions = InputQuestions(self.db, self.vault, ttl_seconds=settings.oauth_consent_ttl_seconds)
        """Tools' questions to end users (MCP input requests), held across turns and replicas."""
        self.tool_pins = ToolPins(self.db, max_per_org=settings.max_tool_pins_per_organisation)
        """Tool-definition pins (``hatchway tools``, ``/v1/tools/drift``), per organisation and server."""
        self.tool_pinning = ToolPinning(self.tool_pins)
        """Each listing of an MCP server's tools checked against the pins: runs' and ``/mcp/<name>``'s."""
        self.mcp_tasks = TaskLedger(
            self.db,
            ttl_seconds=settings.mcp_tasks.ttl_seconds,
            # A run's record outlives every wait it may make, resumed or not (else a resumed run,
            # finding no record, would call the tool again).
            client_ttl_seconds=settings.mcp_tasks.ttl_seconds
            + settings.mcp_tasks.background_wait_seconds * (settings.mcp_tasks.max_resumes + 1),
        )
        """MCP tasks both ways: runs' upstream tasks and the endpoints' tasks (``mcp_tasks``)."""
        plugins = PluginBinding(
            settings,
            plugins=self.plugins,
            pool=self.mcp_pool,
            credentials=self.mcp_credentials,
            cache=self.cache,
            questions=self.questions,
            models=self.models,
            pinning=self.tool_pinning,
            tasks=self.mcp_tasks,
        )
        operation_binding = OperationBinding(settings, self.operations)
        self.planner = Planner(settings, models=self.models, plugins=plugins, operations=operation_binding)
        self.approvals = ApprovalDesk(
            self.operations,
            caller_for=lambda op, ctx: self.planner.operation_caller(op.agent, ctx),
            notifier=self.approval_notifier if settings.operations.approvals.webhooks else None,
            org_names=self._org_name,
        )
        """Approvals beyond the end user: decided by verified people, executed once (``approvals.py``)."""
        for service in operation_binding.services.values():
            service.on_approval_requested = self.approvals.announce_requested
        self.routes_approvals = not isinstance(settings.guards.confirm_when_tainted, bool) or any(
            policy.approvals
            for service in operation_binding.services.values()
            for policy in service.tools.policies.values()
        )
        """Whether any operation can wait for approvers here (tool_policies.yaml ``approvals``, or
        ``guards.confirm_when_tainted: {group|role}``): only then does this replica sweep timeouts."""
        self.replica_id = f"replica_{uuid.uuid4().hex[:16]}"
        """Names this process as the owner of the responses it runs (see ``responses/store.py``)."""
        self.tasks = TaskRegistry()
        """Response runs and live streams, leases, retention; cancelled (and recorded) on close."""
        store = ResponseStore(self.db, owner=self.replica_id, lease_seconds=settings.response_lease_seconds)
        runner = ResponseRunner(store, self.planner, self.scopes, self.vault)
        if settings.a2a.remote_agents:  # the A2A SDK's client loads only when a remote agent is configured
            from hatchway.a2a.remote import RemoteAgents

            runner.remote = RemoteAgents(settings, store, self.vault, self.tasks)
        self.jobs = make_queue(settings)
        """Where background responses go when Redis is configured (any replica or worker runs them)."""
        if self.jobs is not None:  # a run its replica stops while it waits on an MCP task runs again
            runner.resumable = self._resumable
            plugins.task_resumes = True
        background = Background(
            runner,
            tasks=self.tasks,
            queue=self.jobs,
            vault=self.vault,
            orgs=self.orgs,
            settings=settings,
            worker_id=self.replica_id,
            limits=self.limits,
        )
        self.responses = Responses(
            runner,
            background,
            tasks=self.tasks,
            follow_seconds=settings.loop_deadline_seconds + settings.response_lease_seconds * 2,
        )

    def _price_estimate(self, model: str, input_tokens: int, output_tokens: int) -> float | None:
        """What a call of ``model`` (a public name, or ``agent:<name>``: its agent's) with these
        tokens costs by the price table; None when it cannot be priced (the limits' budget holds)."""
        if model.startswith("agent:"):
            agent = next((a for a in self.settings.agents if f"agent:{a.name}" == model), None)
            if agent is None:
                return None
            model = agent.model
        try:
            resolved = self.models.resolve(model)
        except HatchwayError:
            return None
        usage = Usage(prompt_tokens=input_tokens, completion_tokens=output_tokens)
        return resolved.provider.estimate_cost(resolved.upstream_model, usage)

    async def _org_name(self, org_id: str) -> str | None:
        try:
            return (await self.orgs.get_org(org_id)).name
        except HatchwayError:
            return None

    async def _limits_now(self) -> LimitsSettings:
        """hatchway.yaml's limits with ``hatchway limits set``'s laid over them."""
        return overlaid(self.settings.limits, await self.limit_overrides.all())

    async def _resumable(self, response_ids: list[str]) -> list[str]:
        """Of these lost background runs, those waiting on an open upstream MCP task, each at most
        ``mcp_tasks.max_resumes`` times."""
        waiting = await self.mcp_tasks.open_responses(response_ids)
        again = [rid for rid, resumes in waiting.items() if resumes < self.settings.mcp_tasks.max_resumes]
        for response_id in again:
            await self.mcp_tasks.note_resumed(response_id)
            logger.warning(
                "background response %s lost its replica while waiting on an MCP task: queued again",
                response_id,
            )
        return again

    async def start(self) -> None:
        """Apply migrations (or, with ``migrate_on_start: false``, require them applied) and start
        background writers."""
        if self.settings.migrate_on_start:
            await self.db.migrate()
        else:
            await self.db.require_current()
        await self.operations.recover(at_start=True)  # crashed executions → INTERRUPTED, never re-run
        self.log_writer.start()
        await self.limits.refresh()
        self.tasks.spawn("limits:refresh", self.limits.keep_refreshing())
        # With the job queue, a background response waiting on an upstream MCP task when its replica
        # died runs again (and polls the same task) instead of failing.
        resumable = self._resumable if self.jobs is not None else None
        await self.responses.store.fail_expired(RUN_LOST, resumable)
        self.tasks.spawn("responses:leases", keep_leases(self.responses.store, self.tasks, resumable))
        if self.jobs is not None:
            requeue = keep_requeueing(
                self.responses.store,
                self.jobs,
                after_seconds=self.settings.background.requeue_after_seconds,
                requeued=self.telemetry.metrics.responses_requeued_by,
            )
            self.tasks.spawn("responses:requeue", requeue)
        pool = self.settings.mcp_pool
        sweep = max(min(pool.idle_seconds_inline, pool.idle_seconds) / 4, 0.25)
        self.tasks.spawn("mcp:idle", keep_expiring(self.mcp_pool, sweep))
        if self.settings.operations.approvals.webhooks:
            self.tasks.spawn("approvals:notify", self.approval_notifier.run())
        if self.routes_approvals:
            self.tasks.spawn(
                "operations:approvals",
                self.approvals.keep_expiring(self.settings.operations.approval_sweep_seconds),
            )
        # Tasks past their TTL: a tenth of it apart (a minute at least).
        purge_every = max(self.settings.mcp_tasks.ttl_seconds / 10, 60.0)
        self.tasks.spawn("mcp:tasks-ttl", keep_purging_tasks(self.mcp_tasks, purge_every))
        self.tasks.spawn(
            "logs:retention",
            keep_purging_logs(
                self.db,
                self.cache,
                retention_days=self.settings.log_retention_days,
                interval_seconds=self.settings.log_purge_interval_seconds,
            ),
        )

    async def close(self) -> None:
        await self.tasks.close()
        await self.mcp_pool.aclose()
        await self.log_writer.close()
        await asyncio.to_thread(self.telemetry.tracing.shutdown)  # flushes spans over HTTP: off the loop
        await asyncio.to_thread(self.audit_logs.shutdown)
        await self.models.aclose()
        if self.jobs is not None:
            await self.jobs.close()
        await self.limits.close()
        await self.access.close()
        if self.sign_in is not None:
            await self.sign_in.close()
        await self.cache.close()
        await self.db.close()
