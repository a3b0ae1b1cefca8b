"""What observability adds to one request, measured in process (no network noise).

Times N direct ASGI calls of a trivial route through ``ObservabilityMiddleware`` and without it,
with tracing off (the default) and on (an SDK tracer provider with no exporter), plus the per-run
hooks: a ``RunScope`` that begins (gauge, span, instruments) and closes (record, metrics observer).

Run: ``.venv/bin/python -m bench.observability_overhead``.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route

from hatchway.engine.context import RunContext
from hatchway.engine.providers.routing import ResolvedModel
from hatchway.engine.run import RunScopes
from hatchway.observability.metrics import Metrics
from hatchway.observability.middleware import ObservabilityMiddleware
from hatchway.observability.telemetry import Telemetry
from hatchway.observability.tracing import Tracing
from hatchway.principal import Principal
from hatchway.store.db import Database
from hatchway.store.logs import LogWriter


async def _ok(_: Any) -> Response:
    return Response(b"{}", media_type="application/json")


def _app() -> Starlette:
    return Starlette(routes=[Route("/v1/logs/{log_id}", _ok)])


async def _time_calls(app: Any, n: int) -> float:
    """Mean seconds per request over ``n`` calls (best of 5 rounds)."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "path": "/v1/logs/log_1",
        "raw_path": b"/v1/logs/log_1",
        "query_string": b"",
        "headers": [(b"host", b"bench"), (b"authorization", b"Bearer x")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
        "scheme": "http",
        "root_path": "",
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(_: dict[str, Any]) -> None:
        return None

    rounds = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(n):
            await app(dict(scope), receive, send)
        rounds.append((time.perf_counter() - started) / n)
    return min(rounds)


def _per_run_hooks(n: int, telemetry: Telemetry | None) -> float:
    """Mean seconds per run for its scope: opened, begun (the gauge, and with tracing on the span and
    the model's instruments), ended and closed (its record and the metrics observer). Without
    ``telemetry``, only the record is made (the floor the hooks are measured against)."""

    class _Provider:
        id = "bench"

    model = ResolvedModel("gpt-4o", _Provider(), "gpt-4o")  # type: ignore[arg-type]
    writer = LogWriter(Database("sqlite+aiosqlite:///:memory:"))  # never started: records only queue
    scopes = RunScopes(telemetry or Telemetry(Metrics(), Tracing(None)), writer)
    if telemetry is not None:
        writer.observers.append(telemetry.observe_record)
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(n):
            ctx = RunContext(principal=Principal("org_1", "bench", "key_1", "default"))
            scope = scopes.open("chat.completions", ctx, model="gpt-4o")
            if telemetry is not None:
                scope.begin(name="gpt-4o", agent=None, plugin_source=None).model(model)
            scope.end(200)
            scope.close()
        best = min(best, (time.perf_counter() - started) / n)
    return best


def measure(n: int = 20_000) -> dict[str, float]:
    """Microseconds per request for each configuration."""
    base = asyncio.run(_time_calls(_app(), n))
    off = Tracing(None)
    on = Tracing(TracerProvider())
    metrics_only = asyncio.run(_time_calls(ObservabilityMiddleware(_app(), Metrics(), off), n))
    traced = asyncio.run(_time_calls(ObservabilityMiddleware(_app(), Metrics(), on), n))
    runs = n // 10
    record_only = _per_run_hooks(runs, None)
    return {
        "bare app (µs/request)": base * 1e6,
        "middleware, tracing off: added µs": (metrics_only - base) * 1e6,
        "middleware, tracing on: added µs": (traced - base) * 1e6,
        "per-run hooks, tracing off: added µs": (
            _per_run_hooks(runs, Telemetry(Metrics(), off)) - record_only
        )
        * 1e6,
        "per-run hooks, tracing on: added µs": (_per_run_hooks(runs, Telemetry(Metrics(), on)) - record_only)
        * 1e6,
    }


def main() -> None:
    figures = measure()
    width = max(map(len, figures))
    for name, value in figures.items():
        print(f"{name:<{width}}  {value:8.1f}")
    print(f"(best of 5 rounds of {20_000} requests; python {sys.version.split()[0]})")


if __name__ == "__main__":
    main()
