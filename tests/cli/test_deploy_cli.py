"""What a deployment drives from outside (issue 44): ``hatchway --version`` from the one place the
version is written, ``hatchway migrate`` once per rollout with ``migrate_on_start: false`` on the
processes, and secrets handed over as files (``NAME_FILE``)."""

from __future__ import annotations

import base64
import os
import re
import signal
import subprocess
import tomllib
from pathlib import Path

import httpx
import pytest

import hatchway
from hatchway.errors import ConfigError
from hatchway.store.db import script_heads
from tests.support.cli import HATCHWAY, minimal_config, run
from tests.support.paths import ROOT
from tests.support.servers import free_port, wait_until


def test_the_version_is_written_once_and_the_cli_says_it(tmp_path: Path) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    assert project["tool"]["hatch"]["version"]["path"] == "src/hatchway/__init__.py"
    done = run(["--version"], tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == f"hatchway {hatchway.__version__}"
    # The deploy files that name the version must agree with it (a test, not a second source).
    assert (
        f'newTag: "{hatchway.__version__}"'
        in (ROOT / "deploy/kubernetes/base/kustomization.yaml").read_text()
    )
    assert f"${{HATCHWAY_VERSION:-{hatchway.__version__}}}" in (ROOT / "deploy/compose.yaml").read_text()


def test_migrate_applies_the_schema_once_and_says_so(tmp_path: Path) -> None:
    config = minimal_config(tmp_path)
    first = run(["migrate", "--config", str(config)], tmp_path)
    assert first.returncode == 0, first.stderr
    heads = ", ".join(sorted(script_heads()))
    assert f"migrated from an empty database to {heads}" in first.stdout
    again = run(["migrate", "--config", str(config)], tmp_path)
    assert again.returncode == 0 and f"already at {heads}" in again.stdout


def test_a_process_that_does_not_migrate_refuses_an_old_schema_then_serves_once_migrated(
    tmp_path: Path,
) -> None:
    config = minimal_config(tmp_path, migrate_on_start=False)
    port = str(free_port())
    refused = run(["serve", "--config", str(config), "--port", port], tmp_path)
    assert refused.returncode == 1
    assert "no migration applied" in refused.stderr and "hatchway migrate" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert (
        not (tmp_path / "h.db").exists()
        or run(["migrate", "--config", str(config)], tmp_path).returncode == 0
    )
    assert run(["migrate", "--config", str(config)], tmp_path).returncode == 0
    proc = subprocess.Popen(
        [*HATCHWAY, "serve", "--config", str(config), "--port", port],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def ready() -> bool:
            assert proc.poll() is None, proc.communicate()[1]
            try:
                return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ready, timeout=120, interval=0.05, message="hatchway serve to be ready")
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr
    assert "Applying database migrations" not in stderr


def test_secrets_come_from_files_named_by_the_file_variables(tmp_path: Path) -> None:
    """``HATCHWAY_MASTER_KEY_FILE`` (a Docker or Kubernetes secret, mode 0444 as they mount them),
    ``HATCHWAY_DATABASE_PASSWORD_FILE`` into the URL, and ``env:NAME`` read from ``NAME_FILE``."""
    key = base64.b64encode(os.urandom(32)).decode()
    (tmp_path / "master_key").write_text(key + "\n")
    (tmp_path / "master_key").chmod(0o444)
    (tmp_path / "upstream_key").write_text("sk-from-a-file\n")
    config = minimal_config(
        tmp_path,
        providers=[{"id": "upstream", "base_url": "http://127.0.0.1:9/v1", "api_key": "env:UPSTREAM_KEY"}],
    )
    env = {
        **os.environ,
        "HATCHWAY_MASTER_KEY_FILE": str(tmp_path / "master_key"),
        "UPSTREAM_KEY_FILE": str(tmp_path / "upstream_key"),
    }
    env.pop("HATCHWAY_MASTER_KEY", None)
    env.pop("UPSTREAM_KEY", None)
    created = run(["orgs", "create", "acme", "--config", str(config)], tmp_path, env=env)
    assert created.returncode == 0, created.stderr
    stored = run(
        ["secrets", "set", "probe", "--org", "acme", "--config", str(config)],
        tmp_path,
        env=env,
        input="v\n",
    )
    assert stored.returncode == 0, stored.stderr
    assert not (tmp_path / ".hatchway" / "master.key").exists()  # the file's key, not a new one

    # The vault now holds data keys under the file's key: the same key inline opens it, another is refused.
    inline = {k: v for k, v in env.items() if k != "HATCHWAY_MASTER_KEY_FILE"}
    same = run(
        ["secrets", "set", "again", "--org", "acme", "--config", str(config)],
        tmp_path,
        env=inline | {"HATCHWAY_MASTER_KEY": key},
        input="v\n",
    )
    assert same.returncode == 0, same.stderr
    other = run(
        ["secrets", "set", "again", "--org", "acme", "--config", str(config)],
        tmp_path,
        env=inline | {"HATCHWAY_MASTER_KEY": base64.b64encode(os.urandom(32)).decode()},
        input="v\n",
    )
    assert other.returncode != 0 and "master key" in other.stderr.lower(), other.stderr

    both = run(
        ["migrate", "--config", str(config)],
        tmp_path,
        env=env | {"HATCHWAY_DATABASE_URL": "sqlite+aiosqlite:///x.db", "HATCHWAY_DATABASE_URL_FILE": "/x"},
    )
    assert both.returncode == 2 and "HATCHWAY_DATABASE_URL and HATCHWAY_DATABASE_URL_FILE" in both.stderr
    missing = run(
        ["migrate", "--config", str(config)], tmp_path, env=env | {"HATCHWAY_REDIS_URL_FILE": "/nope/x"}
    )
    assert missing.returncode == 2 and "HATCHWAY_REDIS_URL_FILE: cannot read /nope/x" in missing.stderr
    sqlite_password = run(
        ["migrate", "--config", str(config)], tmp_path, env=env | {"HATCHWAY_DATABASE_PASSWORD": "p"}
    )
    assert sqlite_password.returncode == 2 and "SQLite" in sqlite_password.stderr


def test_the_database_password_file_goes_into_the_url(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from hatchway.config.settings import load_settings

    (tmp_path / "pw").write_text("s3cr:et/@x\n")
    config = minimal_config(tmp_path, database_url="postgresql+asyncpg://hatchway@db:5432/hatchway")
    monkeypatch.setenv("HATCHWAY_DATABASE_PASSWORD_FILE", str(tmp_path / "pw"))
    url = load_settings(config).database_url
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    assert parsed.password == "s3cr:et/@x" and parsed.username == "hatchway" and parsed.host == "db"
    assert re.search(r"hatchway:[^@]+@db:5432/hatchway$", url)


def test_an_env_reference_reads_the_file_its_file_variable_names(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from hatchway.config.settings import load_settings
    from hatchway.engine.providers.routing import ModelRouter, resolve_api_key

    (tmp_path / "key").write_text("sk-from-a-file\n")
    monkeypatch.delenv("UPSTREAM_KEY", raising=False)
    monkeypatch.setenv("UPSTREAM_KEY_FILE", str(tmp_path / "key"))
    assert resolve_api_key("env:UPSTREAM_KEY") == "sk-from-a-file"
    config = minimal_config(
        tmp_path,
        providers=[{"id": "upstream", "base_url": "http://127.0.0.1:9/v1", "api_key": "env:UPSTREAM_KEY"}],
    )
    ModelRouter(load_settings(config))  # starts: the key is there
    monkeypatch.delenv("UPSTREAM_KEY_FILE")
    with pytest.raises(ConfigError, match=r"UPSTREAM_KEY \(or UPSTREAM_KEY_FILE\) is not set"):
        ModelRouter(load_settings(config))
