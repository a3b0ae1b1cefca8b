"""Verified end users (``access.end_users``): for an organisation that requires them, the app proves
its user with a JWT from its identity provider (a real JWKS over loopback), and the token's subject,
not ``X-On-Behalf-Of``, is the end user. A missing, expired, foreign-signed or wrong-audience token, or
an ``X-On-Behalf-Of`` naming someone else, is refused with the reason and runs nothing; a valid one's
subject is the end user of the run log, of operations (only it can confirm) and of connections."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from hatchway.principal import Role
from hatchway.store.db import Database
from hatchway.store.orgs import OrgStore
from tests.api.test_mcp_endpoint_oauth import ISSUER, ScriptedIdp
from tests.support.contas import RunningContas, contas_model
from tests.support.gateway import RunningGateway
from tests.support.scripted_llm import ScriptedLLM

AUDIENCE = "acme-web-app"
HEADER = "X-Hatchway-User-Token"
ASK = [{"role": "user", "content": "cancele Produto A, Produto B e Produto C"}]


@pytest.fixture
def idp() -> Iterator[ScriptedIdp]:
    server = ScriptedIdp()
    server.thread.start()
    yield server
    server.thread.stop()


class Stack:
    def __init__(self, gateway: RunningGateway, app_key: str, admin_key: str, idp: ScriptedIdp) -> None:
        self.gateway = gateway
        self.app_key = app_key
        self.admin_key = admin_key
        self.idp = idp

    def token(self, subject: str, **claims: Any) -> str:
        return self.idp.token(subject, AUDIENCE, **claims)

    def chat(self, headers: dict[str, str], key: str | None = None) -> httpx.Response:
        return httpx.post(
            f"{self.gateway.url}/v1/chat/completions",
            json={"model": "agent:contas", "messages": ASK},
            headers={"authorization": f"Bearer {key or self.app_key}", "hatchway-session": "s1", **headers},
            timeout=60,
        )

    def call(
        self, method: str, path: str, headers: dict[str, str], key: str | None = None, **kw: Any
    ) -> httpx.Response:
        headers = {"authorization": f"Bearer {key or self.app_key}", **headers}
        return httpx.request(method, f"{self.gateway.url}{path}", headers=headers, timeout=60, **kw)


@pytest.fixture
def stack(
    idp: ScriptedIdp, contas: RunningContas, gateway_factory: Any, llm: ScriptedLLM, tmp_path: Path
) -> Stack:
    llm.handler = contas_model
    gateway: RunningGateway = gateway_factory(
        agents=[contas.agent(tmp_path / "contas")],
        access={
            "end_users": [
                {
                    "organisations": ["verified"],
                    "issuer": ISSUER,
                    "jwks_url": f"{idp.thread.url}/jwks",
                    "audience": AUDIENCE,
                    "leeway_seconds": 5,
                }
            ]
        },
    )

    async def keys() -> tuple[str, str]:
        db = Database(gateway.settings.database_url)
        try:
            store = OrgStore(db)
            org = await store.create_org("verified")
            _, app = await store.create_key(org.id, "web", role=Role.APP)
            _, admin = await store.create_key(org.id, "ops", role=Role.ADMIN)
            return app, admin
        finally:
            await db.close()

    app_key, admin_key = asyncio.run(keys())
    return Stack(gateway, app_key, admin_key, idp)


def _refused(answer: httpx.Response, status: int, reason: str) -> None:
    assert answer.status_code == status, answer.text
    assert reason in answer.json()["error"]["message"], answer.text


def test_a_request_without_a_valid_user_token_is_refused_and_runs_nothing(
    stack: Stack, llm: ScriptedLLM
) -> None:
    before = len(llm.requests)
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = jwt.encode(
        {"iss": ISSUER, "sub": "ana", "aud": AUDIENCE, "exp": int(time.time()) + 300},
        other_key,
        algorithm="RS256",
        headers={"kid": "k1"},
    )
    _refused(stack.chat({}), 401, f"{HEADER}: required")
    _refused(stack.chat({HEADER: stack.token("ana", exp=int(time.time()) - 60)}), 401, "expired")
    _refused(stack.chat({HEADER: forged}), 401, "signature does not verify")
    _refused(stack.chat({HEADER: stack.idp.token("ana", "another-app")}), 401, "another audience")
    _refused(stack.chat({HEADER: "not-a-jwt"}), 401, "not a JWT")
    mismatch = stack.chat({HEADER: stack.token("ana"), "X-On-Behalf-Of": "bruno"})
    _refused(mismatch, 403, "X-On-Behalf-Of")
    assert mismatch.json()["error"]["code"] == "end_user_mismatch"
    # an admin key without a token may read, but not assert an end user
    asserted = stack.call("GET", "/v1/logs", {"X-On-Behalf-Of": "bruno"}, key=stack.admin_key)
    _refused(asserted, 403, "verified end users")
    assert stack.call("GET", "/v1/logs", {}, key=stack.admin_key).status_code == 200
    assert len(llm.requests) == before, "a refused request reached the model"


def test_the_token_subject_is_the_end_user_of_the_log_and_the_operation(stack: Stack) -> None:
    ana = {HEADER: stack.token("ana")}
    asked = stack.chat(ana)  # no X-On-Behalf-Of: the token names the user
    assert asked.status_code == 200, asked.text
    op_id = asked.headers["x-hatchway-operation-id"]
    op = stack.call("GET", f"/v1/operations/{op_id}", ana).json()
    assert op["requested_by"] == "ana"
    logs = stack.call("GET", "/v1/logs", {}, key=stack.admin_key).json()["data"]
    assert [entry["on_behalf_of"] for entry in logs] == ["ana"]

    # bruno, proven, cannot read or confirm ana's operation; his app key cannot claim to be ana
    bruno = {HEADER: stack.token("bruno")}
    assert stack.call("GET", f"/v1/operations/{op_id}", bruno).status_code == 404
    assert stack.call("GET", "/v1/operations", bruno).json()["data"] == []
    refused = stack.call("POST", f"/v1/operations/{op_id}/confirm", bruno)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "confirmation_not_yours"
    claimed = stack.call("POST", f"/v1/operations/{op_id}/confirm", {**bruno, "X-On-Behalf-Of": "ana"})
    assert claimed.status_code == 403 and claimed.json()["error"]["code"] == "end_user_mismatch"
    assert stack.call("GET", f"/v1/operations/{op_id}", ana).json()["status"] == "AWAITING_CONFIRMATION"

    confirmed = stack.call("POST", f"/v1/operations/{op_id}/confirm", ana, json={"confirm": True})
    assert confirmed.status_code == 200, confirmed.text
    assert confirmed.json()["confirmed_by"] == "ana"


def test_connections_are_the_verified_users(stack: Stack) -> None:
    listed = stack.call("GET", "/v1/connections", {HEADER: stack.token("ana")})
    assert listed.status_code == 200 and listed.json()["data"] == []
    gone = stack.call("DELETE", "/v1/connections/calc", {HEADER: stack.token("ana")})
    assert gone.status_code == 404 and "for this user" in gone.json()["error"]["message"]
    # an app key must name its end user to list connections; with verified users, by its token
    assert stack.call("GET", "/v1/connections", {}).status_code == 401


def test_the_organisations_settings_say_its_end_users_are_verified(stack: Stack) -> None:
    """``GET /v1/admin/orgs/{org}/settings``: what hatchway.yaml sets for it, to an admin only."""
    answer = stack.call("GET", "/v1/admin/orgs/verified/settings", {}, key=stack.admin_key)
    assert answer.status_code == 200, answer.text
    settings = answer.json()
    assert settings["verified_end_users"] == {
        "issuer": ISSUER,
        "audience": AUDIENCE,
        "header": HEADER,
        "subject_claim": "sub",
    }
    assert settings["key_rotation_grace_seconds"] == 86_400
    refused = stack.call("GET", "/v1/admin/orgs/verified/settings", {HEADER: stack.token("ana")})
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "insufficient_role"
