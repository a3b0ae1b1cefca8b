"""A2A push notifications over real HTTP with the official ``a2a-sdk`` client (issue 45): a receiver
on loopback hears the ended task with its token; a URL the egress rule refuses is refused when it is
registered and nothing is sent; configs are the task owner's; the token is sealed at rest."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from a2a.types import (
    AuthenticationInfo,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    SendMessageConfiguration,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError
from sqlalchemy import text

from hatchway.a2a.push_configs import MAX_CONFIGS_PER_TASK
from hatchway.engine.tools.operations.notifications import verify_signature
from hatchway.store.db import Database
from tests.a2a.test_a2a_agents import BINDINGS, client_for, only_task, user_message
from tests.support.gateway import RunningGateway, base_config, write_config
from tests.support.schema import migration_differences
from tests.support.scripted_llm import ScriptedLLM
from tests.support.servers import free_port
from tests.support.webhooks import Receiver

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def _gateway(tmp_path: Path, llm: ScriptedLLM, *, allow_private: bool, **extra: Any) -> RunningGateway:
    port = free_port()
    config = base_config(
        tmp_path,
        llm.base_url,
        public_base_url=f"http://127.0.0.1:{port}",
        allow_private_mcp_urls=allow_private,
        agents=[{"name": "helper", "model": "gpt-4o", "a2a": {"publish": True}}],
        **extra,
    )
    return RunningGateway(write_config(tmp_path, config), port=port).start()


@pytest.fixture
def trusting(tmp_path: Path, llm: ScriptedLLM) -> Iterator[RunningGateway]:
    """A gateway on a trusted network: ``allow_private_mcp_urls: true``, so loopback is reachable."""
    gateway = _gateway(tmp_path, llm, allow_private=True)
    yield gateway
    gateway.stop()


@pytest.fixture
def strict(tmp_path: Path, llm: ScriptedLLM) -> Iterator[RunningGateway]:
    gateway = _gateway(tmp_path, llm, allow_private=False)
    yield gateway
    gateway.stop()


async def wait_for(predicate: Any, timeout: float = 30) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.05)


def with_push(text_: str, url: str, token: str = "tok-secret-123") -> Any:
    request = user_message(text_)
    request.configuration.CopyFrom(
        SendMessageConfiguration(
            task_push_notification_config=TaskPushNotificationConfig(url=url, token=token)
        )
    )
    return request


@pytest.mark.parametrize("binding", BINDINGS)
async def test_the_receiver_hears_the_completed_task_with_its_token_once(
    trusting: RunningGateway, llm: ScriptedLLM, receiver: Receiver, binding: str
) -> None:
    card = await asyncio.to_thread(
        lambda: __import__("httpx").get(f"{trusting.url}/a2a/helper/.well-known/agent-card.json").json()
    )
    assert card["capabilities"]["pushNotifications"] is True
    llm.reply("Paris.")
    client = await client_for(trusting, binding)
    task = await only_task(client.send_message(with_push("Capital of France?", receiver.url)))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    await wait_for(lambda: receiver.received)
    got = receiver.received[0]
    assert got["headers"]["x-a2a-notification-token"] == "tok-secret-123"
    assert got["headers"]["content-type"] == "application/json"
    assert "x-hatchway-signature" not in got["headers"]  # no signing key configured
    body = json.loads(got["body"])
    assert body["task"]["id"] == task.id and body["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert body["task"]["artifacts"][0]["parts"][0]["text"] == "Paris."

    # The config is the task's: read, listed, and a second one for the ended task hears it at once.
    configs = await client.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=task.id)
    )
    assert [c.url for c in configs.configs] == [receiver.url]
    first = configs.configs[0]
    assert first.token == "tok-secret-123" and first.id
    again = await client.get_task_push_notification_config(
        GetTaskPushNotificationConfigRequest(task_id=task.id, id=first.id)
    )
    assert again.url == receiver.url
    second = await client.create_task_push_notification_config(
        TaskPushNotificationConfig(
            task_id=task.id,
            id="second",
            url=receiver.url + "/2",
            authentication=AuthenticationInfo(scheme="Bearer", credentials="cred-xyz"),
        )
    )
    assert second.id == "second" and second.authentication.scheme == "Bearer"
    assert second.authentication.credentials == ""  # write-only
    await wait_for(lambda: len(receiver.received) == 2)
    assert receiver.received[1]["path"] == "/hook/2"
    assert receiver.received[1]["headers"]["authorization"] == "Bearer cred-xyz"
    await asyncio.sleep(0.5)
    assert len(receiver.received) == 2  # once per (config, state)

    await client.delete_task_push_notification_config(
        DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="second")
    )
    with pytest.raises(TaskNotFoundError):
        await client.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task.id, id="second")
        )
    await client.close()


async def test_a_background_task_is_announced_when_it_ends_and_5xx_is_retried(
    trusting: RunningGateway, llm: ScriptedLLM, receiver: Receiver
) -> None:
    receiver.statuses = [503]
    llm.reply("Later.")
    client = await client_for(trusting, BINDINGS[0])
    request = with_push("Take your time", receiver.url)
    request.configuration.return_immediately = True
    task = await only_task(client.send_message(request))
    await wait_for(lambda: len(receiver.received) == 2)  # a 503, then delivered
    assert receiver.received[0]["body"] == receiver.received[1]["body"]
    body = json.loads(receiver.received[1]["body"])
    assert body["task"]["id"] == task.id and body["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    await asyncio.sleep(0.5)
    assert len(receiver.received) == 2
    await client.close()


async def test_with_a_signing_secret_each_notification_is_signed(
    tmp_path: Path, llm: ScriptedLLM, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HW_TEST_A2A_PUSH_KEY", "push-signing-key")
    gateway = await asyncio.to_thread(
        lambda: _gateway(
            tmp_path, llm, allow_private=True, a2a={"push_signing_secret": "env:HW_TEST_A2A_PUSH_KEY"}
        )
    )
    try:
        llm.reply("signed")
        client = await client_for(gateway, BINDINGS[0])
        await only_task(client.send_message(with_push("sign it", receiver.url)))
        await wait_for(lambda: receiver.received)
        got = receiver.received[0]
        assert verify_signature(
            "push-signing-key",
            got["headers"]["x-hatchway-timestamp"],
            got["body"],
            got["headers"]["x-hatchway-signature"],
        )
        await client.close()
    finally:
        await asyncio.to_thread(gateway.stop)


@pytest.mark.parametrize("url", ["127.0.0.1", "169.254.169.254", "10.1.2.3", "[::1]", "localhost"])
async def test_a_private_address_is_refused_and_nothing_is_sent(
    strict: RunningGateway, llm: ScriptedLLM, receiver: Receiver, url: str
) -> None:
    llm.reply("done")
    client = await client_for(strict, BINDINGS[0])
    target = f"http://{url}:{receiver.url.split(':')[2]}"
    with pytest.raises(InvalidParamsError, match="address"):
        await only_task(client.send_message(with_push("hi", target)))
    # No task was started for the refused message.
    assert llm.requests == []
    task = await only_task(client.send_message(user_message("hi")))
    with pytest.raises(InvalidParamsError, match="allow_private_mcp_urls"):
        await client.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=task.id, url=target)
        )
    listed = await client.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=task.id)
    )
    assert list(listed.configs) == []
    await asyncio.sleep(0.3)
    assert receiver.received == []
    await client.close()


async def test_only_http_urls_and_a_bounded_number_of_configs(
    trusting: RunningGateway, llm: ScriptedLLM, receiver: Receiver
) -> None:
    llm.reply("done")
    client = await client_for(trusting, BINDINGS[1])
    task = await only_task(client.send_message(user_message("hi")))
    for bad in ("ftp://127.0.0.1/x", "file:///etc/passwd", ""):
        with pytest.raises(InvalidParamsError):
            await client.create_task_push_notification_config(
                TaskPushNotificationConfig(task_id=task.id, url=bad)
            )
    for i in range(MAX_CONFIGS_PER_TASK):
        await client.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=task.id, id=f"c{i}", url=receiver.url)
        )
    with pytest.raises(InvalidParamsError, match="already has"):
        await client.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=task.id, id="one-too-many", url=receiver.url)
        )
    # Replacing one by its id is not one more.
    await client.create_task_push_notification_config(
        TaskPushNotificationConfig(task_id=task.id, id="c0", url=receiver.url + "/again")
    )
    await client.close()


async def test_another_organisation_or_end_user_cannot_read_or_delete_a_config_and_the_token_is_sealed(
    trusting: RunningGateway, llm: ScriptedLLM, receiver: Receiver
) -> None:
    llm.reply("for ana")
    ana = await client_for(trusting, BINDINGS[0], headers={"x-on-behalf-of": "ana"})
    task = await only_task(ana.send_message(with_push("mine", receiver.url, token="tok-ana-very-secret")))
    config_id = (
        (
            await ana.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task.id)
            )
        )
        .configs[0]
        .id
    )
    bob = await client_for(trusting, BINDINGS[0], headers={"x-on-behalf-of": "bob"})
    stranger = await client_for(trusting, BINDINGS[1], key=(await asyncio.to_thread(trusting.new_org)).key)
    for other in (bob, stranger):
        with pytest.raises(TaskNotFoundError):
            await other.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task.id, id=config_id)
            )
        with pytest.raises(TaskNotFoundError):
            await other.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task.id)
            )
        with pytest.raises(TaskNotFoundError):
            await other.delete_task_push_notification_config(
                DeleteTaskPushNotificationConfigRequest(task_id=task.id, id=config_id)
            )
        with pytest.raises(TaskNotFoundError):
            await other.create_task_push_notification_config(
                TaskPushNotificationConfig(task_id=task.id, url=receiver.url)
            )
    still = await ana.get_task_push_notification_config(
        GetTaskPushNotificationConfigRequest(task_id=task.id, id=config_id)
    )
    assert still.token == "tok-ana-very-secret"

    db = Database(trusting.settings.database_url)
    try:
        async with db.session() as s:
            rows = (await s.execute(text("SELECT * FROM a2a_push_configs"))).mappings().all()
    finally:
        await db.close()
    assert len(rows) == 1
    assert all(
        b"tok-ana-very-secret" not in (v if isinstance(v, bytes) else str(v).encode())
        for v in rows[0].values()
    )
    for client in (ana, bob, stranger):
        await client.close()


def test_the_push_table_is_as_its_migration_makes_it(tmp_path: Path) -> None:
    import hatchway.a2a.push_configs  # noqa: F401  (its table in Base.metadata)

    untold = "ix_a2a_push_configs_untold"  # partial: made by the migration and by a DDL in the model
    assert migration_differences(tmp_path, "a2a_push_configs", ddl_indexes=frozenset({untold})) == []
    with sqlite3.connect(tmp_path / "migrated.db") as conn:
        [(made,)] = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (untold,)).fetchall()
    assert "WHERE delivered IS NULL OR delivered <> notified" in made, made
