"""A published agent as an A2A 1.0 agent, driven by the official ``a2a-sdk`` client over real HTTP
(issue 45, the inbound part): the card, both bindings, send (blocking and returning at once), get,
list, cancel, stream and resubscribe; a task is a stored background response."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.constants import TransportProtocol
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError, UnsupportedOperationError

from hatchway.principal import Role as Role_
from hatchway.store.db import Database
from hatchway.store.orgs import OrgStore
from tests.support.contas import ANSWER, ASK, QUESTION, RunningContas, contas_model
from tests.support.gateway import RunningGateway, base_config, write_config
from tests.support.schema import migration_differences
from tests.support.scripted_llm import ScriptedLLM
from tests.support.servers import free_port

pytestmark = pytest.mark.anyio
BINDINGS = [TransportProtocol.JSONRPC.value, TransportProtocol.HTTP_JSON.value]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def a2a_gateway(tmp_path: Path, llm: ScriptedLLM) -> Iterator[RunningGateway]:
    port = free_port()
    config = base_config(
        tmp_path,
        llm.base_url,
        public_base_url=f"http://127.0.0.1:{port}",
        agents=[
            {
                "name": "helper",
                "model": "gpt-4o",
                "instructions": "You help.\nAlways.",
                "a2a": {"publish": True},
            },
            {"name": "private", "model": "gpt-4o"},
        ],
    )
    gateway = RunningGateway(write_config(tmp_path, config), port=port).start()
    yield gateway
    gateway.stop()


async def client_for(
    gateway: RunningGateway,
    binding: str,
    *,
    key: str | None = None,
    streaming: bool = False,
    headers: dict[str, str] | None = None,
) -> Any:
    http = httpx.AsyncClient(
        headers={"authorization": f"Bearer {key or gateway.key}", **(headers or {})}, timeout=60
    )
    config = ClientConfig(httpx_client=http, streaming=streaming, supported_protocol_bindings=[binding])
    return await create_client(f"{gateway.url}/a2a/helper", client_config=config)


def user_message(text: str, *, context_id: str = "") -> SendMessageRequest:
    return SendMessageRequest(
        message=Message(
            message_id=f"m-{text[:8]}", role=Role.ROLE_USER, parts=[Part(text=text)], context_id=context_id
        )
    )


async def only_task(events: AsyncIterator[StreamResponse]) -> Any:
    found = [event async for event in events]
    assert len(found) == 1 and found[0].HasField("task"), found
    return found[0].task


def test_the_card_names_both_bindings_and_the_key_and_only_published_agents_have_one(
    a2a_gateway: RunningGateway,
) -> None:
    card = httpx.get(f"{a2a_gateway.url}/a2a/helper/.well-known/agent-card.json", timeout=10).json()
    assert card["name"] == "helper" and card["description"] == "The Hatchway agent helper."
    assert "You help" not in str(card)  # the public card never shows the agent's instructions
    bindings = {i["protocolBinding"]: i["url"] for i in card["supportedInterfaces"]}
    assert bindings == {
        "JSONRPC": f"{a2a_gateway.url}/a2a/helper",
        "HTTP+JSON": f"{a2a_gateway.url}/a2a/helper/rest",
    }
    assert card["capabilities"]["streaming"] is True
    assert card["securitySchemes"]["hatchway_key"]["httpAuthSecurityScheme"]["scheme"] == "bearer"
    assert (
        httpx.get(f"{a2a_gateway.url}/a2a/private/.well-known/agent-card.json", timeout=10).status_code == 401
    )
    hidden = httpx.get(
        f"{a2a_gateway.url}/a2a/private/.well-known/agent-card.json",
        headers={"authorization": f"Bearer {a2a_gateway.key}"},
        timeout=10,
    )
    assert hidden.status_code == 404


@pytest.mark.parametrize("binding", BINDINGS)
async def test_send_waits_for_the_answer_and_a_context_continues_the_conversation(
    a2a_gateway: RunningGateway, llm: ScriptedLLM, binding: str
) -> None:
    llm.reply("Paris.").reply("About 2.1 million.")
    client = await client_for(a2a_gateway, binding)
    first = await only_task(client.send_message(user_message("Capital of France?")))
    assert first.status.state == TaskState.TASK_STATE_COMPLETED
    assert first.artifacts[0].parts[0].text == "Paris."
    second = await only_task(
        client.send_message(user_message("Its population?", context_id=first.context_id))
    )
    assert second.status.state == TaskState.TASK_STATE_COMPLETED and second.id != first.id
    assert second.artifacts[0].parts[0].text == "About 2.1 million."
    # The model saw the first exchange: the context is the stored chain.
    sent = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] in ("user", "assistant")]
    assert sent == ["Capital of France?", "Paris.", "Its population?"]

    again = await client.get_task(GetTaskRequest(id=first.id))
    assert (
        again.status.state == TaskState.TASK_STATE_COMPLETED and again.artifacts[0].parts[0].text == "Paris."
    )
    assert [m.parts[0].text for m in again.history] == ["Capital of France?", "Paris."]
    listed = await client.list_tasks(ListTasksRequest(context_id=first.context_id))
    assert [t.id for t in listed.tasks] == [second.id, first.id] and listed.total_size == 2
    await client.close()


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_task_returned_at_once_is_read_while_working_and_cancelled(
    a2a_gateway: RunningGateway, llm: ScriptedLLM, binding: str
) -> None:
    gate = threading.Event()
    llm.reply("never needed", gate=gate)
    client = await client_for(a2a_gateway, binding)
    request = user_message("Take your time.")
    request.configuration.return_immediately = True
    try:
        task = await only_task(client.send_message(request))
        assert task.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
        await wait_for(lambda: len(llm.requests) == 1)
        working = await client.get_task(GetTaskRequest(id=task.id))
        assert working.status.state == TaskState.TASK_STATE_WORKING
        cancelled = await client.cancel_task(CancelTaskRequest(id=task.id))
        assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
        with pytest.raises(TaskNotCancelableError):  # an ended task cannot be cancelled again
            await client.cancel_task(CancelTaskRequest(id=task.id))
    finally:
        gate.set()
        await client.close()


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_streamed_task_sends_its_answer_as_it_is_written_and_a_subscriber_rejoins(
    a2a_gateway: RunningGateway, llm: ScriptedLLM, binding: str
) -> None:
    gate = threading.Event()
    llm.reply("The answer arrives in pieces.", chunk_size=5, gate=gate)
    client = await client_for(a2a_gateway, binding, streaming=True)
    stream = client.send_message(user_message("Stream it."))
    first = await anext(stream)
    assert first.HasField("task")
    task_id = first.task.id
    await stream.aclose()  # the connection cut: the task goes on
    other = await client_for(a2a_gateway, binding, streaming=True)
    resubscribed = other.subscribe(SubscribeToTaskRequest(id=task_id))
    snapshot = await anext(resubscribed)
    assert snapshot.task.id == task_id and snapshot.task.status.state not in (TaskState.TASK_STATE_COMPLETED,)
    gate.set()
    text, states = "", []
    async for event in resubscribed:
        if event.HasField("artifact_update"):
            text += "".join(p.text for p in event.artifact_update.artifact.parts)
        if event.HasField("status_update"):
            states.append(event.status_update.status.state)
    assert text == "The answer arrives in pieces."
    assert states[-1] == TaskState.TASK_STATE_COMPLETED
    await client.close()
    await other.close()


async def test_tasks_are_the_organisations_and_end_users_own(
    a2a_gateway: RunningGateway, llm: ScriptedLLM
) -> None:
    llm.reply("for ana")
    ana = await client_for(a2a_gateway, BINDINGS[0], headers={"x-on-behalf-of": "ana"})
    task = await only_task(ana.send_message(user_message("mine")))
    bob = await client_for(a2a_gateway, BINDINGS[0], headers={"x-on-behalf-of": "bob"})
    stranger = await client_for(
        a2a_gateway, BINDINGS[0], key=(await asyncio.to_thread(a2a_gateway.new_org)).key
    )
    for other in (bob, stranger):
        with pytest.raises(TaskNotFoundError):
            await other.get_task(GetTaskRequest(id=task.id))
        with pytest.raises(TaskNotFoundError):
            await other.cancel_task(CancelTaskRequest(id=task.id))
        assert (await other.list_tasks(ListTasksRequest())).tasks == []
    for client in (ana, bob, stranger):
        await client.close()
    no_key = httpx.post(
        f"{a2a_gateway.url}/a2a/helper", json={"jsonrpc": "2.0", "id": 1, "method": "GetTask"}
    )
    assert no_key.status_code == 401


async def wait_for(predicate: Any, timeout: float = 30) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)


def test_a_viewer_key_is_refused_and_a_revoked_or_unknown_key_is_not_let_in(
    a2a_gateway: RunningGateway,
) -> None:
    async def viewer_key() -> str:
        db = Database(a2a_gateway.settings.database_url)
        try:
            assert a2a_gateway.org is not None
            return (await OrgStore(db).create_key(a2a_gateway.org.org_id, "viewer", role=Role_.VIEWER))[1]
        finally:
            await db.close()

    viewer = asyncio.run(viewer_key())
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
    refused = httpx.post(
        f"{a2a_gateway.url}/a2a/helper", json=body, headers={"authorization": f"Bearer {viewer}"}, timeout=10
    )
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "insufficient_role"
    listed = httpx.get(
        f"{a2a_gateway.url}/a2a/helper/rest/tasks", headers={"authorization": f"Bearer {viewer}"}, timeout=10
    )
    assert listed.status_code == 403
    unknown = httpx.post(
        f"{a2a_gateway.url}/a2a/helper",
        json=body,
        headers={"authorization": "Bearer hw-not-a-key"},
        timeout=10,
    )
    assert unknown.status_code == 401 and unknown.headers["www-authenticate"].startswith("Bearer")


def test_the_task_table_is_as_its_migration_makes_it(tmp_path: Path) -> None:
    import hatchway.a2a.store  # noqa: F401  (its table in Base.metadata)

    assert migration_differences(tmp_path, "a2a_tasks") == []


@pytest.fixture
def contas_a2a(tmp_path: Path, llm: ScriptedLLM, contas: RunningContas) -> Iterator[RunningGateway]:
    llm.handler = contas_model
    port = free_port()
    agent = contas.agent(tmp_path / "contas") | {"a2a": {"publish": True}}
    config = base_config(tmp_path, llm.base_url, public_base_url=f"http://127.0.0.1:{port}", agents=[agent])
    gateway = RunningGateway(write_config(tmp_path, config), port=port).start()
    yield gateway
    gateway.stop()


async def contas_client(gateway: RunningGateway, user: str) -> Any:
    http = httpx.AsyncClient(
        headers={"authorization": f"Bearer {gateway.key}", "x-on-behalf-of": user}, timeout=60
    )
    return await create_client(
        f"{gateway.url}/a2a/contas", client_config=ClientConfig(httpx_client=http, streaming=False)
    )


@pytest.mark.parametrize("answer", ["sim", "não"])
async def test_a_confirmation_is_input_required_and_the_answer_on_the_task_decides_it_once(
    contas_a2a: RunningGateway, contas: RunningContas, answer: str
) -> None:
    ana = await contas_client(contas_a2a, "ana")
    task = await only_task(ana.send_message(user_message(ASK)))
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert task.status.message.parts[0].text == QUESTION and not task.artifacts
    assert sum(contas.backend.executions.values()) == 0

    # Another end user cannot answer it; nor can a message that is no answer to a waiting task.
    bob = await contas_client(contas_a2a, "bob")
    with pytest.raises(TaskNotFoundError):
        await only_task(bob.send_message(answer_to(task, "sim")))

    done = await only_task(ana.send_message(answer_to(task, answer)))
    assert done.id == task.id and done.context_id == task.context_id
    if answer == "sim":
        assert done.status.state == TaskState.TASK_STATE_COMPLETED
        assert done.artifacts[0].parts[0].text == ANSWER  # the per-item verdict
        assert list(contas.backend.executions.values()) == [1]
    else:
        assert done.status.state == TaskState.TASK_STATE_COMPLETED
        assert sum(contas.backend.executions.values()) == 0
    with pytest.raises(
        UnsupportedOperationError
    ):  # the task no longer waits: the same answer again does nothing
        await only_task(ana.send_message(answer_to(task, "sim")))
    assert sum(contas.backend.executions.values()) == (1 if answer == "sim" else 0)
    await ana.close()
    await bob.close()


async def test_cancelling_a_task_that_asks_withdraws_the_question(
    contas_a2a: RunningGateway, contas: RunningContas
) -> None:
    ana = await contas_client(contas_a2a, "ana")
    task = await only_task(ana.send_message(user_message(ASK)))
    assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    cancelled = await ana.cancel_task(CancelTaskRequest(id=task.id))
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    with pytest.raises(UnsupportedOperationError):
        await only_task(ana.send_message(answer_to(task, "sim")))
    # Nor does the conversation's next task confirm it: the operation is cancelled.
    later = await only_task(ana.send_message(user_message("sim", context_id=task.context_id)))
    assert later.status.state != TaskState.TASK_STATE_INPUT_REQUIRED
    assert sum(contas.backend.executions.values()) == 0
    await ana.close()


def answer_to(task: Any, text: str) -> SendMessageRequest:
    request = user_message(text, context_id=task.context_id)
    request.message.task_id = task.id
    return request
