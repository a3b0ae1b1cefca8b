"""What observability adds to one request, measured in process (no network noise).

Times N direct ASGI calls of a trivial route through ``ObservabilityMiddleware`` and without it,
with tracing off (the default) and on (an SDK tracer provider with no exporter), plus the per-run
hooks: ``Telemetry.instrument`` + the record observer.

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

from hatchway.engine.context import Principal, RunContext
from hatchway.engine.providers.routing import ResolvedModel
from hatchway.observability.metrics import Metrics
from hatchway.observability.middleware import ObservabilityMiddleware
from hatchway.observability.runlog import RequestTrace
from hatchway.observability.telemetry import Telemetry
from hatchway.observability.tracing import Tracing


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
    """Mean seconds per run for making its log record, with (or without) the telemetry hooks:
    ``instrument()`` at plan time, the run-end hook and the metrics observer at record time."""
    from hatchway.gateway import RunPlan

    class _Provider:
        id = "bench"

    model = ResolvedModel("gpt-4o", _Provider(), "gpt-4o")  # type: ignore[arg-type]
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(n):
            ctx = RunContext(principal=Principal("org_1", "bench", "key_1", "default"))
            trace = RequestTrace("chat.completions", ctx, model="gpt-4o")
            plan = RunPlan(model=model, public_model="gpt-4o")
            if telemetry is not None:
                telemetry.instrument(plan, ctx)
            record = trace.to_record(http_status=200)
            if telemetry is not None:
                telemetry.observe_record(record)
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
