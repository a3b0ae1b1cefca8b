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
- An upstream's requests for input go to the endpoint's client (``relay.py``).
"""

from __future__ import annotations

import asyncio
import contextvars
import fnmatch
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import mcp_types as types
import orjson
from mcp.server.caching import CACHEABLE_METHODS, CacheHint
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from hatchway.api.mcp_endpoints.listeners import ListChangeListeners
from hatchway.api.mcp_endpoints.oauth import ResourceServer
from hatchway.api.mcp_endpoints.operations import EndpointOperations
from hatchway.api.mcp_endpoints.passthrough import Passthrough
from hatchway.api.mcp_endpoints.relay import (
    ClientSide,
    InputRelayed,
    RelayToClient,
    read_state,
    relay_state,
)
from hatchway.api.mcp_endpoints.results import call_step, redact_result, relayed_error, tool_error
from hatchway.config.plugin import McpServerConfig, PluginConfig
from hatchway.config.settings import McpEndpointConfig
from hatchway.engine.context import Principal, RunContext
from hatchway.engine.loop import RunResult
from hatchway.engine.tools.base import ToolResult
from hatchway.engine.tools.mcp.connection import FORWARDED_CAPABILITIES
from hatchway.engine.tools.mcp.naming import namespaced_name
from hatchway.errors import HatchwayError

if TYPE_CHECKING:
    from hatchway.engine.tools.mcp.plugin_client import PluginMcpClient
    from hatchway.gateway import Gateway

logger = logging.getLogger(__name__)
T = TypeVar("T")
PRINCIPAL = "hatchway_principal"
"""Where the ASGI layer leaves the authenticated principal in the request's scope state."""
END_USER = "hatchway_end_user"
"""And the end user: ``X-On-Behalf-Of`` with a key, the token's subject with OAuth."""
MAX_SESSIONS = 1000
"""2025-11-25 sessions one endpoint keeps at once (a new one past it is 503; 2026-07-28 needs none)."""
SESSION_IDLE_SECONDS = 600.0
"""A 2025-11-25 session with no request for this long is closed."""


class Endpoint:
    """One virtual MCP server: its plugin, its allowlist, and the SDK server answering for it."""

    def __init__(
        self,
        config: McpEndpointConfig,
        plugin: PluginConfig,
        gateway: Gateway,
        *,
        operations: EndpointOperations | None,
        state_key: bytes,
        transport: TransportSecuritySettings,
    ) -> None:
        self.config = config
        self.plugin = plugin
        self.gateway = gateway
        self.operations = operations
        self.resource_server: ResourceServer | None = None
        if config.oauth is not None:
            self.resource_server = ResourceServer(
                config.name,
                config.oauth,
                base_url=gateway.settings.public_base_url,
                secret=gateway.vault.system_secret,
            )
        handlers: dict[str, Any] = {"on_list_tools": self._list_tools, "on_call_tool": self._call_tool}
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
        redacted = {name: _redacting(handler) for name, handler in handlers.items()}
        self.server = _EndpointServer(
            f"hatchway-{config.name}", version="0.1.0", cache_hints=hints, **redacted
        )
        # The endpoint's own requestState (a confirmation, a relayed round) is sealed under a key
        # derived from the master key (every replica has it), bound to the caller and this endpoint.
        security = RequestStateSecurity(keys=[state_key], bind_principal=_caller_of)
        self.server.middleware.append(
            RequestStateBoundary(security, default_audience=f"hatchway:{config.name}")
        )
        self.listeners = ListChangeListeners(max_sessions=MAX_SESSIONS, idle_seconds=SESSION_IDLE_SECONDS)
        """2025-11-25 sessions told when an upstream's tools change."""
        gateway.mcp_pool.tools_changed.append(self.upstream_tools_changed)
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
        """The organisation, and the key when ``keys`` lists them (an OAuth token has no key)."""
        keys = self.config.keys
        by_key = (
            keys is None
            or principal.key_id is None
            or bool({principal.key_id, principal.key_name} & set(keys))
        )
        return self.allows_org(principal) and by_key

    def exposes(self, name: str) -> bool:
        tools = self.config.tools
        return tools == "*" or any(fnmatch.fnmatchcase(name, pattern) for pattern in tools)

    def public_name(self, server: McpServerConfig, name: str) -> str:
        return namespaced_name(server.id, name) if self.config.namespace else name

    def mcp_client(self, answerer: Any = None) -> PluginMcpClient:
        from hatchway.engine.tools.mcp.plugin_client import PluginMcpClient

        gw = self.gateway
        return PluginMcpClient(
            self.plugin, trusted=True, pool=gw.mcp_pool, credentials=gw.mcp_credentials, answerer=answerer
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
            deadline_seconds=self.gateway.settings.loop_deadline_seconds,
            known_secrets=self.gateway.models.secrets,
        )
        ctx.session_key = None  # an operation here is decided by id, never by a conversation's reply
        _CALL.set(ctx)  # what ``_redacting`` redacts the handler's result with
        # This handler's requests upstream declare the client's capabilities, not the gateway's:
        # the upstream then asks only for input this client can give (``relay.py``).
        capabilities = request_ctx.session.client_capabilities
        FORWARDED_CAPABILITIES.set(
            capabilities.model_dump(mode="json", by_alias=True, exclude_none=True) if capabilities else {}
        )
        return ctx

    async def listed_tools(self, ctx: RunContext) -> list[types.Tool]:
        """The tools this endpoint serves to ``ctx``'s caller, as ``tools/list`` gives them (its
        servers' credentials known to ``ctx``, so a description echoing one is redacted)."""
        await self.learn_secrets(ctx)
        if self.operations is not None:
            return [t for t in self.operations.tools() if self.exposes(t.name)]
        return [tool.model_copy(update={"name": name}) for name, _server, tool in await self._catalog(ctx)]

    async def learn_secrets(self, ctx: RunContext) -> None:
        client = self.mcp_client()
        for server in self.plugin.mcp_servers:
            await client.learn_secrets(server, ctx)

    # -- tools -------------------------------------------------------------------------------------

    async def _catalog(
        self, ctx: RunContext, servers: list[McpServerConfig] | None = None
    ) -> list[tuple[str, McpServerConfig, types.Tool]]:
        client = self.mcp_client()
        found: dict[str, tuple[str, McpServerConfig, types.Tool]] = {}
        for server in self.plugin.mcp_servers if servers is None else servers:
            try:
                tools = await client.list_tools(server, ctx)
                # Pinned as a run's listing is: a drift kept with a warning, or withheld (tool_drift).
                tools = await self.gateway.tool_pinning.admitted(server, tools, ctx, trusted=True)
            except HatchwayError as exc:
                logger.warning("MCP endpoint %s: %s not listed (%s)", self.config.name, server.id, exc.code)
                continue
            for tool in tools:
                name = self.public_name(server, tool.name)
                if server.exposes(tool.name) and self.exposes(name) and name not in found:
                    found[name] = (name, server, tool)
        return sorted(found.values(), key=lambda entry: entry[0])  # deterministic order

    async def _list_tools(self, request_ctx: Any, params: Any) -> types.ListToolsResult:
        self._remember(request_ctx)
        return types.ListToolsResult(tools=await self.listed_tools(self.context(request_ctx)))

    async def _call_tool(self, request_ctx: Any, params: types.CallToolRequestParams) -> Any:
        ctx = self.context(request_ctx)
        gw = self.gateway
        meta: dict[str, Any] = {}
        started = time.monotonic()
        async with gw.scopes.open(f"mcp:{self.config.name}", ctx) as scope:
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
                    meta.update(outcome="error", error_code="internal_error")
                    message = ctx.redact(f"the call failed ({type(exc).__name__})")
                    result = tool_error(message, code="internal_error")
                is_error = isinstance(result, types.CallToolResult) and bool(result.is_error)
                describe(ToolResult(output="", is_error=is_error, meta=dict(meta)))
            step = call_step(params, result, meta, ctx, (time.monotonic() - started) * 1000)
            scope.end(200, RunResult(steps=[step], tool_calls=1))
        if failure is not None:
            raise failure
        return result

    @property
    def _source(self) -> str:
        return f"endpoint:{self.config.name}"

    async def _dispatch(
        self, params: types.CallToolRequestParams, ctx: RunContext, client: ClientSide, meta: dict[str, Any]
    ) -> Any:
        name, arguments = params.name, dict(params.arguments or {})
        state = read_state(params.request_state)
        if self.operations is not None:
            if not self.operations.handles(name) or not self.exposes(name):
                return tool_error(f"No tool named '{name}' is available.", code="unknown_tool")
            meta.update(server=self.operations.server_of(name), tool=name)
            caller = self.mcp_client()
            if state is not None and state["kind"] == "confirm":
                return await self.operations.answered(state, params.input_responses, ctx, caller, meta)
            try:
                return await self._within_deadline(
                    ctx, self.operations.call(name, arguments, ctx, caller, client, meta)
                )
            except TimeoutError:
                meta["outcome"] = "timeout"
                return tool_error("No answer from the user in time; nothing was executed.", code="timeout")
        # Only the server the name points at is listed: a slow one never delays the others' calls.
        servers = self.plugin.mcp_servers
        if self.config.namespace:
            servers = [s for s in servers if name.startswith(namespaced_name(s.id, ""))]
        routes = {n: (server, tool.name) for n, server, tool in await self._catalog(ctx, servers)}
        route = routes.get(name)
        if route is None:
            return tool_error(f"No tool named '{name}' is available.", code="unknown_tool")
        server, tool = route
        meta.update(server=server.id, tool=tool)
        # The client's answers go to the upstream whether or not a state came with them (a server
        # ignores what it did not ask for); the upstream's own state only from a relayed round.
        resume: dict[str, Any] = {"input_responses": params.input_responses}
        if state is not None and state["kind"] == "relay" and state.get("server") == server.id:
            resume.update(request_state=state.get("state"), input_round=int(state.get("round") or 1) + 1)
        cache_key = self._cache_key(server, tool, arguments, ctx, resume)
        if cache_key is not None and (hit := await self.gateway.cache.get(cache_key)) is not None:
            meta.update(outcome="ok", cached=True)
            return types.CallToolResult.model_validate(hit)
        relay = self.mcp_client(RelayToClient(client))

        async def progress(done: float, total: float | None, message: str | None) -> None:
            # The upstream's progress, on the client's token, its message redacted like the result.
            await client.session.report_progress(done, total, ctx.redact(message) if message else message)

        outcome = await relay.call(server, tool, arguments, ctx, progress=progress, **resume)
        meta["retries"] = outcome.retries
        if isinstance(outcome.error, InputRelayed):
            round_ = outcome.error.round
            meta["outcome"] = "input_required"
            return types.InputRequiredResult(
                input_requests=round_.requests, request_state=relay_state(round_)
            )
        if outcome.error is not None:
            meta.update(outcome="error", error_code=outcome.error.code)
            rpc = getattr(outcome.error, "rpc_error", None)
            if rpc is not None:  # the upstream's own JSON-RPC error (a missing capability, bad input)
                raise relayed_error(rpc, ctx)
            return tool_error(ctx.redact(outcome.error.message), code=outcome.error.code)
        result = outcome.result
        assert result is not None
        meta["outcome"] = "tool_error" if result.is_error else "ok"
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
            await self.gateway.cache.set(cache_key, seen, ttl)
        return relayed  # redacted with every other result by the handler (``_redacting``)

    def _cache_key(
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
        from hatchway.engine.tools.mcp.toolset import tool_result_key

        return tool_result_key(server, tool, arguments, ctx, trusted=True, prefix="mcp:endpoint-result:")

    @staticmethod
    async def _within_deadline(ctx: RunContext, work: Awaitable[T]) -> T:
        async with asyncio.timeout(max(ctx.remaining(), 0.001)):
            return await work


_CALL: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar("hatchway_mcp_call", default=None)
"""The context of the request a handler is answering (set by ``Endpoint._context``)."""


def _redacting(handler: Callable[[Any, Any], Awaitable[Any]]) -> Callable[[Any, Any], Awaitable[Any]]:
    """A handler whose result is redacted whole with its request's secrets (``results.py``)."""

    async def handle(request_ctx: Any, params: Any) -> Any:
        result = await handler(request_ctx, params)
        ctx = _CALL.get()
        return redact_result(result, ctx) if ctx is not None and isinstance(result, BaseModel) else result

    return handle


class _EndpointServer(Server):  # type: ignore[type-arg]
    """The SDK's server, declaring ``tools.listChanged`` to 2025-11-25 clients: the endpoint tells
    them when an upstream's tools change (the SDK declares it only when asked to)."""

    def create_initialization_options(self, notification_options: Any = None, **kwargs: Any) -> Any:
        options = notification_options or NotificationOptions(tools_changed=True)
        return super().create_initialization_options(options, **kwargs)


def _caller_of(request_ctx: Any) -> str | None:
    """Who a sealed ``requestState`` belongs to: the key, and the end user it acts for."""
    request = request_ctx.request
    if request is None:
        return None
    state = request.scope["state"]
    principal: Principal = state[PRINCIPAL]
    return orjson.dumps([principal.org_id, principal.key_id, state.get(END_USER)]).decode()
