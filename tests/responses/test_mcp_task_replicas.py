"""MCP tasks across real processes: replicas and workers on one PostgreSQL and one Redis.

- A background response whose call the upstream runs as a 60-second task loses its worker to a
  SIGKILL: its lease runs out, it is queued again (not failed), another worker runs it, finds the
  open task of the same call in ``mcp_tasks`` and polls it — the upstream saw one call. A worker
  stopped with SIGTERM queues the response again itself.
- A client of ``/mcp/<name>`` starts a task on replica A and polls it, answers it and reads its
  result on replica B.
- A task's question to the end user, asked through replica A, is answered through replica B: the
  same upstream task resumes (one call); a background response cancelled on replica B while a
  worker runs it cancels its upstream task.

The upstream is ``tests/conformance/mcp_tasks_upstream.py`` in this process (its ``/stats`` counts
the calls each tool's body saw).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from hatchway.engine.tools.mcp.task_ledger import McpTaskRow
from hatchway.store.db import Database
from tests.conformance.mcp_tasks_upstream import build_app
from tests.support.agent_loop import write_plugin
from tests.support.backends import REDIS_URL
from tests.support.gateway import create_org_key
from tests.support.mcp_rpc import rpc
from tests.support.replicas import Replicas, eventually, purge_redis, replica_config, unique_redis_prefix
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import ServerThread

pytestmark = [pytest.mark.postgres, pytest.mark.redis]
TASKS = {"extensions": {"io.modelcontextprotocol/tasks": {}}}  # the capabilities a task client declares


@pytest.fixture
def upstream() -> Iterator[str]:
    with ServerThread(build_app(), host="127.0.0.1", timeout_graceful_shutdown=1) as server:
        yield server.url


def stats(upstream: str) -> dict[str, Any]:
    return httpx.get(f"{upstream}/stats").json()  # type: ignore[no-any-return]


def rows(database_url: str, **where: Any) -> list[McpTaskRow]:
    async def read() -> list[McpTaskRow]:
        db = Database(database_url)
        try:
            async with db.session() as s:
                query = select(McpTaskRow)
                for column, value in where.items():
                    query = query.where(getattr(McpTaskRow, column) == value)
                return list((await s.scalars(query)).all())
        finally:
            await db.close()

    return asyncio.run(read())


def calling_long_job(seconds: int) -> Any:
    def model(body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return Reply(text=f"Done: {str(last['content']).strip(chr(34))}")
        return Reply(tool_calls=[("tasks__long_job", {"seconds": seconds, "label": "long"})])

    return model


@pytest.mark.parametrize(
    ("stop", "seconds"),
    [
        ("kill", 60),  # SIGKILL: the lease runs out, and the lease keeper queues the response again
        ("terminate", 20),  # SIGTERM: the stopping worker queues it again itself, after its grace
    ],
)
def test_a_task_survives_its_worker_and_is_polled_again_never_called_again(
    stop: str, seconds: int, tmp_path: Path, pg_database_url: str, llm: ScriptedLLM, upstream: str
) -> None:
    if not REDIS_URL:
        pytest.skip("needs HATCHWAY_TEST_REDIS_URL")
    prefix = unique_redis_prefix()
    plugin = write_plugin(tmp_path, "tasks", {"mcp_servers": [{"id": "tasks", "url": f"{upstream}/mcp"}]})
    agent = {"name": "tasks", "model": "gpt-4o", "instructions": "Use the tools.", "plugin": plugin}
    config = replica_config(
        tmp_path,
        pg_database_url,
        REDIS_URL,
        prefix,
        llm.base_url,
        agents=[agent],
        allow_private_mcp_urls=True,
    )
    replicas = Replicas(tmp_path, config)
    llm.handler = calling_long_job(seconds)
    try:
        gateway = replicas.serve("a")
        worker = replicas.worker("w1")
        key = asyncio.run(create_org_key(pg_database_url)).key
        queued = gateway.client(key).responses.create(model="agent:tasks", input="run it", background=True)
        [task] = eventually(
            lambda: rows(pg_database_url, response_id=queued.id), 60, "the task recorded", replicas
        )
        assert stats(upstream)["tasks"] == {task.upstream_task_id: "working"}
        if stop == "kill":
            worker.kill()  # SIGKILL mid-task: nothing of the worker's clean-up runs
        else:
            assert worker.terminate() == 0  # graceful: its grace period passes, then its runs stop
        replicas.worker("w2")
        done = eventually(
            lambda: (
                (r := gateway.client(key).responses.retrieve(queued.id)).status
                not in ("queued", "in_progress")
                and r
            ),
            150,
            "the response to end",
            replicas,
        )
        assert done.status == "completed", done.error
        assert done.output_text == "Done: done long"
        seen = stats(upstream)
        assert seen["calls"] == {"long_job": 1}  # the tool was called once, its task polled twice over
        assert seen["tasks"] == {task.upstream_task_id: "completed"}
        [after] = rows(pg_database_url, response_id=queued.id)
        # Resumed once for the stop; on a machine slow enough for a 3 s lease to lapse, maybe again.
        assert after.id == task.id and after.resumes >= 1 and after.status == "completed"
    finally:
        replicas.stop()
        purge_redis(REDIS_URL, prefix)


def test_a_task_started_on_one_replica_is_polled_and_answered_on_the_other(
    tmp_path: Path, pg_database_url: str, llm: ScriptedLLM, upstream: str
) -> None:
    if not REDIS_URL:
        pytest.skip("needs HATCHWAY_TEST_REDIS_URL")
    prefix = unique_redis_prefix()
    plugin = write_plugin(tmp_path, "tasks", {"mcp_servers": [{"id": "tasks", "url": f"{upstream}/mcp"}]})
    config = replica_config(
        tmp_path,
        pg_database_url,
        REDIS_URL,
        prefix,
        llm.base_url,
        allow_private_mcp_urls=True,
        mcp_endpoints=[{"name": "tasks", "plugin": plugin, "namespace": False}],
    )
    replicas = Replicas(tmp_path, config)
    try:
        a, b = replicas.serve("a"), replicas.serve("b")
        key = asyncio.run(create_org_key(pg_database_url)).key
        url_a, url_b = f"{a.url}/mcp/tasks", f"{b.url}/mcp/tasks"
        arguments = {"name": "ask_in_task", "arguments": {"label": "wire"}}
        _, created, _ = rpc(
            url_a, key, "tools/call", arguments, name="ask_in_task", capabilities=TASKS, user="ann"
        )
        assert created is not None and created["result"]["resultType"] == "task", created
        task_id = created["result"]["taskId"]
        assert task_id.startswith("mtask_") and task_id not in stats(upstream)["tasks"]  # Hatchway's id

        def get(url: str, user: str = "ann") -> dict[str, Any]:
            _, answer, text = rpc(
                url, key, "tasks/get", {"taskId": task_id}, name=task_id, capabilities=TASKS, user=user
            )
            assert answer is not None, text
            return answer

        asking = eventually(
            lambda: (r := get(url_b)["result"])["status"] == "input_required" and r,
            30,
            "the question",
            replicas,
        )
        assert list(asking["inputRequests"]) == ["confirm"]
        assert "error" in get(url_b, user="bob")  # another end user: no such task
        update = {
            "taskId": task_id,
            "inputResponses": {"confirm": {"action": "accept", "content": {"confirm": True}}},
        }
        _, ack, _ = rpc(url_b, key, "tasks/update", update, name=task_id, capabilities=TASKS, user="ann")
        assert ack is not None and ack["result"].get("resultType") == "complete", ack
        done = eventually(
            lambda: (r := get(url_a)["result"])["status"] == "completed" and r, 30, "the result", replicas
        )
        assert done["result"]["content"][0]["text"] == "answered wire true"
        assert stats(upstream)["calls"] == {"ask_in_task": 1}
    finally:
        replicas.stop()
        purge_redis(REDIS_URL, prefix)


def asking_model(body: dict[str, Any]) -> Reply:
    last = body["messages"][-1]
    if last["role"] == "tool":
        return Reply(text=f"Done: {str(last['content']).strip(chr(34))}")
    return Reply(tool_calls=[("tasks__ask_in_task", {"label": "wire"})])


def test_a_tasks_question_asked_on_one_replica_is_answered_on_the_other_and_a_cancel_reaches_the_task(
    tmp_path: Path, pg_database_url: str, llm: ScriptedLLM, upstream: str
) -> None:
    """The end user's question comes from replica A; their answer, sent to replica B, resumes the same
    upstream task (one call). Then a background response running on a worker is cancelled on
    replica B: its upstream task is cancelled."""
    if not REDIS_URL:
        pytest.skip("needs HATCHWAY_TEST_REDIS_URL")
    prefix = unique_redis_prefix()
    plugin = write_plugin(tmp_path, "tasks", {"mcp_servers": [{"id": "tasks", "url": f"{upstream}/mcp"}]})
    agent = {"name": "tasks", "model": "gpt-4o", "instructions": "Use the tools.", "plugin": plugin}
    config = replica_config(
        tmp_path,
        pg_database_url,
        REDIS_URL,
        prefix,
        llm.base_url,
        agents=[agent],
        allow_private_mcp_urls=True,
    )
    replicas = Replicas(tmp_path, config)
    try:
        a, b = replicas.serve("a"), replicas.serve("b")
        replicas.worker("w1")
        key = asyncio.run(create_org_key(pg_database_url)).key

        def chat(replica: Any, text: str) -> str:
            reply = replica.client(key).chat.completions.create(
                model="agent:tasks",
                messages=[{"role": "user", "content": text}],
                extra_headers={"hatchway-session": "trip", "X-On-Behalf-Of": "ann"},
            )
            return reply.choices[0].message.content or ""

        llm.handler = asking_model
        question = chat(a, "send the wire")
        assert "Confirm wire?" in question, question
        [task] = [t for t, s in stats(upstream)["tasks"].items() if s == "input_required"]
        assert chat(b, "yes") == "Done: answered wire true"
        seen = stats(upstream)
        assert seen["calls"] == {"ask_in_task": 1} and seen["tasks"] == {task: "completed"}

        llm.handler = calling_long_job(60)
        client_a, client_b = a.client(key), b.client(key)
        queued = client_a.responses.create(model="agent:tasks", input="run it", background=True)
        [row] = eventually(
            lambda: rows(pg_database_url, response_id=queued.id), 60, "the task recorded", replicas
        )
        assert client_b.responses.cancel(queued.id).status == "cancelled"
        eventually(
            lambda: row.upstream_task_id in stats(upstream)["cancelled"],
            30,
            "the upstream task cancelled",
            replicas,
        )
        assert stats(upstream)["calls"]["long_job"] == 1
    finally:
        replicas.stop()
        purge_redis(REDIS_URL, prefix)
