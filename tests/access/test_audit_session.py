"""A scripted session of admin actions on two replicas sharing one PostgreSQL database, through the
admin API and the organisation routes over HTTP, some at once: every change lands in the audit trail
with its actor, source and request id; ``hatchway audit verify`` (a real process) passes; editing or
deleting any one entry makes it fail naming that entry; the export verifies offline; a secret's value
never appears in the trail."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from hatchway.store.db import Database
from tests.audit.conftest import delete_entry, edit_entry
from tests.support.backends import fresh_pg_database
from tests.support.cli import run
from tests.support.gateway import RunningGateway

pytestmark = pytest.mark.postgres
SECRET_VALUE = "sk_live_audit_never_4f1d9c"


@pytest.fixture
def pg_url() -> Iterator[str]:
    with fresh_pg_database("audit_session") as url:
        yield url


def _http(gateway: RunningGateway, key: str, method: str, path: str, **kw: Any) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}", **kw.pop("headers", {})}
    return httpx.request(method, f"{gateway.url}{path}", headers=headers, timeout=60, **kw)


def _session(a: RunningGateway, b: RunningGateway) -> list[str]:
    """The admin actions, spread over both replicas; returns the key ids made."""
    assert a.org is not None
    org, key = a.org.org_name, a.key
    keys = f"/v1/admin/orgs/{org}/keys"

    def make(i: int) -> str:
        replica = (a, b)[i % 2]
        made = _http(
            replica,
            key,
            "POST",
            keys,
            json={"name": f"k{i}", "role": "viewer"},
            headers={"x-request-id": f"req-{i}"},
        )
        assert made.status_code == 201, made.text
        return made.json()["id"]

    for replica in (a, b):
        # Each app's first request builds FastAPI's routes from the route modules both apps share;
        # two apps of one process (these threads) building them at once race (never in `serve`).
        assert _http(replica, key, "GET", "/v1/admin/me").status_code == 200
    with ThreadPoolExecutor(8) as pool:  # appends from both replicas at once
        made = list(pool.map(make, range(12)))
    assert _http(a, key, "PUT", "/v1/secrets/stripe", json={"value": SECRET_VALUE}).status_code == 201
    assert _http(b, key, "PUT", "/v1/secrets/stripe", json={"value": SECRET_VALUE + "2"}).status_code == 200
    assert _http(b, key, "POST", f"{keys}/{made[0]}/rotate").status_code == 201
    assert _http(a, key, "PATCH", f"{keys}/{made[1]}", json={"description": "ci"}).status_code == 200
    assert _http(b, key, "DELETE", f"{keys}/{made[2]}").status_code == 200
    assert _http(a, key, "DELETE", "/v1/secrets/stripe").status_code == 200
    viewer = _http(a, key, "POST", keys, json={"name": "reader", "role": "viewer"}).json()["key"]
    assert _http(b, viewer, "PUT", "/v1/secrets/x", json={"value": "v"}).status_code == 403  # a denial
    return made


def _verify(config: Path) -> tuple[int, str]:
    done = run(["audit", "verify", "--config", str(config)], config.parent)
    return done.returncode, done.stdout + done.stderr


def test_an_admin_session_on_two_replicas_is_recorded_and_verifies(
    pg_url: str, gateway_factory: Any, tmp_path: Path
) -> None:
    a: RunningGateway = gateway_factory(database_url=pg_url)
    b: RunningGateway = gateway_factory(database_url=pg_url)
    assert a.org is not None
    made = _session(a, b)

    trail = _http(a, a.key, "GET", f"/v1/admin/orgs/{a.org.org_name}/audit", params={"limit": 500}).json()
    entries = trail["data"]
    actions = [e["action"] for e in entries]
    assert actions.count("key.create") == 13 and actions.count("secret.put") == 2
    for action in ("key.rotate", "key.update", "key.revoke", "secret.delete", "access.denied"):
        assert action in actions, actions
    assert [e["seq"] for e in entries] == list(range(1, len(entries) + 1))
    created = {e["target"] for e in entries if e["action"] == "key.create"}
    assert {f"key:{k}" for k in made} <= created
    first = next(e for e in entries if e["action"] == "key.create")
    assert first["actor"].startswith("key:") and first["source"] == "127.0.0.1"
    assert {e["request_id"] for e in entries if e["action"] == "key.create"} >= {
        f"req-{i}" for i in range(12)
    }
    denied = next(e for e in entries if e["action"] == "access.denied")
    assert denied["outcome"] == "denied" and denied["target"] == "PUT /v1/secrets/{name}"
    assert SECRET_VALUE not in str(trail)

    code, out = _verify(a.config_path)
    assert code == 0, out
    exported = tmp_path / "trail.jsonl"
    done = run(["audit", "export", "--output", str(exported), "--config", str(a.config_path)], tmp_path)
    assert done.returncode == 0, done.stderr
    assert SECRET_VALUE not in exported.read_text()
    offline = run(["audit", "verify", "--file", str(exported), "--config", str(a.config_path)], tmp_path)
    assert offline.returncode == 0, offline.stdout + offline.stderr

    async def tamper(action: str, seq: int) -> None:
        db = Database(pg_url)
        try:
            if action == "edit":
                await edit_entry(db, a.org.org_id, seq, target="secret:other")  # type: ignore[union-attr]
            else:
                await delete_entry(db, a.org.org_id, seq)  # type: ignore[union-attr]
        finally:
            await db.close()

    asyncio.run(tamper("edit", 5))
    code, out = _verify(a.config_path)
    assert code == 1 and "entry 5" in out, out
    asyncio.run(tamper("delete", 3))  # an earlier break is the first named
    code, out = _verify(a.config_path)
    assert code == 1 and "entry 3" in out, out
