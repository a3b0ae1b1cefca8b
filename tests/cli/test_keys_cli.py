"""``hatchway keys create|list|rotate|revoke`` as real processes: roles and restrictions go in, the
list shows them (never a key), a rotation prints a new key and dates the old one's end, a revocation
is listed, and every change is in the audit trail (``hatchway audit export``) by ``cli:<user>``."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import minimal_config, run


def test_keys_with_roles_and_restrictions_through_the_cli(tmp_path: Path) -> None:
    config = minimal_config(tmp_path, master_key_file=str(tmp_path / "master.key"))
    cfg = ["--config", str(config)]
    assert run(["orgs", "create", "acme", *cfg], tmp_path).returncode == 0
    made = run(
        [
            "keys",
            "create",
            "--org",
            "acme",
            "--name",
            "reader",
            "--role",
            "viewer",
            "--allow-model",
            "gpt-4o",
            "--expires",
            "30d",
            "--description",
            "ci",
            *cfg,
        ],
        tmp_path,
    )
    assert made.returncode == 0, made.stderr
    plaintext = made.stdout.strip()
    assert plaintext.startswith("hw-")
    bad = run(["keys", "create", "--org", "acme", "--role", "owner", *cfg], tmp_path)
    assert bad.returncode == 2 and "owner" in bad.stderr

    listed = run(["keys", "list", "--org", "acme", "--json", *cfg], tmp_path)
    rows = json.loads(listed.stdout)
    assert len(rows) == 1 and plaintext not in listed.stdout
    row = rows[0]
    assert row["role"] == "viewer" and row["allowed_models"] == ["gpt-4o"] and row["description"] == "ci"
    assert row["expires_at"] is not None

    rotated = run(["keys", "rotate", row["id"], "--org", "acme", *cfg], tmp_path)
    assert rotated.returncode == 0, rotated.stderr
    assert rotated.stdout.strip().startswith("hw-") and rotated.stdout.strip() != plaintext
    assert "the old key works until" in rotated.stderr
    revoked = run(["keys", "revoke", row["id"], "--org", "acme", *cfg], tmp_path)
    assert revoked.returncode == 0 and row["id"] in revoked.stdout
    after = run(["keys", "list", "--org", "acme", "--json", "--include-revoked", *cfg], tmp_path)
    states = {r["id"]: r for r in json.loads(after.stdout)}
    assert states[row["id"]]["revoked_at"] is not None and states[row["id"]]["replaced_by"] is not None
    assert states[states[row["id"]]["replaced_by"]]["role"] == "viewer"
    ghost = run(["keys", "revoke", "key_nope", "--org", "acme", *cfg], tmp_path)
    assert ghost.returncode == 1 and "key_nope" in ghost.stderr and "Traceback" not in ghost.stderr

    exported = run(["audit", "export", *cfg], tmp_path)
    actions = [(e.get("action"), e.get("actor", "")) for e in map(json.loads, exported.stdout.splitlines())]
    done = [a for a, actor in actions if a and actor.startswith("cli:")]
    assert done == ["org.create", "key.create", "key.rotate", "key.revoke"], actions
    assert run(["audit", "verify", *cfg], tmp_path).returncode == 0
