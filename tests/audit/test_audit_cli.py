"""``hatchway audit verify`` and ``hatchway audit export`` on each backend: in process through Typer's
runner, and once as a real process, as a user would run them."""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from pathlib import Path

from typer.testing import CliRunner

from hatchway.audit import AuditTrail
from hatchway.cli import app
from hatchway.config.access import AuditSettings
from hatchway.store.db import Database
from hatchway.store.orgs import OrgStore
from hatchway.vault.master_key import ENV_VAR, load_master_key
from tests.audit.conftest import edit_entry, record_many
from tests.support.cli import minimal_config, run

ENV = {k: v for k, v in os.environ.items() if k != ENV_VAR} | {"COLUMNS": "200"}


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str


def hatchway(args: list[str]) -> Outcome:
    """``hatchway *args`` in process (Typer's runner), without a master key in the environment."""
    result = CliRunner().invoke(app, args, env={ENV_VAR: None, "COLUMNS": "200"})
    return Outcome(result.exit_code, result.stdout, result.stderr)


async def _seed(url: str, key_file: Path) -> str:
    db = Database(url)
    await db.migrate()
    try:
        org = await OrgStore(db).create_org("acme")
        await record_many(
            AuditTrail(db, load_master_key(key_file), AuditSettings(checkpoint_every=3)), org.id, 7
        )
        return org.id
    finally:
        await db.close()


async def _tamper(url: str, org_id: str) -> None:
    db = Database(url)
    try:
        await edit_entry(db, org_id, 3, target="forged")
    finally:
        await db.close()


def test_verify_and_export_exit_zero_on_an_intact_trail_and_one_naming_the_first_bad_entry(
    own_database_url: str, tmp_path: Path
) -> None:
    key_file = tmp_path / "master.key"
    config = minimal_config(tmp_path, database_url=own_database_url, master_key_file=str(key_file))
    org_id = asyncio.run(_seed(own_database_url, key_file))
    cfg = ["--config", str(config)]

    ok = hatchway(["audit", "verify", *cfg])
    assert ok.returncode == 0, ok.stderr
    assert f"ok: acme ({org_id}): 7 entries intact up to 7, 3 signatures checked" in ok.stdout

    exported = tmp_path / "audit.jsonl"
    done = hatchway(["audit", "export", "--org", "acme", "--output", str(exported), *cfg])
    assert done.returncode == 0, done.stderr
    assert "exported 7 entries of 1 organisations" in done.stderr
    to_stdout = hatchway(["audit", "export", "--since", "2000-01-01", *cfg])
    assert to_stdout.returncode == 0, to_stdout.stderr
    assert [json.loads(line)["type"] for line in to_stdout.stdout.splitlines()].count("entry") == 7

    offline = hatchway(["audit", "verify", "--file", str(exported), *cfg])
    assert offline.returncode == 0, offline.stderr
    assert f"ok: {org_id}: 7 entries intact" in offline.stdout
    unkeyed = hatchway(
        ["audit", "verify", "--file", str(exported), "--config", str(tmp_path / "absent.yaml")]
    )
    assert unkeyed.returncode == 0 and "no signature was checked" in unkeyed.stderr

    lines = exported.read_text().splitlines()
    lines[-2] = lines[-2].replace('"key:key_test"', '"key:someone"')  # entry 6's actor
    altered = tmp_path / "altered.jsonl"
    altered.write_text("\n".join(lines) + "\n")
    bad_file = hatchway(["audit", "verify", "--file", str(altered), *cfg])
    assert bad_file.returncode == 1
    assert f"{org_id}: entry 6 edited" in bad_file.stderr

    asyncio.run(_tamper(own_database_url, org_id))
    in_process = hatchway(["audit", "verify", "--org", "acme", *cfg])
    as_a_user = run(["audit", "verify", *cfg], tmp_path, env=ENV)  # a real process, its real exit code
    for bad in (in_process, as_a_user):
        assert bad.returncode == 1
        assert f"acme ({org_id}): entry 3 edited" in bad.stderr


def test_a_bad_since_and_an_unreadable_export_are_refused(tmp_path: Path) -> None:
    config = minimal_config(tmp_path, master_key_file=str(tmp_path / "master.key"))
    since = hatchway(["audit", "export", "--since", "yesterday", "--config", str(config)])
    assert since.returncode == 1 and "--since: not an ISO 8601 time" in since.stderr
    missing = hatchway(["audit", "verify", "--file", str(tmp_path / "nope.jsonl"), "--config", str(config)])
    assert missing.returncode == 2 and "cannot read the export" in missing.stderr
