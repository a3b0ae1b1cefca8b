"""Attacks on the A2A bench change (a new task stored in its response's transaction; a background
response run in-process stored ``in_progress`` at once, with no ``start``), on SQLite: a cancel
right after create, a refused message, a background response read right after it is created."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from hatchway.store.db import Database
from tests.a2a.test_a2a_tck_findings import start_gateway
from tests.support.gateway import RunningGateway
from tests.support.scripted_llm import Reply, ScriptedLLM

pytestmark = pytest.mark.anyio
ACTIVE = ("queued", "in_progress")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def sqlite_gateway(tmp_path: Path, llm: ScriptedLLM) -> Iterator[RunningGateway]:
    gateway = start_gateway(tmp_path, llm, f"sqlite+aiosqlite:///{tmp_path / 'hatchway.db'}")
    yield gateway
    gateway.stop()


@pytest.fixture
def one_run(tmp_path: Path, llm: ScriptedLLM) -> Iterator[RunningGateway]:
    gateway = start_gateway(
        tmp_path,
        llm,
        f"sqlite+aiosqlite:///{tmp_path / 'hatchway.db'}",
        limits={"agents": {"helper": {"concurrent_runs": 1}}},
    )
    yield gateway
    gateway.stop()


def rpc(method: str, params: dict[str, Any], id_: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}


def send(text_: str, *, at_once: bool = True) -> dict[str, Any]:
    return rpc(
        "SendMessage",
        {
            "message": {"messageId": f"m-{text_}", "role": "ROLE_USER", "parts": [{"text": text_}]},
            "configuration": {"returnImmediately": at_once},
        },
    )


def client(gateway: RunningGateway) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        headers={"authorization": f"Bearer {gateway.key}", "a2a-version": "1.0"}, timeout=60
    )


async def rows(gateway: RunningGateway, sql: str) -> list[dict[str, Any]]:
    db = Database(gateway.settings.database_url)
    try:
        async with db.session() as s:
            return [dict(r) for r in (await s.execute(text(sql))).mappings()]
    finally:
        await db.close()


async def settled(http: httpx.AsyncClient, base: str, task_id: str, timeout: float = 30) -> dict[str, Any]:
    async with asyncio.timeout(timeout):
        while True:
            task = (await http.post(base, json=rpc("GetTask", {"id": task_id}))).json()["result"]
            if task["status"]["state"] not in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"):
                return task
            await asyncio.sleep(0.05)


async def test_a_task_cancelled_right_after_it_was_created_ends_cancelled_and_stays_so(
    sqlite_gateway: RunningGateway, llm: ScriptedLLM
) -> None:
    """Twenty tasks, each cancelled the moment SendMessage returns (the run may not have begun):
    a cancel that answered CANCELED leaves the task and its response cancelled for good; one that
    was refused (the run had already ended) leaves it completed. No response stays active."""
    llm.default = Reply(text="quick")
    base = f"{sqlite_gateway.url}/a2a/helper"
    outcomes: list[tuple[str, str]] = []
    async with client(sqlite_gateway) as http:
        for n in range(20):
            task = (await http.post(base, json=send(f"race {n}"))).json()["result"]["task"]
            cancel = (await http.post(base, json=rpc("CancelTask", {"id": task["id"]}))).json()
            said = cancel["result"]["status"]["state"] if "result" in cancel else "refused"
            final = await settled(http, base, task["id"])
            outcomes.append((said, final["status"]["state"]))
            if said == "TASK_STATE_CANCELED":
                assert final["status"]["state"] == "TASK_STATE_CANCELED", (n, cancel, final)
            else:
                assert final["status"]["state"] == "TASK_STATE_COMPLETED", (n, cancel, final)
    active = await rows(
        sqlite_gateway, "SELECT id, status FROM responses WHERE status IN ('queued','in_progress')"
    )
    assert active == [], (active, outcomes)
    statuses = await rows(
        sqlite_gateway,
        "SELECT r.status AS status, count(*) AS n FROM a2a_tasks t JOIN responses r ON r.id = t.response_id "
        "GROUP BY r.status",
    )
    assert sum(s["n"] for s in statuses) == 20, statuses


async def test_a_streamed_task_cancelled_before_its_first_token_ends_its_stream_cancelled(
    sqlite_gateway: RunningGateway, llm: ScriptedLLM
) -> None:
    gate = threading.Event()
    llm.default = Reply(text="late", gate=gate)
    base = f"{sqlite_gateway.url}/a2a/helper"
    body = send("held")
    body["method"] = "SendStreamingMessage"
    try:
        async with client(sqlite_gateway) as http, http.stream("POST", base, json=body) as answer:
            lines = answer.aiter_lines()
            task_id = None
            async for line in lines:
                if line.startswith("data:"):
                    task_id = json.loads(line[5:])["result"]["task"]["id"]
                    break
            assert task_id is not None
            cancel = (await http.post(base, json=rpc("CancelTask", {"id": task_id}))).json()
            assert cancel["result"]["status"]["state"] == "TASK_STATE_CANCELED", cancel
            async with asyncio.timeout(30):
                events = [json.loads(line[5:]) async for line in lines if line.startswith("data:")]
            assert (
                events and events[-1]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED"
            ), events
            gate.set()
            final = await settled(http, base, task_id)
            assert final["status"]["state"] == "TASK_STATE_CANCELED"
    finally:
        gate.set()


async def test_a_refused_message_leaves_no_task_pointing_at_a_response_that_does_not_exist(
    one_run: RunningGateway, llm: ScriptedLLM
) -> None:
    gate = threading.Event()
    llm.default = Reply(text="slow", gate=gate)
    base = f"{one_run.url}/a2a/helper"
    try:
        async with client(one_run) as http:
            first = (await http.post(base, json=send("first"))).json()["result"]["task"]
            for n in range(5):
                refused = (await http.post(base, json=send(f"more {n}"))).json()["result"]["task"]
                assert refused["status"]["state"] == "TASK_STATE_REJECTED", refused
            gate.set()
            assert (await settled(http, base, first["id"]))["status"]["state"] == "TASK_STATE_COMPLETED"
        orphans = await rows(
            one_run,
            "SELECT t.id, t.response_id FROM a2a_tasks t LEFT JOIN responses r ON r.id = t.response_id "
            "WHERE t.response_id IS NOT NULL AND r.id IS NULL",
        )
        assert orphans == []
        tasks = await rows(one_run, "SELECT id, response_id, refusal FROM a2a_tasks")
        assert len(tasks) == 6 and sum(t["response_id"] is None for t in tasks) == 5, tasks
        responses = await rows(one_run, "SELECT id FROM responses")
        assert len(responses) == 1, responses  # a refused message stored no response
    finally:
        gate.set()


async def test_a_background_response_read_right_after_it_is_created_is_found_and_cancellable(
    sqlite_gateway: RunningGateway, llm: ScriptedLLM
) -> None:
    """POST /v1/responses (background), then at once GET it, cancel it, and follow its stream."""
    gate = threading.Event()
    llm.default = Reply(text="late", gate=gate)
    headers = {"authorization": f"Bearer {sqlite_gateway.key}"}
    try:
        async with httpx.AsyncClient(
            base_url=f"{sqlite_gateway.url}/v1", headers=headers, timeout=60
        ) as http:
            for n in range(5):
                created = (
                    await http.post(
                        "/responses", json={"model": "gpt-4o", "input": f"bg {n}", "background": True}
                    )
                ).json()
                assert created["status"] in ACTIVE, created
                read = await http.get(f"/responses/{created['id']}")
                assert read.status_code == 200 and read.json()["status"] in ACTIVE, read.text
                cancelled = await http.post(f"/responses/{created['id']}/cancel")
                assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled", (
                    cancelled.text
                )
                async with (
                    asyncio.timeout(30),
                    http.stream("GET", f"/responses/{created['id']}", params={"stream": "true"}) as stream,
                ):
                    events = [
                        json.loads(line[5:])
                        async for line in stream.aiter_lines()
                        if line.startswith("data:") and line[5:].strip() != "[DONE]"
                    ]
                # No `response.cancelled` event exists: a cancelled response's stream ends with its
                # terminal event carrying status `cancelled`.
                assert events and events[-1]["response"]["status"] == "cancelled", events
            gate.set()
            listed = await rows(sqlite_gateway, "SELECT status FROM responses")
            assert {r["status"] for r in listed} == {"cancelled"}, listed
    finally:
        gate.set()
