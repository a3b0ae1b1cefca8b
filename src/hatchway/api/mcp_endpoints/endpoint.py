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
- **Resources and prompts** (``resources: true`` / ``prompts: true``): listed from every server of
  the plugin and read from the server that listed them.
- An upstream's requests for input go to the endpoint's client (``relay.py``).
"""

from __future__ import annotations

import asyncio
import contextvars
import fnmatch
import logging
import re
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
from hatchway.api.mcp_endpoints.relay import (
    ClientSide,
    InputRelayed,
    RelayToClient,
    read_state,
    relay_state,
    relayed_state,
)
from hatchway.api.mcp_endpoints.results import call_step, redact_result, relayed_error, tool_error
from hatchway.config.plugin import McpServerConfig, PluginConfig
from hatchway.config.settings import McpEndpointConfig
from hatchway.engine.context import Principal, RunContext
from hatchway.engine.loop import RunResult
from hatchway.engine.tools.base import ToolResult
from hatchway.engine.tools.mcp.connection import FORWARDED_CAPABILITIES
from hatchway.engine.tools.mcp.naming import namespaced_name
from hatchway.errors import HatchwayError, McpServerError, ToolError

if TYPE_CHECKING:
    from mcp import Client

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
MAX_LIST_PAGES = 50
"""Pages of one server's resource or prompt listing read at most."""
RESOURCE_NOT_FOUND = -32002


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
        if config.resources:
            handlers.update(
                on_list_resources=self._list_resources,
                on_list_resource_templates=self._list_resource_templates,
                on_read_resource=self._read_resource,
            )
        if config.prompts:
            handlers.update(
                on_list_prompts=self._list_prompts,
                on_get_prompt=self._get_prompt,
                on_completion=self._complete,
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

    def _name(self, server: McpServerConfig, name: str) -> str:
        return namespaced_name(server.id, name) if self.config.namespace else name

    def _client(self, answerer: Any = None) -> PluginMcpClient:
        from hatchway.engine.tools.mcp.plugin_client import PluginMcpClient

        gw = self.gateway
        return PluginMcpClient(
            self.plugin, trusted=True, pool=gw.mcp_pool, credentials=gw.mcp_credentials, answerer=answerer
        )

    def _context(self, request_ctx: Any) -> RunContext:
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
        await self._learn_secrets(ctx)
        if self.operations is not None:
            return [t for t in self.operations.tools() if self.exposes(t.name)]
        return [tool.model_copy(update={"name": name}) for name, _server, tool in await self._catalog(ctx)]

    async def _learn_secrets(self, ctx: RunContext) -> None:
        client = self._client()
        for server in self.plugin.mcp_servers:
            await client.learn_secrets(server, ctx)

    # -- tools -------------------------------------------------------------------------------------

    async def _catalog(
        self, ctx: RunContext, servers: list[McpServerConfig] | None = None
    ) -> list[tuple[str, McpServerConfig, types.Tool]]:
        client = self._client()
        found: dict[str, tuple[str, McpServerConfig, types.Tool]] = {}
        for server in self.plugin.mcp_servers if servers is None else servers:
            try:
                tools = await client.list_tools(server, ctx)
            except HatchwayError as exc:
                logger.warning("MCP endpoint %s: %s not listed (%s)", self.config.name, server.id, exc.code)
                continue
            for tool in tools:
                name = self._name(server, tool.name)
                if server.exposes(tool.name) and self.exposes(name) and name not in found:
                    found[name] = (name, server, tool)
        return sorted(found.values(), key=lambda entry: entry[0])  # deterministic order

    async def _list_tools(self, request_ctx: Any, params: Any) -> types.ListToolsResult:
        self._remember(request_ctx)
        return types.ListToolsResult(tools=await self.listed_tools(self._context(request_ctx)))

    async def _call_tool(self, request_ctx: Any, params: types.CallToolRequestParams) -> Any:
        ctx = self._context(request_ctx)
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
            result = redact_result(result, ctx) if isinstance(result, BaseModel) else result
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
            caller = self._client()
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
        relay = self._client(RelayToClient(client))

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
        relayed = redact_result(relayed, ctx)
        if cache_key is not None and not result.is_error:  # what the client saw: already redacted
            ttl = self.plugin.agent.tool_cache_ttl_seconds
            await self.gateway.cache.set(cache_key, relayed.model_dump(mode="json", by_alias=True), ttl)
        return relayed

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

    # -- resources and prompts ---------------------------------------------------------------------

    async def _from_servers(
        self, request_ctx: Any, send: Callable[[Client, str | None], Awaitable[Any]], field: str
    ) -> tuple[list[tuple[McpServerConfig, Any]], RunContext]:
        """Every entry of a paginated listing, from every server of the plugin (a failing one skipped)."""
        ctx = self._context(request_ctx)
        await self._learn_secrets(ctx)
        client = self._client()
        found: list[tuple[McpServerConfig, Any]] = []
        for server in self.plugin.mcp_servers:
            cursor: str | None = None
            try:
                for _ in range(MAX_LIST_PAGES):
                    page = await client.request(server, ctx, lambda c, cur=cursor: send(c, cur))
                    found.extend((server, entry) for entry in getattr(page, field))
                    cursor = page.next_cursor
                    if not cursor:
                        break
            except ToolError as exc:
                logger.warning("MCP endpoint %s: %s not listed (%s)", self.config.name, server.id, exc.code)
        return found, ctx

    async def _list_resources(self, request_ctx: Any, params: Any) -> types.ListResourcesResult:
        found, _ = await self._from_servers(
            request_ctx, lambda c, cur: c.session.list_resources(params=_page(cur)), "resources"
        )
        return types.ListResourcesResult(resources=[resource for _server, resource in found])

    async def _list_resource_templates(
        self, request_ctx: Any, params: Any
    ) -> types.ListResourceTemplatesResult:
        found, _ = await self._from_servers(
            request_ctx,
            lambda c, cur: c.session.list_resource_templates(params=_page(cur)),
            "resource_templates",
        )
        return types.ListResourceTemplatesResult(resource_templates=[template for _s, template in found])

    async def _read_resource(self, request_ctx: Any, params: types.ReadResourceRequestParams) -> Any:
        uri = str(params.uri)
        server = await self._resource_server(request_ctx, uri)
        ctx = self._context(request_ctx)
        upstream_state = relayed_state(params.request_state)

        async def read(client: Client) -> Any:
            return await client.session.read_resource(
                uri,
                input_responses=params.input_responses,
                request_state=upstream_state,
                allow_input_required=True,
            )

        return await self._relayed(server, ctx, read, uri)

    async def _resource_server(self, request_ctx: Any, uri: str) -> McpServerConfig:
        servers = self.plugin.mcp_servers
        if len(servers) == 1:
            return servers[0]
        found, _ = await self._from_servers(
            request_ctx, lambda c, cur: c.session.list_resources(params=_page(cur)), "resources"
        )
        for server, resource in found:
            if str(resource.uri) == uri:
                return server
        templates, _ = await self._from_servers(
            request_ctx,
            lambda c, cur: c.session.list_resource_templates(params=_page(cur)),
            "resource_templates",
        )
        # The template that matches, the most specific first (the longest literal part): a
        # catch-all template of one server never takes what another's own template names.
        matching = [
            (literal_chars(t.uri_template), server)
            for server, t in templates
            if template_matches(t.uri_template, uri)
        ]
        if matching:
            return max(matching, key=lambda entry: entry[0])[1]
        raise MCPError(code=RESOURCE_NOT_FOUND, message="Resource not found", data={"uri": uri})

    async def _list_prompts(self, request_ctx: Any, params: Any) -> types.ListPromptsResult:
        found, _ = await self._from_servers(
            request_ctx, lambda c, cur: c.session.list_prompts(params=_page(cur)), "prompts"
        )
        prompts = {
            self._name(server, p.name): p.model_copy(update={"name": self._name(server, p.name)})
            for server, p in found
        }
        return types.ListPromptsResult(prompts=[prompts[name] for name in sorted(prompts)])

    async def _prompt_route(self, request_ctx: Any, name: str) -> tuple[McpServerConfig, str]:
        found, _ = await self._from_servers(
            request_ctx, lambda c, cur: c.session.list_prompts(params=_page(cur)), "prompts"
        )
        for server, prompt in found:
            if self._name(server, prompt.name) == name:
                return server, prompt.name
        raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown prompt: {name}")

    async def _get_prompt(self, request_ctx: Any, params: types.GetPromptRequestParams) -> Any:
        server, prompt = await self._prompt_route(request_ctx, params.name)
        ctx = self._context(request_ctx)
        upstream_state = relayed_state(params.request_state)

        async def get(client: Client) -> Any:
            return await client.session.get_prompt(
                prompt,
                params.arguments,
                input_responses=params.input_responses,
                request_state=upstream_state,
                allow_input_required=True,
            )

        result = await self._relayed(server, ctx, get, prompt)
        return result

    async def _complete(self, request_ctx: Any, params: types.CompleteRequestParams) -> types.CompleteResult:
        ref = params.ref
        if isinstance(ref, types.PromptReference):
            server, prompt = await self._prompt_route(request_ctx, ref.name)
            ref = ref.model_copy(update={"name": prompt})
        else:
            server = await self._resource_server(request_ctx, ref.uri)
        ctx = self._context(request_ctx)
        context = params.context.arguments if params.context is not None else None
        argument = {"name": params.argument.name, "value": params.argument.value}

        async def complete(client: Client) -> types.CompleteResult:
            return await client.session.complete(ref=ref, argument=argument, context_arguments=context)

        return await self._upstream(server, ctx, complete)

    async def _relayed(
        self, server: McpServerConfig, ctx: RunContext, send: Callable[[Client], Awaitable[Any]], target: str
    ) -> Any:
        """A request that may answer ``input_required``: the round goes to the endpoint's client."""
        result = await self._upstream(server, ctx, send)
        if isinstance(result, types.InputRequiredResult):
            from hatchway.engine.tools.mcp.inputs import InputRound

            round_ = InputRound(server.id, target, 1, dict(result.input_requests or {}), result.request_state)
            return types.InputRequiredResult(
                input_requests=result.input_requests, request_state=relay_state(round_)
            )
        return result

    async def _upstream(
        self, server: McpServerConfig, ctx: RunContext, send: Callable[[Client], Awaitable[T]]
    ) -> T:
        """One request to ``server``; its JSON-RPC error relayed to the client (redacted)."""
        try:
            return await self._client().request(server, ctx, send)
        except McpServerError as exc:
            if exc.rpc_error is not None:
                raise relayed_error(exc.rpc_error, ctx) from None
            raise MCPError(code=types.INTERNAL_ERROR, message=ctx.redact(exc.message)) from None
        except ToolError as exc:
            raise MCPError(code=types.INTERNAL_ERROR, message=ctx.redact(exc.message)) from None


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


_EXPRESSION = re.compile(r"\{([+#./;?&]?)[^}]*\}")


def template_matches(template: str, uri: str) -> bool:
    """Whether ``uri`` is one of the URIs an RFC 6570 ``template`` describes: a simple expression
    (``{id}``) stands for one path segment, a reserved or path one (``{+path}``, ``{/path}``…) for
    anything."""
    pattern, at = [], 0
    for match in _EXPRESSION.finditer(template):
        pattern.append(re.escape(template[at : match.start()]))
        pattern.append("[^/?#]+" if match.group(1) == "" else ".*")
        at = match.end()
    pattern.append(re.escape(template[at:]))
    return re.fullmatch("".join(pattern), uri) is not None


def literal_chars(template: str) -> int:
    return len(_EXPRESSION.sub("", template))


def _caller_of(request_ctx: Any) -> str | None:
    """Who a sealed ``requestState`` belongs to: the key, and the end user it acts for."""
    request = request_ctx.request
    if request is None:
        return None
    state = request.scope["state"]
    principal: Principal = state[PRINCIPAL]
    return orjson.dumps([principal.org_id, principal.key_id, state.get(END_USER)]).decode()


def _page(cursor: str | None) -> types.PaginatedRequestParams | None:
    return types.PaginatedRequestParams(cursor=cursor) if cursor else None
