"""The database handle: an async engine, a session factory and migrations applied at start."""

from __future__ import annotations

import ast
import functools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import create_engine, event, inspect, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.engine.url import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

from hatchway.errors import SchemaNotCurrent, Unavailable

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
_MIGRATION_LOCK_ID = 0x4A7C_0001  # PostgreSQL advisory lock: one replica migrates at a time


def _sqlite_pragmas(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    # In WAL mode NORMAL never corrupts the database and survives a process crash; only an OS crash
    # or power loss can drop the last commits. FULL would fsync on every commit (every log batch).
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=10000")
    cur.close()


def _json_dumps(value: object) -> str:
    # JSON columns (request-log steps, stored responses) are written on every request: orjson is
    # several times faster than the stdlib encoder SQLAlchemy uses by default.
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


DATABASE_UNAVAILABLE = Unavailable(
    "The database is unreachable right now; try again shortly.", code="database_unavailable"
)
"""What a request that needed the database is answered (503) while it cannot be reached."""


def database_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` means the database could not be reached — down, refusing connections, cut
    mid-query, its pool exhausted, its host name not resolving (a Compose service or Kubernetes
    Service not there yet) — rather than a bug: a 503 to a client, one line from the CLI."""
    from socket import gaierror

    from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
    from sqlalchemy.exc import TimeoutError as PoolTimeout

    unreachable = OperationalError | InterfaceError | PoolTimeout | ConnectionError | TimeoutError | gaierror
    if isinstance(exc, unreachable):
        return True
    return isinstance(exc, DBAPIError) and exc.connection_invalidated


class Database:
    """One async engine per process; ``session()`` hands out short-lived sessions."""

    def __init__(self, url: str, *, echo: bool = False) -> None:
        self.url = url
        parsed = make_url(url)
        self.is_sqlite = parsed.get_backend_name() == "sqlite"
        kwargs: dict[str, object] = {"echo": echo, "json_serializer": _json_dumps}
        if self.is_sqlite:
            if parsed.database and parsed.database != ":memory:":
                Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        else:
            kwargs.update(pool_size=10, max_overflow=20, pool_pre_ping=True)
        self.engine: AsyncEngine = create_async_engine(url, **kwargs)
        if self.is_sqlite:
            event.listen(self.engine.sync_engine, "connect", _sqlite_pragmas)
        self.sessions = async_sessionmaker(self.engine, expire_on_commit=False)

    @functools.cached_property
    def insert(self) -> Callable[..., Any]:
        """This database's dialect's ``insert``, the one with ``on_conflict_do_nothing``. Only this
        dialect's module is imported: PostgreSQL's (every driver's module of it) would cost a SQLite
        gateway ~2 MiB."""
        if self.is_sqlite:
            from sqlalchemy.dialects.sqlite import insert
        else:
            from sqlalchemy.dialects.postgresql import insert
        return insert

    def blocking_engine(self, *, cache_kib: int) -> Engine | None:
        """A blocking engine on this SQLite file, for a writer with a thread of its own (the run log's),
        its connections' page cache ``cache_kib`` (SQLite's default: ~2,000 KiB each). None for an
        in-memory database, which only this engine's connection sees."""
        parsed = make_url(self.url)
        if not self.is_sqlite or parsed.database in (None, "", ":memory:"):
            return None
        engine = create_engine(parsed.set(drivername="sqlite"), json_serializer=_json_dumps)
        event.listen(engine, "connect", _sqlite_pragmas)

        @event.listens_for(engine, "connect")
        def _cache(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
            dbapi_conn.execute(f"PRAGMA cache_size=-{int(cache_kib)}")

        return engine

    @asynccontextmanager
    async def session(self) -> AsyncIterator[AsyncSession]:
        """A session inside a transaction, committed on success and rolled back on error."""
        async with self.sessions() as session, session.begin():
            yield session

    async def migrate(self) -> frozenset[str]:
        """Apply every Alembic migration (all heads) under a lock, so replicas can start together.

        Returns the revisions the database was at when this process held the lock: the heads when
        another process had migrated it meanwhile (``hatchway migrate`` reports which one did).
        A database already at the heads is left alone without loading Alembic at all; one holding
        a revision these scripts do not know (a newer release migrated it) raises SchemaNotCurrent.
        """
        async with self.engine.connect() as conn:
            if await conn.run_sync(_at_heads):
                return script_heads()
            if not self.is_sqlite:
                await conn.execute(text("SELECT pg_advisory_lock(:id)"), {"id": _MIGRATION_LOCK_ID})
            try:
                before = await conn.run_sync(_applied)
                if unknown := before - script_revisions():
                    raise SchemaNotCurrent(before, script_heads(), unknown)
                if before != script_heads():
                    await conn.run_sync(_upgrade)
                await conn.commit()
                return before
            finally:
                if not self.is_sqlite:
                    await conn.execute(text("SELECT pg_advisory_unlock(:id)"), {"id": _MIGRATION_LOCK_ID})
                    await conn.commit()

    async def applied_revisions(self) -> frozenset[str]:
        """The migration revisions the database is at; empty before the first migration."""
        async with self.engine.connect() as conn:
            return await conn.run_sync(_applied)

    async def require_current(self) -> None:
        """Raise SchemaNotCurrent unless the database is at this release's migration heads (a process
        that does not migrate as it starts: ``migrate_on_start: false``)."""
        applied = await self.applied_revisions()
        if applied != script_heads():
            raise SchemaNotCurrent(applied, script_heads(), applied - script_revisions())

    async def ping(self) -> None:
        async with self.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))

    async def close(self) -> None:
        await self.engine.dispose()


def script_heads() -> frozenset[str]:
    """The head revisions of the migration scripts, read from their source.

    Hand-written rather than Alembic's ``ScriptDirectory`` because importing Alembic costs the
    serving process ~0.3 s of start-up and ~10 MiB, for nothing when the database is up to date
    (tests/store check that the answer matches Alembic's).
    """
    return _script_graph()[1]


def script_revisions() -> frozenset[str]:
    """Every revision of the migration scripts: one the database holds outside these is a newer
    release's."""
    return _script_graph()[0]


@functools.cache
def _script_graph() -> tuple[frozenset[str], frozenset[str]]:
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in (MIGRATIONS_DIR / "versions").glob("*.py"):
        values = {}
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
            ):
                values[node.targets[0].id] = node.value
        revisions.add(ast.literal_eval(values["revision"]))
        down = ast.literal_eval(values["down_revision"]) if "down_revision" in values else None
        parents.update([down] if isinstance(down, str) else down or ())
    return frozenset(revisions), frozenset(revisions - parents)


def _applied(connection: Connection) -> frozenset[str]:
    if not inspect(connection).has_table("alembic_version"):
        return frozenset()
    return frozenset(connection.execute(text("SELECT version_num FROM alembic_version")).scalars())


def _at_heads(connection: Connection) -> bool:
    return _applied(connection) == script_heads()


def _upgrade(connection: Connection) -> None:
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["connection"] = connection
    command.upgrade(cfg, "heads")
