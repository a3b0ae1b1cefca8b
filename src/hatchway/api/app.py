"""``create_app``: the ASGI application over one Gateway."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from types import MappingProxyType

from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from hatchway import __version__
from hatchway.api import (
    admin,
    approvals,
    connections,
    health,
    logs,
    mcp_servers,
    messages,
    metrics,
    models,
    operations,
    response_tree,
    responses,
    responses_compact,
    responses_socket,
    secrets,
    sso,
    tool_pins,
    usage,
)
from hatchway.api.chat import ChatCompletionsApp
from hatchway.api.errors import ErrorMiddleware, error_response, install_error_handlers
from hatchway.api.openapi import install_openapi
from hatchway.api.ui import mount_dashboard
from hatchway.config.settings import Settings
from hatchway.errors import InvalidRequest
from hatchway.gateway import Gateway
from hatchway.observability.middleware import ObservabilityMiddleware


class GatewayApp(FastAPI):
    """FastAPI, with the hot routes served as plain ASGI apps ahead of its middleware and router.

    ``direct_routes`` maps an exact path to its app (each wrapped in ``ObservabilityMiddleware``,
    which the FastAPI stack would otherwise have applied). Every other request, and the lifespan,
    goes through FastAPI as usual.
    """

    direct_routes: Mapping[str, ASGIApp] = MappingProxyType({})
    mcp_endpoints: ASGIApp | None = None
    """``/mcp/{name}``: the virtual MCP servers (``api/mcp_endpoints``), when any is configured."""
    a2a_agents: ASGIApp | None = None
    """``/a2a/{agent}``: the agents published over A2A (``api/a2a.py``), when any is."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if "\x00" in scope["path"] or b"%00" in scope["query_string"]:
                await error_response(_NUL)(scope, receive, send)
                return
            direct = self.direct_routes.get(scope["path"])
            if direct is not None:
                await direct(scope, receive, send)
                return
            if self.mcp_endpoints is not None and scope["path"].startswith(_MCP_PATHS):
                await self.mcp_endpoints(scope, receive, send)
                return
            if self.a2a_agents is not None and scope["path"].startswith("/a2a/"):
                await self.a2a_agents(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


_MCP_PATHS = ("/mcp/", "/.well-known/oauth-protected-resource/mcp/")
"""The MCP endpoints, and the protected resource metadata of those in OAuth resource-server mode."""

_NUL = InvalidRequest(
    "The path or query contains a NUL character (%00), which no id or parameter may hold.",
    code="invalid_request",
)
"""Refused before any route: PostgreSQL cannot compare text with NUL in it, so an id or a filter
holding one would otherwise fail in the database, not as the caller's mistake."""


def create_app(
    settings: Settings, *, gateway: Gateway | None = None, freeze_heap: bool = False
) -> GatewayApp:
    """The gateway as an ASGI app; resources open in the lifespan and close on shutdown.

    ``freeze_heap`` (``hatchway serve``): once started, move every object alive to the garbage
    collector's permanent generation, so its collections, triggered by the allocations of requests,
    no longer walk the start-up heap (modules, settings, pools). For a process that serves only.
    """
    gw = gateway or Gateway(settings)
    endpoints = None
    if settings.mcp_endpoints:  # the MCP SDK's server loads only when an endpoint is configured
        from hatchway.api.mcp_endpoints import McpEndpoints

        endpoints = McpEndpoints(gw)

    a2a = None
    if any(agent.a2a.publish for agent in settings.agents):  # the A2A SDK loads only when one is published
        from hatchway.api.a2a import A2AAgents

        a2a = A2AAgents(gw)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await gw.start()
        gw.tasks.spawn("jobs:worker", gw.responses.background.serve())  # queued responses, with Redis
        if endpoints is not None:
            gw.tasks.spawn("mcp:endpoints", endpoints.serve())
        if a2a is not None:
            gw.tasks.spawn("a2a:push-sweep", a2a.keep_announcing())
        if freeze_heap:
            gc.collect()
            gc.freeze()
        try:
            yield
        finally:
            if endpoints is not None:
                await endpoints.close()
            if a2a is not None:
                await a2a.push.aclose()  # deliveries under way: their claims lapse to another replica
            await gw.close()

    app = GatewayApp(title="Hatchway", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.gateway = gw
    app.state.mcp_endpoints = endpoints
    """The ``McpEndpoints`` (``api/mcp_endpoints``), or None: what ``GET /v1/mcp/endpoints`` describes."""
    install_error_handlers(app)
    install_openapi(app)
    for module in (
        admin,
        approvals,
        health,
        metrics,
        models,
        logs,
        operations,
        response_tree,
        responses_compact,
        responses,
        responses_socket,
        secrets,
        usage,
    ):
        app.include_router(module.router)
    app.include_router(mcp_servers.router)
    app.include_router(connections.router)
    app.include_router(tool_pins.router)
    app.include_router(sso.router)  # /ui/login, /ui/callback, …: before the dashboard's files at /ui
    mount_dashboard(app)
    observed = {"metrics": gw.telemetry.metrics, "tracing": gw.telemetry.tracing}
    app.add_middleware(ErrorMiddleware)  # inside the observability middleware: it sees the status sent
    app.add_middleware(ObservabilityMiddleware, **observed)
    chat = ErrorMiddleware(ChatCompletionsApp(gw))
    direct = {ChatCompletionsApp.path: ObservabilityMiddleware(chat, **observed)}
    for path in (messages.ROUTE, messages.COUNT_ROUTE):  # Anthropic's API, in its error shape
        answer = ErrorMiddleware(messages.MessagesApp(gw, path), respond=messages.anthropic_error)
        direct[path] = ObservabilityMiddleware(answer, **observed)
    app.direct_routes = direct
    if endpoints is not None:  # logged, measured and answered in the gateway's error shape like /v1
        app.mcp_endpoints = ObservabilityMiddleware(ErrorMiddleware(endpoints), **observed)
    if a2a is not None:
        app.a2a_agents = ObservabilityMiddleware(ErrorMiddleware(a2a), **observed)
    return app
