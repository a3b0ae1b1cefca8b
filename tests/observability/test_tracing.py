"""OpenTelemetry spans of real runs: the request, each model call (``chat {model}``) and each tool call
(``execute_tool {name}``), nested across subagents; and export over OTLP/HTTP to a real receiver."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.support.agent_loop import USER, rounds, rule_for, summarise
from tests.support.mcp_servers import McpTestServer
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import ServerThread, wait_until


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracer_provider(exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def children_of(spans: list[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]


def only(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    [span] = [s for s in spans if s.name == name]
    return span


def finished_request_span(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    """Every span, once the request's server span (it ends after the last byte is sent) and its run's
    span (when the run is recorded, a few ms later: ``engine/run.py``) have ended."""

    def ready() -> list[ReadableSpan] | None:
        spans = list(exporter.get_finished_spans())
        requests = [s for s in spans if s.name == name]
        runs = (
            [s for s in children_of(spans, requests[-1]) if s.name.startswith("invoke_agent")]
            if requests
            else []
        )
        return spans if runs else None

    return wait_until(ready, message=f"the {name} span")


def test_a_run_with_two_tool_calls_is_one_span_tree(
    mcp_server_factory: Callable[..., McpTestServer],
    gateway_factory,
    llm: ScriptedLLM,
    tmp_path: Path,
    tracer_provider: TracerProvider,
    exporter: InMemorySpanExporter,
) -> None:
    search = mcp_server_factory("search")
    calc = mcp_server_factory("calc")
    plugin = {
        "mcp_servers": [
            {"id": "search", "url": search.url, "tools": ["echo"]},
            {"id": "calc", "url": calc.url, "tools": ["add", "fail"]},
        ]
    }
    gateway = gateway_factory(
        **rule_for(tmp_path, plugin), gateway_options={"tracer_provider": tracer_provider}
    )
    llm.handler = rounds(
        Reply(
            tool_calls=[("search__echo", {"text": "hi"}, "call_a"), ("calc__fail", {}, "call_b")],
            prompt_tokens=30,
            completion_tokens=4,
        ),
        summarise,
    )

    gateway.client().chat.completions.create(model="gpt-4o", messages=USER)

    spans = finished_request_span(exporter, "POST /v1/chat/completions")
    request = only(spans, "POST /v1/chat/completions")
    assert request.kind is SpanKind.SERVER and request.parent is None
    assert request.attributes["http.route"] == "/v1/chat/completions"
    assert request.attributes["http.response.status_code"] == 200
    [run] = children_of(spans, request)
    assert run.name == "invoke_agent gpt-4o"
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run.attributes["hatchway.plugin_source"] == "rule:research"
    assert run.attributes["hatchway.rounds"] == 2
    assert run.attributes["gen_ai.usage.input_tokens"] == 30 + 11
    under_run = sorted(children_of(spans, run), key=lambda s: s.start_time)
    assert len(under_run) == 4
    assert under_run[0].name == under_run[3].name == "chat gpt-4o-2024"
    assert {s.name for s in under_run[1:3]} == {"execute_tool search__echo", "execute_tool calc__fail"}

    first_model = under_run[0]
    assert first_model.kind is SpanKind.CLIENT
    assert dict(first_model.attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o-2024",
        "gen_ai.provider.name": "openai",
        "gen_ai.system": "openai",
        "hatchway.provider.id": "upstream",
        "hatchway.stream": False,
        "gen_ai.response.model": "gpt-4o-2024",
        "gen_ai.response.finish_reasons": ("tool_calls",),
        "gen_ai.usage.input_tokens": 30,
        "gen_ai.usage.output_tokens": 4,
        "gen_ai.response.id": first_model.attributes["gen_ai.response.id"],
    }
    echo = only(spans, "execute_tool search__echo")
    assert echo.attributes["gen_ai.operation.name"] == "execute_tool"
    assert echo.attributes["gen_ai.tool.name"] == "search__echo"
    assert echo.attributes["gen_ai.tool.call.id"] == "call_a"
    assert echo.attributes["hatchway.tool.server"] == "search"
    assert echo.attributes["hatchway.tool.outcome"] == "ok"
    assert echo.status.status_code is StatusCode.UNSET
    failed = only(spans, "execute_tool calc__fail")
    assert failed.attributes["hatchway.tool.server"] == "calc"
    assert failed.status.status_code is StatusCode.ERROR and failed.attributes["error.type"] == "tool_error"
    assert {s.context.trace_id for s in spans if s.name != "GET /v1/logs"} == {request.context.trace_id}


def test_subagent_children_nest_under_the_tool_call_that_spawned_them(
    gateway_factory, llm: ScriptedLLM, tracer_provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    def script(body: dict[str, Any]) -> Reply:
        task = next(m["content"] for m in body["messages"] if m["role"] == "user")
        if any(m["role"] == "tool" for m in body["messages"]):
            return Reply("both done")
        if task == "top":
            return Reply(tool_calls=[("spawn_subagent", {"task": "a"}), ("spawn_subagent", {"task": "b"})])
        return Reply(f"child {task}")

    llm.handler = script
    gateway = gateway_factory(
        agents=[{"name": "lead", "model": "gpt-4o", "subagents": {"enabled": True}}],
        gateway_options={"tracer_provider": tracer_provider},
    )

    parent = gateway.client().responses.create(model="agent:lead", input="top")

    spans = finished_request_span(exporter, "POST /v1/responses")
    request = only(spans, "POST /v1/responses")
    [top] = children_of(spans, request)
    assert top.name == "invoke_agent lead" and top.attributes["hatchway.response_id"] == parent.id
    assert top.attributes["hatchway.depth"] == 0
    spawns = [s for s in children_of(spans, top) if s.name == "execute_tool spawn_subagent"]
    assert len(spawns) == 2
    child_runs = []
    for spawn in spawns:
        [child] = children_of(spans, spawn)
        assert child.name == "invoke_agent lead" and child.attributes["hatchway.depth"] == 1
        assert spawn.attributes["hatchway.child_response_id"] == child.attributes["hatchway.response_id"]
        assert [s.name for s in children_of(spans, child)] == ["chat gpt-4o-2024"]
        child_runs.append(child)
    assert len({c.context.span_id for c in child_runs}) == 2
    assert len([s for s in children_of(spans, top) if s.name.startswith("chat ")]) == 2
    assert {s.context.trace_id for s in spans} == {request.context.trace_id}


class OtlpReceiver:
    """A minimal OTLP/HTTP traces endpoint on loopback that keeps what it is sent."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self._lock = threading.Lock()
        self.server = ServerThread(Starlette(routes=[Route("/v1/traces", self._traces, methods=["POST"])]))

    async def _traces(self, request: Request) -> Response:
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.body())
        with self._lock:
            self.requests.append(message)
        return Response(b"", media_type="application/x-protobuf")

    def span_names(self) -> list[str]:
        with self._lock:
            return [
                span.name
                for req in self.requests
                for resource in req.resource_spans
                for scope in resource.scope_spans
                for span in scope.spans
            ]

    def service_names(self) -> set[str]:
        with self._lock:
            return {
                attr.value.string_value
                for req in self.requests
                for resource in req.resource_spans
                for attr in resource.resource.attributes
                if attr.key == "service.name"
            }


def test_spans_are_exported_over_otlp_when_configured(gateway_factory, llm: ScriptedLLM) -> None:
    receiver = OtlpReceiver()
    receiver.server.start()
    try:
        gateway = gateway_factory(otel={"endpoint": receiver.server.url, "service_name": "hatchway-test"})
        llm.reply("hello")
        gateway.client().chat.completions.create(model="gpt-4o", messages=USER)
        gateway.stop()  # shutting down flushes the batch processor

        assert {"POST /v1/chat/completions", "invoke_agent gpt-4o", "chat gpt-4o-2024"} <= set(
            receiver.span_names()
        )
        assert receiver.service_names() == {"hatchway-test"}
    finally:
        receiver.server.stop()


def test_tracing_is_off_without_configuration(gateway, llm: ScriptedLLM) -> None:
    llm.reply("hello")
    gateway.client().chat.completions.create(model="gpt-4o", messages=USER)
    assert gateway.gateway.telemetry.tracing.tracer is None


def test_streamed_and_failed_model_calls_have_their_spans(
    gateway_factory, llm: ScriptedLLM, tracer_provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    gateway = gateway_factory(gateway_options={"tracer_provider": tracer_provider})
    client = gateway.client()
    llm.reply("streamed answer", prompt_tokens=5, completion_tokens=3)
    chunks = list(
        client.chat.completions.create(
            model="gpt-4o", messages=USER, stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks[-1].usage.total_tokens == 8
    streamed = finished_request_span(exporter, "POST /v1/chat/completions")
    [model] = [s for s in streamed if s.name == "chat gpt-4o-2024"]
    assert model.attributes["hatchway.stream"] is True
    assert model.attributes["gen_ai.usage.output_tokens"] == 3
    exporter.clear()

    llm.reply(status=503, error="upstream is down")
    response = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": "gpt-4o", "messages": USER},
        headers={"authorization": f"Bearer {gateway.key}"},
    )
    assert response.status_code == 502
    spans = finished_request_span(exporter, "POST /v1/chat/completions")
    failed_model = only(spans, "chat gpt-4o-2024")
    assert failed_model.status.status_code is StatusCode.ERROR
    assert failed_model.attributes["error.type"] == "ProviderStatusError"
    run = only(spans, "invoke_agent gpt-4o")
    assert run.status.status_code is StatusCode.ERROR and run.attributes["hatchway.status"] == "error"
    assert only(spans, "POST /v1/chat/completions").status.status_code is StatusCode.ERROR


def test_an_mcp_endpoint_call_is_a_run_span_with_its_tool_span(
    gateway_factory: Any,
    mcp_server_factory: Any,
    tracer_provider: TracerProvider,
    exporter: InMemorySpanExporter,
    tmp_path: Path,
) -> None:
    import asyncio

    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from tests.support.agent_loop import write_plugin

    upstream = mcp_server_factory("calc")
    plugin = write_plugin(tmp_path, "calc", {"mcp_servers": [{"id": "calc", "url": upstream.url}]})
    gateway = gateway_factory(
        allow_private_mcp_urls=True,
        mcp_endpoints=[{"name": "tools", "plugin": plugin}],
        gateway_options={"tracer_provider": tracer_provider},
    )

    async def call() -> None:
        http = httpx2.AsyncClient(headers={"authorization": f"Bearer {gateway.key}"}, timeout=20)
        async with Client(streamable_http_client(f"{gateway.url}/mcp/tools", http_client=http)) as client:
            await client.call_tool("calc__add", {"a": 1, "b": 2})

    asyncio.run(call())
    spans = wait_until(
        lambda: (
            (s := list(exporter.get_finished_spans()))
            and any(x.name == "invoke_agent mcp:tools" for x in s)
            and s
        ),
        message="the endpoint's run span",
    )
    run = only(spans, "invoke_agent mcp:tools")
    [tool] = [s for s in children_of(spans, run) if s.name == "execute_tool calc__add"]
    assert (
        tool.attributes["hatchway.tool.server"] == "calc" and tool.attributes["hatchway.tool.outcome"] == "ok"
    )
