"""What the gateway observes about runs: metrics always, spans when tracing is on.

``RunScope`` (``engine/run.py``) is the only caller of the run hooks here: ``run_started`` when a
run is planned (the run counts as in flight; with tracing on its span opens and ``RunInstruments``
wraps the model provider and toolsets so model and tool calls get spans of their own),
``run_left`` when its scope closes, on every exit path, and ``run_ended`` with its record, a few
milliseconds later (``RunScopes``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from hatchway.engine.providers.routing import ResolvedModel
from hatchway.engine.tools.base import ToolResult, Toolset
from hatchway.observability.metrics import Metrics
from hatchway.observability.spans import TracedProvider, TracedToolset, describe_tool_call
from hatchway.observability.tracing import Tracing
from hatchway.store.logs import LogRecord, Record


@dataclass(frozen=True, slots=True)
class RunInstruments:
    """Wraps a run's model and toolsets in spans parented on the run's span (identity when off)."""

    span: Span | None = None
    tracer: Tracer | None = None

    def model(self, model: ResolvedModel) -> ResolvedModel:
        if self.span is None or self.tracer is None:
            return model
        provider = TracedProvider(model.provider, self.tracer, trace.set_span_in_context(self.span))
        return dataclasses.replace(model, provider=provider)

    @contextlib.contextmanager
    def tool_call(self, name: str) -> Iterator[Callable[[ToolResult], None]]:
        """One ``execute_tool {name}`` span around a call made outside a toolset (an MCP endpoint's);
        the function it gives describes the span by the call's result."""
        if self.span is None or self.tracer is None:
            yield lambda result: None
            return
        with self.tracer.start_as_current_span(
            f"execute_tool {name}",
            context=trace.set_span_in_context(self.span),
            kind=SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.type": "extension",
            },
        ) as span:
            yield lambda result: describe_tool_call(span, result)

    def toolset(self, toolset: Toolset) -> Toolset:
        if self.span is None or self.tracer is None:
            return toolset
        return TracedToolset(toolset, self.tracer, trace.set_span_in_context(self.span))


class Telemetry:
    """The gateway's metrics and tracing, and the hooks that tie a run to both."""

    def __init__(self, metrics: Metrics, tracing: Tracing) -> None:
        self.metrics = metrics
        self.tracing = tracing

    def run_started(self, name: str, attributes: dict[str, Any]) -> Span | None:
        """Count a run in flight; with tracing on, open its ``invoke_agent`` span."""
        self.metrics.runs_in_flight.inc()
        tracer = self.tracing.tracer
        if tracer is None:
            return None
        # Parent: the HTTP request's span, or the tool call spawning a child.
        return tracer.start_span(f"invoke_agent {name}", kind=SpanKind.INTERNAL, attributes=attributes)

    def instruments(self, span: Span | None) -> RunInstruments:
        return RunInstruments(span, self.tracing.tracer)

    def run_left(self) -> None:
        """The run's scope closed: it is no longer in flight."""
        self.metrics.runs_in_flight.dec()

    def run_ended(self, span: Span | None, record: LogRecord | None, *, end_time: int | None = None) -> None:
        """The run's span ends (at ``end_time``, ns since the epoch: when its scope closed),
        described by its record (None: handed to the job queue, whose worker records it)."""
        if span is None:
            return
        if record is None:
            span.set_attribute("hatchway.status", "queued")
            span.end(end_time=end_time)
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
        span.set_attributes(guard_attributes(record.steps or ()))
        if record.status != "ok":
            span.set_status(Status(StatusCode.ERROR, f"HTTP {record.http_status}"))
        span.end(end_time=end_time)

    def observe_record(self, record: Record) -> None:
        """Every record the log writer receives feeds the run metrics."""
        self.metrics.observe_record(record)


def guard_attributes(steps: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """What the guards found in a run's tool results, for its span: how many findings, and which
    detectors, kinds and actions (sorted, each once); nothing when they found nothing."""
    findings = [
        f
        for step in steps
        if step.get("type") in ("tool_call", "tool_description") and step.get("guard")
        for f in step["guard"]["findings"]
    ]
    if not findings:
        return {}
    return {
        "hatchway.guard.findings": len(findings),
        "hatchway.guard.detectors": sorted({str(f["detector"]) for f in findings}),
        "hatchway.guard.kinds": sorted({str(f["kind"]) for f in findings}),
        "hatchway.guard.actions": sorted({str(f.get("action") or "") for f in findings}),
    }
