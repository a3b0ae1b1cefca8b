"""A plain ASGI middleware: HTTP metrics for every request and, with tracing on, its server span.

It measures to the last byte sent, so a stream counts for as long as it runs. The route label is
the matched route's template (``/v1/logs/{log_id}``), never the raw path, so ids do not become
series; unmatched paths are ``unmatched``.
"""

from __future__ import annotations

import time
from typing import Any

from opentelemetry.propagate import extract
from opentelemetry.trace import SpanKind, Status, StatusCode

from hatchway.observability.metrics import Metrics
from hatchway.observability.tracing import Tracing

Scope = dict[str, Any]
UNMATCHED = "unmatched"


class ObservabilityMiddleware:
    """Counts and times each HTTP request; opens a ``SERVER`` span when tracing is on."""

    def __init__(self, app: Any, metrics: Metrics, tracing: Tracing) -> None:
        self.app = app
        self.metrics = metrics
        self.tracer = tracing.tracer

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [500]  # what the client got; stays 500 if the app died before answering

        async def send_and_note(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            if self.tracer is None:
                await self.app(scope, receive, send_and_note)
            else:
                await self._traced(scope, receive, send_and_note, status)
        finally:
            self.metrics.observe_http(
                route_of(scope), scope["method"], status[0], time.perf_counter() - started
            )

    async def _traced(self, scope: Scope, receive: Any, send: Any, status: list[int]) -> None:
        assert self.tracer is not None
        method = scope["method"]
        carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        with self.tracer.start_as_current_span(
            method,
            context=extract(carrier),  # continue the caller's trace when it sends traceparent
            kind=SpanKind.SERVER,
            attributes={"http.request.method": method, "url.path": scope["path"]},
        ) as span:
            try:
                await self.app(scope, receive, send)
            finally:
                route = route_of(scope)
                span.update_name(f"{method} {route}")
                span.set_attributes({"http.route": route, "http.response.status_code": status[0]})
                if status[0] >= 500:
                    span.set_status(Status(StatusCode.ERROR))


def route_of(scope: Scope) -> str:
    """The template of the route that handled the request (set in the scope by the router)."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) and path else UNMATCHED
