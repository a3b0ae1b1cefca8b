"""``hatchway secrets`` and ``hatchway vault rotate-master-key``, each run as a real process."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

from hatchway.errors import DecryptionError
from hatchway.store.db import Database
from hatchway.store.orgs import OrgStore
from hatchway.vault import Vault, load_master_key
from tests.support.cli import HATCHWAY
from tests.support.leak_scanner import SecretScanner


class Cli:
    """Runs ``hatchway`` in ``tmp_path`` with a config there; every output goes to the leak scanner."""

    def __init__(self, tmp_path: Path, scanner: SecretScanner) -> None:
        self.cwd = tmp_path
        self.db_url = f"sqlite+aiosqlite:///{tmp_path / 'h.db'}"
        self.key_file = tmp_path / "state" / "master.key"
        self.config = tmp_path / "hatchway.yaml"
        self.config.write_text(
            yaml.safe_dump(
                {
                    "database_url": self.db_url,
                    "master_key_file": str(self.key_file),
                    "providers": [{"id": "up", "base_url": "http://127.0.0.1:9/v1"}],
                }
            )
        )
        self.scanner = scanner
        scanner.watch_database(self.db_url)

    def __call__(self, *args: str, stdin: str | None = None, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
        result = subprocess.run(
            [*HATCHWAY, *args, "--config", str(self.config)],
            cwd=self.cwd,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "COLUMNS": "200", **(env or {})},
        )
        self.scanner.observe(f"hatchway {' '.join(args)}", result.stdout + result.stderr)
        return result

    def read(self, org: str, name: str) -> str:
        """The value as the gateway would decrypt it, with whatever key file is there now."""

        async def go() -> str:
            db = Database(self.db_url)
            try:
                org_id = (await OrgStore(db).get_org(org)).id
                return (await Vault(db, load_master_key(self.key_file, env={})).get(org_id, name)).value
            finally:
                await db.close()

        return asyncio.run(go())


@pytest.fixture
def cli(secret_scanner: SecretScanner, tmp_path: Path) -> Cli:
    return Cli(tmp_path, secret_scanner)


def test_set_list_delete_with_the_value_on_stdin_only(cli: Cli, secret_scanner: SecretScanner) -> None:
    value = f"sk-{uuid.uuid4().hex}"
    secret_scanner.watch(value)
    assert cli("orgs", "create", "acme").returncode == 0

    made = cli(
        "secrets", "set", "mcp_key", "--org", "acme", "--allowed-host", "mcp.example.com", stdin=value + "\n"
    )
    assert made.returncode == 0, made.stderr
    assert "created secret mcp_key" in made.stdout
    assert stat.S_IMODE(cli.key_file.stat().st_mode) == 0o600
    assert cli.read("acme", "mcp_key") == value  # the trailing newline of `echo` is dropped

    listed = cli("secrets", "list", "--org", "acme")
    assert listed.returncode == 0 and "mcp_key" in listed.stdout and "mcp.example.com" in listed.stdout

    gone = cli("secrets", "delete", "mcp_key", "--org", "acme")
    assert gone.returncode == 0 and "mcp_key" not in cli("secrets", "list", "--org", "acme").stdout
    again = cli("secrets", "delete", "mcp_key", "--org", "acme")
    assert again.returncode == 1 and "secret 'mcp_key' not found" in again.stderr


BAD_INPUT = [
    (["set", "k", "--org", "acme"], "", "the secret value is empty"),
    (["set", "k", "--org", "acme"], "\n", "the secret value is empty"),
    (["set", "a.b", "--org", "acme"], "v", "found '.'"),
    (["set", "a/b", "--org", "acme"], "v", "found '/'"),
    (["set", "x" * 65, "--org", "acme"], "v", "at most 64 characters"),
    (["set", "k", "--org", "acme", "--allowed-host", "https://x/"], "v", "allowed_hosts[0]"),
    (["set", "k", "--org", "ghost"], "v", "No organisation named 'ghost'"),
    (["list", "--org", "ghost"], None, "No organisation named 'ghost'"),
]


def test_bad_input_exits_non_zero_with_a_clear_message(cli: Cli) -> None:
    cli("orgs", "create", "acme")
    for args, stdin, message in BAD_INPUT:
        result = cli("secrets", *args, stdin=stdin)
        assert result.returncode == 1, args
        assert message in " ".join(result.stderr.split()) and "Traceback" not in result.stderr, args
    assert "│" not in cli("secrets", "list", "--org", "acme").stdout.split("┡")[-1]  # nothing was stored


def test_rotating_the_master_key_keeps_every_secret_readable(cli: Cli, secret_scanner: SecretScanner) -> None:
    values = {(org, name): f"v-{uuid.uuid4().hex}" for org in ("acme", "globex") for name in ("a", "b")}
    secret_scanner.watch(*values.values())
    for org in ("acme", "globex"):
        cli("orgs", "create", org)
    for (org, name), value in values.items():
        assert cli("secrets", "set", name, "--org", org, stdin=value).returncode == 0
    old_key = cli.key_file.read_text()

    rotated = cli("vault", "rotate-master-key")

    assert rotated.returncode == 0, rotated.stderr
    assert "re-wrapped 2 data key(s)" in rotated.stdout
    # every organisation's audit trail (its creation, its secrets) is signed again with the new key
    assert "re-signed 2 audit head(s)" in rotated.stdout
    verified = cli("audit", "verify")
    shown = verified.stdout + verified.stderr
    assert verified.returncode == 0 and "not checked" not in shown, shown
    assert "0 signatures checked" not in verified.stdout, verified.stdout
    assert cli.key_file.read_text() != old_key
    backup = cli.key_file.with_name("master.key.old")
    assert backup.read_text() == old_key and stat.S_IMODE(backup.stat().st_mode) == 0o600
    assert stat.S_IMODE(cli.key_file.stat().st_mode) == 0o600
    for (org, name), value in values.items():
        assert cli.read(org, name) == value
    assert "a" in cli("secrets", "list", "--org", "globex").stdout

    backup.replace(cli.key_file)  # the old key alone no longer opens anything
    with pytest.raises(DecryptionError, match="the master key does not match"):
        cli.read("acme", "a")
    refused = cli("secrets", "set", "c", "--org", "acme", stdin="v")
    assert refused.returncode == 1 and "the master key does not match" in refused.stderr


def test_a_master_key_file_readable_by_others_stops_the_commands_and_serve(cli: Cli) -> None:
    cli("orgs", "create", "acme")
    assert cli("secrets", "set", "k", "--org", "acme", stdin="v").returncode == 0
    cli.key_file.chmod(0o644)
    for args in (["secrets", "list", "--org", "acme"], ["serve", "--port", "0"]):
        result = cli(*args)
        assert result.returncode == 1, result.stderr
        assert "chmod 600" in result.stderr and "Traceback" not in result.stderr


def test_rotation_with_the_key_in_the_environment_takes_the_new_key_from_the_environment(
    cli: Cli, secret_scanner: SecretScanner
) -> None:
    import base64

    old, new = (base64.b64encode(os.urandom(32)).decode() for _ in range(2))
    secret_scanner.watch(old, new)
    cli("orgs", "create", "acme", env={"HATCHWAY_MASTER_KEY": old})  # it signs the audit trail
    made = cli("secrets", "set", "env_secret", "--org", "acme", stdin="v1", env={"HATCHWAY_MASTER_KEY": old})
    assert made.returncode == 0

    missing = cli("vault", "rotate-master-key", env={"HATCHWAY_MASTER_KEY": old})
    assert missing.returncode == 1 and "HATCHWAY_NEW_MASTER_KEY" in missing.stderr
    rotated = cli(
        "vault", "rotate-master-key", env={"HATCHWAY_MASTER_KEY": old, "HATCHWAY_NEW_MASTER_KEY": new}
    )
    assert rotated.returncode == 0 and "set HATCHWAY_MASTER_KEY" in " ".join(rotated.stdout.split())

    assert "env_secret" in cli("secrets", "list", "--org", "acme", env={"HATCHWAY_MASTER_KEY": new}).stdout
    stale = cli("secrets", "set", "k2", "--org", "acme", stdin="v", env={"HATCHWAY_MASTER_KEY": old})
    assert stale.returncode == 1 and "the master key does not match" in stale.stderr
    assert not cli.key_file.exists()  # the environment was used throughout
