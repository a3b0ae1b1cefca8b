"""Attacks: SSO sessions and sign-ins attacked over HTTP, without a browser.

The real ``oidc-provider`` answers ``/ui/login``'s discovery; sessions are made directly in the
gateway's database (what a finished sign-in would have made), so the cookie's
rules can be attacked on their own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hatchway.access.sessions import Grants, OrgGrant, SsoSessions
from hatchway.principal import Role
from hatchway.store.db import Database
from tests.support.gateway import OrgKey, RunningGateway, create_org_key
from tests.support.oidc_provider import OidcProvider


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[OidcProvider]:
    """The real ``oidc-provider`` (``/ui/login`` reads its discovery document and nothing else here)."""
    server = OidcProvider(
        "hatchway", "attack-client-secret", ["http://127.0.0.1:9/ui/callback"], {}, tmp_path / "oidc.log"
    ).start()
    yield server
    server.stop()


def _sso(provider: OidcProvider, **extra: Any) -> dict[str, Any]:
    return {"sso": {"issuer": provider.issuer, "client_id": "hatchway", **extra}}


def test_an_anonymous_flood_of_started_sign_ins_does_not_lock_everyone_out(
    provider: OidcProvider, gateway_factory: Any
) -> None:
    gateway: RunningGateway = gateway_factory(access=_sso(provider, max_pending_logins=10))
    with httpx.Client(base_url=gateway.url, follow_redirects=False, timeout=30) as attacker:
        for _ in range(10):  # no key, no cookie kept: ten GETs
            assert attacker.get("/ui/login").status_code == 303
    with httpx.Client(base_url=gateway.url, follow_redirects=False, timeout=30) as victim:
        answer = victim.get("/ui/login", params={"next": "/ui/#/keys"})
    assert answer.status_code == 303, (
        f"after ten anonymous requests nobody can sign in for login_seconds: {answer.status_code}"
    )


# -- sessions ---------------------------------------------------------------------------------------


def _session(gateway: RunningGateway, grants: Grants, subject: str = "alice") -> tuple[str, str]:
    """(cookie value, CSRF token) of a new session made as a sign-in would make it."""
    assert gateway.settings.access.sso is not None

    async def make() -> tuple[str, str]:
        db = Database(gateway.settings.database_url)
        try:
            value, session = await SsoSessions(db, gateway.settings.access.sso).create(  # type: ignore[arg-type]
                subject, subject, None, grants
            )
            return value, session.csrf_token
        finally:
            await db.close()

    return asyncio.run(make())


def _as_person(gateway: RunningGateway, cookie: str, method: str, path: str, **kw: Any) -> httpx.Response:
    return httpx.request(
        method, f"{gateway.url}{path}", cookies={"hatchway_session": cookie}, timeout=30, **kw
    )


@pytest.fixture
def people(provider: OidcProvider, gateway_factory: Any) -> tuple[RunningGateway, OrgKey, OrgKey]:
    gateway: RunningGateway = gateway_factory(access=_sso(provider))
    assert gateway.org is not None
    other = asyncio.run(create_org_key(gateway.settings.database_url, "globex"))
    return gateway, gateway.org, other


def test_a_session_cannot_be_used_where_it_has_no_grant_or_without_its_own_csrf_token(
    people: tuple[RunningGateway, OrgKey, OrgKey],
) -> None:
    gateway, acme, globex = people
    # alice: admin in acme, viewer in globex; bob: admin in globex
    alice, alice_csrf = _session(
        gateway,
        Grants(
            (
                OrgGrant(acme.org_id, acme.org_name, Role.ADMIN),
                OrgGrant(globex.org_id, globex.org_name, Role.VIEWER),
            )
        ),
    )
    _, bob_csrf = _session(gateway, Grants((OrgGrant(globex.org_id, globex.org_name, Role.ADMIN),)), "bob")
    keys = f"/v1/admin/orgs/{globex.org_name}/keys"
    # viewer in globex: no admin route there, whatever the header says
    for headers in ({}, {"hatchway-organization": acme.org_name}, {"hatchway-organization": acme.org_id}):
        answer = _as_person(gateway, alice, "GET", keys, headers=headers)
        assert answer.status_code == 403, (headers, answer.text)
    # a change with no CSRF token, with another session's, with a case-changed header name
    secret = {"json": {"value": "v"}, "headers": {"hatchway-organization": acme.org_name}}
    assert (
        _as_person(gateway, alice, "PUT", "/v1/secrets/x", **secret).json()["error"]["code"] == "csrf_failed"
    )
    stolen = {**secret, "headers": {**secret["headers"], "x-csrf-token": bob_csrf}}
    assert (
        _as_person(gateway, alice, "PUT", "/v1/secrets/x", **stolen).json()["error"]["code"] == "csrf_failed"
    )
    own = {**secret, "headers": {**secret["headers"], "X-Csrf-Token": alice_csrf}}
    assert _as_person(gateway, alice, "PUT", "/v1/secrets/x", **own).status_code == 201
    # an organisation named in neither path nor grants, by id: refused before any lookup
    third = asyncio.run(create_org_key(gateway.settings.database_url, "initech"))
    for ref in (third.org_id, third.org_name, "no-such-org"):
        answer = _as_person(gateway, alice, "GET", f"/v1/admin/orgs/{ref}/keys")
        assert answer.status_code == 403 and answer.json()["error"]["code"] == "insufficient_role", (
            answer.text
        )
    # the cookie never opens the inference routes (keys only)
    chat = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    headers = {"x-csrf-token": alice_csrf, "hatchway-organization": acme.org_name}
    for path in ("/v1/chat/completions", "/v1/messages"):
        assert _as_person(gateway, alice, "POST", path, json=chat, headers=headers).status_code == 401
