"""Hatchway as an MCP server: each ``mcp_endpoints`` entry served at ``/mcp/{name}``.

One MCP SDK ``Server`` per endpoint, over the SDK's streamable HTTP session manager (2026-07-28
stateless requests and 2025-11-25 sessions alike). A request is authenticated with a Hatchway API
key as bearer (what Claude Code's and Cursor's ``headers`` send) before the SDK sees it; the
endpoint's ``organisations`` bound who may use it. Its tools are the plugin's servers' tools,
namespaced as in the loop (``<server>__<tool>``), in a deterministic order, and a call goes through
the gateway's own MCP client: the pool, the vault's credentials (never the MCP client's: no token
passthrough), per-user OAuth for ``X-On-Behalf-Of``, retries, redaction.

Served here only: plain tools. Operations (tools.yaml policies and confirmations), resources,
prompts and OAuth resource-server mode are not (see docs/mcp-endpoints.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import logging
from typing import TYPE_CHECKING, Any

import orjson
from starlette.types import Receive, Scope, Send

from hatchway.api.auth import bearer_token
from hatchway.api.errors import error_response
from hatchway.config.plugin import McpServerConfig, PluginConfig, load_plugin
from hatchway.config.settings import McpEndpointConfig
from hatchway.engine.context import Principal, RunContext
from hatchway.engine.tools.mcp.naming import namespaced_name
from hatchway.errors import HatchwayError, NotFound, PermissionDenied

if TYPE_CHECKING:
    from hatchway.gateway import Gateway

logger = logging.getLogger(__name__)
PREFIX = "/mcp/"
_PRINCIPAL = "hatchway_principal"
MAX_SESSIONS = 1000
"""2025-11-25 sessions one endpoint keeps at once (a new one past it is 503; 2026-07-28 needs none)."""
SESSION_IDLE_SECONDS = 600.0
"""A 2025-11-25 session with no request for this long is closed."""


class Endpoint:
    """One virtual MCP server: its plugin, its allowlist, and the SDK server answering for it."""

    def __init__(self, config: McpEndpointConfig, plugin: PluginConfig, gateway: Gateway) -> None:
        from mcp.server.lowlevel import Server
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

        self.config = config
        self.plugin = plugin
        self.gateway = gateway
        self.server = Server(
            f"hatchway-{config.name}",
            version="0.1.0",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        self.sessions = StreamableHTTPSessionManager(
            app=self.server, max_sessions=MAX_SESSIONS, session_idle_timeout=SESSION_IDLE_SECONDS
        )

    def allows_org(self, principal: Principal) -> bool:
        allowed = self.config.organisations
        return allowed is None or principal.org_id in allowed or principal.org_name in allowed

    def exposes(self, name: str) -> bool:
        tools = self.config.tools
        return tools == "*" or any(fnmatch.fnmatchcase(name, pattern) for pattern in tools)

    def _client(self) -> Any:
        from hatchway.engine.tools.mcp.plugin_client import PluginMcpClient

        gw = self.gateway
        return PluginMcpClient(self.plugin, trusted=True, pool=gw.mcp_pool, credentials=gw.mcp_credentials)

    def _context(self, request_ctx: Any) -> RunContext:
        request = request_ctx.request
        principal: Principal = request.scope["state"][_PRINCIPAL]
        headers = {k.lower(): v for k, v in request.headers.items() if k.lower() != "authorization"}
        return RunContext.from_headers(
            principal,
            headers,
            deadline_seconds=self.gateway.settings.loop_deadline_seconds,
            known_secrets=self.gateway.models.secrets,
        )

    async def _tools(
        self, ctx: RunContext, servers: list[McpServerConfig] | None = None
    ) -> list[tuple[str, McpServerConfig, Any]]:
        client = self._client()
        found: list[tuple[str, McpServerConfig, Any]] = []
        for server in self.plugin.mcp_servers if servers is None else servers:
            try:
                tools = await client.list_tools(server, ctx)
            except HatchwayError as exc:
                logger.warning("MCP endpoint %s: %s not listed (%s)", self.config.name, server.id, exc.code)
                continue
            for tool in tools:
                name = namespaced_name(server.id, tool.name)
                if server.exposes(tool.name) and self.exposes(name):
                    found.append((name, server, tool))
        return sorted(found, key=lambda entry: entry[0])  # deterministic order

    async def _list_tools(self, request_ctx: Any, params: Any) -> Any:
        import mcp_types as types

        ctx = self._context(request_ctx)
        tools = [tool.model_copy(update={"name": name}) for name, _server, tool in await self._tools(ctx)]
        return types.ListToolsResult(tools=tools)

    async def _call_tool(self, request_ctx: Any, params: Any) -> Any:
        import mcp_types as types

        ctx = self._context(request_ctx)
        try:
            return await self._call(types, ctx, params)
        except Exception as exc:  # the SDK would send its text unredacted to 2025-era clients
            logger.exception("MCP endpoint %s: the call of %s failed", self.config.name, params.name)
            return _error(types, ctx.redact(f"the call failed ({type(exc).__name__})"))

    async def _call(self, types: Any, ctx: RunContext, params: Any) -> Any:
        # Only the server the name points at is listed: a slow one never delays the others' calls.
        servers = [s for s in self.plugin.mcp_servers if params.name.startswith(namespaced_name(s.id, ""))]
        routes = {name: (server, tool.name) for name, server, tool in await self._tools(ctx, servers)}
        route = routes.get(params.name)
        if route is None:
            return _error(types, f"No tool named '{params.name}' is available.")
        server, tool = route
        outcome = await self._client().call(server, tool, dict(params.arguments or {}), ctx)
        if outcome.error is not None:
            return _error(types, ctx.redact(outcome.error.message), code=outcome.error.code)
        result = outcome.result
        assert result is not None
        structured = result.structured if isinstance(result.structured, dict) else None
        if structured is not None:  # the tool's outputSchema promises it; redacted like the text
            structured = ctx.redact_value(structured)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=ctx.redact(result.text))],
            structured_content=structured,
            is_error=result.is_error,
        )


def _error(types: Any, message: str, *, code: str | None = None) -> Any:
    body = orjson.dumps({"error": {"code": code or "tool_error", "message": message}}).decode()
    return types.CallToolResult(content=[types.TextContent(type="text", text=body)], is_error=True)


class McpEndpoints:
    """Every endpoint of hatchway.yaml, as one ASGI app for the paths under ``/mcp/``."""

    def __init__(self, gateway: Gateway) -> None:
        settings = gateway.settings
        self.gateway = gateway
        self.endpoints: dict[str, Endpoint] = {}
        agents = {a.name: a for a in settings.agents}
        for config in settings.mcp_endpoints:
            source = config.plugin if config.plugin is not None else agents[config.agent or ""].plugin
            assert source is not None
            plugin = load_plugin(settings.resolve_path(source))
            self.endpoints[config.name] = Endpoint(config, plugin, gateway)

    async def serve(self) -> None:
        """Run every endpoint's session manager until the gateway stops (a task of the gateway's)."""
        async with contextlib.AsyncExitStack() as stack:
            for endpoint in self.endpoints.values():
                await stack.enter_async_context(endpoint.sessions.run())
            await _forever()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        name = scope["path"][len(PREFIX) :].strip("/")
        endpoint = self.endpoints.get(name)
        try:
            principal = await self._authenticate(scope)  # first: no key, no telling which names exist
            if endpoint is None:
                raise NotFound(f"no MCP endpoint '{name}'")
            if not endpoint.allows_org(principal):
                raise PermissionDenied(f"this organisation may not use the MCP endpoint '{name}'")
        except HatchwayError as exc:
            response = error_response(exc)
            if exc.status_code == 401:
                response.headers["www-authenticate"] = 'Bearer realm="hatchway"'
            await response(scope, receive, send)
            return
        scope = {
            **scope,
            "state": {**scope.get("state", {}), _PRINCIPAL: principal},
            # The SDK binds a 2025-11-25 session to the credential that opened it: this key.
            "user": _session_owner(principal),
        }
        await endpoint.sessions.handle_request(scope, receive, send)

    async def _authenticate(self, scope: Scope) -> Principal:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        return await self.gateway.orgs.authenticate(bearer_token(headers.get("authorization", "")))


def _session_owner(principal: Principal) -> Any:
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
    from mcp.server.auth.provider import AccessToken

    subject = principal.key_id or principal.org_id
    return AuthenticatedUser(AccessToken(token="", client_id=principal.org_id, scopes=[], subject=subject))


async def _forever() -> None:
    await asyncio.Event().wait()
