"""A task whose run needs the end user's per-user OAuth grant is ``auth-required`` (issue 45): the
consent link is its status message; once the end user has authorized (in Chromium, against an
Authlib authorization server), their next message on the task goes on and the tool runs with their
own token."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import CancelTaskRequest, GetTaskRequest, TaskState

from tests.a2a.test_a2a_agents import only_task, user_message
from tests.credentials.test_per_user_oauth import LINK, USERS, Browser, whoami_model
from tests.support.agent_loop import write_plugin
from tests.support.browser import missing_browser
from tests.support.gateway import RunningGateway, base_config, write_config
from tests.support.oauth_server import AuthorizedMcpServer, OAuthTestServer
from tests.support.scripted_llm import ScriptedLLM
from tests.support.servers import free_port

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Stack:
    def __init__(self, tmp_path: Path, llm: ScriptedLLM) -> None:
        port = free_port()
        public = f"http://127.0.0.1:{port}"
        self.idp = OAuthTestServer(users=USERS, redirect_uri=f"{public}/oauth/callback").start()
        self.mcp = AuthorizedMcpServer(self.idp).start()
        server = {
            "id": "tickets",
            "url": self.mcp.url,
            "auth": {
                "type": "oauth",
                "grant": "authorization_code",
                "client_id": self.idp.client.client_id,
                "secret_ref": "secret.idp_client",
            },
        }
        plugin = write_plugin(tmp_path, "tickets", {"mcp_servers": [server]})
        agent = {"name": "tickets", "model": "gpt-4o", "plugin": plugin, "a2a": {"publish": True}}
        config = base_config(
            tmp_path, llm.base_url, public_base_url=public, allow_private_mcp_urls=True, agents=[agent]
        )
        self.gateway = RunningGateway(write_config(tmp_path, config), port=port).start()
        assert self.gateway.put_secret("idp_client", self.idp.client.client_secret).status_code == 201
        llm.handler = whoami_model

    async def client(self, user: str) -> Any:
        http = httpx.AsyncClient(
            headers={"authorization": f"Bearer {self.gateway.key}", "x-on-behalf-of": user}, timeout=60
        )
        url = f"{self.gateway.url}/a2a/tickets"
        return await create_client(url, client_config=ClientConfig(httpx_client=http, streaming=False))

    def stop(self) -> None:
        self.gateway.stop()
        self.mcp.stop()
        self.idp.stop()


@pytest.fixture
def stack(tmp_path: Path, llm: ScriptedLLM) -> Iterator[Stack]:
    if reason := missing_browser():
        pytest.skip(reason)
    running = Stack(tmp_path, llm)
    yield running
    running.stop()


async def test_a_task_waits_for_the_end_users_grant_then_goes_on_with_their_token(stack: Stack) -> None:
    alice = await stack.client("alice")
    task = await only_task(alice.send_message(user_message("Who am I?")))
    assert task.status.state == TaskState.TASK_STATE_AUTH_REQUIRED
    link = LINK.search(task.status.message.parts[0].text)
    assert link is not None, task.status.message
    assert stack.mcp.calls == []  # nothing reached the tool without alice's token

    def consent() -> str:  # Playwright's sync API, in a thread of its own (not this event loop's)
        browser = Browser()
        try:
            return browser.consent(link.group(0), "alice", USERS["alice"])
        finally:
            browser.close()

    assert "Connected" in await asyncio.to_thread(consent)

    answer = user_message("Who am I?", context_id=task.context_id)
    answer.message.task_id = task.id
    done = await only_task(alice.send_message(answer))
    assert done.id == task.id and done.status.state == TaskState.TASK_STATE_COMPLETED
    assert done.artifacts[0].parts[0].text == "You are user:alice."
    await alice.close()


async def test_cancelling_a_task_that_waits_for_authorization(stack: Stack) -> None:
    bob = await stack.client("bob")
    task = await only_task(bob.send_message(user_message("Who am I?")))
    assert task.status.state == TaskState.TASK_STATE_AUTH_REQUIRED
    cancelled = await bob.cancel_task(CancelTaskRequest(id=task.id))
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    assert (await bob.get_task(GetTaskRequest(id=task.id))).status.state == TaskState.TASK_STATE_CANCELED
    await bob.close()
