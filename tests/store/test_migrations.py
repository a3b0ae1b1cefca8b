"""Start-up migrations: applied once, and a database already at the heads costs no Alembic import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine

import hatchway.engine.tools.operations.models  # noqa: F401  (its tables in Base.metadata)
from hatchway.store.db import MIGRATIONS_DIR, Database, script_heads
from hatchway.store.tables import Base

pytestmark = pytest.mark.anyio


def test_script_heads_are_alembics_heads() -> None:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    assert script_heads() == frozenset(ScriptDirectory.from_config(config).get_heads())


_MIGRATE_AGAIN = """
import asyncio, sys
from hatchway.store.db import Database

async def main():
    db = Database(sys.argv[1])
    await db.migrate()
    await db.close()

asyncio.run(main())
print("alembic" in sys.modules)
"""


async def test_a_database_at_the_heads_is_not_migrated_again(database_url: str) -> None:
    db = Database(database_url)
    await db.migrate()  # a fresh database: Alembic applies every migration
    await db.close()
    again = subprocess.run(
        [sys.executable, "-c", _MIGRATE_AGAIN, database_url], capture_output=True, text=True, check=True
    )
    assert again.stdout.strip() == "False", again.stderr  # at the heads: Alembic was never imported


async def test_the_models_declare_the_one_pending_operation_index_as_the_migration_creates_it(
    tmp_path: Path,
) -> None:
    """The partial unique index is declared as DDL (no PostgreSQL dialect import): `create_all` from
    the models makes the same index, WHERE clause included, as the migrations do."""

    def index_sql(url: str) -> str:
        engine = create_engine(url)
        with engine.connect() as conn:
            sql = conn.exec_driver_sql(
                "SELECT sql FROM sqlite_master WHERE name = 'ux_operations_one_pending'"
            ).scalar_one()
        engine.dispose()
        return " ".join(sql.replace('"', "").split())

    migrated = Database(f"sqlite+aiosqlite:///{tmp_path / 'migrated.db'}")
    await migrated.migrate()
    await migrated.close()
    created = create_engine(f"sqlite:///{tmp_path / 'created.db'}")
    Base.metadata.create_all(created)
    created.dispose()
    expected = index_sql(f"sqlite:///{tmp_path / 'migrated.db'}")
    assert "WHERE status = 'AWAITING_CONFIRMATION'" in expected
    assert index_sql(f"sqlite:///{tmp_path / 'created.db'}").lower() == expected.lower()
