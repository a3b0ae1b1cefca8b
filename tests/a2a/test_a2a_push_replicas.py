"""A2A push notifications outlive the replica that took the task (two ``hatchway serve`` and a
``hatchway worker`` on PostgreSQL and Redis): a task whose accepting replica is SIGKILLed while the
worker runs it is still announced when it ends — by the other replica's sweep — and a notification
whose replica died between retries is sent again by another once its claim lapses."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import GetTaskRequest, TaskState

from tests.a2a.test_a2a_agents import only_task
from tests.a2a.test_a2a_push import with_push
from tests.support.backends import NEEDS_PG_AND_REDIS, REDIS_URL
from tests.support.gateway import create_org_key
from tests.support.replicas import Replicas, eventually, purge_redis, replica_config, unique_redis_prefix
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.webhooks import Receiver

pytestmark = [*NEEDS_PG_AND_REDIS, pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def replicas(tmp_path: Path, pg_database_url: str, llm: ScriptedLLM) -> Iterator[Replicas]:
    prefix = unique_redis_prefix()
    agent = {"name": "helper", "model": "gpt-4o", "a2a": {"publish": True}}
    config = replica_config(
        tmp_path,
        pg_database_url,
        REDIS_URL,
        prefix,
        llm.base_url,
        agents=[agent],
        allow_private_mcp_urls=True,  # the receiver is on loopback
        a2a={"push_sweep_seconds": 0.5, "push_claim_seconds": 2},
    )
    running = Replicas(tmp_path, config)
    try:
        yield running
    finally:
        running.stop()
        purge_redis(REDIS_URL, prefix)


async def client(url: str, key: str):  # type: ignore[no-untyped-def]
    http = httpx.AsyncClient(headers={"authorization": f"Bearer {key}"}, timeout=60)
    return await create_client(
        f"{url}/a2a/helper", client_config=ClientConfig(httpx_client=http, streaming=False)
    )


def announced(receiver: Receiver) -> list[dict[str, Any]]:
    return [json.loads(got["body"])["task"] for got in list(receiver.received)]


async def test_a_task_is_announced_when_it_ends_after_the_replica_that_took_it_was_killed(
    replicas: Replicas, pg_database_url: str, llm: ScriptedLLM, receiver: Receiver
) -> None:
    a, b = replicas.serve("a"), replicas.serve("b")
    replicas.worker("w")
    key = (await create_org_key(pg_database_url)).key
    gate = threading.Event()
    llm.handler = lambda body: Reply(text="done at last", gate=gate)
    on_a, on_b = await client(a.url, key), await client(b.url, key)
    try:
        request = with_push("a long question", receiver.url)
        request.configuration.return_immediately = True
        task = await only_task(on_a.send_message(request))

        async def working() -> bool:
            read = await on_b.get_task(GetTaskRequest(id=task.id))
            return read.status.state == TaskState.TASK_STATE_WORKING

        async def until(predicate: Any, timeout: float, what: str) -> None:
            import anyio

            with anyio.fail_after(timeout):
                while not await predicate():
                    await anyio.sleep(0.05)

        await until(working, 60, "the worker to run the task")
        a.kill()  # the replica that took the task, and its watcher, are gone
        gate.set()  # the worker ends the task: nobody follows it any more but the store

        told = eventually(lambda: announced(receiver), 60, "the task to be announced", replicas)
        assert [t["id"] for t in told] == [task.id], told
        assert told[0]["status"]["state"] == "TASK_STATE_COMPLETED"
        assert told[0]["artifacts"][0]["parts"][0]["text"] == "done at last"
        assert receiver.received[0]["headers"]["x-a2a-notification-token"] == "tok-secret-123"
    finally:
        gate.set()


async def test_a_notification_whose_replica_died_between_retries_is_sent_by_another(
    replicas: Replicas, pg_database_url: str, llm: ScriptedLLM, receiver: Receiver
) -> None:
    a = replicas.serve("a")  # alone at first: its own watcher claims the notification
    replicas.worker("w")
    key = (await create_org_key(pg_database_url)).key
    llm.handler = lambda body: Reply(text="answered")
    receiver.statuses = [503] * 50  # the receiver is down: A retries with backoff
    on_a = await client(a.url, key)
    task = await only_task(on_a.send_message(with_push("a quick question", receiver.url)))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    eventually(lambda: receiver.received, 60, "A's first attempt", replicas)
    a.kill()  # between two attempts: its claim is left to lapse
    receiver.statuses = []  # the receiver is back
    seen = len(receiver.received)
    replicas.serve("b")

    def delivered_again() -> list[dict[str, Any]]:
        return announced(receiver)[seen:]

    again = eventually(delivered_again, 60, "B to send it again once A's claim lapsed", replicas)
    assert again[0]["id"] == task.id and again[0]["status"]["state"] == "TASK_STATE_COMPLETED"
