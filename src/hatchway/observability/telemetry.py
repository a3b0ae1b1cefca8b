"""What the gateway observes about runs: metrics always, spans when tracing is on.

``Telemetry.instrument(plan, ctx)`` is called once a run is planned: it counts the run as in
flight, opens the run's span and wraps the plan's provider and toolsets so model and tool calls
get spans of their own. The run ends when its request-log record is made
(``RequestTrace.to_record`` calls the hook left in ``ctx.extras``), which closes both.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from hatchway.engine.context import RunContext
from hatchway.observability.metrics import Metrics
from hatchway.observability.runlog import RUN_END_KEY
from hatchway.observability.spans import TracedProvider, TracedToolset
from hatchway.observability.tracing import Tracing
from hatchway.store.logs import Record

if TYPE_CHECKING:
    from hatchway.gateway import RunPlan


class Telemetry:
    """The gateway's metrics and tracing, and the hooks that tie a run to both."""

    def __init__(self, metrics: Metrics, tracing: Tracing) -> None:
        self.metrics = metrics
        self.tracing = tracing

    def instrument(self, plan: RunPlan, ctx: RunContext) -> None:
        """Count the run in flight; with tracing on, open its span and wrap its model and tools."""
        self.metrics.runs_in_flight.inc()
        span = self._start_run(plan, ctx) if self.tracing.tracer is not None else None
        ctx.extras[RUN_END_KEY] = functools.partial(self._run_ended, span)

    def _start_run(self, plan: RunPlan, ctx: RunContext) -> Span:
        tracer = self.tracing.tracer
        assert tracer is not None
        name = plan.agent.name if plan.agent is not None else plan.public_model
        span = tracer.start_span(  # parent: the HTTP request's span, or the tool call spawning a child
            f"invoke_agent {name}",
            kind=SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": name,
                "gen_ai.request.model": plan.public_model,
                "hatchway.org_id": ctx.org_id,
                "hatchway.depth": ctx.depth,
                "hatchway.plugin_source": plan.plugin_source or "",
            },
        )
        if ctx.response_id:
            span.set_attribute("hatchway.response_id", ctx.response_id)
        parent = trace.set_span_in_context(span)
        plan.model = dataclasses.replace(
            plan.model, provider=TracedProvider(plan.model.provider, tracer, parent)
        )
        plan.toolsets = [TracedToolset(t, tracer, parent) for t in plan.toolsets]
        return span

    def _run_ended(self, span: Span | None, record: Record) -> None:
        self.metrics.runs_in_flight.dec()
        if span is None:
            return
        span.set_attributes(
            {
                "hatchway.request_log_id": record.id,
                "hatchway.status": record.status,
                "hatchway.rounds": record.rounds,
                "hatchway.max_rounds_hit": record.max_rounds_hit,
                "gen_ai.usage.input_tokens": record.prompt_tokens,
                "gen_ai.usage.output_tokens": record.completion_tokens,
            }
        )
        if record.finish_reason:
            span.set_attribute("gen_ai.response.finish_reasons", [record.finish_reason])
        if record.status != "ok":
            span.set_status(Status(StatusCode.ERROR, f"HTTP {record.http_status}"))
        span.end()

    def observe_record(self, record: Record) -> None:
        """Every record the log writer receives feeds the run metrics."""
        self.metrics.observe_record(record)
