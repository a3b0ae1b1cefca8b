"""The ``mcp_tasks`` ledger on a real database: what finds a task again, whose it is, when it goes."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

import hatchway.engine.tools.mcp.task_ledger  # noqa: F401  (the model, for the migration check)
from hatchway.engine.tools.mcp.task_ledger import CallIdentity, McpTaskRow, TaskLedger, server_ref
from hatchway.store.db import Database
from hatchway.store.tables import utcnow
from tests.support.schema import migration_differences

pytestmark = pytest.mark.anyio


def test_the_model_matches_its_migration(tmp_path: Path) -> None:
    assert migration_differences(tmp_path, "mcp_tasks") == []


def call(
    org: str = "org_a", response: str = "resp_1", n: int = 1, ref: str = "http://up/mcp"
) -> CallIdentity:
    return CallIdentity(org, response, "tasks", server_ref(ref), "long_job", {"seconds": 60}, n)


async def record(ledger: TaskLedger, identity: CallIdentity, upstream: str = "up-1") -> str:
    return await ledger.record_call(
        identity,
        org_id=identity.org_id,
        server_id="tasks",
        ref=identity.server_ref,
        tool="long_job",
        upstream_task_id=upstream,
        status="working",
        poll_interval_ms=100,
        end_user=None,
    )


async def test_a_call_finds_its_open_task_again_and_no_other_calls(sqlite_db: Database) -> None:
    ledger = TaskLedger(sqlite_db, ttl_seconds=600)
    row_id = await record(ledger, call())
    found = await ledger.open_call(call())
    assert found is not None and found.id == row_id and found.upstream_task_id == "up-1"
    assert await ledger.open_call(call(n=2)) is None  # the run's second such call is another call
    assert await ledger.open_call(call(org="org_b")) is None  # another organisation's run
    assert await ledger.open_call(call(ref="http://elsewhere/mcp")) is None  # another server, same id
    await ledger.set_status(row_id, "completed")
    assert await ledger.open_call(call()) is None  # ended: a new run calls the tool anew
    assert await ledger.open_responses(["resp_1"]) == {}


async def test_resumes_are_counted_per_response(sqlite_db: Database) -> None:
    ledger = TaskLedger(sqlite_db, ttl_seconds=600)
    await record(ledger, call())
    assert await ledger.open_responses(["resp_1", "resp_2"]) == {"resp_1": 0}
    await ledger.note_resumed("resp_1")
    await ledger.note_resumed("resp_1")
    assert await ledger.open_responses(["resp_1"]) == {"resp_1": 2}


async def test_an_endpoint_task_is_its_organisation_end_user_and_endpoints_only(sqlite_db: Database) -> None:
    ledger = TaskLedger(sqlite_db, ttl_seconds=600)
    row = ledger.endpoint_row(
        org_id="org_a",
        end_user="ann",
        endpoint="tools",
        server_id="s",
        server_ref="r",
        tool="t",
        status="working",
    )
    await ledger.create_endpoint_task(row)
    assert await ledger.endpoint_task(row.id, org_id="org_a", end_user="ann", endpoint="tools") is not None
    assert await ledger.endpoint_task(row.id, org_id="org_b", end_user="ann", endpoint="tools") is None
    assert await ledger.endpoint_task(row.id, org_id="org_a", end_user="bob", endpoint="tools") is None
    assert await ledger.endpoint_task(row.id, org_id="org_a", end_user=None, endpoint="tools") is None
    assert await ledger.endpoint_task(row.id, org_id="org_a", end_user="ann", endpoint="other") is None
    assert await ledger.open_count("org_a") == 1 and await ledger.open_count("org_b") == 0
    settled = await ledger.settle(row.id, status="completed", result={"content": []})
    assert settled is not None and settled.status == "completed"
    again = await ledger.settle(row.id, status="working")  # an ended task never changes again
    assert again is not None and again.status == "completed"


async def test_rows_past_their_ttl_are_unreadable_and_purged(sqlite_db: Database) -> None:
    ledger = TaskLedger(sqlite_db, ttl_seconds=600)
    row = ledger.endpoint_row(
        org_id="org_a",
        end_user=None,
        endpoint="tools",
        server_id="s",
        server_ref="r",
        tool="t",
        status="working",
    )
    await ledger.create_endpoint_task(row)
    kept = await record(ledger, call())
    async with sqlite_db.session() as s:
        await s.execute(
            update(McpTaskRow)
            .where(McpTaskRow.id == row.id)
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )
    assert await ledger.endpoint_task(row.id, org_id="org_a", end_user=None, endpoint="tools") is None
    assert await ledger.purge_expired() == 1
    assert await ledger.open_call(call()) is not None and kept
