"""What docs/deploy.md promises an operator, attacked from the operator's side (issue 44 review):
secrets handed over as files and in the environment, the database URL and its password, ``hatchway
migrate`` racing on PostgreSQL and a schema newer than the release, the master key's rotation when
the key is a file. Each test is one way a deployment went wrong before it was fixed."""

from __future__ import annotations

import asyncio
import base64
import os
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from hatchway.errors import ConfigError
from hatchway.store.db import script_heads
from tests.support.backends import PG_URL, fresh_pg_database
from tests.support.cli import HATCHWAY, minimal_config, run
from tests.support.servers import free_port

PASSWORD = "Sup3r-S3cret-PW"


def new_key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any Hatchway setting or secret, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HATCHWAY_")}
    return env | extra


# --- the database URL and its password -------------------------------------------------------------


def test_a_database_password_for_a_url_naming_no_user_is_refused_not_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``HATCHWAY_DATABASE_PASSWORD`` is put into ``database_url``; a URL without a user name cannot
    carry it (SQLAlchemy renders ``postgresql://host/db`` with the password silently left out), so
    the process would connect without the password the operator gave it."""
    from hatchway.config.settings import load_settings

    config = minimal_config(tmp_path, database_url="postgresql+asyncpg://db.example:5432/hatchway")
    monkeypatch.delenv("HATCHWAY_DATABASE_URL", raising=False)
    monkeypatch.setenv("HATCHWAY_DATABASE_PASSWORD", PASSWORD)
    try:
        settings = load_settings(config)
    except ConfigError as exc:
        rendered = exc.render()
        assert "HATCHWAY_DATABASE_PASSWORD" in rendered and "user" in rendered, rendered
        assert PASSWORD not in rendered
    else:
        pytest.fail(f"the password was dropped: database_url is {settings.database_url}")


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("HATCHWAY_DATABASE_URL", f"mysql://hatch:{PASSWORD}@127.0.0.1/hatchway"),
        ("HATCHWAY_DATABASE_URL", f"postgresql+asyncpg://hatch:{PASSWORD}@127.0.0.1:abc/hatchway"),
        ("HATCHWAY_REDIS_URL", f"http://:{PASSWORD}@redis.example:6379/0"),
    ],
)
def test_a_bad_url_in_the_environment_is_exit_2_without_a_traceback_or_its_password(
    tmp_path: Path, variable: str, value: str
) -> None:
    """The same mistake in hatchway.yaml is one red line (exit 2); from the environment it was
    pydantic's traceback, whose ``input_value`` printed the URL — password included."""
    config = minimal_config(tmp_path)
    done = run(["migrate", "--config", str(config)], tmp_path, env=clean_env(**{variable: value}))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert variable in done.stderr
    assert PASSWORD not in done.stdout + done.stderr


def test_an_unresolvable_database_host_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """A database host that does not resolve (a Compose service not created yet, a Kubernetes Service
    name misspelt, DNS not ready) is "could not be reached", like a refused connection."""
    config = minimal_config(tmp_path)
    url = f"postgresql+asyncpg://hatch:{PASSWORD}@hatchway-db.invalid:5432/hatchway"
    done = run(["migrate", "--config", str(config)], tmp_path, env=clean_env(HATCHWAY_DATABASE_URL=url))
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "could not be reached" in done.stderr
    assert PASSWORD not in done.stdout + done.stderr


# --- secrets as files ------------------------------------------------------------------------------


def test_an_empty_master_key_file_is_refused_not_replaced_by_a_new_key(tmp_path: Path) -> None:
    """A Secret created with an empty value, or a file not written yet, used to read as "not set":
    each process then generated a master key of its own in its state directory (a Kubernetes
    emptyDir per pod), sealing each organisation's secrets under a key no other replica has."""
    config = minimal_config(tmp_path)
    (tmp_path / "master_key").write_text("")
    env = clean_env(HATCHWAY_MASTER_KEY_FILE=str(tmp_path / "master_key"))
    created = run(["orgs", "create", "acme", "--config", str(config)], tmp_path, env=env)
    assert created.returncode != 0, created.stdout + created.stderr
    assert "HATCHWAY_MASTER_KEY_FILE" in created.stderr and "empty" in created.stderr
    served = run(["serve", "--config", str(config), "--port", str(free_port())], tmp_path, env=env)
    assert served.returncode == 2, served.stderr[-2000:]  # docs/deploy.md: a bad secret file is exit 2
    assert "HATCHWAY_MASTER_KEY_FILE" in served.stderr and "empty" in served.stderr
    assert not (tmp_path / ".hatchway" / "master.key").exists()


def test_an_empty_secret_file_is_an_error_in_every_file_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hatchway.environment import env_value

    (tmp_path / "empty").write_text("\r\n")
    monkeypatch.delenv("SOME_KEY", raising=False)
    monkeypatch.setenv("SOME_KEY_FILE", str(tmp_path / "empty"))
    with pytest.raises(ConfigError, match="empty"):
        env_value("SOME_KEY")
    (tmp_path / "crlf").write_text("value\r\n")
    monkeypatch.setenv("SOME_KEY_FILE", str(tmp_path / "crlf"))
    assert env_value("SOME_KEY") == "value"


def test_rotating_a_master_key_that_comes_from_a_file(tmp_path: Path) -> None:
    """``HATCHWAY_MASTER_KEY_FILE`` and ``HATCHWAY_NEW_MASTER_KEY_FILE`` (Docker, Compose and Kubernetes
    secrets): the rotation re-wrapped every data key, then tried to swap ``master_key_file`` — a file
    that does not exist when the key is given — and crashed before re-signing the audit trail."""
    config = minimal_config(tmp_path)
    (tmp_path / "old").write_text(new_key() + "\n")
    (tmp_path / "new").write_text(new_key() + "\n")
    old_env = clean_env(HATCHWAY_MASTER_KEY_FILE=str(tmp_path / "old"))
    new_env = clean_env(HATCHWAY_MASTER_KEY_FILE=str(tmp_path / "new"))
    assert run(["orgs", "create", "acme", "--config", str(config)], tmp_path, env=old_env).returncode == 0
    stored = run(
        ["secrets", "set", "s1", "--org", "acme", "--config", str(config)], tmp_path, env=old_env, input="v\n"
    )
    assert stored.returncode == 0, stored.stderr

    rotated = run(
        ["vault", "rotate-master-key", "--config", str(config)],
        tmp_path,
        env=old_env | {"HATCHWAY_NEW_MASTER_KEY_FILE": str(tmp_path / "new")},
    )
    assert rotated.returncode == 0, rotated.stderr[-2000:]
    assert "Traceback" not in rotated.stderr
    assert "re-wrapped 1 data key" in rotated.stdout
    assert not (tmp_path / ".hatchway").exists()  # no key file was made or swapped

    verified = run(["audit", "verify", "--org", "acme", "--config", str(config)], tmp_path, env=new_env)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    listed = run(["secrets", "list", "--org", "acme", "--config", str(config)], tmp_path, env=new_env)
    assert listed.returncode == 0 and "s1" in listed.stdout, listed.stderr


# --- migrations ------------------------------------------------------------------------------------


def test_a_schema_newer_than_the_release_is_named_as_such(tmp_path: Path) -> None:
    """An old pod restarting after a newer release migrated the database (docs/deploy.md, "Rolling
    upgrades", step 3): ``hatchway migrate`` and a migrating ``serve`` printed Alembic's traceback
    ("Can't locate revision"), and a non-migrating one advised running ``hatchway migrate`` — which
    cannot help. Each must say, in one line, that a newer release's schema is there."""
    config = minimal_config(tmp_path)
    assert run(["migrate", "--config", str(config)], tmp_path).returncode == 0
    head = sorted(script_heads())[-1]
    with sqlite3.connect(tmp_path / "h.db") as db:
        db.execute(
            "UPDATE alembic_version SET version_num = '9999_from_a_newer_release' WHERE version_num = ?",
            (head,),
        )

    migrated = run(["migrate", "--config", str(config)], tmp_path)
    assert migrated.returncode == 1, migrated.stdout + migrated.stderr
    assert "Traceback" not in migrated.stderr, migrated.stderr[-2000:]
    assert "9999_from_a_newer_release" in migrated.stderr and "newer release" in migrated.stderr

    for migrate_on_start in (True, False):
        config = minimal_config(tmp_path, migrate_on_start=migrate_on_start)
        served = run(
            ["serve", "--config", str(config), "--port", str(free_port())],
            tmp_path,
            env=clean_env(HATCHWAY_MASTER_KEY=new_key()),
        )
        assert served.returncode == 1, served.stderr[-2000:]
        assert "Traceback" not in served.stderr, served.stderr[-2000:]
        assert "newer release" in served.stderr, served.stderr
        assert "run `hatchway migrate`" not in served.stderr


@pytest.mark.postgres
@pytest.mark.skipif(not PG_URL, reason="needs PostgreSQL: set HATCHWAY_TEST_DATABASE_URL")
def test_racing_migrations_apply_once_and_only_one_says_it_migrated(tmp_path: Path) -> None:
    """Several ``hatchway migrate`` at once (the init containers of one rollout): each takes the
    advisory lock in turn; the first applies the schema, the others find it at head. They all said
    "migrated from an empty database", so an operator reading the pods' logs could not tell which one
    changed the schema (docs/deploy.md: "the others wait on the lock, find the schema at their heads
    and exit 0 at once")."""
    import asyncpg

    with fresh_pg_database("hatchway_race") as url:
        config = minimal_config(tmp_path, database_url=url)
        plain = url.replace("postgresql+asyncpg://", "postgresql://")

        async def hold_then_release() -> list[subprocess.CompletedProcess[str]]:
            holder = await asyncpg.connect(plain)
            await holder.execute("SELECT pg_advisory_lock($1)", 0x4A7C_0001)
            procs = [
                subprocess.Popen(
                    [*HATCHWAY, "migrate", "--config", str(config)],
                    cwd=tmp_path,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=clean_env(),
                )
                for _ in range(3)
            ]
            deadline = time.monotonic() + 60
            while (
                await holder.fetchval(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                )
                < 3
            ):
                assert time.monotonic() < deadline, "the migrations never waited on the lock"
                assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
                await asyncio.sleep(0.1)
            await holder.execute("SELECT pg_advisory_unlock($1)", 0x4A7C_0001)
            await holder.close()
            done = []
            for proc in procs:
                out, err = proc.communicate(timeout=120)
                done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
            return done

        done = asyncio.run(hold_then_release())
        assert [d.returncode for d in done] == [0, 0, 0], [d.stderr[-1000:] for d in done]
        said = [d.stdout for d in done]
        assert sum("migrated from an empty database" in s for s in said) == 1, said
        assert sum("already at" in s for s in said) == 2, said


def test_serve_with_a_password_file_and_no_user_does_not_start(tmp_path: Path) -> None:
    """The same as the first test, end to end: ``serve`` refuses (exit 2) instead of trying the
    database without the password."""
    config = minimal_config(tmp_path, database_url="postgresql+asyncpg://127.0.0.1:1/hatchway")
    (tmp_path / "pw").write_text(PASSWORD + "\n")
    done = run(
        ["serve", "--config", str(config), "--port", str(free_port())],
        tmp_path,
        env=clean_env(HATCHWAY_DATABASE_PASSWORD_FILE=str(tmp_path / "pw")),
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "HATCHWAY_DATABASE_PASSWORD" in done.stderr and PASSWORD not in done.stderr
