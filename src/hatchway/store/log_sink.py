"""Where the log writer's batches go: the database, batch by batch; the spool through an outage.

What a batch meets, and what happens to its rows:

- a row the database refuses (a value no column cleaning foresaw): the batch is split in halves until
  the refused row is alone, so every other row lands; that row is cleaned deeper (``fit_row(deep=…)``)
  and tried once more; only if the database refuses it again — and still answers a ping, so it is
  the row and not the database — is it dropped: logged by id without its content, and counted;
- the database unreachable (refused or cut connections, an attempt past ``ATTEMPT_SECONDS``): the
  batch is tried again with backoff for up to ``retry_seconds`` from the start of the outage, the
  writer's later records queueing meanwhile; then the rows go to the spool, and so do later batches,
  until a probe (every ``PROBE_SECONDS``) finds the database back: the spool is replayed then.

Inserts ignore a row whose id is already stored, so a retried batch whose first commit did land, or a
spool replayed twice (a crash between the replay and the deletion of the file), stores no duplicate.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from sqlalchemy import exc as sa_exc

from hatchway.store.columns import fit_row
from hatchway.store.db import Database
from hatchway.store.spool import RecordSpool, SpoolFile
from hatchway.store.tables import RequestLog

logger = logging.getLogger(__name__)

TABLE = RequestLog.__table__
ATTEMPT_SECONDS = 10.0
"""An insert (or ping) taking longer than this counts as the database unreachable."""
PROBE_SECONDS = 2.0
"""While rows are spooled, how often the database is tried again."""
DROP_REASONS = ("refused", "unreachable", "spool_full", "spool_error", "error")
"""Why a record was dropped: the database refused it even cleaned; it was unreachable past the retry
budget with no spool configured; the spool was full; the spool could not be written; a writer bug."""
_FIRST_DELAY = 0.05
_REPLAY_CHUNK = 200

Row = dict[str, Any]


class RecordTally(Protocol):
    """Counts what became of rows that did not go straight into the database (the metrics)."""

    def records_dropped(self, reason: str, count: int) -> None: ...
    def records_spooled(self, count: int) -> None: ...
    def records_replayed(self, count: int) -> None: ...


class NoTally:
    def records_dropped(self, reason: str, count: int) -> None:
        pass

    def records_spooled(self, count: int) -> None:
        pass

    def records_replayed(self, count: int) -> None:
        pass


class LogSink:
    """Stores rows of ``request_logs``; ``write`` never raises, and no row is lost without a count."""

    def __init__(
        self,
        db: Database,
        *,
        retry_seconds: float = 10.0,
        spool: RecordSpool | None = None,
        tally: RecordTally | None = None,
    ) -> None:
        self.db = db
        self.retry_seconds = retry_seconds
        self.spool = spool
        self.tally: RecordTally = tally or NoTally()
        self._statement = db.insert(TABLE).on_conflict_do_nothing(index_elements=["id"])
        self._sqlite = _SqliteRows(db) if db.is_sqlite else None
        self._down_since: float | None = None
        """When the current outage began (monotonic); None while the database answers."""
        self.spooling = False
        """Past the retry budget: rows go to the spool until a probe finds the database back."""
        self._next_probe = 0.0
        self._hurry = asyncio.Event()

    def hurry(self) -> None:
        """Stop waiting out an outage (the gateway is stopping): what cannot be stored now is spooled."""
        self._hurry.set()

    async def write(self, rows: list[Row]) -> None:
        """Store ``rows`` (fitted to the table): in the database, or where this module says."""
        if self.spooling:
            await self.recover()
        if self.spooling or (self._hurry.is_set() and self._down_since is not None):
            await self._set_aside(rows)
            return
        left = await self._insert(rows)
        if left:
            await self._wait_out(left)
        else:
            self._down_since = None

    async def recover(self) -> None:
        """Replay the spool once the database answers (at start: what earlier processes left)."""
        if self.spooling:
            now = time.monotonic()
            if now < self._next_probe or self._hurry.is_set():
                return
            self._next_probe = now + PROBE_SECONDS
            if not await self._answers():
                return
        if self.spool is not None and not await self._replay(self.spool):
            return
        if self.spooling:
            logger.warning("the database answers again: run records are stored again")
        self.spooling = False
        self._down_since = None

    async def close(self) -> None:
        if self._sqlite is not None:
            await asyncio.to_thread(self._sqlite.close)
        if self.spool is not None:
            await asyncio.to_thread(self.spool.close)

    # -- the database ------------------------------------------------------------------------------

    async def _insert(self, rows: list[Row]) -> list[Row]:
        """Insert ``rows``, dropping (and counting) those the database refuses; returns the rows not
        stored because the database is unreachable."""
        if not rows:
            return []
        try:
            await self._execute(rows)
            return []
        except Exception as exc:
            if _unreachable(exc):
                self._note_outage(exc)
                return rows
            if len(rows) == 1:
                return await self._insert_cleaned(rows[0], exc)
        middle = len(rows) // 2
        left = await self._insert(rows[:middle])
        if left:  # the database went away meanwhile: do not split the rest row by row
            return left + rows[middle:]
        return await self._insert(rows[middle:])

    async def _insert_cleaned(self, row: Row, refused: Exception) -> list[Row]:
        try:
            await self._execute([fit_row(TABLE, row, deep=True)])
            return []
        except Exception as exc:
            if _unreachable(exc) or not await self._answers():
                self._note_outage(exc)
                return [row]
            logger.error(
                "run record %s dropped: the database refused it, and again once cleaned (%s, then %s)",
                row.get("id"),
                _describe(refused),
                _describe(exc),
            )
            self.tally.records_dropped("refused", 1)
            return []

    async def _execute(self, rows: list[Row]) -> None:
        async with asyncio.timeout(ATTEMPT_SECONDS):
            if self._sqlite is not None:
                await self._sqlite.insert(rows)
                return
            # A bulk INSERT of plain rows on a connection: no ORM session or unit-of-work bookkeeping
            # for rows nobody reads back.
            async with self.db.engine.begin() as conn:
                await conn.execute(self._statement, rows)

    async def _answers(self) -> bool:
        try:
            async with asyncio.timeout(ATTEMPT_SECONDS):
                await self.db.ping()
        except Exception:
            return False
        return True

    def _note_outage(self, exc: BaseException) -> None:
        if self._down_since is None:
            self._down_since = time.monotonic()
            logger.warning(
                "the database is unreachable (%s): run records wait up to %.1f s, then go to %s",
                _describe(exc),
                self.retry_seconds,
                self.spool.directory if self.spool is not None else "nowhere (no spool: they are dropped)",
            )

    async def _wait_out(self, rows: list[Row]) -> None:
        """Try ``rows`` again with backoff until the outage is ``retry_seconds`` old; then spool them."""
        down_since = self._down_since or time.monotonic()
        delay = _FIRST_DELAY
        while not self._hurry.is_set():
            remaining = down_since + self.retry_seconds - time.monotonic()
            if remaining <= 0:
                break
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(delay, remaining)):
                    await self._hurry.wait()
            delay = min(delay * 2, PROBE_SECONDS)
            rows = await self._insert(rows)
            if not rows:
                self._down_since = None
                return
        self.spooling = True
        self._next_probe = time.monotonic() + PROBE_SECONDS
        await self._set_aside(rows)

    # -- the spool -----------------------------------------------------------------------------------

    async def _set_aside(self, rows: list[Row]) -> None:
        """Rows the database cannot take now: into the spool, or dropped (and counted) when it cannot."""
        if self.spool is None:
            self._drop(rows, "unreachable", "no spool_dir is configured")
            return
        rows = [fit_row(TABLE, row, deep=True) for row in rows]  # JSON that the file can hold
        try:
            kept = await asyncio.to_thread(self.spool.append, rows)
        except OSError as exc:
            self._drop(rows, "spool_error", f"{type(exc).__name__}: {exc.strerror}")
            return
        self.tally.records_spooled(kept)
        if kept < len(rows):
            self._drop(rows[kept:], "spool_full", f"the spool holds {self.spool.max_bytes} bytes at most")

    def _drop(self, rows: list[Row], reason: str, why: str) -> None:
        logger.error("%d run record(s) dropped (%s): %s", len(rows), reason, why)
        self.tally.records_dropped(reason, len(rows))

    async def _replay(self, spool: RecordSpool) -> bool:
        """Every spooled row into the database, file by file; False if it went away meanwhile."""
        try:
            files = await asyncio.to_thread(spool.pending)
        except OSError as exc:
            logger.error("could not read the run-record spool %s: %s", spool.directory, exc)
            return True  # nothing readable to wait for: store new rows again
        for spooled in files:
            replayed = 0
            chunks = _chunks(spool, spooled)
            while chunk := await asyncio.to_thread(next, chunks, None):
                left = await self._insert([fit_row(TABLE, row) for row in chunk])
                if left:
                    self.spooling = True  # the file stays; it is replayed whole next time
                    self._next_probe = time.monotonic() + PROBE_SECONDS
                    return False
                replayed += len(chunk)
            await asyncio.to_thread(spool.remove, spooled)
            self.tally.records_replayed(replayed)
            logger.warning("replayed %d run record(s) from %s", replayed, spooled.path.name)
        return True


def _chunks(spool: RecordSpool, spooled: SpoolFile) -> Iterator[list[Row]]:
    chunk: list[Row] = []
    for row in spool.read(spooled):
        chunk.append(row)
        if len(chunk) == _REPLAY_CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class _SqliteRows:
    """A batch as multi-row ``INSERT … VALUES (…), (…) ON CONFLICT (id) DO NOTHING`` statements, each
    value bound as SQLAlchemy would bind it (the columns' bind processors for the dialect: JSON
    through the engine's serializer, datetimes in SQLite's stored format).

    Hand-written because SQLAlchemy sends a batch to SQLite as ``executemany``, and the sqlite3
    module releases and takes back the GIL around each row: on an event loop busy serving requests,
    each take-back waits out the interpreter's switch interval — measured, a 200-row batch took
    1.3 s beside a busy loop, 0.2 s as one statement; under load (``bench/profile_hot.py``, c=64)
    the gateway did 19 % more requests per second with 0.1 ms less CPU each. PostgreSQL's driver
    (asyncpg) runs on the loop itself and keeps SQLAlchemy's ``executemany``.

    A batch runs on a blocking connection of its own, in a thread of its own: one hand-off from the
    loop per batch, where through aiosqlite the BEGIN, every statement and the COMMIT were one each,
    every one waiting for the busy loop to pick up its result. Measured at c=64 (2,700 req/s): a
    200-row batch 64 → 21 ms, so the writer keeps up instead of queueing ~2,400 records (+7 MiB)
    in 8 s. Its page cache is ``CACHE_KIB`` (appending rows reads few pages; the default would be
    ~2 MiB more of the gateway's memory). An in-memory database keeps the async engine's connection.

    A statement holds a power of two of rows, at most ``MAX_ROWS`` (a batch of 200: 64 + 64 + 64 + 8):
    the driver keeps each distinct statement prepared, and one per batch size would be 200 of them —
    measured, +51 MiB; these seven take 0.6 MiB.
    """

    MAX_ROWS = 64
    CACHE_KIB = 512

    def __init__(self, db: Database) -> None:
        self._db = db
        self._engine = db.blocking_engine(cache_kib=self.CACHE_KIB)
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="hatchway-run-log")
        dialect = db.engine.dialect
        columns = list(TABLE.columns)
        self._names = ", ".join(c.name for c in columns)
        self._binds: list[tuple[str, Callable[[Any], Any] | None]] = [
            (c.key, c.type.dialect_impl(dialect).bind_processor(dialect)) for c in columns
        ]
        # SQLite's bound-parameter limit (32,766 since 3.32), as SQLAlchemy reads it for the dialect.
        assert self.MAX_ROWS * len(columns) <= dialect.insertmanyvalues_max_parameters

    def statements(self, rows: list[Row]) -> Iterator[tuple[str, tuple[Any, ...]]]:
        binds, start = self._binds, 0
        while start < len(rows):
            size = min(self.MAX_ROWS, 1 << ((len(rows) - start).bit_length() - 1))
            chunk = rows[start : start + size]
            start += size
            params = tuple(
                value if (value := row[key]) is None or bind is None else bind(value)
                for row in chunk
                for key, bind in binds
            )
            yield _multi_insert(self._names, len(binds), size), params

    async def insert(self, rows: list[Row]) -> None:
        if self._engine is None:
            async with self._db.engine.begin() as conn:
                for sql, params in self.statements(rows):
                    await conn.exec_driver_sql(sql, params)
            return
        await asyncio.get_running_loop().run_in_executor(self._thread, self._insert_blocking, rows)

    def _insert_blocking(self, rows: list[Row]) -> None:
        assert self._engine is not None
        with self._engine.begin() as conn:
            for sql, params in self.statements(rows):
                conn.exec_driver_sql(sql, params)

    def close(self) -> None:
        """Wait for the batch in the thread, if any; close the connection."""
        self._thread.shutdown(wait=True)
        if self._engine is not None:
            self._engine.dispose()


@functools.lru_cache(maxsize=16)
def _multi_insert(names: str, width: int, rows: int) -> str:
    one = "(" + ", ".join("?" * width) + ")"
    return f"INSERT INTO {TABLE.name} ({names}) VALUES {', '.join([one] * rows)} ON CONFLICT (id) DO NOTHING"


def _unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says the database cannot be reached (rather than that it refused the rows)."""
    if isinstance(exc, OSError | TimeoutError | sa_exc.TimeoutError | sa_exc.DisconnectionError):
        return True
    if isinstance(exc, sa_exc.DBAPIError):
        return exc.connection_invalidated or isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError)
    return False


def _describe(exc: BaseException) -> str:
    """The error's kind, without its message where that may quote the row (parameters, values)."""
    if isinstance(exc, OSError | TimeoutError):
        return f"{type(exc).__name__}: {exc}"
    if isinstance(exc, sa_exc.DBAPIError):
        code = getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None)
        return f"{type(exc).__name__} ({type(exc.orig).__name__}{f', SQLSTATE {code}' if code else ''})"
    return type(exc).__name__
