"""MCP tasks (SEP-2663) under attack: a hostile upstream that answers anything, a hostile client of
``/mcp/<name>`` with a valid key, a model that calls any tool.

The upstream is ``tests/support/hostile_tasks_upstream.py`` (the official SDK, its tasks answering
what each test scripts); the gateway is served over loopback; endpoint clients send raw 2026-07-28
requests (``tests/support/mcp_rpc.py``), chat clients use the official ``openai`` client.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from hatchway.engine.tools.mcp.task_ledger import McpTaskRow
from hatchway.store.db import Database
from hatchway.store.tables import utcnow
from tests.support.agent_loop import log_of, rounds, rule_for, summarise, tool_messages, write_plugin
from tests.support.gateway import RunningGateway, create_org_key
from tests.support.hostile_tasks_upstream import TaskScript, build_app, working
from tests.support.mcp_rpc import rpc
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import ServerThread, wait_until

TASKS = {"extensions": {"io.modelcontextprotocol/tasks": {}}}
REDACTED = "[REDACTED]"


@pytest.fixture
def script() -> TaskScript:
    return TaskScript()


@pytest.fixture
def upstream(script: TaskScript) -> Iterator[str]:
    with ServerThread(build_app(script), host="127.0.0.1", timeout_graceful_shutdown=1) as server:
        yield f"{server.url}/mcp"


def _server(url: str, **extra: Any) -> dict[str, Any]:
    return {"id": "up", "url": url, "max_retries": 0, **extra}


def endpoint_gateway(gateway_factory: Any, tmp_path: Path, upstream: str, **extra: Any) -> RunningGateway:
    plugin = write_plugin(tmp_path, "up", {"mcp_servers": [_server(upstream)]})
    endpoints = [
        {"name": "tasks", "plugin": plugin, "namespace": False},
        {"name": "other", "plugin": plugin, "namespace": False},
    ]
    return gateway_factory(allow_private_mcp_urls=True, mcp_endpoints=endpoints, **extra)  # type: ignore[no-any-return]


def rows(gateway: RunningGateway) -> list[McpTaskRow]:
    """The gateway's organisation's ``mcp_tasks`` rows."""
    assert gateway.org is not None

    async def read() -> list[McpTaskRow]:
        db = Database(gateway.settings.database_url)
        try:
            async with db.session() as s:
                query = select(McpTaskRow).where(McpTaskRow.org_id == gateway.org.org_id)
                return list((await s.scalars(query)).all())
        finally:
            await db.close()

    return asyncio.run(read())


def expire(gateway: RunningGateway, task_id: str) -> None:
    async def write() -> None:
        db = Database(gateway.settings.database_url)
        try:
            async with db.session() as s:
                past = utcnow() - timedelta(days=2)
                await s.execute(update(McpTaskRow).where(McpTaskRow.id == task_id).values(expires_at=past))
        finally:
            await db.close()

    asyncio.run(write())


def make_task(url: str, key: str, user: str = "ann") -> str:
    _, created, text = rpc(
        url, key, "tools/call", {"name": "job", "arguments": {}}, name="job", capabilities=TASKS, user=user
    )
    assert created is not None and created["result"].get("resultType") == "task", text
    return str(created["result"]["taskId"])


def get(url: str, key: str, task_id: str, user: str = "ann", name: str | None = None) -> dict[str, Any]:
    _, answer, text = rpc(
        url,
        key,
        "tasks/get",
        {"taskId": task_id},
        name=task_id if name is None else name,
        capabilities=TASKS,
        user=user,
    )
    assert answer is not None, text
    return answer


# -- the endpoint side ------------------------------------------------------------------------------


def test_an_upstream_task_never_reaches_an_endpoint_client_that_did_not_declare_the_extension(
    gateway_factory: Any, tmp_path: Path, upstream: str, script: TaskScript
) -> None:
    gateway = endpoint_gateway(gateway_factory, tmp_path, upstream)
    url = f"{gateway.url}/mcp/tasks"
    _, answer, text = rpc(
        url, gateway.key, "tools/call", {"name": "job", "arguments": {}}, name="job", user="ann"
    )
    assert answer is not None and "result" in answer, text
    result = answer["result"]
    assert result.get("resultType") != "task" and "taskId" not in result, result
    assert result.get("isError") is True and "mcp_protocol_error" in result["content"][0]["text"], result
    assert [declared for _, declared, _ in script.asked("tools/call")] == [False]
    assert rows(gateway) == []  # nothing counted against the organisation, nothing left open
    assert script.asked("tasks/cancel"), "the task nobody will poll is cancelled upstream"


def test_a_task_past_the_organisations_limit_is_not_made_by_an_upstream_that_ignores_the_limit(
    gateway_factory: Any, tmp_path: Path, upstream: str, script: TaskScript
) -> None:
    gateway = endpoint_gateway(
        gateway_factory, tmp_path, upstream, mcp_tasks={"max_open_per_organisation": 1}
    )
    url = f"{gateway.url}/mcp/tasks"
    make_task(url, gateway.key)  # the one open task the organisation may have
    _, answer, text = rpc(
        url,
        gateway.key,
        "tools/call",
        {"name": "job", "arguments": {}},
        name="job",
        capabilities=TASKS,
        user="ann",
    )
    assert answer is not None and answer["result"].get("resultType") != "task", text
    assert [declared for _, declared, _ in script.asked("tools/call")] == [True, False]
    assert len(rows(gateway)) == 1


def test_another_organisation_end_user_or_endpoint_cannot_read_update_or_cancel_a_task(
    gateway_factory: Any, tmp_path: Path, upstream: str, script: TaskScript
) -> None:
    gateway = endpoint_gateway(gateway_factory, tmp_path, upstream)
    url = f"{gateway.url}/mcp/tasks"
    task_id = make_task(url, gateway.key)
    other_org = asyncio.run(create_org_key(gateway.settings.database_url)).key
    strangers = [
        (url, other_org, "ann"),
        (url, gateway.key, "bob"),
        (url, gateway.key, None),
        (f"{gateway.url}/mcp/other", gateway.key, "ann"),
    ]
    answers = []
    for where, key, user in strangers:
        for method, params in (
            ("tasks/get", {"taskId": task_id}),
            ("tasks/update", {"taskId": task_id, "inputResponses": {}}),
            ("tasks/cancel", {"taskId": task_id}),
        ):
            _, answer, text = rpc(where, key, method, params, name=task_id, capabilities=TASKS, user=user)
            assert answer is not None and "error" in answer, (method, user, text)
            answers.append(answer["error"])
    unknown = get(url, gateway.key, "mtask_" + uuid.uuid4().hex)["error"]
    assert all(a == unknown for a in answers), answers  # the same as a task that never was: no oracle
    assert unknown["code"] == -32602
    assert (
        script.asked("tasks/get") == [] and script.asked("tasks/cancel") == []
    )  # nothing reached the upstream
    assert get(url, gateway.key, task_id)["result"]["status"] == "working"  # the owner still reads it
    wrong_header = get(url, gateway.key, task_id, name="mtask_other")
    assert wrong_header["error"]["code"] == -32020


def test_an_ended_endpoint_task_and_its_result_are_deleted_once_expired(
    gateway_factory: Any, tmp_path: Path, upstream: str, script: TaskScript
) -> None:
    script.detailed = lambda _b, _n: {
        "resultType": "complete",
        **working(status="completed", result={"content": [{"type": "text", "text": "x" * 100_000}]}),
    }
    gateway = endpoint_gateway(gateway_factory, tmp_path, upstream)
    url = f"{gateway.url}/mcp/tasks"
    ended = make_task(url, gateway.key)
    assert get(url, gateway.key, ended)["result"]["status"] == "completed"
    kept = make_task(url, gateway.key)
    expire(gateway, ended)  # its ttl passed
    gateway.stop()
    again = RunningGateway(gateway.config_path).start(gateway.org)  # a replica starting purges
    try:
        wait_until(
            lambda: {row.id for row in rows(again)} == {kept}, timeout=30, interval=0.2, message="the purge"
        )
    finally:
        again.stop()


def test_an_input_request_echoing_the_vaults_bearer_is_stored_redacted(
    gateway_factory: Any, tmp_path: Path, upstream: str, script: TaskScript
) -> None:
    asks = {
        "method": "elicitation/create",
        "params": {"mode": "form", "message": "", "requestedSchema": {"type": "object", "properties": {}}},
    }

    def asking(bearer: str, _n: int) -> dict[str, Any]:
        ask = {**asks, "params": {**asks["params"], "message": f"give {bearer}"}}
        return {"resultType": "complete", **working(status="input_required", inputRequests={"k": ask})}

    script.detailed = asking
    server = _server(upstream, auth={"type": "bearer", "secret_ref": "secret.vault_key"})
    plugin = write_plugin(tmp_path, "up", {"mcp_servers": [server]})
    endpoints = [{"name": "tasks", "plugin": plugin, "namespace": False}]
    gateway = gateway_factory(allow_private_mcp_urls=True, mcp_endpoints=endpoints)
    secret = f"vault-{uuid.uuid4().hex}"
    assert gateway.put_secret("vault_key", secret).status_code in (200, 201)
    url = f"{gateway.url}/mcp/tasks"
    task_id = make_task(url, gateway.key)
    asked = get(url, gateway.key, task_id)["result"]
    assert asked["inputRequests"]["k"]["params"]["message"] == f"give Bearer {REDACTED}"
    [row] = rows(gateway)
    assert row.input_requests is not None and secret not in str(row.input_requests)  # the database too


# -- the client side (a run's calls) ----------------------------------------------------------------


def agent_gateway(gateway_factory: Any, tmp_path: Path, upstream: str, **extra: Any) -> RunningGateway:
    server = _server(upstream, auth={"type": "bearer", "secret_ref": "secret.vault_key"})
    return gateway_factory(
        allow_private_mcp_urls=True, **rule_for(tmp_path, {"mcp_servers": [server]}), **extra
    )  # type: ignore[no-any-return]


def chat(gateway: RunningGateway) -> tuple[str, dict[str, Any]]:
    raw = gateway.client().chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "go"}], extra_headers={"X-On-Behalf-Of": "ann"}
    )
    return raw.text, log_of(gateway, raw.headers["x-hatchway-request-id"])


def test_a_status_message_echoing_the_vaults_bearer_is_redacted_in_the_run_log(
    gateway_factory: Any, llm: ScriptedLLM, tmp_path: Path, upstream: str, script: TaskScript
) -> None:
    secret = f"vault-{uuid.uuid4().hex}"
    script.created = lambda bearer: {"resultType": "task", **working(statusMessage=f"started for {bearer}")}
    script.detailed = lambda bearer, n: {
        "resultType": "complete",
        **working(
            status="completed" if n > 1 else "working",
            statusMessage=f"still {bearer}",
            result={"content": [{"type": "text", "text": "ok"}]},
        ),
    }
    gateway = agent_gateway(gateway_factory, tmp_path, upstream)
    assert gateway.put_secret("vault_key", secret).status_code in (200, 201)
    llm.handler = rounds(Reply(tool_calls=[("up__job", {})]), summarise)
    text, record = chat(gateway)
    assert [declared for _, declared, _ in script.asked("tools/call")] == [True]
    steps = [s for s in record["steps"] if s["type"] == "task"]
    assert steps and all(REDACTED in s["message"] for s in steps), steps
    assert secret not in str(record) and secret not in text
    assert all(secret not in (row.status_message or "") for row in rows(gateway))


def test_a_task_status_the_extension_does_not_know_is_a_protocol_error_not_stored_or_logged(
    gateway_factory: Any, llm: ScriptedLLM, tmp_path: Path, upstream: str, script: TaskScript
) -> None:
    odd = "x" * 5000
    script.detailed = lambda _b, _n: {"resultType": "complete", **working(status=odd)}
    gateway = agent_gateway(gateway_factory, tmp_path, upstream, loop_deadline_seconds=20)
    assert gateway.put_secret("vault_key", "s3cret").status_code in (200, 201)
    llm.handler = rounds(Reply(tool_calls=[("up__job", {})]), summarise)
    _, record = chat(gateway)
    [message] = tool_messages(llm.requests[-1])
    assert "mcp_protocol_error" in message, message
    assert len(script.asked("tasks/get")) == 1  # not polled on until the deadline
    assert all(s.get("status") != odd for s in record["steps"])
    assert all(row.status != odd for row in rows(gateway))


def test_a_poll_interval_of_any_size_or_sign_is_clamped_before_it_is_stored(
    gateway_factory: Any,
    database_url: str,
    llm: ScriptedLLM,
    tmp_path: Path,
    upstream: str,
    script: TaskScript,
) -> None:
    script.created = lambda _b: {"resultType": "task", **working(pollIntervalMs=10**12)}
    script.detailed = lambda _b, n: {
        "resultType": "complete",
        **working(
            status="completed" if n > 2 else "working",
            pollIntervalMs=-(10**12) if n == 1 else 0,
            result={"content": [{"type": "text", "text": "ok"}]},
        ),
    }
    gateway = agent_gateway(gateway_factory, tmp_path, upstream, database_url=database_url)
    assert gateway.put_secret("vault_key", "s3cret").status_code in (200, 201)
    llm.handler = rounds(Reply(tool_calls=[("up__job", {})]), summarise)
    chat(gateway)
    assert tool_messages(llm.requests[-1]) == ["ok"]
    [row] = rows(gateway)
    assert row.status == "completed" and row.poll_interval_ms == 5_000  # mcp_tasks.max_poll_ms
