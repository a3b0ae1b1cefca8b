"""The operation state machine in the database (SQLite and PostgreSQL): guarded transitions,
one execution under concurrent confirmations, interrupted executions, expiry, supersede."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import uuid
from datetime import timedelta
from pathlib import Path

import anyio
import pytest

from hatchway.config.agent_files import AgentTools
from hatchway.config.settings import Settings
from hatchway.engine.tools.operations.execution import OperationConflict, confirm_operation
from hatchway.engine.tools.operations.models import OperationStatus
from hatchway.engine.tools.operations.service import OperationService, ResultKind
from hatchway.engine.tools.operations.store import EXPIRED, OperationDraft, OperationQuery, OperationStore
from hatchway.gateway import Gateway
from hatchway.store.db import Database
from hatchway.store.tables import utcnow
from tests.support.contas import ABC, RunningContas
from tests.support.operations import make_ctx

pytestmark = pytest.mark.anyio
S = OperationStatus


def _org() -> str:
    return f"org_{uuid.uuid4().hex[:8]}"


def _draft(org: str, session: str | None = "s1", **kw) -> OperationDraft:
    return OperationDraft(
        org_id=org,
        agent="contas",
        session_key=session,
        tool="cancelar_vas_lote",
        server="contas",
        operation_type="transactional",
        policy={"source": "tool_policies.yaml"},
        arguments={"items": ["Produto A"]},
        ttl_seconds=60,
        **kw,
    )


async def _pending(
    store: OperationStore, agent_tools: AgentTools, contas: RunningContas, org: str, session="s1"
):
    service = OperationService("contas", agent_tools, store)
    step = await service.call(
        "cancelar_vas_avulso", ABC, make_ctx(org, session), contas.caller(), call_id="call_1"
    )
    assert step.kind is ResultKind.NEEDS_CONFIRMATION
    assert step.operation is not None
    return step.operation


async def test_transitions_are_compare_and_set(db: Database) -> None:
    store = OperationStore(db)
    op = await store.create(_draft(_org()))
    assert op.state is S.COLLECTING_PARAMETERS
    assert await store.transition(op.id, [S.COLLECTING_PARAMETERS], S.PRE_VALIDATION)
    assert not await store.transition(op.id, [S.COLLECTING_PARAMETERS], S.PRE_VALIDATION)
    assert (await store.get(op.id)).state is S.PRE_VALIDATION


async def test_a_new_request_supersedes_the_conversations_open_operations(db: Database) -> None:
    store = OperationStore(db)
    org = _org()
    first = await store.create(_draft(org))
    assert await store.await_confirmation(first, resolved_arguments={}, arguments_digest="x")
    elsewhere = await store.create(_draft(org, session="s2"))
    second = await store.create(_draft(org))
    assert await store.await_confirmation(second, resolved_arguments={}, arguments_digest="y")

    old = await store.get(first.id)
    assert old.state is S.CANCELLED and old.status_reason.startswith(f"superseded by {second.id}")
    assert (await store.get(elsewhere.id)).state is S.COLLECTING_PARAMETERS
    assert (await store.pending_for(org, "contas", "s1")).id == second.id
    pending = await store.list(org, OperationQuery(status=S.AWAITING_CONFIRMATION))
    assert [p.id for p in pending] == [second.id]


async def test_one_pending_confirmation_per_conversation_even_when_racing(database_url: str) -> None:
    """Two replicas put two operations of one conversation up for confirmation at the same moment."""
    dbs = [Database(database_url), Database(database_url)]
    await dbs[0].migrate()
    try:
        stores = [OperationStore(d) for d in dbs]
        org = _org()
        ops = [await stores[i].create(_draft(org)) for i in (0, 1)]
        # Both drafts were created (the second superseded the first's COLLECTING state); make both
        # eligible again to race for AWAITING_CONFIRMATION.
        for op in ops:
            await stores[0].transition(op.id, [S.CANCELLED, S.COLLECTING_PARAMETERS], S.PRE_VALIDATION)
        results = await asyncio.gather(
            *(
                s.await_confirmation(op, resolved_arguments={}, arguments_digest="d")
                for s, op in zip(stores, ops, strict=True)
            )
        )
        assert all(results)
        states = [(await stores[0].get(op.id)).state for op in ops]
        assert sorted(states) == sorted([S.AWAITING_CONFIRMATION, S.CANCELLED])
    finally:
        for d in dbs:
            await d.close()


async def test_concurrent_confirmations_execute_once(
    database_url: str, agent_tools: AgentTools, contas: RunningContas
) -> None:
    """Four confirmations from four connections (as from four replicas) race: one executes."""
    dbs = [Database(database_url) for _ in range(4)]
    await dbs[0].migrate()
    try:
        stores = [OperationStore(d) for d in dbs]
        org = _org()
        op = await _pending(stores[0], agent_tools, contas, org)
        ctx = make_ctx(org)
        outcomes = await asyncio.gather(
            *(confirm_operation(s, op.id, contas.caller(), ctx, via="api") for s in stores)
        )
        assert sum(o.executed for o in outcomes) == 1
        assert contas.backend.executions[op.id] == 1
        assert contas.backend.stats()["total_executions"] == 1
        for outcome in outcomes:  # the losers return the winner's outcome
            assert outcome.operation.state is S.COMPLETED
            assert outcome.operation.verdict["status"] == "PARTIAL_SUCCESS"
    finally:
        for d in dbs:
            await d.close()


async def test_a_confirmation_during_execution_never_runs_it_and_gets_the_outcome(
    database_url: str, agent_tools: AgentTools, contas: RunningContas
) -> None:
    dbs = [Database(database_url), Database(database_url)]
    await dbs[0].migrate()
    try:
        first, second = OperationStore(dbs[0]), OperationStore(dbs[1])
        org = _org()
        op = await _pending(first, agent_tools, contas, org)
        contas.backend.gate = threading.Event()  # hold the tool call in flight
        winner = asyncio.create_task(
            confirm_operation(first, op.id, contas.caller(), make_ctx(org), via="api")
        )
        await anyio.to_thread.run_sync(contas.backend.started.wait, 10)

        during = await confirm_operation(
            second, op.id, contas.caller(), make_ctx(org), via="reply", wait_seconds=0.2
        )
        assert not during.executed and during.operation.state is S.EXECUTING

        contas.backend.gate.set()
        won = await winner
        assert won.executed and won.operation.state is S.COMPLETED
        after = await confirm_operation(second, op.id, contas.caller(), make_ctx(org), via="reply")
        assert not after.executed and after.operation.verdict == won.operation.verdict
        assert contas.backend.executions[op.id] == 1
    finally:
        for d in dbs:
            await d.close()


async def test_a_crash_during_execution_is_interrupted_at_start_and_never_rerun(
    database_url: str, tmp_path: Path, agent_tools: AgentTools, contas: RunningContas
) -> None:
    """A process claimed the operation and died a minute ago: its lease lapsed; the next start reports it."""
    a_minute_ago = lambda: utcnow() - timedelta(seconds=60)  # noqa: E731
    crashed_db = Database(database_url)
    await crashed_db.migrate()
    crashed = OperationStore(crashed_db, lease_seconds=30, clock=a_minute_ago)
    org = _org()
    op = await _pending(crashed, agent_tools, contas, org)
    assert await crashed.claim(op.id, via="reply", confirmed_by="user-7")
    assert (await crashed.get(op.id)).state is S.EXECUTING  # while its lease held, it was running
    await crashed_db.close()  # the process is gone; nothing renews the lease

    settings = Settings.model_validate(
        {
            "database_url": database_url,
            "master_key_file": str(tmp_path / "master.key"),
            "providers": [{"id": "up", "base_url": "http://127.0.0.1:9/v1"}],
            "operations": {"execution_lease_seconds": 5},
        }
    )
    restarted = Gateway(settings)
    assert restarted.operations.lease_seconds == 5
    await restarted.start()
    try:
        after = await restarted.operations.get(op.id)
        assert after.state is S.INTERRUPTED and "not re-run" in after.status_reason
        assert after.confirmed_by == "user-7" and after.verdict is None
        outcome = await confirm_operation(
            restarted.operations, op.id, contas.caller(), make_ctx(org), via="api"
        )
        assert not outcome.executed and outcome.operation.state is S.INTERRUPTED
        assert contas.backend.stats()["total_executions"] == 0
    finally:
        await restarted.close()


async def test_the_executor_still_records_the_outcome_after_being_marked_interrupted(db: Database) -> None:
    store = OperationStore(db, lease_seconds=1)
    op = await store.create(_draft(_org()))
    assert await store.claim(op.id, from_states=[S.COLLECTING_PARAMETERS], via="policy")
    sweeper = OperationStore(db, clock=lambda: utcnow() + timedelta(seconds=10))
    assert await sweeper.recover() >= (1, 0)
    assert (await store.get(op.id)).state is S.INTERRUPTED
    assert not await sweeper.finish(op.id, S.COMPLETED)  # only the executor may
    assert await store.finish(op.id, S.COMPLETED, verdict={"status": "SUCCESS"})
    assert (await store.get(op.id)).state is S.COMPLETED


async def test_pending_operations_expire_as_cancelled(
    db: Database, agent_tools: AgentTools, contas: RunningContas
) -> None:
    store = OperationStore(db)
    org = _org()
    op = await _pending(store, agent_tools, contas, org)
    later = OperationStore(db, clock=lambda: utcnow() + timedelta(hours=1))
    assert later.is_expired(op)
    expired = await later.get(op.id)  # reading applies the expiry
    assert expired.state is S.CANCELLED and expired.status_reason == EXPIRED
    assert not await later.claim(op.id, via="api")
    with pytest.raises(OperationConflict) as info:
        await confirm_operation(later, op.id, contas.caller(), make_ctx(org), via="api")
    assert info.value.code == "operation_expired"
    assert contas.backend.stats()["total_executions"] == 0


async def test_reads_are_scoped_to_the_organisation(db: Database) -> None:
    from hatchway.errors import NotFound

    store = OperationStore(db)
    mine, theirs = _org(), _org()
    op = await store.create(_draft(mine))
    await store.create(_draft(theirs))
    assert [o.id for o in await store.list(mine, OperationQuery())] == [op.id]
    with pytest.raises(NotFound):
        await store.get(op.id, org_id=theirs)
    assert not await store.cancel(op.id, "nope", org_id=theirs)
    assert await store.claim(op.id, from_states=[S.COLLECTING_PARAMETERS], via="api", org_id=theirs) is False


async def test_a_running_execution_renews_its_lease_so_peers_leave_it_alone(
    db: Database, agent_tools: AgentTools, contas: RunningContas
) -> None:
    # A lease of 3 s renewed every second: long enough that a busy machine's stalls do not let it
    # lapse (a lapsed lease is taken for a dead executor), short enough to see renewals.
    store = OperationStore(db, lease_seconds=3)
    org = _org()
    op = await _pending(store, agent_tools, contas, org)
    contas.backend.gate = threading.Event()
    running = asyncio.create_task(confirm_operation(store, op.id, contas.caller(), make_ctx(org), via="api"))
    await anyio.to_thread.run_sync(contas.backend.started.wait, 30)
    first_lease = (await store.get(op.id)).lease_expires_at
    assert first_lease is not None
    with anyio.fail_after(30):
        while (await store.get(op.id)).lease_expires_at == first_lease:
            await asyncio.sleep(0.05)
    peer = OperationStore(db)
    await peer.recover()  # a peer starting now finds a live lease
    assert (await peer.get(op.id)).state is S.EXECUTING
    contas.backend.gate.set()
    assert (await running).operation.state is S.COMPLETED


def _exited_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=120)
    return proc.pid


@pytest.mark.parametrize(
    ("executor", "interrupted_at_start"),
    [
        (lambda: f"{socket.gethostname()}:{os.getpid()}:previous", True),  # our pid now: a restart
        (lambda: f"{socket.gethostname()}:{_exited_pid()}:crashed", True),  # that process is gone
        (lambda: f"{socket.gethostname()}:{os.getppid()}:alive", False),  # still running here
        (lambda: "other-host:1:replica", False),  # another machine: only its lease can tell
    ],
    ids=["restarted", "dead-pid", "live-pid", "other-host"],
)
async def test_at_start_a_dead_local_executor_is_interrupted_without_waiting_for_its_lease(
    db: Database, executor, interrupted_at_start: bool
) -> None:
    before = OperationStore(db, lease_seconds=3600, instance_id=executor())
    op = await before.create(_draft(_org()))
    assert await before.claim(op.id, from_states=[S.COLLECTING_PARAMETERS], via="api")
    starting = OperationStore(db)
    await starting.recover(at_start=True)
    expected = S.INTERRUPTED if interrupted_at_start else S.EXECUTING
    assert (await starting.get(op.id)).state is expected
    await starting.recover()  # an ordinary sweep only trusts leases
    assert (await starting.get(op.id)).state is expected
