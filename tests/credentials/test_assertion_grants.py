"""The assertion grants, over real HTTP: a workload's identity token presented with the JWT bearer
grant (workload identity federation), and a user's identity token exchanged at an enterprise IdP for
an ID-JAG that the confidential client then presents (enterprise-managed authorization, SEP-990).

Where the tokens come from is part of the contract: a file is read again at each exchange (a
projected token rotates in place), ``env:``/``file:`` are refused to plugins sent in a request, and
neither the assertions nor the secrets appear in what an endpoint's error becomes.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from hatchway.cli.probe_session import GivenSecrets, ToolCall, probe_context, probe_server
from hatchway.credentials import VaultCredentials
from hatchway.errors import McpAuthError, PermissionDenied, ToolError
from hatchway.redaction import Redactor
from hatchway.store.cache import MemoryCache
from tests.support.mcp_servers import McpTestServer
from tests.support.server_configs import requester, server
from tests.support.servers import ServerThread

pytestmark = pytest.mark.anyio

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ID_JAG = "urn:ietf:params:oauth:token-type:id-jag"
ISSUED = "issued-access-token"
ID_TOKEN = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLW9mLWFsaWNl"


class Endpoints:
    """The MCP server's authorization server (``/token``) and the enterprise IdP (``/idp/token``)."""

    def __init__(self) -> None:
        self.token_requests: list[tuple[dict[str, str], dict[str, str]]] = []
        self.idp_requests: list[dict[str, str]] = []
        self.echo_errors = False
        """Answer 400 with an ``error_description`` repeating every field received (debug endpoints do)."""
        self.app = Starlette(
            routes=[
                Route("/token", self.token, methods=["POST"]),
                Route("/idp/token", self.idp_token, methods=["POST"]),
            ]
        )

    async def token(self, request: Request) -> Response:
        form = {k: str(v) for k, v in (await request.form()).items()}
        self.token_requests.append((dict(request.headers), form))
        if self.echo_errors:
            return JSONResponse({"error": "invalid_grant", "error_description": repr(form)}, 400)
        return JSONResponse({"access_token": ISSUED, "token_type": "Bearer", "expires_in": 600})

    async def idp_token(self, request: Request) -> Response:
        form = {k: str(v) for k, v in (await request.form()).items()}
        self.idp_requests.append(form)
        jag = f"idjag.for-{form.get('audience')}.sig"
        return JSONResponse({"access_token": jag, "issued_token_type": ID_JAG, "token_type": "N_A"})


@pytest.fixture
def endpoints() -> Iterator[tuple[Endpoints, str]]:
    found = Endpoints()
    thread = ServerThread(found.app).start()
    yield found, thread.url
    thread.stop()


def _credentials(secrets: dict[str, str] | None = None) -> VaultCredentials:
    return VaultCredentials(GivenSecrets(secrets or {}), MemoryCache(), allow_private_hosts=True)


async def test_a_workload_assertion_is_read_from_its_file_at_each_exchange(
    endpoints: tuple[Endpoints, str], tmp_path: Path
) -> None:
    found, base = endpoints
    projected = tmp_path / "token"
    projected.write_text("workload.assertion.one\n")
    entry = server(
        "wl",
        "https://mcp.example.com/mcp",
        type="oauth",
        grant="jwt_bearer",
        token_url=f"{base}/token",
        client_id="workload-7",
        assertion_ref=f"file:{projected}",
        scopes=["mcp:read"],
    )
    credentials, seen = _credentials(), Redactor()

    headers = await credentials.auth_headers(entry, requester("org", seen), trusted=True)
    projected.write_text("workload.assertion.two")  # the kubelet rotates it in place
    await credentials.invalidate(entry, requester("org"), refused=headers)
    await credentials.auth_headers(entry, requester("org", seen), trusted=True)

    assert headers == {"Authorization": f"Bearer {ISSUED}"}
    forms = [form for _, form in found.token_requests]
    assert [f["assertion"] for f in forms] == ["workload.assertion.one", "workload.assertion.two"]
    assert forms[0] == {
        "grant_type": JWT_BEARER,
        "assertion": "workload.assertion.one",
        "scope": "mcp:read",
        "client_id": "workload-7",  # client_auth none: the assertion is the proof, the id is named
    }
    assert all("authorization" not in h for h, _ in found.token_requests)
    assert seen.redact("workload.assertion.two") != "workload.assertion.two"  # redacted from the run


async def test_a_plugin_sent_in_a_request_may_not_read_the_gateways_files_or_environment(
    endpoints: tuple[Endpoints, str],
) -> None:
    found, base = endpoints
    for ref in ("file:/etc/hostname", "env:HOME"):
        entry = server(
            "wl", "https://mcp.example.com/mcp", type="oauth", grant="jwt_bearer",
            token_url=f"{base}/token", assertion_ref=ref,
        )  # fmt: skip
        with pytest.raises(PermissionDenied) as refused:
            await _credentials().authorize(entry, requester("org"), trusted=False)
        assert refused.value.code == "token_source_not_allowed"
        with pytest.raises(McpAuthError) as failed:
            await _credentials().auth_headers(entry, requester("org"), trusted=False)
        assert failed.value.code == "token_source_not_allowed"
    assert found.token_requests == []


async def test_an_unreadable_assertion_fails_the_call_without_a_request(
    endpoints: tuple[Endpoints, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    found, base = endpoints
    monkeypatch.delenv("HATCHWAY_TEST_NO_SUCH_TOKEN", raising=False)
    for ref in (f"file:{tmp_path / 'missing'}", "env:HATCHWAY_TEST_NO_SUCH_TOKEN"):
        entry = server(
            "wl", "https://mcp.example.com/mcp", type="oauth", grant="jwt_bearer",
            token_url=f"{base}/token", assertion_ref=ref,
        )  # fmt: skip
        with pytest.raises(McpAuthError) as failed:
            await _credentials().auth_headers(entry, requester("org"), trusted=True)
        assert failed.value.code == "oauth_assertion_unreadable"
    assert found.token_requests == []


def _enterprise(base: str, **auth: Any) -> Any:
    return server(
        "crm",
        "https://mcp.example.com/mcp",
        type="oauth",
        grant="identity_assertion",
        token_url=f"{base}/token",
        client_id="crm-client",
        secret_ref="secret.crm_secret",
        audience="https://as.example.com",
        idp_token_url=f"{base}/idp/token",
        idp_client_id="idp-client",
        subject_token_ref="secret.alice_id_token",
        **auth,
    )


async def test_the_identity_token_is_exchanged_for_an_id_jag_which_the_client_presents(
    endpoints: tuple[Endpoints, str],
) -> None:
    found, base = endpoints
    secrets = {"crm_secret": "s3cr3t/+", "alice_id_token": ID_TOKEN}

    headers = await _credentials(secrets).auth_headers(_enterprise(base), requester("org"), trusted=True)

    assert headers == {"Authorization": f"Bearer {ISSUED}"}
    assert found.idp_requests == [
        {
            "grant_type": TOKEN_EXCHANGE,
            "requested_token_type": ID_JAG,
            "audience": "https://as.example.com",
            "resource": "https://mcp.example.com/mcp",
            "subject_token": ID_TOKEN,
            "subject_token_type": "urn:ietf:params:oauth:token-type:id_token",
            "client_id": "idp-client",
        }
    ]
    (token_headers, form), = found.token_requests  # fmt: skip
    assert form == {"grant_type": JWT_BEARER, "assertion": "idjag.for-https://as.example.com.sig"}
    basic = base64.b64decode(token_headers["authorization"].removeprefix("Basic ")).decode()
    assert basic == "crm-client:s3cr3t%2F%2B"  # client_secret_basic, form-encoded (RFC 6749 §2.3.1)


async def test_an_endpoint_that_echoes_what_it_got_never_puts_a_token_in_the_error(
    endpoints: tuple[Endpoints, str],
) -> None:
    found, base = endpoints
    found.echo_errors = True
    secrets = {"crm_secret": "s3cr3t-value", "alice_id_token": ID_TOKEN}

    with pytest.raises(McpAuthError) as failed:
        await _credentials(secrets).auth_headers(_enterprise(base), requester("org"), trusted=True)

    message = failed.value.message
    assert "invalid_grant" in message and "HTTP 400" in message
    for value in ("s3cr3t-value", "idjag.for-https://as.example.com.sig", ".sig"):
        assert value not in message, message


async def test_a_probe_reaches_a_server_with_a_workload_assertion(
    endpoints: tuple[Endpoints, str], mcp_server_factory: Callable[..., McpTestServer], tmp_path: Path
) -> None:
    found, base = endpoints
    protected = mcp_server_factory("workload", required_bearer=ISSUED)
    (tmp_path / "token").write_text("workload.assertion")
    entry = server(
        "wl", protected.url, type="oauth", grant="jwt_bearer", token_url=f"{base}/token",
        assertion_ref=f"file:{tmp_path / 'token'}",
    )  # fmt: skip

    report = await probe_server(
        entry, _credentials(), probe_context(timeout=20), calls=[ToolCall("add", {"a": 1, "b": 2})]
    )

    _, outcome = report.results[0]
    assert not isinstance(outcome, ToolError) and outcome.text == "3"
    assert len(found.token_requests) == 1  # one token for the listing and the call
