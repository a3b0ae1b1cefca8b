"""One virtual MCP server (an ``mcp_endpoints`` entry): its tools, resources and prompts, and the
SDK server answering for it.

- **Tools**: an agent with tools.yaml exposes those tools under their policies (``operations.py``),
  and nothing else of its plugin (as in the loop: the policies cannot be stepped around through
  the plugin's raw tools); otherwise the plugin's servers' tools, each server's allowlist then the
  endpoint's, named as the loop names them (or the upstream's names with ``namespace: false``),
  sorted. A call goes through the gateway's own MCP client — the pool, the vault's credentials
  (never the MCP client's: no token passthrough), per-user OAuth for ``X-On-Behalf-Of``, timeouts,
  retries — its content is relayed whole and redacted of every secret the call used, and it is a
  run in the run log (route ``mcp:<endpoint>``), with its span and metrics.
- **Resources and prompts** (``resources: true`` / ``prompts: true``): ``passthrough.py``.
- An upstream's requests for input go to the endpoint's client (``relay.py``), and the upstream
  requests made for a client declare that client's capabilities, not the gateway's.

An endpoint is given its collaborators (``EndpointDeps``), never the ``Gateway``; authenticating a
request, checking its host and routing it here are the API layer's (``api/mcp_endpoints``).
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import mcp_types as types
import orjson
from mcp.server.caching import CACHEABLE_METHODS, CacheHint
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError
from mcp.shared.inbound import MCP_METHOD_HEADER, MCP_NAME_HEADER, decode_header_value
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from hatchway import __version__
from hatchway.config.plugin import McpServerConfig, PluginConfig
from hatchway.config.settings import McpEndpointConfig, McpTaskSettings
from hatchway.engine.context import RunContext
from hatchway.engine.loop import RunResult
from hatchway.engine.run import RunScope, RunScopes
from hatchway.engine.run_log import Outcome
from hatchway.engine.tools.base import ToolResult
from hatchway.engine.tools.mcp.catalog import CatalogTool, Listing, McpCatalog, namespaced, upstream_name
from hatchway.engine.tools.mcp.credentials import McpCredentials
from hatchway.engine.tools.mcp.inputs import InputAnswerer
from hatchway.engine.tools.mcp.pinning import ToolPinning
from hatchway.engine.tools.mcp.plugin_client import PluginMcpClient
from hatchway.engine.tools.mcp.pool import McpServerPool
from hatchway.engine.tools.mcp.task_ledger import TaskLedger
from hatchway.engine.tools.mcp.tasks import declares_tasks, without_tasks
from hatchway.engine.tools.mcp.toolset import tool_result_key, user_grant
from hatchway.engine.tools.payloads import connect_message
from hatchway.errors import AuthorizationRequired, LimitsUnavailable, RateLimited
from hatchway.json_limits import MAX_JSON_DEPTH, too_deep
from hatchway.limits.scopes import Requester
from hatchway.mcp_server.listeners import ListChangeListeners
from hatchway.mcp_server.operations import EndpointOperations
from hatchway.mcp_server.passthrough import Passthrough
from hatchway.mcp_server.relay import (
    ClientSide,
    InputRelayed,
    RelayToClient,
    read_state,
    relay_state,
)
from hatchway.mcp_server.results import call_step, redact_result, relayed_error, tool_error
from hatchway.mcp_server.tasks import EndpointTasks
from hatchway.principal import Principal
from hatchway.redaction import Redactor
from hatchway.store.cache import Cache

logger = logging.getLogger(__name__)
T = TypeVar("T")
PRINCIPAL = "hatchway_principal"
"""Where the ASGI layer leaves the authenticated principal in the request's scope state."""
END_USER = "hatchway_end_user"
"""And the end user: ``X-On-Behalf-Of`` with a key, the token's subject with OAuth."""
ARRIVED = "hatchway_arrived"
"""And when the request arrived (``time.monotonic()``): where a call's run, and its latency, begin."""
MAX_SESSIONS = 1000
"""2025-11-25 sessions one endpoint keeps at once (a new one past it is 503; 2026-07-28 needs none)."""
SESSION_IDLE_SECONDS = 600.0
"""A 2025-11-25 session with no request for this long is closed."""
Handler = Callable[[Any, Any, RunContext], Awaitable[Any]]
"""An endpoint's handler: the SDK's request context, the request's params, the run context made for it."""


@dataclass(frozen=True, slots=True)
class EndpointDeps:
    """What an endpoint uses of the gateway, built once by the API layer (``api/mcp_endpoints``)."""

    pool: McpServerPool
    """The MCP sessions its calls go through (and whose upstreams' tool changes it announces)."""
    credentials: McpCredentials
    """The upstreams' credentials, from the vault (never the MCP client's: no token passthrough)."""
    pinning: ToolPinning
    """Withholds a tool whose definition drifted from its pin, as in the loop."""
    cache: Cache
    """Where results are cached (the plugin's ``agent.tool_cache_ttl_seconds``)."""
    scopes: RunScopes
    """Every call's run: admitted to the limits, recorded, traced, counted."""
    known_secrets: Redactor
    """What every request's answer is redacted of besides its own credentials (the providers' keys)."""
    deadline_seconds: float
    """How long one request may take (``loop_deadline_seconds``)."""
    tasks: TaskLedger | None = None
    """Where its MCP tasks are kept (``tasks.py``); None: it serves no tasks."""
    task_settings: McpTaskSettings | None = None


class Endpoint:
    """One virtual MCP server: its plugin, its allowlist, and the SDK server answering for it."""

    def __init__(
        self,
        config: McpEndpointConfig,
        plugin: PluginConfig,
        deps: EndpointDeps,
        *,
        operations: EndpointOperations | None,
        state_key: bytes,
        transport: TransportSecuritySettings,
    ) -> None:
        self.config = config
        self.plugin = plugin
        self.deps = deps
        self.operations = operations
        self.naming = namespaced if config.namespace else upstream_name
        """How this endpoint names a server's tools and prompts."""
        handlers: dict[str, Handler] = {"on_list_tools": self._list_tools, "on_call_tool": self._call_tool}
        self.passthrough = Passthrough(self)
        if config.resources:
            handlers.update(
                on_list_resources=self.passthrough.list_resources,
                on_list_resource_templates=self.passthrough.list_resource_templates,
                on_read_resource=self.passthrough.read_resource,
            )
        if config.prompts:
            handlers.update(
                on_list_prompts=self.passthrough.list_prompts,
                on_get_prompt=self.passthrough.get_prompt,
                on_completion=self.passthrough.complete,
            )
        # What a client may cache of a listing depends on who asks (per-user servers, allowlists):
        # private, and stale at once (the gateway's own listings are cached upstream of it).
        hints = {method: CacheHint(ttl_ms=0, scope="private") for method in CACHEABLE_METHODS}
        answering = {name: self._answering(handler) for name, handler in handlers.items()}
        self.server = _EndpointServer(
            f"hatchway-{config.name}", version=__version__, cache_hints=hints, **answering
        )
        # The endpoint's own requestState (a confirmation, a relayed round) is sealed under a key
        # derived from the master key (every replica has it), bound to the caller and this endpoint.
        security = RequestStateSecurity(keys=[state_key], bind_principal=_caller_of)
        self.server.middleware.append(
            RequestStateBoundary(security, default_audience=f"hatchway:{config.name}")
        )
        self.tasks: EndpointTasks | None = None
        """Its MCP tasks (``tasks.py``): made by calls that declare the extension, polled by id."""
        if deps.tasks is not None:
            self.tasks = EndpointTasks(self, deps.tasks, deps.task_settings or McpTaskSettings())
            self.tasks.install(self.server, self._answering)
        self.listeners = ListChangeListeners(max_sessions=MAX_SESSIONS, idle_seconds=SESSION_IDLE_SECONDS)
        """2025-11-25 sessions told when an upstream's tools change."""
        self.unmatched_tools: set[str] = set()
        """Allowlist entries a full listing found matching no tool (logged once each; ``/readyz``)."""
        deps.pool.tools_changed.append(self.upstream_tools_changed)
        self.sessions = StreamableHTTPSessionManager(
            app=self.server,
            max_sessions=MAX_SESSIONS,
            session_idle_timeout=SESSION_IDLE_SECONDS,
            security_settings=transport,
        )

    # -- list changes ------------------------------------------------------------------------------

    def _remember(self, request_ctx: Any) -> None:
        """A 2025-11-25 session that lists tools is told when they change (by its session id)."""
        request = request_ctx.request
        session_id = request.headers.get("mcp-session-id") if request is not None else None
        if session_id is None or request_ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return  # 2026-07-28 listings say ttlMs 0: a client lists again when it needs to
        self.listeners.remember(session_id, request_ctx.session)

    async def upstream_tools_changed(self, server: McpServerConfig) -> None:
        """A server of this endpoint's plugin changed its tools: tell the sessions listening."""
        if any(s.id == server.id and s.url == server.url for s in self.plugin.mcp_servers):
            self.listeners.changed()

    def allows_org(self, principal: Principal) -> bool:
        allowed = self.config.organisations
        return allowed is None or principal.org_id in allowed or principal.org_name in allowed

    def allows(self, principal: Principal) -> bool:
        """The organisation, and the key when ``keys`` lists them (an OAuth token has no key): by
        its id, or by its name within the endpoint's ``organisations`` — any organisation can name a
        key ``app``, so a name alone would admit another organisation's key."""
        keys = self.config.keys
        by_key = (
            keys is None
            or principal.key_id is None
            or principal.key_id in keys
            or (self.config.organisations is not None and principal.key_name in keys)
        )
        return self.allows_org(principal) and by_key

    def exposes(self, name: str) -> bool:
        tools = self.config.tools
        return tools == "*" or any(fnmatch.fnmatchcase(name, pattern) for pattern in tools)

    def public_name(self, server: McpServerConfig, name: str) -> str:
        """A server's tool or prompt as this endpoint names it (the catalog's naming)."""
        return self.naming(server, name)

    def mcp_client(
        self, capabilities: dict[str, Any] | None, answerer: InputAnswerer | None = None
    ) -> PluginMcpClient:
        """The plugin's MCP client for one request: its upstream requests declare ``capabilities``
        (the endpoint's client's; None: the gateway's own), ``answerer`` answers their input requests."""
        return PluginMcpClient(
            self.plugin,
            trusted=True,
            pool=self.deps.pool,
            credentials=self.deps.credentials,
            answerer=answerer,
            capabilities=capabilities,
        )

    def catalog(self, capabilities: dict[str, Any] | None) -> McpCatalog:
        """The plugin's tools as this endpoint serves them (listed, pinned, named, routed), listed
        with ``capabilities`` declared (see ``mcp_client``)."""
        return McpCatalog(
            self.mcp_client(capabilities), pinning=self.deps.pinning, naming=self.naming, exposes=self.exposes
        )

    def context(self, request_ctx: Any) -> RunContext:
        request = request_ctx.request
        principal: Principal = request.scope["state"][PRINCIPAL]
        headers = {k.lower(): v for k, v in request.headers.items() if k.lower() != "authorization"}
        headers.pop("x-on-behalf-of", None)
        if (end_user := request.scope["state"].get(END_USER)) is not None:
            headers["x-on-behalf-of"] = end_user  # the key's X-On-Behalf-Of, or the token's subject
        ctx = RunContext.from_headers(
            principal,
            headers,
            deadline_seconds=self.deps.deadline_seconds,
            known_secrets=self.deps.known_secrets,
        )
        ctx.session_key = None  # an operation here is decided by id, never by a conversation's reply
        return ctx

    def _answering(self, handler: Handler) -> Callable[[Any, Any], Awaitable[Any]]:
        """``handler`` as the SDK calls it: given the run context made for its request, and its
        result redacted whole with every secret that context learned (``results.py``)."""

        async def handle(request_ctx: Any, params: Any) -> Any:
            ctx = self.context(request_ctx)
            result = await handler(request_ctx, params, ctx)
            return redact_result(result, ctx) if isinstance(result, BaseModel) else result

        return handle

    async def listed_tools(
        self, ctx: RunContext, called: str | None = None, *, capabilities: dict[str, Any] | None = None
    ) -> list[types.Tool]:
        """The tools this endpoint serves to ``ctx``'s caller, as ``tools/list`` gives them, sorted
        (its servers' credentials known to ``ctx``, so a description echoing one is redacted).

        ``called``: the listing only looks that tool up (``_list_tools``), so only the servers it
        may be on are asked, and only their credentials fetched. A per-user server the end user has
        not authorized answers the listing with its consent link, as the loop answers the run with
        it (``consent_required``). ``capabilities``: the MCP client's, declared upstream.
        """
        catalog = self.catalog(capabilities)
        servers = catalog.servers_for(called)
        await self.learn_secrets(ctx, servers)
        if self.operations is not None:
            return [t for t in self.operations.tools() if self.exposes(t.name)]
        listing = await catalog.listing(ctx, servers)
        if listing.consent:
            raise consent_required(listing.consent)
        if called is None and not listing.failures:
            self._warn_unmatched(listing)
        tools = [entry.tool.model_copy(update={"name": entry.name}) for entry in listing.tools]
        return sorted(tools, key=lambda tool: tool.name)  # deterministic order

    def _warn_unmatched(self, listing: Listing) -> None:
        """An allowlist entry that matches none of the tools the servers offer: said once per entry
        in the log (a misspelt name exposes nothing, silently otherwise)."""
        patterns = self.config.tools
        if patterns == "*":
            return
        names = {entry.name for entry in listing.tools} | set(listing.withheld)
        names |= {namespaced(entry.server, entry.tool.name) for entry in listing.tools}
        matched = {pattern for pattern in patterns if fnmatch.filter(names, pattern)}
        self.unmatched_tools -= matched  # a server that offers it now (listings change)
        for pattern in patterns:
            if pattern not in self.unmatched_tools and pattern not in matched:
                self.unmatched_tools.add(pattern)
                logger.warning(
                    "MCP endpoint %s: mcp_endpoints[].tools entry %r matches none of the tools its "
                    "servers offer (names are <server>__<tool>)",
                    self.config.name,
                    pattern,
                )

    async def learn_secrets(self, ctx: RunContext, servers: list[McpServerConfig] | None = None) -> None:
        client = self.mcp_client(None)  # resolves credentials only: sends nothing
        for server in self.plugin.mcp_servers if servers is None else servers:
            await client.learn_secrets(server, ctx)

    # -- tools -------------------------------------------------------------------------------------

    async def _list_tools(self, request_ctx: Any, params: Any, ctx: RunContext) -> types.ListToolsResult:
        self._remember(request_ctx)
        capabilities = ClientSide.of(request_ctx).capabilities
        tools = await self.listed_tools(ctx, _called_tool(request_ctx), capabilities=capabilities)
        return types.ListToolsResult(tools=tools)

    async def _call_tool(self, request_ctx: Any, params: types.CallToolRequestParams, ctx: RunContext) -> Any:
        if params.arguments and (path := too_deep(params.arguments)) is not None:
            # As /v1 refuses a body past the limit (400): invalid params, naming where, not a crash
            # of whatever walks the arguments next (orjson stops at 255 levels).
            where = f"arguments.{path}" if path else "arguments"
            raise MCPError(types.INVALID_PARAMS, f"{where}: nested deeper than {MAX_JSON_DEPTH} levels")
        meta: dict[str, Any] = {}
        started = time.monotonic()
        # The run began when its request arrived: the SDK's lookups before this handler (the
        # called tool's schema, from a listing) are part of what the client waited.
        arrived = request_ctx.request.scope["state"].get(ARRIVED)
        async with self.deps.scopes.open(f"mcp:{self.config.name}", ctx, started=arrived) as scope:
            refusal = await self._admit(scope)
            if refusal is not None:
                return refusal
            instruments = scope.begin(
                name=f"mcp:{self.config.name}", agent=self.config.agent, plugin_source=self._source
            )
            failure: MCPError | None = None
            with instruments.tool_call(params.name) as describe:
                try:
                    result = await self._dispatch(params, ctx, ClientSide.of(request_ctx), meta)
                except MCPError as exc:  # relayed as the JSON-RPC error it is, after the run is recorded
                    failure, result = exc, tool_error(exc.error.message, code="mcp_protocol_error")
                except Exception as exc:  # the SDK would send its text unredacted to 2025-era clients
                    logger.exception("MCP endpoint %s: the call of %s failed", self.config.name, params.name)
                    meta.update(outcome=Outcome.ERROR, error_code="internal_error")
                    message = ctx.redact(f"the call failed ({type(exc).__name__})")
                    result = tool_error(message, code="internal_error")
                is_error = isinstance(result, types.CallToolResult) and bool(result.is_error)
                describe(ToolResult(output="", is_error=is_error, meta=dict(meta)))
            step = call_step(params, result, meta, ctx, (time.monotonic() - started) * 1000)
            scope.end(200, RunResult(steps=[step], tool_calls=1))
        if failure is not None:
            raise failure
        return result

    async def _admit(self, scope: RunScope) -> types.CallToolResult | None:
        """A call is a run like any other: admitted to the limits of its key, organisation, end user
        and agent (requests and concurrency per minute, budgets), and settled when it ends. A
        refusal is the call's result, which the client (and its model) can read, with when to retry;
        the run log records it with its HTTP status (429, or 503 ``unavailable``)."""
        ctx = scope.ctx
        who = Requester(ctx.principal, ctx.on_behalf_of, self.config.agent)
        try:
            await scope.admit(who)
        except (RateLimited, LimitsUnavailable) as refused:
            scope.end(refused.status_code, error=refused.message)
            retry_after = refused.headers.get("retry-after")
            result = tool_error(refused.message, code=refused.code)
            result.structured_content = {
                "error": {"code": refused.code, "message": refused.message, "retry_after": retry_after}
            }
            return result
        return None

    @property
    def _source(self) -> str:
        return f"endpoint:{self.config.name}"

    async def _dispatch(
        self, params: types.CallToolRequestParams, ctx: RunContext, client: ClientSide, meta: dict[str, Any]
    ) -> Any:
        name, arguments = params.name, dict(params.arguments or {})
        state = read_state(params.request_state)
        if self.operations is not None:
            return await self._operation_call(name, arguments, state, params, ctx, client, meta)
        # Only the server the name points at is listed: a slow one never delays the others' calls.
        found = await self.catalog(client.capabilities).route(name, ctx)
        if not isinstance(found, CatalogTool):
            return _not_routed(name, found)
        server, tool = found.server, found.tool.name
        meta.update(server=server.id, tool=tool)
        # The client's answers go to the upstream whether or not a state came with them (a server
        # ignores what it did not ask for); the upstream's own state only from a relayed round.
        resume: dict[str, Any] = {"input_responses": params.input_responses}
        if state is not None and state["kind"] == "relay" and state.get("server") == server.id:
            resume.update(request_state=state.get("state"), input_round=int(state.get("round") or 1) + 1)
        cache_key = await self._cache_key(server, tool, arguments, ctx, resume)
        if cache_key is not None and (hit := await self.deps.cache.get(cache_key)) is not None:
            meta.update(outcome=Outcome.OK, cached=True)
            return types.CallToolResult.model_validate(hit)
        # A client with the tasks extension may get a task (``tasks.py``): the upstream's, behind an
        # id of the gateway's, unless its organisation has too many open (then the upstream is asked
        # without the extension).
        declared = client.capabilities
        if declares_tasks(declared) and (self.tasks is None or not await self.tasks.may_create(client, ctx)):
            declared = without_tasks(declared)
        relay = self.mcp_client(declared, RelayToClient(client))

        async def progress(done: float, total: float | None, message: str | None) -> None:
            # The upstream's progress, on the client's token, its message redacted like the result.
            await client.session.report_progress(done, total, ctx.redact(message) if message else message)

        outcome = await relay.call(
            server, tool, arguments, ctx, progress=progress, follow_tasks=False, **resume
        )
        meta["retries"] = outcome.retries
        if outcome.task is not None and self.tasks is not None:
            meta["outcome"] = Outcome.OK
            return await self.tasks.relayed(outcome.task, server.id, server.url or server.command, tool, ctx)
        if isinstance(outcome.error, InputRelayed):
            round_ = outcome.error.round
            meta["outcome"] = Outcome.INPUT_REQUIRED
            return types.InputRequiredResult(
                input_requests=round_.requests, request_state=relay_state(round_)
            )
        if outcome.error is not None:
            meta.update(outcome=Outcome.ERROR, error_code=outcome.error.code)
            if isinstance(outcome.error, AuthorizationRequired):  # a refresh refused: authorize again
                raise consent_required({server.id: outcome.error.link})
            rpc = getattr(outcome.error, "rpc_error", None)
            if rpc is not None:  # the upstream's own JSON-RPC error (a missing capability, bad input)
                raise relayed_error(rpc, ctx)
            return tool_error(ctx.redact(outcome.error.message), code=outcome.error.code)
        result = outcome.result
        assert result is not None
        meta["outcome"] = Outcome.TOOL_ERROR if result.is_error else Outcome.OK
        structured = result.structured if isinstance(result.structured, dict) else None
        content = result.content or [types.TextContent(text=result.text)]
        relayed = types.CallToolResult(
            content=content,
            structured_content=structured,
            is_error=result.is_error,
        )
        if cache_key is not None and not result.is_error:  # the cache may be Redis: kept redacted
            ttl = self.plugin.agent.tool_cache_ttl_seconds
            seen = redact_result(relayed, ctx).model_dump(mode="json", by_alias=True)
            await self.deps.cache.set(cache_key, seen, ttl)
        return relayed  # redacted with every other result by the handler (``_answering``)

    async def _operation_call(
        self,
        name: str,
        arguments: dict[str, Any],
        state: dict[str, Any] | None,
        params: types.CallToolRequestParams,
        ctx: RunContext,
        client: ClientSide,
        meta: dict[str, Any],
    ) -> Any:
        """A call of an agent's tools.yaml tool (``operations.py``)."""
        assert self.operations is not None
        if not self.operations.handles(name) or not self.exposes(name):
            return tool_error(f"No tool named '{name}' is available.", code="unknown_tool")
        meta.update(server=self.operations.server_of(name), tool=name)
        caller = self.mcp_client(client.capabilities)
        if state is not None and state["kind"] == "confirm":
            return await self.operations.answered(state, params.input_responses, ctx, caller, meta)
        as_task = None
        if self.tasks is not None and await self.tasks.may_create(client, ctx):
            as_task = self.tasks.operation
        try:
            return await self._within_deadline(
                ctx, self.operations.call(name, arguments, ctx, caller, client, meta, as_task)
            )
        except TimeoutError:
            meta["outcome"] = Outcome.TIMEOUT
            return tool_error("No answer from the user in time; nothing was executed.", code="timeout")

    async def _cache_key(
        self,
        server: McpServerConfig,
        tool: str,
        arguments: dict[str, Any],
        ctx: RunContext,
        resume: dict[str, Any],
    ) -> str | None:
        """The loop's tool-result cache (``agent.tool_cache_ttl_seconds``), for a first round only."""
        if self.plugin.agent.tool_cache_ttl_seconds <= 0 or resume.get("input_responses") is not None:
            return None
        grant = await user_grant(server, self.deps.credentials, ctx)
        if grant is False:
            return None
        return tool_result_key(
            server, tool, arguments, ctx, trusted=True, prefix="mcp:endpoint-result:", grant=grant
        )

    @staticmethod
    async def _within_deadline(ctx: RunContext, work: Awaitable[T]) -> T:
        async with asyncio.timeout(max(ctx.remaining(), 0.001)):
            return await work


class _EndpointServer(Server):  # type: ignore[type-arg]
    """The SDK's server, declaring ``tools.listChanged`` to 2025-11-25 clients: the endpoint tells
    them when an upstream's tools change (the SDK declares it only when asked to)."""

    def create_initialization_options(self, notification_options: Any = None, **kwargs: Any) -> Any:
        options = notification_options or NotificationOptions(tools_changed=True)
        return super().create_initialization_options(options, **kwargs)


def consent_required(links: dict[str, str]) -> UrlElicitationRequiredError:
    """What the end user must do before a per-user server's tools can be listed or called: open its
    consent link (URL elicitation, -32042) — as the loop answers the run with the link."""
    elicitations = [
        types.ElicitRequestURLParams(
            message=f"Connect your account to {server} (the link works once and expires).",
            url=link,
            elicitation_id=f"connect-{server}",
        )
        for server, link in sorted(links.items())
    ]
    return UrlElicitationRequiredError(elicitations, message=connect_message(links))


def _not_routed(name: str, listing: Listing) -> types.CallToolResult:
    """Why a call's name reaches no tool: withheld (never routed to another server's tool of the same
    name), a server to authorize first, or no such tool."""
    if listing.consent:
        raise consent_required(listing.consent)
    if name in listing.withheld:
        return tool_error(
            f"'{name}' is withheld: its definition changed since it was approved (hatchway tools diff).",
            code="tool_withheld",
        )
    return tool_error(f"No tool named '{name}' is available.", code="unknown_tool")


def _called_tool(request_ctx: Any) -> str | None:
    """The tool a listing is made for: on a 2026-07-28 ``tools/call``, the SDK looks the called
    tool's input schema up with the ``tools/list`` handler (to check its ``Mcp-Param-*`` headers)
    before the call's handler runs. Its ``Mcp-Method`` and ``Mcp-Name`` headers, which the SDK has
    checked against the body by then, name the call."""
    request = request_ctx.request
    if request is None or request.headers.get(MCP_METHOD_HEADER) != "tools/call":
        return None
    return decode_header_value(request.headers.get(MCP_NAME_HEADER))


def _caller_of(request_ctx: Any) -> str | None:
    """Who a sealed ``requestState`` belongs to: the key, and the end user it acts for."""
    request = request_ctx.request
    if request is None:
        return None
    state = request.scope["state"]
    principal: Principal = state[PRINCIPAL]
    return orjson.dumps([principal.org_id, principal.key_id, state.get(END_USER)]).decode()
