"""Every way a run can end, through the real adapters: afterwards ``runs_in_flight`` is back at 0, every
span the run opened has ended, and the run has exactly one record.

The exit paths: an answer, an upstream error, an unexpected exception, a client that hangs up
mid-stream, a cancel, a background response through the job queue (real Redis), an abandoned
WebSocket turn, and a body that could not be serialised upstream (refused as it is read).
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from websockets.sync.client import connect

from tests.support.agent_loop import USER, rounds, rule_for, summarise
from tests.support.backends import REDIS_URL
from tests.support.gateway import RunningGateway
from tests.support.mcp_servers import McpTestServer
from tests.support.metrics import scrape, value
from tests.support.replicas import purge_redis, unique_redis_prefix
from tests.support.responses_api import poll
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import wait_until


class SpanLedger(SpanProcessor):
    """Every span started and ended in a gateway, so a test can ask which are still open."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started: dict[int, str] = {}
        self.ended: set[int] = set()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        with self._lock:
            self.started[span.context.span_id] = span.name

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            assert span.context is not None
            self.ended.add(span.context.span_id)

    def open_run_spans(self) -> list[str]:
        """Spans still open, but for the GET requests a test makes to look (``/metrics``, ``/v1/logs``)."""
        with self._lock:
            return [n for i, n in self.started.items() if i not in self.ended and not n.startswith("GET")]

    def run_spans(self) -> list[str]:
        with self._lock:
            return [n for n in self.started.values() if n.startswith("invoke_agent")]


@pytest.fixture
def ledger() -> SpanLedger:
    return SpanLedger()


@pytest.fixture
def traced(
    gateway_factory: Callable[..., RunningGateway], ledger: SpanLedger
) -> Callable[..., RunningGateway]:
    """``traced(**config)``: a gateway whose spans all go to ``ledger``."""

    def make(**config: Any) -> RunningGateway:
        provider = TracerProvider()
        provider.add_span_processor(ledger)
        return gateway_factory(gateway_options={"tracer_provider": provider}, **config)

    return make


def records(gateway: RunningGateway) -> list[dict[str, Any]]:
    response = httpx.get(f"{gateway.url}/v1/logs", headers={"authorization": f"Bearer {gateway.key}"})
    assert response.status_code == 200, response.text
    return response.json()["data"]


def settled(ledger: SpanLedger, *gateways: RunningGateway, runs: int = 1) -> dict[str, Any]:
    """Wait until every run has ended everywhere; then there is exactly one record, returned."""

    def done() -> bool:
        in_flight = sum(value(scrape(g), "hatchway_runs_in_flight") for g in gateways)
        return in_flight == 0 and not ledger.open_run_spans() and len(records(gateways[0])) >= 1

    wait_until(done, timeout=20, interval=0.05, message="every run to end")
    assert [value(scrape(g), "hatchway_runs_in_flight") for g in gateways] == [0] * len(gateways)
    assert ledger.open_run_spans() == []
    assert len(ledger.run_spans()) == runs
    [record] = records(gateways[0])
    return record


def test_a_run_that_answers(traced, llm: ScriptedLLM, ledger: SpanLedger) -> None:
    gateway = traced()
    llm.reply("hello")

    gateway.client().chat.completions.create(model="gpt-4o", messages=USER)

    record = settled(ledger, gateway)
    assert (record["status"], record["http_status"]) == ("ok", 200)


def test_an_upstream_error_fails_the_response_and_records_it(
    traced, llm: ScriptedLLM, ledger: SpanLedger
) -> None:
    gateway = traced()
    llm.reply(status=503, error="overloaded")

    response = httpx.post(
        f"{gateway.url}/v1/responses",
        json={"model": "gpt-4o", "input": "x"},
        headers={"authorization": f"Bearer {gateway.key}"},
    )

    assert response.status_code == 502
    record = settled(ledger, gateway)
    assert (record["status"], record["http_status"]) == ("error", 502)


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_an_unexpected_exception(traced, llm: ScriptedLLM, ledger: SpanLedger, api: str) -> None:
    gateway = traced()
    llm.reply(raw_body=b'{"choices": [{"message": "not an object"}]}')  # 200, but not a completion

    if api == "chat":
        response = httpx.post(
            f"{gateway.url}/v1/chat/completions",
            json={"model": "gpt-4o", "messages": USER},
            headers={"authorization": f"Bearer {gateway.key}"},
        )
    else:
        response = httpx.post(
            f"{gateway.url}/v1/responses",
            json={"model": "gpt-4o", "input": "x"},
            headers={"authorization": f"Bearer {gateway.key}"},
        )

    assert response.status_code >= 500 and "Traceback" not in response.text
    record = settled(ledger, gateway)
    assert record["status"] == "error" and record["http_status"] >= 500


def test_a_client_that_hangs_up_mid_stream(
    mcp_server_factory: Callable[..., McpTestServer],
    traced,
    llm: ScriptedLLM,
    ledger: SpanLedger,
    tmp_path: Path,
) -> None:
    server = mcp_server_factory("s")
    gateway = traced(**rule_for(tmp_path, {"mcp_servers": [{"id": "s", "url": server.url}]}))
    llm.handler = rounds(Reply(tool_calls=[("s__slow", {"ms": 30_000})]), summarise)

    with httpx.stream(
        "POST",
        f"{gateway.url}/v1/chat/completions",
        json={"model": "gpt-4o", "messages": USER, "stream": True},
        headers={"authorization": f"Bearer {gateway.key}"},
    ) as stream:
        assert stream.status_code == 200
        first = next(stream.iter_lines())  # the stream has started; the tool is running
        assert first.startswith("data: ")
        wait_until(lambda: server.tool_calls("slow") == 1, message="the slow tool to be called")
    # Leaving the block closed the connection mid-stream.

    record = settled(ledger, gateway)
    assert record["http_status"] == 499 and record["status"] == "error"


def test_a_cancelled_background_response(traced, llm: ScriptedLLM, ledger: SpanLedger) -> None:
    gateway = traced()
    llm.reply("too late", delay=30)
    client = gateway.client()
    created = client.responses.create(model="gpt-4o", input="long job", background=True)
    wait_until(lambda: llm.requests, message="the upstream call to start")

    assert client.responses.cancel(created.id).status == "cancelled"

    record = settled(ledger, gateway)
    assert record["response_id"] == created.id and record["http_status"] == 499


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.skipif(not REDIS_URL, reason="Redis not configured: set HATCHWAY_TEST_REDIS_URL")
def test_a_background_response_through_the_queue(
    traced, llm: ScriptedLLM, ledger: SpanLedger, pg_database_url: str
) -> None:
    prefix = unique_redis_prefix()
    shared = {"database_url": pg_database_url, "redis_url": REDIS_URL, "redis_prefix": prefix}
    try:
        front = traced(**shared, background={"serve_concurrency": 0})  # accepts, never runs
        worker = traced(**shared)
        llm.reply("ran on the worker")
        created = front.client().responses.create(model="gpt-4o", input="x", background=True)
        assert created.status == "queued"
        poll(front.client(), created.id, ("completed",), timeout=20)

        record = settled(ledger, front, worker)
        assert record["response_id"] == created.id and record["status"] == "ok"
    finally:
        purge_redis(REDIS_URL, prefix)


def test_an_abandoned_websocket_turn(traced, llm: ScriptedLLM, ledger: SpanLedger) -> None:
    gateway = traced()
    gate = threading.Event()
    llm.reply("nobody reads this", gate=gate)
    url = gateway.url.replace("http", "ws") + "/v1/responses"

    with connect(url, additional_headers={"Authorization": f"Bearer {gateway.key}"}) as ws:
        ws.send(json.dumps({"type": "response.create", "model": "gpt-4o", "input": "x"}))
        assert json.loads(ws.recv(timeout=10))["type"] == "response.created"
        wait_until(lambda: llm.requests, message="the upstream call to start")
        ws.socket.shutdown(socket.SHUT_RDWR)  # the client is gone mid-turn, without a close frame
    gate.set()

    record = settled(ledger, gateway)
    assert record["route"] == "responses"


def test_a_body_that_could_not_be_serialised_upstream(traced, llm: ScriptedLLM, ledger: SpanLedger) -> None:
    gateway = traced()
    llm.reply("unused")
    nested: Any = "deep"
    for _ in range(300):  # JSON that parses (1024 levels) but could not be written back (254 levels)
        nested = [nested]

    response = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        content=json.dumps({"model": "gpt-4o", "messages": USER, "metadata": {"x": nested}}),
        headers={"authorization": f"Bearer {gateway.key}", "content-type": "application/json"},
    )

    assert response.status_code == 400 and response.json()["error"]["param"].startswith("metadata.x[0]")
    assert llm.requests == []
    record = settled(ledger, gateway, runs=0)  # refused as it was read: no run was planned
    assert (record["status"], record["http_status"]) == ("error", 400)
