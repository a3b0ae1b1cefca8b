"""An organisation holds at most ``a2a.max_streams_per_organisation`` A2A streams open on a replica
(``SendStreamingMessage`` and ``SubscribeToTask``, over all its agents): one more is refused before
it starts a task, and a stream that closes gives its slot back. Over real HTTP, JSON-RPC."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.a2a.test_a2a_tck_findings import answers_by_text, start_gateway
from tests.support.gateway import RunningGateway
from tests.support.scripted_llm import ScriptedLLM

pytestmark = pytest.mark.anyio
LIMIT = 2


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    gate = threading.Event()
    yield gate
    gate.set()  # whatever the test did, nothing stays held


@pytest.fixture
def two_streams(
    tmp_path: Path, llm: ScriptedLLM, database_url: str, gate: threading.Event
) -> Iterator[RunningGateway]:
    answers_by_text(llm, gate)
    gateway = start_gateway(tmp_path, llm, database_url, a2a={"max_streams_per_organisation": LIMIT})
    yield gateway
    gate.set()
    gateway.stop()


def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def streaming_message(text: str) -> dict[str, Any]:
    return rpc(
        "SendStreamingMessage",
        {"message": {"messageId": f"m-{text}", "role": "ROLE_USER", "parts": [{"text": text}]}},
    )


@asynccontextmanager
async def opened(http: httpx.AsyncClient, url: str, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    """The stream's first event (or the error it was answered with), while the stream stays open."""
    async with http.stream("POST", url, json=body) as answer:
        if not answer.headers["content-type"].startswith("text/event-stream"):
            yield json.loads(await answer.aread())
            return
        async for line in answer.aiter_lines():
            if line.startswith("data:"):
                yield json.loads(line[len("data:") :])
                return
        raise AssertionError("the stream ended before its first event")


async def tasks_listed(http: httpx.AsyncClient, url: str) -> int:
    answer = (await http.post(url, json=rpc("ListTasks", {}))).json()
    return len(answer["result"].get("tasks", []))


async def test_an_organisation_holds_a_bounded_number_of_streams_and_a_closed_one_frees_its_slot(
    two_streams: RunningGateway,
) -> None:
    url = f"{two_streams.url}/a2a/helper"
    headers = {"authorization": f"Bearer {two_streams.key}", "a2a-version": "1.0"}
    async with httpx.AsyncClient(headers=headers, timeout=60) as http, AsyncExitStack() as held:
        first = await held.enter_async_context(opened(http, url, streaming_message("slow one")))
        second_stream = AsyncExitStack()
        second = await second_stream.enter_async_context(opened(http, url, streaming_message("slow two")))
        assert "result" in first and "result" in second, (first, second)
        task_id = first["result"]["task"]["id"]

        async with opened(http, url, streaming_message("slow three")) as third:
            assert third["error"]["code"] == -32600, third
            assert "a2a.max_streams_per_organisation" in third["error"]["message"]
        assert await tasks_listed(http, url) == 2  # the refused stream started no task
        async with opened(http, url, rpc("SubscribeToTask", {"id": task_id})) as subscription:
            assert subscription["error"]["code"] == -32600, subscription
        # A plain SendMessage is not a stream: still taken.
        answer = await http.post(
            url,
            json=rpc(
                "SendMessage",
                {"message": {"messageId": "m-at-once", "role": "ROLE_USER", "parts": [{"text": "quick"}]}},
            ),
        )
        assert answer.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", answer.text

        await second_stream.aclose()  # the client goes away: its slot comes back

        async def subscribed() -> dict[str, Any]:
            async with asyncio.timeout(60):
                while True:
                    async with opened(http, url, rpc("SubscribeToTask", {"id": task_id})) as event:
                        if "result" in event:
                            return event
                    await asyncio.sleep(0.05)

        event = await subscribed()
        assert event["result"]["task"]["id"] == task_id
