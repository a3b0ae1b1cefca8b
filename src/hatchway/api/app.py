"""``create_app``: the ASGI application over one Gateway."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from hatchway.api import (
    chat,
    health,
    logs,
    mcp_servers,
    metrics,
    models,
    operations,
    response_tree,
    responses,
    responses_compact,
    responses_socket,
    secrets,
)
from hatchway.api.errors import install_error_handlers
from hatchway.api.responses_worker import serve_queue
from hatchway.api.ui import mount_dashboard
from hatchway.config.settings import Settings
from hatchway.gateway import Gateway
from hatchway.observability.middleware import ObservabilityMiddleware


def create_app(settings: Settings, *, gateway: Gateway | None = None) -> FastAPI:
    """The gateway as an ASGI app; resources open in the lifespan and close on shutdown."""
    gw = gateway or Gateway(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await gw.start()
        gw.tasks.spawn("jobs:worker", serve_queue(gw))  # background responses off the Redis queue
        try:
            yield
        finally:
            await gw.close()

    app = FastAPI(title="Hatchway", version="0.1.0", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.gateway = gw
    install_error_handlers(app)
    for module in (
        health,
        metrics,
        models,
        chat,
        logs,
        operations,
        response_tree,
        responses_compact,
        responses,
        responses_socket,
        secrets,
    ):
        app.include_router(module.router)
    app.include_router(mcp_servers.router)
    mount_dashboard(app)
    app.add_middleware(ObservabilityMiddleware, metrics=gw.telemetry.metrics, tracing=gw.telemetry.tracing)
    return app
