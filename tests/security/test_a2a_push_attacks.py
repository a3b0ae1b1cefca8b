"""Attacks on A2A push notifications that outlive their replica (``a2a/push.py``, the watcher in
``a2a/push_methods.py``, the sweep in ``api/a2a.py``), over real HTTP with the official ``a2a-sdk``
client against a gateway under uvicorn on loopback (SQLite), and webhook receivers on loopback.

A receiver here can hold a POST open (a slow or hanging receiver: the gateway's attempt waits for
its status line), answer a status, or redirect; every POST is recorded as it arrives, before it is
held, so that a test can wait for "the gateway is sending now"."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from a2a.types import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    SendMessageConfiguration,
    TaskPushNotificationConfig,
    TaskState,
)
from sqlalchemy import text

from hatchway.store.db import Database
from tests.a2a.test_a2a_agents import BINDINGS, client_for, only_task, user_message
from tests.support.contas import ASK, RunningContas, contas_model
from tests.support.gateway import RunningGateway, base_config, write_config
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import free_port
from tests.support.webhooks import Hooks

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def hooks() -> Iterator[Hooks]:
    h = Hooks()
    yield h
    h.close()


def start(tmp_path: Path, llm: ScriptedLLM, agents: list[dict[str, Any]], **extra: Any) -> RunningGateway:
    port = free_port()
    config = base_config(
        tmp_path,
        llm.base_url,
        public_base_url=f"http://127.0.0.1:{port}",
        allow_private_mcp_urls=True,  # the receivers are on loopback
        agents=agents,
        a2a={"push_sweep_seconds": 0.5, "push_claim_seconds": 2},
        **extra,
    )
    return RunningGateway(write_config(tmp_path, config), port=port).start()


HELPER = {"name": "helper", "model": "gpt-4o", "a2a": {"publish": True}}


@pytest.fixture
def gateway(tmp_path: Path, llm: ScriptedLLM) -> Iterator[RunningGateway]:
    running = start(tmp_path, llm, [HELPER])
    yield running
    running.stop()


async def until(predicate: Any, timeout: float, what: str) -> None:
    try:
        async with asyncio.timeout(timeout):
            while not predicate():
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"not within {timeout} s: {what}") from None


def with_push(text_: str, url: str, token: str = "tok-attack") -> Any:
    request = user_message(text_)
    request.configuration.CopyFrom(
        SendMessageConfiguration(
            task_push_notification_config=TaskPushNotificationConfig(url=url, token=token)
        )
    )
    return request


async def config_rows(gateway: RunningGateway) -> list[dict[str, Any]]:
    db = Database(gateway.settings.database_url)
    try:
        async with db.session() as s:
            return [dict(r) for r in (await s.execute(text("SELECT * FROM a2a_push_configs"))).mappings()]
    finally:
        await db.close()


# -- a notification never sent -------------------------------------------------------------------


@pytest.fixture
def contas_gateway(tmp_path: Path, llm: ScriptedLLM, contas: RunningContas) -> Iterator[RunningGateway]:
    llm.handler = contas_model
    agent = contas.agent(tmp_path / "contas") | {"a2a": {"publish": True}}
    running = start(tmp_path, llm, [agent])
    yield running
    running.stop()


async def test_a_task_cancelled_while_its_input_required_notification_is_in_flight_is_announced_cancelled(
    contas_gateway: RunningGateway, hooks: Hooks
) -> None:
    """The receiver is slow to take the input-required notification; meanwhile the end user cancels
    the task. The receiver must still hear TASK_STATE_CANCELED (from the watcher, or the sweep)."""
    hooks.held["/slow"] = slow = threading.Event()
    ana_contas = await _contas_client(contas_gateway, "ana")
    try:
        task = await only_task(ana_contas.send_message(with_push(ASK, hooks.url("/slow"))))
        assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        await until(lambda: hooks.at("/slow"), 30, "the input-required notification to be sent")
        cancelled = await ana_contas.cancel_task(CancelTaskRequest(id=task.id))
        assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
        slow.set()  # the receiver takes the first notification now
        try:
            await until(lambda: "TASK_STATE_CANCELED" in hooks.states("/slow"), 15, "the cancel announced")
        except AssertionError as exc:  # 30 sweeps of 0.5 s went by
            rows = await config_rows(contas_gateway)
            raise AssertionError(f"{exc}; heard {hooks.states('/slow')}; config rows {rows}") from None
    finally:
        slow.set()
        await ana_contas.close()


async def _contas_client(gateway: RunningGateway, user: str) -> Any:
    import httpx
    from a2a.client import ClientConfig, create_client

    http = httpx.AsyncClient(
        headers={"authorization": f"Bearer {gateway.key}", "x-on-behalf-of": user}, timeout=60
    )
    return await create_client(
        f"{gateway.url}/a2a/contas", client_config=ClientConfig(httpx_client=http, streaming=False)
    )


async def test_a_config_created_while_the_tasks_watcher_is_busy_is_announced_by_the_sweep(
    gateway: RunningGateway, llm: ScriptedLLM, hooks: Hooks
) -> None:
    """The task's watcher is still delivering to a slow first config when a second config is created
    for the ended task: no second watcher starts (one per task and run), so the sweep must tell it."""
    hooks.held["/first"] = first = threading.Event()
    llm.reply("done")
    client = await client_for(gateway, BINDINGS[0])
    try:
        task = await only_task(client.send_message(with_push("hi", hooks.url("/first"))))
        await until(lambda: hooks.at("/first"), 30, "the first config's notification to be sent")
        await client.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=task.id, id="second", url=hooks.url("/second"))
        )
        await until(lambda: hooks.at("/second"), 15, "the second config to be told")
        assert hooks.states("/second") == ["TASK_STATE_COMPLETED"]
    finally:
        first.set()
        await client.close()


# -- one organisation's receivers starving another's --------------------------------------------


async def test_one_organisations_hanging_receivers_do_not_hold_up_another_organisations_sweep(
    gateway: RunningGateway, llm: ScriptedLLM, hooks: Hooks
) -> None:
    """A hostile organisation points its configs at a receiver that never answers (each attempt
    waits the 10 s timeout, five attempts). Its first config keeps the task's watcher busy, so its
    other seven are the sweep's to send. Another organisation's config that only the sweep can
    tell (its own task's watcher is busy too) must still be told within a few sweeps."""
    hooks.held["/hang"] = threading.Event()  # never set: released at teardown
    hooks.held["/victim-first"] = victim_first = threading.Event()
    llm.default = Reply(text="done")
    hostile_key = (await asyncio.to_thread(gateway.new_org)).key
    hostile = await client_for(gateway, BINDINGS[0], key=hostile_key)
    victim = await client_for(gateway, BINDINGS[1])
    try:
        bad = await only_task(hostile.send_message(with_push("hostile", hooks.url("/hang"))))
        await until(lambda: len(hooks.at("/hang")) == 1, 30, "the watcher to hang on the hostile receiver")
        for i in range(7):
            await hostile.create_task_push_notification_config(
                TaskPushNotificationConfig(task_id=bad.id, id=f"h{i}", url=hooks.url("/hang"))
            )
        await until(lambda: len(hooks.at("/hang")) == 8, 30, "the sweep to hang on the hostile receivers")

        mine = await only_task(victim.send_message(with_push("victim", hooks.url("/victim-first"))))
        await until(lambda: hooks.at("/victim-first"), 30, "the victim's watcher to be sending")
        await victim.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=mine.id, id="second", url=hooks.url("/victim-second"))
        )
        victim_first.set()
        await until(
            lambda: hooks.at("/victim-second"),
            15,
            "the victim's second config to be told while the hostile receivers hang",
        )
    finally:
        victim_first.set()
        await hostile.close()
        await victim.close()


# -- a config deleted or replaced mid-delivery ---------------------------------------------------


async def test_a_config_deleted_while_its_notification_is_retried_is_not_posted_again(
    gateway: RunningGateway, llm: ScriptedLLM, hooks: Hooks
) -> None:
    """Its owner deletes a config whose receiver answers 503 (so it is being retried with backoff).
    A control config on the same task, also 503, shows the retries going on; the deleted one gets
    at most the attempt already in flight."""
    hooks.statuses["/gone"] = [503] * 10
    hooks.statuses["/control"] = [503] * 10
    llm.reply("done")
    client = await client_for(gateway, BINDINGS[0])
    try:
        request = with_push("hi", hooks.url("/gone"))
        request.configuration.task_push_notification_config.id = "gone"
        request.configuration.return_immediately = True
        task = await only_task(client.send_message(request))
        await client.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=task.id, id="control", url=hooks.url("/control"))
        )
        await until(lambda: hooks.at("/gone"), 30, "the first attempt to the config to be deleted")
        await client.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="gone")
        )
        at_delete = len(hooks.at("/gone"))
        await until(lambda: len(hooks.at("/control")) >= 4, 60, "the control config's retries")
        assert len(hooks.at("/gone")) <= at_delete + 1, (
            f"{len(hooks.at('/gone'))} POSTs to the deleted config, {at_delete} when it was deleted"
        )
    finally:
        await client.close()


# -- a redirect ---------------------------------------------------------------------------------


async def test_a_receiver_that_redirects_is_not_followed_nor_retried(
    gateway: RunningGateway, llm: ScriptedLLM, hooks: Hooks
) -> None:
    """The receiver answers 307 to another address (here another path of the same loopback server,
    which the egress rule would let through on this trusting gateway): the gateway does not go there,
    and does not try again."""
    hooks.redirects["/redirect"] = hooks.url("/internal-only")
    llm.reply("done")
    client = await client_for(gateway, BINDINGS[0])
    try:
        await only_task(client.send_message(with_push("hi", hooks.url("/redirect"))))

        async def told() -> bool:
            rows = await config_rows(gateway)
            return bool(rows) and rows[0]["delivered"] is not None

        async with asyncio.timeout(30):
            while not await told():
                await asyncio.sleep(0.05)
        assert len(hooks.at("/redirect")) == 1
        assert hooks.at("/internal-only") == []
    finally:
        await client.close()
