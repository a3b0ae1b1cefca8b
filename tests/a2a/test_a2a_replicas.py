"""A2A tasks across replicas (two ``hatchway serve`` processes and a ``hatchway worker`` on
PostgreSQL and Redis): a task sent to one replica is run by the worker, read and listed on the
other, streamed there to its end, and cancelled from there while it runs."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import CancelTaskRequest, GetTaskRequest, ListTasksRequest, SubscribeToTaskRequest, TaskState

from tests.a2a.test_a2a_agents import only_task, user_message
from tests.support.backends import NEEDS_PG_AND_REDIS, REDIS_URL
from tests.support.gateway import create_org_key
from tests.support.replicas import Replicas, eventually, purge_redis, replica_config, unique_redis_prefix
from tests.support.scripted_llm import Reply, ScriptedLLM

pytestmark = [*NEEDS_PG_AND_REDIS, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def replicas(tmp_path: Path, pg_database_url: str, llm: ScriptedLLM) -> Iterator[Replicas]:
    prefix = unique_redis_prefix()
    agent = {"name": "helper", "model": "gpt-4o", "a2a": {"publish": True}}
    config = replica_config(tmp_path, pg_database_url, REDIS_URL, prefix, llm.base_url, agents=[agent])
    running = Replicas(tmp_path, config)
    try:
        yield running
    finally:
        running.stop()
        purge_redis(REDIS_URL, prefix)


async def client(url: str, key: str, *, streaming: bool = False):  # type: ignore[no-untyped-def]
    http = httpx.AsyncClient(headers={"authorization": f"Bearer {key}"}, timeout=60)
    return await create_client(
        f"{url}/a2a/helper", client_config=ClientConfig(httpx_client=http, streaming=streaming)
    )


async def test_a_task_sent_to_one_replica_is_run_by_the_worker_and_read_streamed_and_cancelled_on_the_other(
    replicas: Replicas, pg_database_url: str, llm: ScriptedLLM
) -> None:
    a, b = replicas.serve("a"), replicas.serve("b")
    replicas.worker("w")
    key = (await create_org_key(pg_database_url)).key
    gate = threading.Event()
    replies = {
        "quick": Reply(text="answered by the worker", chunk_size=4),
        "slow": Reply(text="never", gate=gate),
    }
    llm.handler = lambda body: next(r for needle, r in replies.items() if needle in str(body["messages"]))
    on_a, on_b = await client(a.url, key), await client(b.url, key, streaming=True)
    try:
        request = user_message("quick question")
        request.configuration.return_immediately = True
        task = await only_task(on_a.send_message(request))
        assert task.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)

        # Followed on B, which does not run it: the worker does, B reads the store.
        text, states = "", []
        async for event in on_b.subscribe(SubscribeToTaskRequest(id=task.id)):
            if event.HasField("artifact_update"):
                text += "".join(p.text for p in event.artifact_update.artifact.parts)
            if event.HasField("status_update"):
                states.append(event.status_update.status.state)
        assert states[-1] == TaskState.TASK_STATE_COMPLETED and text == "answered by the worker"
        read = await on_b.get_task(GetTaskRequest(id=task.id))
        assert read.artifacts[0].parts[0].text == "answered by the worker"
        assert [t.id for t in (await on_b.list_tasks(ListTasksRequest())).tasks] == [task.id]

        slow = user_message("slow one")
        slow.configuration.return_immediately = True
        running = await only_task(on_a.send_message(slow))
        await asyncio.to_thread(
            eventually,
            lambda: any("slow one" in str(r["messages"]) for r in llm.requests),
            60,
            "the worker",
            replicas,
        )
        cancelled = await on_b.cancel_task(CancelTaskRequest(id=running.id))
        assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
        assert (
            await on_a.get_task(GetTaskRequest(id=running.id))
        ).status.state == TaskState.TASK_STATE_CANCELED
    finally:
        gate.set()
        await on_a.close()
        await on_b.close()
