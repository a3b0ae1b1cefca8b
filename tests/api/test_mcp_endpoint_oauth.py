"""An MCP endpoint in OAuth resource-server mode: protected resource metadata naming the configured
authorization server, access tokens validated by its JWKS or by introspection, audience bound to
the endpoint, the token's subject as the end user — through the official MCP Python SDK's client.

The authorization server's keys and introspection answers are served over real HTTP by a small
Starlette app here; the tokens are signed with its key (PyJWT), as an IdP's would be."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.support.contas import ABC, QUESTION, RunningContas
from tests.support.gateway import RunningGateway
from tests.support.servers import ServerThread, free_port

ISSUER = "https://idp.example.com"
INTROSPECTION_SECRET = "introspection-secret-4b1d"


class ScriptedIdp:
    """An authorization server's JWKS and introspection endpoints; it mints the tokens itself."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.active: dict[str, dict[str, Any]] = {}
        self.introspections = 0
        self.thread = ServerThread(
            Starlette(
                routes=[Route("/jwks", self._jwks), Route("/introspect", self._introspect, methods=["POST"])]
            )
        )

    async def _jwks(self, request: Request) -> JSONResponse:
        public = jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
        return JSONResponse({"keys": [{**public, "kid": "k1", "use": "sig", "alg": "RS256"}]})

    async def _introspect(self, request: Request) -> JSONResponse:
        self.introspections += 1
        expected = "Basic " + base64.b64encode(f"hatchway:{INTROSPECTION_SECRET}".encode()).decode()
        if request.headers.get("authorization") != expected:
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        token = (await request.form()).get("token")
        return JSONResponse(self.active.get(str(token), {"active": False}))

    def token(self, subject: str, audience: str, **claims: Any) -> str:
        body = {
            "iss": ISSUER,
            "sub": subject,
            "aud": audience,
            "exp": int(time.time()) + 300,
            "scope": "mcp:tools",
            **claims,
        }
        return jwt.encode(body, self.key, algorithm="RS256", headers={"kid": claims.pop("kid", "k1")})


@pytest.fixture
def idp() -> Iterator[ScriptedIdp]:
    server = ScriptedIdp()
    server.thread.start()
    yield server
    server.thread.stop()


def _gateway(
    gateway_factory: Any, contas: RunningContas, tmp_path: Path, oauth: dict[str, Any]
) -> tuple[RunningGateway, str]:
    """The gateway, and the key of ``acme``, the organisation OAuth calls act for. It knows its own
    address (``public_base_url``): the audience of its tokens comes from configuration only."""
    port = free_port()
    gateway: RunningGateway = gateway_factory(
        public_base_url=f"http://127.0.0.1:{port}",
        gateway_options={"port": port},
        agents=[contas.agent(tmp_path / "contas")],
        mcp_endpoints=[
            {
                "name": "contas",
                "agent": "contas",
                "oauth": {"issuer": ISSUER, "organisation": "acme", "scopes": ["mcp:tools"], **oauth},
            }
        ],
    )
    return gateway, gateway.new_org("acme").key


async def _session(url: str, token: str, action: Any, headers: dict[str, str] | None = None) -> Any:
    http = httpx2.AsyncClient(headers={"authorization": f"Bearer {token}", **(headers or {})}, timeout=30)
    async with Client(streamable_http_client(url, http_client=http)) as client:
        return await action(client)


def test_protected_resource_metadata_and_jwt_access_tokens_for_the_endpoint(
    idp: ScriptedIdp, contas: RunningContas, gateway_factory: Any, tmp_path: Path
) -> None:
    gateway, acme = _gateway(gateway_factory, contas, tmp_path, {"jwks_url": f"{idp.thread.url}/jwks"})
    url = f"{gateway.url}/mcp/contas"
    metadata = httpx.get(f"{gateway.url}/.well-known/oauth-protected-resource/mcp/contas").json()
    assert metadata["resource"] == url  # the audience tokens must carry
    assert metadata["authorization_servers"] == [ISSUER] and metadata["scopes_supported"] == ["mcp:tools"]

    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    anonymous = httpx.post(url, json=body)
    assert anonymous.status_code == 401
    challenge = anonymous.headers["www-authenticate"]
    assert f'resource_metadata="{gateway.url}/.well-known/oauth-protected-resource/mcp/contas"' in challenge

    def refused(token: str) -> bool:
        response = httpx.post(url, json=body, headers={"authorization": f"Bearer {token}"})
        return response.status_code == 401 and 'error="invalid_token"' in response.headers["www-authenticate"]

    assert refused(idp.token("alice", "https://other.example.com/mcp"))  # another audience
    assert refused(idp.token("alice", url, iss="https://evil.example.com"))
    assert refused(idp.token("alice", url, exp=int(time.time()) - 600))
    assert refused(idp.token("alice", url, scope="other"))  # without the endpoint's scope
    forged = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    assert refused(
        jwt.encode(
            {"iss": ISSUER, "sub": "alice", "aud": url, "exp": int(time.time()) + 60, "scope": "mcp:tools"},
            forged,
            algorithm="RS256",
            headers={"kid": "k1"},
        )
    )
    assert refused(
        jwt.encode(
            {"iss": ISSUER, "sub": "alice", "aud": url, "exp": int(time.time()) + 60},
            "a-shared-secret-of-32-bytes-or-more!",
            algorithm="HS256",
        )
    )
    assert refused("not-a-token")

    asked: list[str] = []

    async def elicit(context: Any, params: Any) -> Any:
        import mcp_types as types

        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"confirm": True})

    async def use(client: Client) -> Any:
        names = [t.name for t in (await client.list_tools()).tools]
        return names, await client.call_tool("cancelar_vas_avulso", ABC)

    async def run() -> Any:
        http = httpx2.AsyncClient(
            # The client's X-On-Behalf-Of is ignored: the token's subject is the end user.
            headers={"authorization": f"Bearer {idp.token('alice', url)}", "x-on-behalf-of": "mallory"},
            timeout=30,
        )
        async with Client(
            streamable_http_client(url, http_client=http), elicitation_callback=elicit
        ) as client:
            return await use(client)

    names, result = asyncio.run(run())
    assert "cancelar_vas_avulso" in names and asked == [QUESTION]
    assert result.structured_content["verdict"] == "PARTIAL_SUCCESS"
    op_id = result.structured_content["operation_id"]
    assert contas.backend.executions == {op_id: 1}
    as_acme = {"authorization": f"Bearer {acme}"}
    op = httpx.get(f"{gateway.url}/v1/operations/{op_id}", headers=as_acme).json()
    assert op["requested_by"] == "alice" and op["confirmed_by"] == "alice"  # the subject, not mallory
    logs = httpx.get(f"{gateway.url}/v1/logs", headers=as_acme).json()["data"]
    assert {r["on_behalf_of"] for r in logs if r["route"] == "mcp:contas"} == {"alice"}


def test_introspected_tokens_are_accepted_while_active(
    idp: ScriptedIdp, contas: RunningContas, gateway_factory: Any, tmp_path: Path
) -> None:
    gateway, _acme = _gateway(
        gateway_factory,
        contas,
        tmp_path,
        {
            "introspection_url": f"{idp.thread.url}/introspect",
            "client_id": "hatchway",
            "secret_ref": "secret.idp_introspection",
        },
    )
    system = gateway.new_org("system")  # where hatchway.yaml's secret.<name> live
    assert gateway.put_secret("idp_introspection", INTROSPECTION_SECRET, key=system.key).status_code == 201
    url = f"{gateway.url}/mcp/contas"
    idp.active["opaque-alice"] = {
        "active": True,
        "sub": "alice",
        "aud": url,
        "iss": ISSUER,
        "scope": "mcp:tools",
        "exp": int(time.time()) + 300,
    }
    idp.active["opaque-elsewhere"] = {**idp.active["opaque-alice"], "aud": "https://other.example.com"}

    async def names(client: Client) -> list[str]:
        return [t.name for t in (await client.list_tools()).tools]

    assert "cancelar_vas_avulso" in asyncio.run(_session(url, "opaque-alice", names))
    assert "cancelar_vas_avulso" in asyncio.run(_session(url, "opaque-alice", names))
    assert idp.introspections == 1  # an active answer is reused for a while
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    for token in ("opaque-elsewhere", "opaque-unknown"):
        response = httpx.post(url, json=body, headers={"authorization": f"Bearer {token}"})
        assert response.status_code == 401, (token, response.text)
    # A Hatchway key still works on an OAuth endpoint.
    assert "cancelar_vas_avulso" in asyncio.run(_session(url, gateway.key, names))
