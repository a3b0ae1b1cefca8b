"""Start-up migrations: applied once, and a database already at the heads costs no Alembic import."""

from __future__ import annotations

import subprocess
import sys

import pytest
from alembic.config import Config
from alembic.script import ScriptDirectory

from hatchway.store.db import MIGRATIONS_DIR, Database, script_heads

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
