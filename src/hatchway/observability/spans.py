"""GenAI spans around one run's model calls and tool calls, as thin wrappers.

``TracedProvider`` wraps the run's model provider (``chat {model}`` spans) and ``TracedToolset``
each gateway toolset (``execute_tool {name}`` spans), following the OpenTelemetry GenAI semantic
conventions. Both parent their spans on the run's span explicitly: the loop's events are an async
generator, which cannot hold a current span across its yields. A tool span is made current while
the tool runs, so a hosted subagent's child run nests under the call that spawned it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from hatchway.engine.context import RunContext
from hatchway.engine.items import FunctionCall, Item, ToolSpec, Usage
from hatchway.engine.providers.base import ModelProvider, ModelRequest, ModelResponse, StreamDone, StreamEvent
from hatchway.engine.tools.base import RunPreamble, ToolResult, Toolset

PROVIDER_NAME = "openai"
"""Every upstream speaks the OpenAI wire format; the configured provider id is ``hatchway.provider.id``."""


class TracedProvider(ModelProvider):
    """A provider whose every request (or stream) is one ``chat {model}`` client span."""

    def __init__(self, inner: ModelProvider, tracer: Tracer, parent: Context) -> None:
        self.inner = inner
        self.id = inner.id
        self.tracer = tracer
        self.parent = parent

    def estimate_cost(self, model: str, usage: Usage) -> float | None:
        return self.inner.estimate_cost(model, usage)

    def _start(self, req: ModelRequest, streaming: bool) -> Span:
        return self.tracer.start_span(
            f"chat {req.model}",
            context=self.parent,
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": req.model,
                "gen_ai.provider.name": PROVIDER_NAME,
                "gen_ai.system": PROVIDER_NAME,
                "hatchway.provider.id": self.id,
                "hatchway.stream": streaming,
            },
        )

    async def request(self, req: ModelRequest) -> ModelResponse:
        span = self._start(req, streaming=False)
        try:
            response = await self.inner.request(req)
        except Exception as exc:
            _failed(span, exc)
            raise
        _answered(span, response)
        return response

    async def stream(self, req: ModelRequest) -> AsyncIterator[StreamEvent]:
        span = self._start(req, streaming=True)
        inner = self.inner.stream(req)
        response: ModelResponse | None = None
        failed = False
        try:
            async for event in inner:
                if isinstance(event, StreamDone):
                    response = event.response
                yield event
        except Exception as exc:
            failed = True
            _failed(span, exc)
            raise
        finally:
            aclose = getattr(inner, "aclose", None)
            if aclose is not None:
                await aclose()
            if response is not None:
                _answered(span, response)
            elif not failed:
                span.end()  # the consumer stopped early (deadline, client gone)

    async def aclose(self) -> None:
        """The inner provider is the gateway's; it closes it."""


def _answered(span: Span, response: ModelResponse) -> None:
    span.set_attributes(
        {
            "gen_ai.response.model": response.model or "",
            "gen_ai.response.finish_reasons": [response.finish_reason],
            "gen_ai.usage.input_tokens": response.usage.prompt_tokens,
            "gen_ai.usage.output_tokens": response.usage.completion_tokens,
        }
    )
    if response_id := response.raw.get("id"):
        span.set_attribute("gen_ai.response.id", str(response_id))
    span.end()


def _failed(span: Span, exc: BaseException) -> None:
    span.set_attribute("error.type", type(exc).__name__)
    span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
    span.end()


class TracedToolset(Toolset):
    """A toolset whose every call is one ``execute_tool {name}`` span, current while it runs."""

    def __init__(self, inner: Toolset, tracer: Tracer, parent: Context) -> None:
        self.inner = inner
        self.tracer = tracer
        self.parent = parent

    async def list_tools(self, ctx: RunContext) -> list[ToolSpec]:
        return await self.inner.list_tools(ctx)

    async def before_run(self, items: list[Item], ctx: RunContext) -> RunPreamble | None:
        return await self.inner.before_run(items, ctx)

    async def call_tool(self, call: FunctionCall, ctx: RunContext) -> ToolResult:
        with self.tracer.start_as_current_span(
            f"execute_tool {call.name}",
            context=self.parent,
            kind=SpanKind.INTERNAL,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": call.name,
                "gen_ai.tool.call.id": call.call_id,
                "gen_ai.tool.type": "extension",
            },
        ) as span:
            result = await self.inner.call_tool(call, ctx)
            describe_tool_call(span, result)
            return result


def describe_tool_call(span: Span, result: ToolResult) -> None:
    """A tool call's span described by its result (its ``meta``: outcome, server, retries…)."""
    meta: dict[str, Any] = result.meta
    attributes: dict[str, Any] = {
        "hatchway.tool.outcome": str(meta.get("outcome") or ("error" if result.is_error else "ok")),
        "hatchway.tool.cached": bool(meta.get("cached", False)),
        "hatchway.tool.retries": int(meta.get("retries", 0) or 0),
    }
    if server := meta.get("server"):
        attributes["hatchway.tool.server"] = str(server)
    if tool := meta.get("tool"):
        attributes["hatchway.tool.remote_name"] = str(tool)
    for key in ("operation_id", "child_response_id"):
        if value := meta.get(key):
            attributes[f"hatchway.{key}"] = str(value)
    span.set_attributes(attributes)
    if result.is_error:
        code = str(meta.get("error_code") or "tool_error")
        span.set_attribute("error.type", code)
        span.set_status(Status(StatusCode.ERROR, code))
