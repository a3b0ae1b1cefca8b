"""Storage on SQLite and (when configured) PostgreSQL: the same tests on both."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta

import anyio
import pytest

from hatchway.errors import AuthenticationError, Conflict, NotFound
from hatchway.ids import new_id
from hatchway.store.columns import fit_row
from hatchway.store.db import Database
from hatchway.store.log_sink import _SqliteRows
from hatchway.store.logs import LogQuery, LogWriter, RequestLogStore
from hatchway.store.orgs import OrgStore, hash_key
from hatchway.store.tables import ApiKey, RequestLog

pytestmark = pytest.mark.anyio


def _name() -> str:
    return f"org-{uuid.uuid4().hex[:8]}"


async def test_keys_are_hashed_shown_once_and_authenticate(db: Database) -> None:
    store = OrgStore(db)
    org = await store.create_org(_name())
    row, plaintext = await store.create_key(org.name, "ci")

    principal = await store.authenticate(plaintext)
    assert (principal.org_id, principal.key_name) == (org.id, "ci")
    async with db.session() as s:
        stored = await s.get(ApiKey, row.id)
    assert stored.key_hash == hash_key(plaintext)
    assert plaintext not in (stored.key_hash, stored.key_prefix)
    with pytest.raises(AuthenticationError):
        await store.authenticate(plaintext + "x")
    with pytest.raises(AuthenticationError):
        await store.authenticate(None)


async def test_a_cached_key_is_not_hashed_again_and_the_cache_holds_neither_key_nor_stored_hash(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cache files a key under a per-process keyed BLAKE2b: a hit skips SHA-256 (slow through
    OpenSSL on an idle loop), and what the cache holds matches neither the key nor the database's hash."""
    from hatchway.store import orgs

    store = OrgStore(db)
    org = await store.create_org(_name())
    _, plaintext = await store.create_key(org.name)
    hashed: list[str] = []
    monkeypatch.setattr(orgs, "hash_key", lambda key: hashed.append(key) or hash_key(key))

    first = await store.authenticate(plaintext)
    second = await store.authenticate(plaintext)
    assert first == second and first.org_id == org.id
    assert hashed == [plaintext]  # the miss looked the key up by its SHA-256; the hit did not hash it
    held = repr(store._auth_cache)
    assert plaintext not in held and hash_key(plaintext) not in held
    with pytest.raises(AuthenticationError):  # a near miss is not confused with the cached key
        await store.authenticate(plaintext[:-1] + ("A" if plaintext[-1] != "A" else "B"))


async def test_requests_that_miss_the_key_cache_together_share_one_lookup(db: Database) -> None:
    """When a busy key's cache entry expires, every request in flight misses at once: one query
    answers them all (each taking a connection drained the pool), and one caller going away does
    not fail the others."""
    from sqlalchemy import event

    store = OrgStore(db)
    org = await store.create_org(_name())
    _, plaintext = await store.create_key(org.name)
    lookups: list[str] = []

    def count(conn, cursor, statement, *args) -> None:  # type: ignore[no-untyped-def]
        if "api_keys" in statement:
            lookups.append(statement)

    event.listen(db.engine.sync_engine, "before_cursor_execute", count)
    try:
        store.cache_seconds = -1.0  # every entry expired
        for bearer, ok in ((plaintext, True), (plaintext + "x", False)):
            lookups.clear()
            outcomes: list[object] = []

            async def one(bearer: str = bearer, outcomes: list[object] = outcomes) -> None:
                try:
                    outcomes.append((await store.authenticate(bearer)).org_id)
                except AuthenticationError as exc:
                    outcomes.append(exc)

            with anyio.fail_after(10):
                with anyio.CancelScope() as gone:  # the first caller starts the lookup and goes away
                    gone.cancel()
                    await store.authenticate(bearer)
                async with anyio.create_task_group() as tg:
                    for _ in range(41):
                        tg.start_soon(one)
            assert len(lookups) == 1, lookups
            assert len(outcomes) == 41
            if ok:
                assert outcomes == [org.id] * 41
            else:
                assert all(isinstance(o, AuthenticationError) for o in outcomes)
            assert store._auth_lookups == {}
    finally:
        event.remove(db.engine.sync_engine, "before_cursor_execute", count)


async def test_duplicate_org_and_unknown_org(db: Database) -> None:
    store = OrgStore(db)
    name = _name()
    await store.create_org(name)
    with pytest.raises(Conflict):
        await store.create_org(name)
    with pytest.raises(NotFound):
        await store.create_key("no-such-org")


def _record(org_id: str, **kw) -> RequestLog:
    base = {
        "id": new_id("log"),
        "org_id": org_id,
        "route": "chat.completions",
        "model": "gpt-4o",
        "status": "ok",
        "http_status": 200,
        "latency_ms": 1.0,
        "prompt_tokens": 1,
        "completion_tokens": 1,
        "total_tokens": 2,
        "rounds": 1,
        "max_rounds_hit": False,
        "has_tool_calls": False,
        "steps": [],
    }
    return RequestLog(**(base | kw))


async def test_log_writer_batches_and_flushes_and_reads_are_org_scoped(db: Database) -> None:
    writer = LogWriter(db, batch_size=3)
    writer.start()
    a, b = new_id("org"), new_id("org")
    for i in range(7):
        writer.submit(_record(a, has_tool_calls=i % 2 == 0, steps=[{"type": "model_call", "round": 1}]))
    writer.submit(_record(b, on_behalf_of="user-9"))
    await writer.flush()
    store = RequestLogStore(db)

    rows_a = await store.list(a, LogQuery())
    assert len(rows_a) == 7
    assert [r.id for r in rows_a] == sorted((r.id for r in rows_a), reverse=True)
    assert len(await store.list(a, LogQuery(has_tool_calls=True))) == 4
    assert rows_a[0].steps == [{"type": "model_call", "round": 1}]
    page = await store.list(a, LogQuery(limit=3, after=rows_a[2].id))
    assert [r.id for r in page] == [r.id for r in rows_a[3:6]]
    rows_b = await store.list(b, LogQuery())
    assert [r.on_behalf_of for r in rows_b] == ["user-9"]
    with pytest.raises(NotFound):
        await store.get(b, rows_a[0].id)
    await writer.close()


async def test_a_batch_past_one_statements_parameters_is_stored_whole_each_value_as_given(
    db: Database,
) -> None:
    """On SQLite a batch goes as multi-row INSERTs (``log_sink.py``), 2,000 rows as 32 of them: every
    kind of value reads back as it was written, and a row whose id is stored already is ignored, in
    the same batch or a later one."""
    org = new_id("org")
    writer = LogWriter(db, batch_size=2001)
    records = [
        _record(
            org,
            on_behalf_of=None if i % 3 else f"usér-{i} ✓",
            cost_usd=None if i % 5 == 0 else i / 1000,
            has_tool_calls=i % 2 == 0,
            steps=[{"type": "model_call", "round": 1, "n": i, "nested": {"ok": True, "x": [1.5, None]}}],
            created_at=datetime(2026, 11, 1, tzinfo=UTC) + timedelta(seconds=i),
            error='quote \' and "double"' if i == 7 else None,
        )
        for i in range(2000)
    ]
    for record in records:
        writer.submit(record)
    writer.submit(records[0])  # the same id again, in the same batch
    await writer.flush()
    writer.submit(records[1])  # and in a later one
    await writer.flush()

    stored = {r.id: r for r in await RequestLogStore(db).list(org, LogQuery(limit=5000))}
    assert len(stored) == 2000
    for record in records:
        row = stored[record.id]
        for column in ("on_behalf_of", "cost_usd", "has_tool_calls", "steps", "created_at", "error"):
            assert getattr(row, column) == getattr(record, column), (record.id, column)
    # Compared in the database as it stores them (SQLite: text): the second half, exactly.
    since = datetime(2026, 11, 1, tzinfo=UTC) + timedelta(seconds=1000)
    assert len(await RequestLogStore(db).list(org, LogQuery(limit=5000, since=since))) == 1000
    await writer.close()


def test_batches_of_any_size_share_seven_sqlite_statements() -> None:
    """The driver keeps every distinct statement prepared (a 64-row one is ~0.1 MiB): one per batch
    size from 1 to 200 rows held 51 MiB. Any batch is cut into powers of two of at most 64 rows."""
    rows = [fit_row(RequestLog.__table__, _record("org_x")) for _ in range(200)]
    texts: set[str] = set()
    writer = _SqliteRows(Database("sqlite+aiosqlite:///:memory:"))
    for n in range(1, 201):
        statements = list(writer.statements(rows[:n]))
        assert sum(len(params) for _, params in statements) == n * len(RequestLog.__table__.columns)
        texts.update(sql for sql, _ in statements)
    assert len(texts) == 7


async def test_the_route_filter_is_exact_and_org_scoped(db: Database) -> None:
    writer = LogWriter(db)
    writer.start()
    a, b = new_id("org"), new_id("org")
    for route in ("mcp:tools", "mcp:tools", "mcp:tools-2", "chat.completions", "responses"):
        writer.submit(_record(a, route=route))
    writer.submit(_record(b, route="mcp:tools"))
    await writer.flush()
    store = RequestLogStore(db)

    tools = await store.list(a, LogQuery(route="mcp:tools"))
    assert [r.route for r in tools] == ["mcp:tools", "mcp:tools"]  # not mcp:tools-2: no prefix match
    assert [r.id for r in tools] == sorted((r.id for r in tools), reverse=True)
    assert [r.route for r in await store.list(a, LogQuery(route="chat.completions"))] == ["chat.completions"]
    assert await store.list(a, LogQuery(route="mcp:")) == []
    assert len(await store.list(a, LogQuery(route="mcp:tools", limit=1))) == 1
    assert [r.org_id for r in await store.list(b, LogQuery(route="mcp:tools"))] == [b]
    await writer.close()


async def test_log_writer_close_writes_everything_queued(db: Database) -> None:
    def writer_threads() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name.startswith("hatchway-run-log")}

    others = writer_threads()  # another test's gateway still stopping in this process has its own
    writer = LogWriter(db)
    writer.start()
    org = new_id("org")
    for _ in range(50):
        writer.submit(_record(org))
    await writer.close()
    assert len(await RequestLogStore(db).list(org, LogQuery(limit=100))) == 50
    assert not writer_threads() - others  # SQLite's


async def test_log_writer_close_while_lingering_keeps_the_held_record(db: Database) -> None:
    writer = LogWriter(db, linger_seconds=60)
    writer.start()
    org = new_id("org")
    writer.submit(_record(org))
    with anyio.fail_after(5):  # the writer has taken the record off its queue and waits for company
        while not writer._queue.empty():
            await anyio.sleep(0)
    await writer.close()
    assert len(await RequestLogStore(db).list(org, LogQuery())) == 1


async def test_log_writer_writes_a_full_batch_without_waiting_out_the_linger(db: Database) -> None:
    writer = LogWriter(db, batch_size=5, linger_seconds=60)
    writer.start()
    org = new_id("org")
    writer.submit(_record(org))
    with anyio.fail_after(5):  # the writer holds the first record and waits for company
        while not writer._queue.empty():
            await anyio.sleep(0)
    for _ in range(4):
        writer.submit(_record(org))  # with these the batch is full
    store = RequestLogStore(db)
    with anyio.fail_after(5):  # stored long before the 60 s linger ends, with nobody flushing
        while len(await store.list(org, LogQuery())) < 5:
            await anyio.sleep(0.01)
    writer.submit(_record(org))  # one record alone lingers again; close() writes it
    await writer.close()
    assert len(await store.list(org, LogQuery())) == 6


async def test_log_writer_flush_does_not_wait_out_the_linger(db: Database) -> None:
    writer = LogWriter(db, linger_seconds=60)
    writer.start()
    org = new_id("org")
    writer.submit(_record(org))
    with anyio.fail_after(5):
        await writer.flush()
    assert len(await RequestLogStore(db).list(org, LogQuery())) == 1
    writer.submit(_record(org))  # the next record lingers again, and a flush cuts it short again
    with anyio.fail_after(5):
        await writer.flush()
    assert len(await RequestLogStore(db).list(org, LogQuery())) == 2
    await writer.close()
