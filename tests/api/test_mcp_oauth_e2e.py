"""OAuth client_credentials end to end: the official openai client → Hatchway → an MCP server built
with the official SDK that checks bearer tokens (``MCPServer(token_verifier=…)``), tokens minted by a
real TLS token endpoint (CA made in the test with trustme, trusted by the gateway through
``SSL_CERT_FILE``, as a deployment with a private CA would). The client secret goes in through
``PUT /v1/secrets``; the plugin comes from hatchway.yaml (a routing rule).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.support.agent_loop import USER, log_of, rounds, rule_for, summarise, tool_messages, tool_steps
from tests.support.backends import REDIS_URL
from tests.support.gateway import RunningGateway
from tests.support.leak_scanner import SecretScanner, put_secret
from tests.support.mcp_servers import McpTestServer
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import wait_until
from tests.support.token_endpoint import IssuedTokens, TokenEndpoint

CLIENT_ID = "hatchway agent+1"  # a space and a '+': Basic credentials must be form-encoded
SECRET = "billing_client_secret"
CLIENT_SECRET = "cs:billing/+=d41d8cd98f00b204e9800998ecf8427e"


@pytest.fixture
def idp(
    secret_scanner: SecretScanner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[TokenEndpoint]:
    """The identity provider's token endpoint; the gateways started after it trust its CA."""
    endpoint = TokenEndpoint(tmp_path).start()
    ca = tmp_path / "idp-ca.pem"
    endpoint.ca.cert_pem.write_to_path(str(ca))
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    secret_scanner.watch(CLIENT_SECRET)
    yield endpoint
    endpoint.stop()
    secret_scanner.watch(*endpoint.issued)


@pytest.fixture
def billing(idp: TokenEndpoint, mcp_server_factory: Callable[..., McpTestServer]) -> McpTestServer:
    """The MCP server: it accepts only live tokens of ``idp`` that carry the billing.read scope."""
    return mcp_server_factory("billing", token_verifier=IssuedTokens(idp), required_scopes=["billing.read"])


def oauth_gateway(
    gateway_factory: Callable[..., RunningGateway],
    tmp_path: Path,
    idp: TokenEndpoint,
    server: McpTestServer,
    secret_scanner: SecretScanner,
    redis_url: str | None = None,
    timeout_ms: int = 10_000,
    **auth: Any,
) -> RunningGateway:
    """A gateway whose routing rule binds ``server`` with oauth auth; the client secret is stored.
    ``timeout_ms`` bounds the token exchange and each call: short only where a hang is the point (a
    busy machine can take over a second on the happy path)."""
    plugin = {
        "mcp_servers": [
            {
                "id": "billing",
                "url": server.url,
                "auth": {
                    "type": "oauth",
                    "token_url": idp.url,
                    "client_id": CLIENT_ID,
                    "secret_ref": f"secret.{SECRET}",
                    "scopes": ["billing.read", "billing.write"],
                    **auth,
                },
                "tools": ["echo", "grow", "extra"],
                "timeout_ms": timeout_ms,
                "max_retries": 2,
            }
        ]
    }
    gateway = gateway_factory(redis_url=redis_url, **rule_for(tmp_path, plugin))
    secret_scanner.watch_database(gateway.settings.database_url)
    put_secret(gateway, gateway.key, SECRET, CLIENT_SECRET, secret_scanner)
    return gateway


def ask(gateway: RunningGateway, scanner: SecretScanner) -> tuple[str, dict[str, Any]]:
    """One chat completion; the answer and the stored run record (both handed to the scanner)."""
    raw = gateway.client().chat.completions.with_raw_response.create(model="gpt-4o", messages=USER)
    answer = raw.parse().choices[0].message.content or ""
    record = log_of(gateway, raw.headers["x-hatchway-request-id"])
    scanner.observe("chat answer", raw.text)
    scanner.observe("run record", json.dumps(record))
    return answer, record


def tool_error(body: dict[str, Any]) -> dict[str, Any]:
    [message] = tool_messages(body)
    return json.loads(message)["error"]


@pytest.mark.parametrize("method", ["client_secret_basic", "client_secret_post"])
def test_one_token_fetch_serves_parallel_calls_in_concurrent_requests(
    method: str,
    secret_scanner: SecretScanner,
    idp: TokenEndpoint,
    billing: McpTestServer,
    gateway_factory: Callable[..., RunningGateway],
    llm: ScriptedLLM,
    tmp_path: Path,
) -> None:
    gateway = oauth_gateway(
        gateway_factory, tmp_path, idp, billing, secret_scanner, token_endpoint_auth_method=method
    )
    llm.handler = rounds(
        Reply(tool_calls=[("billing__echo", {"text": f"call-{i}"}) for i in range(3)]), summarise
    )
    idp.gate.clear()  # hold the token until all three requests are under way

    with ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(ask, gateway, secret_scanner) for _ in range(3)]
        wait_until(lambda: idp.requests, message="the token request")
        idp.gate.set()
        answers = [future.result(timeout=30)[0] for future in futures]

    assert all(f"echo:call-{i}" in answer for answer in answers for i in range(3))
    [token_request] = idp.requests
    [token] = idp.issued
    if method == "client_secret_basic":
        assert token_request.basic_credentials() == (CLIENT_ID, CLIENT_SECRET)
        assert "client_secret" not in token_request.form
    else:
        assert token_request.basic_credentials() is None
        assert (token_request.form["client_id"], token_request.form["client_secret"]) == (
            CLIENT_ID,
            CLIENT_SECRET,
        )
    assert token_request.form["grant_type"] == "client_credentials"
    assert token_request.form["scope"] == "billing.read billing.write"
    assert billing.tool_calls("echo") == 9
    assert set(billing.bearers()) == {token}, "every request the MCP server saw carried the token"
    assert all(r.answered == 200 for r in billing.requests)


def test_a_revoked_token_is_replaced_once_and_a_second_401_is_an_error(
    secret_scanner: SecretScanner,
    idp: TokenEndpoint,
    billing: McpTestServer,
    gateway_factory: Callable[..., RunningGateway],
    llm: ScriptedLLM,
    tmp_path: Path,
) -> None:
    gateway = oauth_gateway(gateway_factory, tmp_path, idp, billing, secret_scanner)
    llm.handler = rounds(Reply(tool_calls=[("billing__echo", {"text": "a"})]), summarise)
    ask(gateway, secret_scanner)
    [first] = idp.issued

    idp.revoke_all()  # the identity provider revoked it; the gateway's cache still holds it
    llm.handler = rounds(
        Reply(tool_calls=[("billing__echo", {"text": f"p{i}"}) for i in range(4)]), summarise
    )
    seen = len(billing.requests)
    answer, record = ask(gateway, secret_scanner)

    assert all(f"echo:p{i}" in answer for i in range(4))
    assert len(idp.issued) == 2, "four calls refused at once share one new token"
    second = idp.issued[1]
    refused = [r for r in billing.requests[seen:] if r.answered == 401]
    assert refused and all(r.headers["authorization"] == f"Bearer {first}" for r in refused)
    accepted = [r for r in billing.requests[seen:] if r.answered == 200]
    assert len(accepted) == 4 and all(r.headers["authorization"] == f"Bearer {second}" for r in accepted)
    assert all(s["outcome"] == "ok" and s["retries"] == 0 for s in tool_steps(record))

    idp.revoke_new = True  # the server now refuses every token of this client
    idp.revoke_all()
    llm.handler = rounds(Reply(tool_calls=[("billing__echo", {"text": "b"})]), summarise)
    seen = len(billing.requests)
    answer, record = ask(gateway, secret_scanner)

    assert len(idp.issued) == 3, "one refetch after the first 401, none after the second"
    attempts = billing.requests[seen:]
    assert [r.answered for r in attempts] == [401, 401]
    error = tool_error(llm.requests[-1])
    assert error["code"] == "mcp_unauthorized" and "HTTP 401" in error["message"]
    [step] = tool_steps(record)
    assert step["outcome"] == "error" and step["error_code"] == "mcp_unauthorized"


@pytest.mark.parametrize(
    ("behaviour", "code", "fragment"),
    [
        ("status_500", "oauth_failed", "answered HTTP 500"),
        ("hang", "oauth_timeout", "did not answer within 1.5s"),
        ("oversized", "oauth_too_large", "sent a body over 64 KiB"),
    ],
)
def test_a_failed_token_exchange_is_a_tool_error_and_nothing_reaches_the_server(
    behaviour: str,
    code: str,
    fragment: str,
    secret_scanner: SecretScanner,
    idp: TokenEndpoint,
    billing: McpTestServer,
    gateway_factory: Callable[..., RunningGateway],
    llm: ScriptedLLM,
    tmp_path: Path,
) -> None:
    idp.expires_in = 1  # refreshed after half a second
    gateway = oauth_gateway(gateway_factory, tmp_path, idp, billing, secret_scanner, timeout_ms=1500)
    llm.reply("warm")  # lists the tools with a first token; the listing stays cached
    ask(gateway, secret_scanner)
    [first] = idp.issued
    wait_until(lambda: IssuedTokens(idp).expired(first), timeout=5, message="the first token to expire")

    idp.behaviour = behaviour
    llm.handler = rounds(Reply(tool_calls=[("billing__echo", {"text": "x"})]), summarise)
    seen = len(billing.requests)
    answer, record = ask(gateway, secret_scanner)

    assert billing.requests[seen:] == [], "no request went out without a token"
    assert None not in billing.bearers()
    assert len(idp.requests) == 2, "the failed exchange was not retried"
    error = tool_error(llm.requests[-1])
    assert error["code"] == code and fragment in error["message"]
    assert error["message"].startswith(f"MCP server 'billing': the OAuth token endpoint {idp.url}")
    [step] = tool_steps(record)
    assert step["outcome"] == "error" and step["retries"] == 0 and step["error_code"] == code
    assert "Answer from" in answer


def test_an_expired_token_is_refreshed_on_the_pooled_session_and_the_tools_stay(
    secret_scanner: SecretScanner,
    idp: TokenEndpoint,
    billing: McpTestServer,
    gateway_factory: Callable[..., RunningGateway],
    llm: ScriptedLLM,
    tmp_path: Path,
) -> None:
    idp.expires_in = 2  # the gateway renews it a second before it expires
    gateway = oauth_gateway(gateway_factory, tmp_path, idp, billing, secret_scanner)
    llm.handler = rounds(Reply(tool_calls=[("billing__echo", {"text": "one"})]), summarise)
    ask(gateway, secret_scanner)
    first = idp.issued[-1]
    wait_until(lambda: IssuedTokens(idp).expired(first), timeout=5, message="the token to expire")

    llm.handler = rounds(Reply(tool_calls=[("billing__grow", {})]), summarise)
    seen = len(billing.requests)
    answer, _ = ask(gateway, secret_scanner)

    assert "grown" in answer
    offered = {t["function"]["name"] for t in llm.requests[-1]["tools"]}
    assert offered == {"billing__echo", "billing__grow"}
    later = billing.requests[seen:]
    assert later and all(r.answered == 200 for r in later), "the expired token was never sent"
    assert first not in billing.bearers()[seen:]
    assert len(gateway.gateway.mcp_pool) == 1
    assert len(billing.calls_of("server/discover")) + len(billing.calls_of("initialize")) == 1

    # The server announced a new tool (over the session's own stream): it appears, listed with a
    # live token, and the old ones are still there.
    llm.handler = rounds(Reply(text="listing"))

    def offered_now() -> set[str]:
        ask(gateway, secret_scanner)
        return {t["function"]["name"] for t in llm.requests[-1]["tools"]}

    assert wait_until(lambda: "billing__extra" in offered_now(), timeout=10, interval=0.1)
    assert {"billing__echo", "billing__grow"} <= offered_now()
    assert all(r.answered == 200 for r in billing.requests[seen:])


@pytest.mark.skipif(not REDIS_URL, reason="Redis not configured: set HATCHWAY_TEST_REDIS_URL")
def test_replicas_sharing_redis_share_one_sealed_token(
    secret_scanner: SecretScanner,
    idp: TokenEndpoint,
    billing: McpTestServer,
    gateway_factory: Callable[..., RunningGateway],
    llm: ScriptedLLM,
    tmp_path: Path,
) -> None:
    import redis

    assert REDIS_URL is not None
    first = oauth_gateway(gateway_factory, tmp_path, idp, billing, secret_scanner, redis_url=REDIS_URL)
    # The second replica: its own process state, the same database, master key file and Redis.
    second = gateway_factory(redis_url=REDIS_URL, routing_rules=first.settings.model_dump()["routing_rules"])
    second.org = first.org
    assert second.settings.master_key_file == first.settings.master_key_file
    secret_scanner.watch_redis(REDIS_URL)
    llm.handler = rounds(Reply(tool_calls=[("billing__echo", {"text": "r"})]), summarise)

    assert "echo:r" in ask(first, secret_scanner)[0]
    [token] = idp.issued
    client = redis.Redis.from_url(REDIS_URL)
    try:
        [key] = client.keys(f"{first.settings.redis_prefix}mcp-oauth:{first.org.org_id}:*")
        raw = client.get(key)
    finally:
        client.close()
    assert raw is not None and token.encode() not in raw and token.encode().hex().encode() not in raw
    assert set(json.loads(raw)) == {"sealed", "refresh_at"}

    assert "echo:r" in ask(second, secret_scanner)[0]
    assert len(idp.requests) == 1, "the second replica opened the cached token instead of fetching one"
    assert billing.bearers() and set(billing.bearers()) == {token}
