"""Keys through the admin API over HTTP: a key's restrictions (models, MCP endpoints, expiry) hold on
the inference routes; a rotated key works through its grace period and not after; a revoked or
narrowed key loses its powers at once on the replica that changed it and within the key cache's TTL
on another; an existing key created before roles is an admin key after the migration."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from hatchway.principal import Role
from hatchway.store.db import Database
from hatchway.store.orgs import OrgStore, hash_key
from tests.support.gateway import RunningGateway
from tests.support.mcp_endpoints import calc_endpoint
from tests.support.mcp_servers import McpTestServer
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import wait_until

NEW_COLUMNS = ("role", "description", "allowed_models", "allowed_mcp_endpoints", "expires_at", "replaced_by")
CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}


def _http(gateway: RunningGateway, key: str, method: str, path: str, **kw: Any) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}", **kw.pop("headers", {})}
    return httpx.request(method, f"{gateway.url}{path}", headers=headers, timeout=60, **kw)


def _mint(gateway: RunningGateway, **body: Any) -> dict[str, Any]:
    assert gateway.org is not None
    made = _http(gateway, gateway.key, "POST", f"/v1/admin/orgs/{gateway.org.org_name}/keys", json=body)
    assert made.status_code == 201, made.text
    return made.json()


def test_a_key_restricted_to_a_model_may_call_only_that_model(gateway_factory: Any, llm: ScriptedLLM) -> None:
    llm.handler = lambda body: Reply(text="hello")
    gateway: RunningGateway = gateway_factory(
        models=[
            {"name": "gpt-4o", "provider": "upstream", "upstream_model": "gpt-4o"},
            {"name": "gpt-4o-mini", "provider": "upstream", "upstream_model": "gpt-4o-mini"},
        ]
    )
    key = _mint(gateway, name="mini-only", allowed_models=["gpt-4o-mini"])
    assert key["role"] == "app" and key["allowed_models"] == ["gpt-4o-mini"]
    allowed = _http(
        gateway, key["key"], "POST", "/v1/chat/completions", json={**CHAT, "model": "gpt-4o-mini"}
    )
    assert allowed.status_code == 200, allowed.text
    refused = _http(gateway, key["key"], "POST", "/v1/chat/completions", json=CHAT)
    assert refused.status_code == 403 and refused.json()["error"]["param"] == "model"
    responses = _http(gateway, key["key"], "POST", "/v1/responses", json={"model": "gpt-4o", "input": "hi"})
    assert responses.status_code == 403 and "gpt-4o-mini" in responses.json()["error"]["message"]
    background = {"model": "gpt-4o", "input": "hi", "background": True, "store": True}
    assert _http(gateway, key["key"], "POST", "/v1/responses", json=background).status_code == 403
    # the model list for everyone; lifting the restriction takes effect at once on this replica
    assert gateway.org is not None
    path = f"/v1/admin/orgs/{gateway.org.org_name}/keys/{key['id']}"
    lifted = _http(gateway, gateway.key, "PATCH", path, json={"allowed_models": None})
    assert lifted.status_code == 200 and lifted.json()["allowed_models"] is None
    assert _http(gateway, key["key"], "POST", "/v1/chat/completions", json=CHAT).status_code == 200


def test_a_key_restricted_to_an_endpoint_may_not_use_another(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory: Any, tmp_path: Path
) -> None:
    _, gateway = calc_endpoint(mcp_server_factory, gateway_factory, tmp_path)
    key = _mint(gateway, name="elsewhere", allowed_mcp_endpoints=["other"])
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-06-18"}
    refused = _http(gateway, key["key"], "POST", "/mcp/tools", json=init, headers=headers)
    assert refused.status_code == 403 and "may not use the MCP endpoint 'tools'" in refused.text
    allowed = _mint(gateway, name="tools-only", allowed_mcp_endpoints=["tools"])
    assert _http(gateway, allowed["key"], "POST", "/mcp/tools", json=init, headers=headers).status_code == 200


def test_an_expired_key_is_refused(gateway: RunningGateway) -> None:
    soon = datetime.now(UTC) + timedelta(seconds=3)
    key = _mint(gateway, name="short", expires_at=soon.isoformat())
    assert _http(gateway, key["key"], "GET", "/v1/models").status_code == 200
    wait_until(
        lambda: _http(gateway, key["key"], "GET", "/v1/models").status_code == 401, timeout=60, interval=0.2
    )
    refused = _http(gateway, key["key"], "GET", "/v1/models")
    assert refused.json()["error"]["code"] == "expired_api_key"
    past = _http(
        gateway,
        gateway.key,
        "POST",
        f"/v1/admin/orgs/{gateway.org.org_name if gateway.org else ''}/keys",
        json={"name": "past", "expires_at": "2020-01-01T00:00:00Z"},
    )
    assert past.status_code == 400 and past.json()["error"]["param"] == "expires_at"


def test_rotation_keeps_the_old_key_through_its_grace_period_only(gateway_factory: Any) -> None:
    gateway: RunningGateway = gateway_factory(access={"key_rotation_grace_seconds": 3})
    old = _mint(gateway, name="rotating", role="viewer", description="ci reader")
    assert gateway.org is not None
    rotated = _http(
        gateway, gateway.key, "POST", f"/v1/admin/orgs/{gateway.org.org_name}/keys/{old['id']}/rotate"
    )
    assert rotated.status_code == 201, rotated.text
    new = rotated.json()
    assert new["role"] == "viewer" and new["description"] == "ci reader" and new["key"] != old["key"]
    assert new["replaces"]["id"] == old["id"] and new["replaces"]["replaced_by"] == new["id"]
    assert _http(gateway, old["key"], "GET", "/v1/logs").status_code == 200  # in its grace period
    assert _http(gateway, new["key"], "GET", "/v1/logs").status_code == 200
    wait_until(
        lambda: _http(gateway, old["key"], "GET", "/v1/logs").status_code == 401, timeout=60, interval=0.2
    )
    assert _http(gateway, new["key"], "GET", "/v1/logs").status_code == 200


def test_revocation_and_a_role_change_reach_another_replica_within_the_cache_ttl(
    gateway_factory: Any,
) -> None:
    # b trusts a key it looked up for 1 s (access.key_cache_seconds; 10 by default): the bound waited for
    a: RunningGateway = gateway_factory(access={"key_cache_seconds": 1})
    b: RunningGateway = gateway_factory(database_url=a.settings.database_url, access={"key_cache_seconds": 1})
    assert a.org is not None  # b serves the same database (with an organisation of its own)
    key = _mint(a, name="shared", role="admin")
    assert _http(b, key["key"], "GET", "/v1/secrets").status_code == 200  # cached on b now
    path = f"/v1/admin/orgs/{a.org.org_name}/keys/{key['id']}"
    narrowed = _http(a, a.key, "PATCH", path, json={"role": "viewer"})
    assert narrowed.status_code == 200 and narrowed.json()["role"] == "viewer"
    assert _http(a, key["key"], "GET", "/v1/secrets").status_code == 403  # at once where it changed
    wait_until(
        lambda: _http(b, key["key"], "GET", "/v1/secrets").status_code == 403, timeout=60, interval=0.2
    )
    revoked = _http(a, a.key, "DELETE", path)
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    assert _http(a, key["key"], "GET", "/v1/logs").status_code == 401
    wait_until(lambda: _http(b, key["key"], "GET", "/v1/logs").status_code == 401, timeout=60, interval=0.2)


def test_keys_made_before_roles_are_admin_keys_after_the_migration(tmp_path: Path) -> None:
    """A database at the last revision before 0013_access, with a key in it: after ``migrate`` the
    key authenticates with the admin role; a key made now is an app key."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'old.db'}"

    async def scenario() -> tuple[Role, Role]:
        db = Database(url)
        try:
            await db.migrate()
            async with db.engine.begin() as conn:  # back to the foundation's api_keys
                # the other heads still stand on the foundation: only 0013_access is to be applied
                await conn.execute(sa.text("DELETE FROM alembic_version WHERE version_num = '0013_access'"))
                for column in NEW_COLUMNS:
                    await conn.execute(sa.text(f"ALTER TABLE api_keys DROP COLUMN {column}"))
                await conn.execute(
                    sa.text(
                        "INSERT INTO organizations (id, name, created_at) "
                        "VALUES ('org_old', 'old', '2026-01-01')"
                    )
                )
                await conn.execute(
                    sa.text(
                        "INSERT INTO api_keys (id, org_id, name, key_prefix, key_hash, created_at) "
                        "VALUES ('key_old', 'org_old', 'legacy', 'hw-legacy', :digest, '2026-01-01 00:00:00')"
                    ),
                    {"digest": hash_key("hw-legacy-key")},
                )
            await db.migrate()
            store = OrgStore(db)
            legacy = await store.authenticate("hw-legacy-key")
            _, new = await store.create_key("old", "new")
            return legacy.role, (await store.authenticate(new)).role
        finally:
            await db.close()

    legacy, new = asyncio.run(scenario())
    assert legacy is Role.ADMIN and new is Role.APP


@pytest.mark.parametrize(
    "body", [{"role": "owner"}, {"allowed_models": "gpt-4o"}, {"name": ""}, {"bogus": 1}]
)
def test_a_bad_key_body_is_a_400_naming_the_field(gateway: RunningGateway, body: dict[str, Any]) -> None:
    assert gateway.org is not None
    answer = _http(gateway, gateway.key, "POST", f"/v1/admin/orgs/{gateway.org.org_name}/keys", json=body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == next(iter(body))
