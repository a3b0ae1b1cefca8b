"""Attacks on the A2A stream cap (``a2a/streams.py``, ``a2a.max_streams_per_organisation``): slots
that leak (a client gone mid-stream on either binding, an error inside the stream, a task that
ends, a cancel), one organisation taking another's, a refused stream that starts a task. Raw HTTP on
both bindings (JSON-RPC at ``/a2a/helper``, HTTP+JSON under ``/a2a/helper/rest``), limit 1."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.a2a.test_a2a_tck_findings import answers_by_text, start_gateway
from tests.support.gateway import RunningGateway
from tests.support.scripted_llm import Reply, ScriptedLLM

pytestmark = pytest.mark.anyio
BINDINGS = ["jsonrpc", "rest"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    gate = threading.Event()
    yield gate
    gate.set()


@pytest.fixture
def one_stream(tmp_path: Path, llm: ScriptedLLM, gate: threading.Event) -> Iterator[RunningGateway]:
    answers_by_text(llm, gate)
    sqlite = f"sqlite+aiosqlite:///{tmp_path / 'hatchway.db'}"
    gateway = start_gateway(tmp_path, llm, sqlite, a2a={"max_streams_per_organisation": 1})
    yield gateway
    gate.set()
    gateway.stop()


def _message(text: str, task_id: str = "") -> dict[str, Any]:
    message: dict[str, Any] = {"messageId": f"m-{text}", "role": "ROLE_USER", "parts": [{"text": text}]}
    if task_id:
        message["taskId"] = task_id
    return {"message": message}


def stream_request(
    binding: str, base: str, text: str, task_id: str = ""
) -> tuple[str, str, dict[str, Any] | None]:
    if binding == "jsonrpc":
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendStreamingMessage",
            "params": _message(text, task_id),
        }
        return "POST", base, body
    return "POST", f"{base}/rest/message:stream", _message(text, task_id)


def subscribe_request(binding: str, base: str, task_id: str) -> tuple[str, str, dict[str, Any] | None]:
    if binding == "jsonrpc":
        return (
            "POST",
            base,
            {"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": task_id}},
        )
    return "POST", f"{base}/rest/tasks/{task_id}:subscribe", {}


@asynccontextmanager
async def opened(
    http: httpx.AsyncClient, request: tuple[str, str, dict[str, Any] | None]
) -> AsyncIterator[Any]:
    """(the stream, its first event or the error it was answered with), while it stays open."""
    method, url, body = request
    async with http.stream(method, url, json=body) as answer:
        if not answer.headers.get("content-type", "").startswith("text/event-stream"):
            yield answer, {"refused": answer.status_code, "body": json.loads(await answer.aread())}
            return
        lines = answer.aiter_lines()
        async for line in lines:
            if line.startswith("data:"):
                yield (answer, lines), json.loads(line[len("data:") :])
                return
        raise AssertionError("the stream ended before its first event")


def refused(event: dict[str, Any]) -> bool:
    if "refused" in event:
        return True
    return "error" in event


def task_of(event: dict[str, Any]) -> dict[str, Any]:
    result = event.get("result", event)
    return result["task"]


async def drain(stream: Any) -> list[dict[str, Any]]:
    _, lines = stream
    return [json.loads(line[5:]) async for line in lines if line.startswith("data:")]


async def a_stream_opens(http: httpx.AsyncClient, binding: str, base: str, timeout: float = 30) -> None:
    """A new stream is taken within ``timeout`` (its slot came back); it is read to its end."""
    async with asyncio.timeout(timeout):
        while True:
            async with opened(http, stream_request(binding, base, "quick probe")) as (stream, event):
                if not refused(event):
                    await drain(stream)
                    return
            await asyncio.sleep(0.05)


def client(gateway: RunningGateway, key: str | None = None) -> httpx.AsyncClient:
    headers = {"authorization": f"Bearer {key or gateway.key}", "a2a-version": "1.0"}
    return httpx.AsyncClient(headers=headers, timeout=60)


async def tasks_listed(http: httpx.AsyncClient, base: str) -> int:
    answer = (
        await http.post(base, json={"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}})
    ).json()
    return len(answer["result"].get("tasks", []))


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_client_gone_mid_stream_gives_its_slot_back_and_a_refused_stream_starts_no_task(
    one_stream: RunningGateway, binding: str
) -> None:
    base = f"{one_stream.url}/a2a/helper"
    async with client(one_stream) as http:
        for round_ in range(3):
            async with opened(http, stream_request(binding, base, f"slow {round_}")) as (_, first):
                assert not refused(first), first
                async with opened(http, stream_request(binding, base, f"refused {round_}")) as (_, second):
                    assert refused(second), second
            # The client closed the first stream mid-run: its slot comes back.
            await a_stream_opens(http, binding, base)
        # Three slow tasks and three probes; the refused streams started none.
        assert await tasks_listed(http, base) == 6


@pytest.mark.parametrize("binding", BINDINGS)
async def test_an_error_inside_the_stream_a_failed_run_and_a_cancel_each_give_the_slot_back(
    one_stream: RunningGateway, llm: ScriptedLLM, gate: threading.Event, binding: str
) -> None:
    base = f"{one_stream.url}/a2a/helper"
    async with client(one_stream) as http:
        # An error inside the stream, after the slot is held: a message naming no waiting task.
        for _ in range(3):
            async with opened(http, stream_request(binding, base, "hi", task_id="task_nope")) as (_, event):
                assert refused(event) or "error" in json.dumps(event), event
        await a_stream_opens(http, binding, base)

        # A run that fails upstream: the stream ends failed.
        llm.handler = lambda body: Reply(status=500, text="boom")
        async with opened(http, stream_request(binding, base, "fails")) as (stream, first):
            assert not refused(first), first
            if isinstance(stream, tuple):
                await drain(stream)
        answers_by_text(llm, gate)
        await a_stream_opens(http, binding, base)

        # A cancel of the streamed task: its stream ends, its slot comes back.
        async with opened(http, stream_request(binding, base, "slow cancelled")) as (stream, first):
            task_id = task_of(first)["id"]
            cancel = await http.post(
                base, json={"jsonrpc": "2.0", "id": 2, "method": "CancelTask", "params": {"id": task_id}}
            )
            assert cancel.json()["result"]["status"]["state"] == "TASK_STATE_CANCELED", cancel.text
            events = await drain(stream)
            assert "TASK_STATE_CANCELED" in json.dumps(events[-1]), events
        await a_stream_opens(http, binding, base)

        # A subscription to a task that ends: its slot comes back.
        async with opened(http, stream_request(binding, base, "slow streamed")) as (stream, first):
            task_id = task_of(first)["id"]
        async with opened(http, subscribe_request(binding, base, task_id)) as (stream, first):
            assert not refused(first), first
            gate.set()
            await drain(stream)
        await a_stream_opens(http, binding, base)


async def test_one_organisation_holding_its_streams_leaves_anothers_alone(one_stream: RunningGateway) -> None:
    base = f"{one_stream.url}/a2a/helper"
    other_key = (await asyncio.to_thread(one_stream.new_org)).key
    async with client(one_stream) as mine, client(one_stream, other_key) as theirs:
        async with opened(mine, stream_request("jsonrpc", base, "slow mine")) as (_, first):
            assert not refused(first), first
            async with opened(mine, stream_request("rest", base, "slow again")) as (_, second):
                assert refused(second), second
            for binding in BINDINGS:
                await a_stream_opens(theirs, binding, base, timeout=5)
