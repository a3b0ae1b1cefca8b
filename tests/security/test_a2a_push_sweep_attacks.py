"""Attacks on the A2A push sweep (``PushNotifier.sweep``, ``PushConfigs.untold``): rows it can
never settle that fill its batch for every organisation, a process restarted while a task ran on
SQLite, an agent no longer published, and the push secrets in logs and in the database."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import (
    AuthenticationInfo,
    CancelTaskRequest,
    GetTaskRequest,
    TaskPushNotificationConfig,
    TaskState,
)

from hatchway.a2a.push import SWEEP_BATCH
from hatchway.a2a.push_configs import MAX_CONFIGS_PER_TASK
from tests.a2a.test_a2a_agents import BINDINGS, client_for, only_task
from tests.security.test_a2a_push_attacks import HELPER, Hooks, config_rows, start, until, with_push
from tests.support.contas import ASK, RunningContas, contas_model
from tests.support.gateway import RunningGateway, create_org_key
from tests.support.leak_scanner import SecretScanner
from tests.support.replicas import Replicas, eventually
from tests.support.scripted_llm import Reply, ScriptedLLM

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def hooks() -> Iterator[Hooks]:
    h = Hooks()
    yield h
    h.close()


async def a2a_client(url: str, key: str, agent: str, **headers: str) -> Any:
    http = httpx.AsyncClient(headers={"authorization": f"Bearer {key}", **headers}, timeout=60)
    return await create_client(
        f"{url}/a2a/{agent}", client_config=ClientConfig(httpx_client=http, streaming=False)
    )


# -- rows the sweep cannot settle ------------------------------------------------------------------


@pytest.fixture
def both_agents(tmp_path: Path, llm: ScriptedLLM, contas: RunningContas) -> Iterator[RunningGateway]:
    def decide(body: dict[str, Any]) -> Any:
        if body.get("tools"):  # the contas agent has tools; the helper has none
            return contas_model(body)
        return Reply(text="done")

    llm.handler = decide
    agent = contas.agent(tmp_path / "contas") | {"a2a": {"publish": True}}
    running = start(tmp_path, llm, [agent, HELPER])
    yield running
    running.stop()


async def test_configs_of_a_withdrawn_task_whose_response_was_deleted_do_not_jam_every_organisations_sweep(
    both_agents: RunningGateway, hooks: Hooks
) -> None:
    """A hostile organisation cancels four input-required tasks (refusal ``canceled``, the response
    kept), deletes their responses (DELETE /v1/responses/{id}), then gives each task eight push
    configs: 32 rows the sweep selects (a refused task has ended, they were never told) but whose
    snapshot raises NotFound, so none is ever claimed or told. They are the oldest owed rows, so
    each sweep's batch (SWEEP_BATCH) is full of them. Another organisation's config that only the
    sweep can tell must still be told."""
    gw = both_agents
    hostile_key = (await asyncio.to_thread(gw.new_org)).key
    hostile = await a2a_client(gw.url, hostile_key, "contas", **{"x-on-behalf-of": "eve"})
    victim = await client_for(gw, BINDINGS[0])
    hooks.held["/victim-first"] = victim_first = threading.Event()
    try:
        for n in range(SWEEP_BATCH // MAX_CONFIGS_PER_TASK):
            task = await only_task(hostile.send_message(_message(ASK, f"eve-{n}")))
            assert task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, task
            await hostile.cancel_task(CancelTaskRequest(id=task.id))
            response_id = task.metadata["hatchway_response_id"]
            deleted = httpx.delete(
                f"{gw.url}/v1/responses/{response_id}", headers={"authorization": f"Bearer {hostile_key}"}
            )
            assert deleted.status_code == 200, deleted.text
            for i in range(MAX_CONFIGS_PER_TASK):
                await hostile.create_task_push_notification_config(
                    TaskPushNotificationConfig(task_id=task.id, id=f"p{i}", url=hooks.url("/poison"))
                )

        mine = await only_task(victim.send_message(with_push("victim", hooks.url("/victim-first"))))
        await until(lambda: hooks.at("/victim-first"), 30, "the victim's watcher to be sending")
        await victim.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=mine.id, id="second", url=hooks.url("/victim-second"))
        )
        victim_first.set()
        try:
            await until(lambda: hooks.at("/victim-second"), 15, "the victim's sweep-only config told")
        except AssertionError as exc:
            owed = sum(1 for r in await config_rows(gw) if r["delivered"] is None)
            raise AssertionError(f"{exc}; {owed} config rows never told") from None
    finally:
        victim_first.set()
        await hostile.close()
        await victim.close()


def _message(text_: str, message_id: str) -> Any:
    from tests.a2a.test_a2a_agents import user_message

    request = user_message(text_)
    request.message.message_id = message_id
    return request


# -- a process restarted while a task ran (SQLite) -------------------------------------------------


@pytest.fixture
def sqlite_serve(tmp_path: Path, llm: ScriptedLLM) -> Iterator[Replicas]:
    from hatchway.vault import load_master_key

    load_master_key(tmp_path / "master.key")
    replicas = Replicas(
        tmp_path,
        {
            "database_url": f"sqlite+aiosqlite:///{tmp_path / 'serve.db'}",
            "master_key_file": str(tmp_path / "master.key"),
            "providers": [{"id": "upstream", "base_url": llm.base_url, "timeout_seconds": 60}],
            "models": [{"name": "gpt-4o", "provider": "upstream", "upstream_model": "gpt-4o"}],
            "agents": [HELPER],
            "allow_private_mcp_urls": True,
            "response_lease_seconds": 3,
            "a2a": {"push_sweep_seconds": 0.5, "push_claim_seconds": 2},
        },
    )
    yield replicas
    replicas.stop()


async def test_on_sqlite_a_task_running_when_its_process_was_killed_is_announced_failed_after_a_restart(
    sqlite_serve: Replicas, tmp_path: Path, llm: ScriptedLLM, hooks: Hooks
) -> None:
    a = sqlite_serve.serve("a")
    key = (await create_org_key(f"sqlite+aiosqlite:///{tmp_path / 'serve.db'}")).key
    gate = threading.Event()
    llm.handler = lambda body: Reply(text="never", gate=gate)
    on_a = await a2a_client(a.url, key, "helper")
    try:
        request = with_push("long", hooks.url("/restart"))
        request.configuration.return_immediately = True
        task = await only_task(on_a.send_message(request))

        async def working() -> bool:
            return (
                await on_a.get_task(GetTaskRequest(id=task.id))
            ).status.state == TaskState.TASK_STATE_WORKING

        async with asyncio.timeout(30):
            while not await working():
                await asyncio.sleep(0.05)
        a.kill()
        await asyncio.to_thread(sqlite_serve.serve, "b")
        await asyncio.to_thread(
            eventually, lambda: hooks.at("/restart"), 60, "the lost task to be announced", sqlite_serve
        )
        assert hooks.states("/restart") == ["TASK_STATE_FAILED"]
    finally:
        gate.set()
        await on_a.close()


# -- an agent no longer published ------------------------------------------------------------------


async def test_a_task_of_an_agent_no_longer_published_is_given_up_once_not_swept_forever(
    tmp_path: Path, llm: ScriptedLLM, hooks: Hooks
) -> None:
    """The task's config is owed when the gateway restarts without the agent published (another
    agent is, so the sweep runs): the config is given up (told, never POSTed), once."""
    sqlite = f"sqlite+aiosqlite:///{tmp_path / 'hatchway.db'}"
    gate = threading.Event()
    llm.handler = lambda body: Reply(text="late", gate=gate)
    first = await asyncio.to_thread(
        start, tmp_path, llm, [HELPER], database_url=sqlite, response_lease_seconds=3
    )
    try:
        client = await client_for(first, BINDINGS[0])
        request = with_push("long", hooks.url("/unpublished"))
        request.configuration.return_immediately = True
        await only_task(client.send_message(request))
        await client.close()
    finally:
        await asyncio.to_thread(first.stop)  # the run is cut short; its watcher with it
    gate.set()
    other = {"name": "other", "model": "gpt-4o", "a2a": {"publish": True}}
    second = await asyncio.to_thread(
        start, tmp_path, llm, [other, {"name": "helper", "model": "gpt-4o"}], database_url=sqlite
    )
    try:

        async def given_up() -> bool:
            rows = await config_rows(second)
            return bool(rows) and rows[0]["delivered"] is not None

        async with asyncio.timeout(30):
            while not await given_up():
                await asyncio.sleep(0.05)
        rows = await config_rows(second)
        assert rows[0]["delivered"].endswith("|UNPUBLISHED"), rows
        assert hooks.at("/unpublished") == []
    finally:
        await asyncio.to_thread(second.stop)


# -- secrets ----------------------------------------------------------------------------------------


async def test_the_push_token_and_credentials_appear_in_no_log_line_and_not_in_clear_in_the_database(
    secret_scanner: SecretScanner, tmp_path: Path, llm: ScriptedLLM, hooks: Hooks
) -> None:
    """Token and credentials sent on SendMessage and on CreateTaskPushNotificationConfig; the
    receivers answer 503 then 200, 401, a redirect, and one never answers in time: every log path of
    the notifier runs. The root logger is at DEBUG (the SDK's own request logging included)."""
    token, credentials = "tok-Zq81-push-token-value", "cred-Wm52-push-credentials-value"
    token2 = "tok-Kx07-second-token-value"
    secret_scanner.watch(token, credentials, token2)
    gateway = await asyncio.to_thread(start, tmp_path, llm, [HELPER])
    secret_scanner.watch_database(gateway.settings.database_url)
    hooks.statuses["/retry"] = [503]
    hooks.statuses["/refuse"] = [401]
    hooks.redirects["/moved"] = hooks.url("/elsewhere")
    llm.reply("done")
    try:
        for binding in BINDINGS:
            client = await client_for(gateway, binding)
            request = with_push("hi", hooks.url("/retry"), token=token)
            request.configuration.task_push_notification_config.authentication.CopyFrom(
                AuthenticationInfo(scheme="Bearer", credentials=credentials)
            )
            llm.reply("done")
            task = await only_task(client.send_message(request))
            for path in ("/refuse", "/moved"):
                created = await client.create_task_push_notification_config(
                    TaskPushNotificationConfig(
                        task_id=task.id,
                        id=path.strip("/"),
                        url=hooks.url(path),
                        token=token2,
                        authentication=AuthenticationInfo(scheme="Basic", credentials=credentials),
                    )
                )
                assert created.token == token2
            await client.close()

        async def all_told() -> bool:
            rows = await config_rows(gateway)
            return len(rows) == 6 and all(r["delivered"] is not None for r in rows)

        async with asyncio.timeout(30):
            while not await all_told():
                await asyncio.sleep(0.05)
        assert len(hooks.at("/retry")) == 3  # one 503 retried, then delivered twice
        got = hooks.at("/retry")[-1]["headers"]
        assert got["x-a2a-notification-token"] == token and got["authorization"] == f"Bearer {credentials}"
    finally:
        await asyncio.to_thread(gateway.stop)
