"""What the A2A TCK (github a2aproject/a2a-tck, run locally: docs/a2a.md) found in a published
agent, pinned over real HTTP with the official ``a2a-sdk`` client (and raw HTTP where the client
would answer for the server): ``ListTasks`` orders by the status timestamp, filters ``status`` and
``statusTimestampAfter`` before it pages, pages by cursor and counts the tasks it returns; a negative
``historyLength`` is refused; ``SubscribeToTask`` of an ended task and ``GetExtendedAgentCard`` of an
agent that declares none are ``UnsupportedOperationError`` (A2A 1.0 3.1.6, 3.3.4)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import (
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.constants import TransportProtocol
from a2a.utils.errors import InvalidParamsError, UnsupportedOperationError

from tests.support.gateway import RunningGateway, base_config, write_config
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import free_port

pytestmark = pytest.mark.anyio
BINDINGS = [TransportProtocol.JSONRPC.value, TransportProtocol.HTTP_JSON.value]
COMPLETED, WORKING = TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_WORKING


def start_gateway(tmp_path: Path, llm: ScriptedLLM, database_url: str, **extra: Any) -> RunningGateway:
    port = free_port()
    config = base_config(
        tmp_path,
        llm.base_url,
        database_url,
        public_base_url=f"http://127.0.0.1:{port}",
        agents=[{"name": "helper", "model": "gpt-4o", "a2a": {"publish": True}}],
        **extra,
    )
    return RunningGateway(write_config(tmp_path, config), port=port).start()


@pytest.fixture
def a2a_gateway(tmp_path: Path, llm: ScriptedLLM, database_url: str) -> Iterator[RunningGateway]:
    gateway = start_gateway(tmp_path, llm, database_url)
    yield gateway
    gateway.stop()


@pytest.fixture
def one_run_at_a_time(tmp_path: Path, llm: ScriptedLLM, database_url: str) -> Iterator[RunningGateway]:
    """The agent may run once at a time: a second task while one runs is refused (rejected)."""
    gateway = start_gateway(
        tmp_path, llm, database_url, limits={"agents": {"helper": {"concurrent_runs": 1}}}
    )
    yield gateway
    gateway.stop()


async def client_for(gateway: RunningGateway, binding: str, *, streaming: bool = False) -> Any:
    http = httpx.AsyncClient(headers={"authorization": f"Bearer {gateway.key}"}, timeout=60)
    config = ClientConfig(httpx_client=http, streaming=streaming, supported_protocol_bindings=[binding])
    return await create_client(f"{gateway.url}/a2a/helper", client_config=config)


def message(text: str, *, context_id: str = "", at_once: bool = False) -> SendMessageRequest:
    request = SendMessageRequest(
        message=Message(message_id=f"m-{time.monotonic_ns()}", role=Role.ROLE_USER, parts=[Part(text=text)])
    )
    request.message.context_id = context_id
    request.configuration.return_immediately = at_once
    return request


async def send(client: Any, request: SendMessageRequest) -> Any:
    found = [event async for event in client.send_message(request)]
    assert len(found) == 1 and found[0].HasField("task"), found
    return found[0].task


def answers_by_text(llm: ScriptedLLM, gate: threading.Event) -> None:
    """``slow …`` waits for ``gate``; any other message is answered at once."""

    def decide(body: dict[str, Any]) -> Reply:
        last = [m["content"] for m in body["messages"] if m["role"] == "user"][-1]
        return Reply(text=f"re: {last}", gate=gate if str(last).startswith("slow") else None)

    llm.handler = decide


async def until(predicate: Any, timeout: float = 30) -> None:
    async with asyncio.timeout(timeout):
        while not await predicate():
            await asyncio.sleep(0.05)


@pytest.mark.parametrize("binding", BINDINGS)
async def test_list_orders_by_last_update_and_filters_state_before_it_pages(
    a2a_gateway: RunningGateway, llm: ScriptedLLM, binding: str
) -> None:
    gate = threading.Event()
    answers_by_text(llm, gate)
    client = await client_for(a2a_gateway, binding)
    try:
        slow = await send(client, message("slow one", at_once=True))
        quick = await send(client, message("quick one"))
        assert quick.status.state == COMPLETED

        async def slow_works() -> bool:
            return (await client.get_task(GetTaskRequest(id=slow.id))).status.state == WORKING

        await until(slow_works)
        # The newest task is still working: a status filter picks the completed one, counts only
        # what matches, and the page is not cut before the filter.
        done = await client.list_tasks(ListTasksRequest(status=COMPLETED, page_size=1))
        assert [t.id for t in done.tasks] == [quick.id]
        assert done.total_size == 1 and done.page_size == 1 and done.next_page_token == ""
        working = await client.list_tasks(ListTasksRequest(status=WORKING))
        assert [t.id for t in working.tasks] == [slow.id] and working.total_size == 1
        rejected = await client.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_REJECTED))
        assert list(rejected.tasks) == [] and rejected.total_size == 0 and rejected.page_size == 0

        gate.set()

        async def slow_done() -> bool:
            return (await client.get_task(GetTaskRequest(id=slow.id))).status.state == COMPLETED

        await until(slow_done)
        # Started first, ended last: the most recently updated task is listed first.
        listed = await client.list_tasks(ListTasksRequest())
        assert [t.id for t in listed.tasks] == [slow.id, quick.id]
        stamps = [t.status.timestamp.ToDatetime() for t in listed.tasks]
        assert stamps == sorted(stamps, reverse=True)
    finally:
        gate.set()
        await client.close()


@pytest.mark.parametrize("binding", BINDINGS)
async def test_list_pages_by_cursor_and_filters_by_status_time(
    a2a_gateway: RunningGateway, llm: ScriptedLLM, binding: str
) -> None:
    llm.default = Reply(text="ok")
    client = await client_for(a2a_gateway, binding)
    try:
        first = await send(client, message("one"))
        context = first.context_id
        await asyncio.sleep(0.05)
        since = datetime.now(UTC)
        later = [await send(client, message(t, context_id=context)) for t in ("two", "three")]

        pages, token = [], ""
        while True:
            page = await client.list_tasks(
                ListTasksRequest(context_id=context, page_size=2, page_token=token)
            )
            assert page.total_size == 3 and page.page_size == len(page.tasks)
            pages.append([t.id for t in page.tasks])
            token = page.next_page_token
            if not token:
                break
        assert pages == [[later[1].id, later[0].id], [first.id]]

        request = ListTasksRequest(context_id=context)
        request.status_timestamp_after.FromDatetime(since)
        recent = await client.list_tasks(request)
        assert [t.id for t in recent.tasks] == [later[1].id, later[0].id] and recent.total_size == 2

        empty = await client.list_tasks(ListTasksRequest(context_id="ctx-no-such-context"))
        assert list(empty.tasks) == [] and empty.page_size == 0 and empty.next_page_token == ""
        with pytest.raises(InvalidParamsError):
            await client.list_tasks(ListTasksRequest(page_token="not-a-token"))
        with pytest.raises(InvalidParamsError):
            await client.list_tasks(ListTasksRequest(status=99))  # type: ignore[arg-type]
    finally:
        await client.close()


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_negative_history_length_is_refused(
    a2a_gateway: RunningGateway, llm: ScriptedLLM, binding: str
) -> None:
    llm.default = Reply(text="ok")
    client = await client_for(a2a_gateway, binding)
    try:
        task = await send(client, message("hello"))
        with pytest.raises(InvalidParamsError):
            await client.get_task(GetTaskRequest(id=task.id, history_length=-1))
        with pytest.raises(InvalidParamsError):
            await client.list_tasks(ListTasksRequest(history_length=-1))
        request = message("again", context_id=task.context_id)
        request.configuration.history_length = -1
        with pytest.raises(InvalidParamsError):
            await send(client, request)
        assert len(llm.requests) == 1  # refused before anything ran
        shown = await client.get_task(GetTaskRequest(id=task.id, history_length=1))
        assert [m.role for m in shown.history] == [Role.ROLE_AGENT]
    finally:
        await client.close()


@pytest.mark.parametrize("binding", BINDINGS)
async def test_subscribing_to_an_ended_task_is_an_unsupported_operation(
    a2a_gateway: RunningGateway, llm: ScriptedLLM, binding: str
) -> None:
    llm.default = Reply(text="done")
    client = await client_for(a2a_gateway, binding)
    streaming = await client_for(a2a_gateway, binding, streaming=True)
    try:
        task = await send(client, message("finish"))
        assert task.status.state == COMPLETED
        with pytest.raises(UnsupportedOperationError):
            async for _ in streaming.subscribe(SubscribeToTaskRequest(id=task.id)):
                pass
    finally:
        await client.close()
        await streaming.close()


def test_an_agent_without_an_extended_card_answers_unsupported_operation(
    a2a_gateway: RunningGateway,
) -> None:
    headers = {"authorization": f"Bearer {a2a_gateway.key}", "a2a-version": "1.0"}
    card = httpx.get(f"{a2a_gateway.url}/a2a/helper/.well-known/agent-card.json", timeout=10).json()
    assert card["capabilities"].get("extendedAgentCard", False) is False
    rpc = httpx.post(
        f"{a2a_gateway.url}/a2a/helper",
        json={"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard", "params": {}},
        headers=headers,
        timeout=10,
    )
    assert rpc.json()["error"]["code"] == -32004
    rest = httpx.get(f"{a2a_gateway.url}/a2a/helper/rest/extendedAgentCard", headers=headers, timeout=10)
    assert rest.status_code == 400
    assert rest.json()["error"]["details"][0]["reason"] == "UNSUPPORTED_OPERATION"


async def test_a_refused_task_is_listed_by_its_own_state_and_time(
    one_run_at_a_time: RunningGateway, llm: ScriptedLLM
) -> None:
    gate = threading.Event()
    answers_by_text(llm, gate)
    client = await client_for(one_run_at_a_time, BINDINGS[0])
    try:
        slow = await send(client, message("slow one", at_once=True))
        refused = await send(client, message("one too many"))  # the agent's one run is taken
        assert refused.status.state == TaskState.TASK_STATE_REJECTED
        only = await client.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_REJECTED))
        assert [t.id for t in only.tasks] == [refused.id] and only.total_size == 1
        assert (await client.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_FAILED))).total_size == 0
        gate.set()

        async def slow_done() -> bool:
            return (await client.get_task(GetTaskRequest(id=slow.id))).status.state == COMPLETED

        await until(slow_done)
        listed = await client.list_tasks(ListTasksRequest())
        assert [t.id for t in listed.tasks] == [slow.id, refused.id]  # the refusal came before the end
    finally:
        gate.set()
        await client.close()


def test_a_part_of_a_kind_the_sdk_drops_is_an_unsupported_content_type(
    a2a_gateway: RunningGateway, llm: ScriptedLLM
) -> None:
    """The TCK's ``file`` part (A2A 0.3's shape) reaches the handler as a part with no content: it
    is refused as content this agent does not take (as ``raw`` and ``url`` parts are), and says
    which part, not "None parts"."""
    headers = {"authorization": f"Bearer {a2a_gateway.key}", "a2a-version": "1.0"}
    parts = [{"text": "Please process this file"}, {"file": {"name": "x.bin", "fileWithBytes": "VGVzdA=="}}]
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": parts}},
    }
    answer = httpx.post(f"{a2a_gateway.url}/a2a/helper", json=body, headers=headers, timeout=10).json()
    assert answer["error"]["code"] == -32005
    assert "parts[1]" in answer["error"]["message"] and "None" not in answer["error"]["message"]
    raw = [{"text": "and this"}, {"raw": "VGVzdA==", "mediaType": "application/octet-stream"}]
    body["params"]["message"]["parts"] = raw
    answer = httpx.post(f"{a2a_gateway.url}/a2a/helper", json=body, headers=headers, timeout=10).json()
    assert answer["error"]["code"] == -32005 and "raw parts" in answer["error"]["message"]
    assert llm.requests == []
