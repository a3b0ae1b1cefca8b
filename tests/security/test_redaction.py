"""No secret leaves, in any encoding (issue 17): each leak found by the attack run, end to end.

Every test drives ``hatchway serve`` over loopback with the official ``openai`` client (or httpx),
MCP servers built with the official SDK, the scripted upstream and a real TLS token endpoint, and
hands everything it sees — answers, errors, streamed events, run records, stored operations and
responses, the upstream's requests, the database and every log line — to the leak scanner, which
looks for each secret raw, JSON-escaped, URL-encoded and in base64 (``tests/support/leak_scanner.py``).

The secrets carry ``"`` and ``\\``, so the gateway's own JSON escapes them; the raw value alone is
then nowhere to be found, which is how they leaked.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus, urlencode

import httpx
import openai
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from mcp.server.mcpserver import Context

from hatchway.store.orgs import OrgStore
from hatchway.vault import SYSTEM_ORG
from tests.support.agent_loop import USER, log_of, rounds, rule_for, summarise, tool_messages, tool_steps
from tests.support.backends import REDIS_URL
from tests.support.gateway import RunningGateway
from tests.support.leak_scanner import SecretScanner, put_secret
from tests.support.mcp_servers import McpTestServer, StaticBearers
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import wait_until
from tests.support.token_endpoint import TokenEndpoint

REDACTED = "[REDACTED]"
CLIENT_ID = "hatchway agent+1"


def quoted_secret(prefix: str) -> str:
    """A unique secret with the characters JSON escapes (it still fits in an HTTP header)."""
    return f'{prefix}-"q"\\b/{uuid.uuid4().hex}'


def headers_of(ctx: Context) -> dict[str, str]:
    return dict(ctx.headers or {})


def vault_server(factory: Callable[..., McpTestServer], secret: str) -> McpTestServer:
    """An SDK MCP server that accepts only ``secret`` as its bearer, with tools that echo the
    Authorization header back inside JSON: as a structured result, and as JSON inside JSON."""
    server = factory("vault", token_verifier=StaticBearers(secret))

    @server.mcp.tool(description="Who am I (structured).")
    def whoami(ctx: Context) -> dict[str, str]:
        return {"you_sent": headers_of(ctx).get("authorization", "")}

    @server.mcp.tool(description="Who am I (JSON in a JSON string).")
    def whoami_nested(ctx: Context) -> dict[str, str]:
        return {"payload": json.dumps({"auth": headers_of(ctx).get("authorization", "")})}

    @server.mcp.tool(description="Rotate an account's key (an operation's primary tool).")
    def rotate_key(account: str, ctx: Context) -> dict[str, Any]:
        echo = headers_of(ctx).get("authorization", "")
        return {
            "results": [
                {"id": account, "success": True, "message": f"rotated; caller {echo}"},
                {"id": "B2", "success": False, "error": f"caller {echo} may not rotate B2"},
            ]
        }

    return server


def vault_plugin(server: McpTestServer, **agent: Any) -> dict[str, Any]:
    plugin: dict[str, Any] = {
        "mcp_servers": [
            {
                "id": "vault",
                "url": server.url,
                "auth": {"type": "bearer", "secret_ref": "secret.vault_key"},
                "max_retries": 0,
            }
        ]
    }
    return plugin | ({"agent": agent} if agent else {})


def chat(gateway: RunningGateway, scanner: SecretScanner, **headers: str) -> tuple[str, dict[str, Any]]:
    """One chat completion: its answer and run record, both handed to the scanner."""
    raw = gateway.client(default_headers=headers).chat.completions.with_raw_response.create(
        model="gpt-4o", messages=USER
    )
    scanner.observe("chat response", raw.text)
    record = log_of(gateway, raw.headers["x-hatchway-request-id"])
    scanner.observe("run record", json.dumps(record))
    return raw.parse().choices[0].message.content or "", record


def observe_upstream(llm: ScriptedLLM, scanner: SecretScanner) -> None:
    """What the gateway sent the upstream (the model's input), as the upstream received it."""
    scanner.observe("upstream requests", json.dumps(llm.requests))


def observe_logs(gateway: RunningGateway, scanner: SecretScanner) -> list[dict[str, Any]]:
    response = httpx.get(f"{gateway.url}/v1/logs", headers={"authorization": f"Bearer {gateway.key}"})
    scanner.observe("GET /v1/logs", response.text)
    assert response.status_code == 200, response.text
    return response.json()["data"]


# -- a tool's echo, inside JSON ---------------------------------------------------------------------


def test_a_secret_echoed_inside_json_reaches_neither_the_model_nor_the_run_log_nor_the_cache(
    secret_scanner: SecretScanner,
    mcp_server_factory: Callable[..., McpTestServer],
    gateway_factory: Callable[..., RunningGateway],
    llm: ScriptedLLM,
    tmp_path: Path,
) -> None:
    secret = quoted_secret("sk-vault")
    secret_scanner.watch(secret)
    server = vault_server(mcp_server_factory, secret)
    plugin = vault_plugin(server, tool_cache_ttl_seconds=60)
    cache = {"redis_url": REDIS_URL} if REDIS_URL else {}  # the in-memory cache without Redis
    gateway = gateway_factory(**cache, **rule_for(tmp_path, plugin))
    secret_scanner.watch_database(gateway.settings.database_url)
    if REDIS_URL:
        secret_scanner.watch_redis(REDIS_URL)
    put_secret(gateway, gateway.key, "vault_key", secret, secret_scanner)
    llm.handler = rounds(Reply(tool_calls=[("vault__whoami", {}), ("vault__whoami_nested", {})]), summarise)

    first, record = chat(gateway, secret_scanner)
    second, cached = chat(gateway, secret_scanner)  # both results now come from the tool-result cache
    observe_upstream(llm, secret_scanner)

    structured, nested = (json.loads(m) for m in tool_messages(llm.requests[-1]))
    assert structured == {"you_sent": f"Bearer {REDACTED}"}, "the model reads valid JSON, scrubbed"
    assert json.loads(nested["payload"]) == {"auth": f"Bearer {REDACTED}"}
    assert first == second and first.count(REDACTED) == 2
    steps = tool_steps(record)
    assert [s["outcome"] for s in steps] == ["ok", "ok"] and all(
        REDACTED in s["result_preview"] for s in steps
    )
    assert [s["cached"] for s in tool_steps(cached)] == [True, True]
    assert set(server.bearers()) == {secret}, "the server itself got the real secret"


def test_a_secret_echoed_inside_json_stays_out_of_responses_output_items_and_events(
    secret_scanner: SecretScanner,
    mcp_server_factory: Callable[..., McpTestServer],
    gateway_factory: Callable[..., RunningGateway],
    llm: ScriptedLLM,
    tmp_path: Path,
) -> None:
    secret = quoted_secret("sk-resp")
    secret_scanner.watch(secret)
    server = vault_server(mcp_server_factory, secret)
    gateway = gateway_factory(**rule_for(tmp_path, vault_plugin(server)))
    secret_scanner.watch_database(gateway.settings.database_url)
    put_secret(gateway, gateway.key, "vault_key", secret, secret_scanner)
    llm.handler = rounds(Reply(tool_calls=[("vault__whoami", {})]), summarise)
    auth = {"authorization": f"Bearer {gateway.key}"}

    raw = gateway.client().responses.with_raw_response.create(model="gpt-4o", input="go")
    secret_scanner.observe("response", raw.text)
    response = raw.parse()
    with httpx.stream(
        "POST",
        f"{gateway.url}/v1/responses",
        json={"model": "gpt-4o", "input": "go", "stream": True},
        headers=auth,
        timeout=30,
    ) as stream:
        events = stream.read().decode()
    secret_scanner.observe("streamed events", events)
    stored = httpx.get(f"{gateway.url}/v1/responses/{response.id}", headers=auth)
    items = httpx.get(f"{gateway.url}/v1/responses/{response.id}/input_items", headers=auth)
    secret_scanner.observe("GET response", stored.text)
    secret_scanner.observe("GET input_items", items.text)
    observe_logs(gateway, secret_scanner)
    observe_upstream(llm, secret_scanner)

    [call] = [item for item in stored.json()["output"] if item["type"] == "mcp_call"]
    assert json.loads(call["output"]) == {"you_sent": f"Bearer {REDACTED}"}
    assert REDACTED in response.output_text and "response.completed" in events
    assert events.count(REDACTED) >= 1


def test_a_secret_echoed_by_an_operation_is_not_stored_with_its_result(
    secret_scanner: SecretScanner,
    mcp_server_factory: Callable[..., McpTestServer],
    gateway_factory: Callable[..., RunningGateway],
    llm: ScriptedLLM,
    tmp_path: Path,
) -> None:
    secret = quoted_secret("sk-op")
    secret_scanner.watch(secret)
    server = vault_server(mcp_server_factory, secret)
    gateway = gateway_factory(agents=[rotation_agent(tmp_path, server)])
    secret_scanner.watch_database(gateway.settings.database_url)
    put_secret(gateway, gateway.key, "vault_key", secret, secret_scanner)
    llm.handler = lambda body: (
        summarise(body)
        if body["messages"][-1]["role"] == "tool"
        else Reply(tool_calls=[("rotate_key", {"account": "A1"})])
    )
    client = gateway.client(default_headers={"hatchway-session": "conv-1", "x-on-behalf-of": "ana"})
    ask = [{"role": "user", "content": "rotate A1"}]

    asked = client.chat.completions.with_raw_response.create(model="agent:vault", messages=ask)
    op_id = asked.headers["x-hatchway-operation-id"]
    question = asked.parse().choices[0].message.content or ""
    yes = [*ask, {"role": "assistant", "content": question}, {"role": "user", "content": "sim"}]
    done = client.chat.completions.with_raw_response.create(model="agent:vault", messages=yes)
    secret_scanner.observe("chat answer", done.text)
    operation = httpx.get(
        f"{gateway.url}/v1/operations/{op_id}", headers={"authorization": f"Bearer {gateway.key}"}
    )
    secret_scanner.observe("GET operation", operation.text)
    observe_logs(gateway, secret_scanner)
    observe_upstream(llm, secret_scanner)

    stored = operation.json()
    assert stored["status"] == "COMPLETED", stored
    rotated, refused = stored["result"]["results"]
    assert rotated["message"] == f"rotated; caller Bearer {REDACTED}"
    assert stored["items"][1]["error"] == refused["error"] == f"caller Bearer {REDACTED} may not rotate B2"
    assert stored["verdict"]["status"] == "PARTIAL_SUCCESS"


def rotation_agent(tmp_path: Path, server: McpTestServer) -> dict[str, Any]:
    """An agent ``vault`` whose ``rotate_key`` is a transactional operation asking for confirmation."""
    directory = tmp_path / "agent-vault"
    directory.mkdir()
    files = {
        "plugin.yaml": {"version": "1", **vault_plugin(server)},
        "tools.yaml": {
            "tools": {
                "rotate_key": {
                    "description": "Rotate an account's key.",
                    "mcp_server": "vault",
                    "enabled": True,
                    "tool_type": "action",
                    "args_schema": {"account": {"type": "string"}},
                }
            }
        },
        "tool_policies.yaml": {
            "version": 1,
            "tool_policies": {
                "rotate_key": {
                    "operation_type": "transactional",
                    "require_confirmation": True,
                    "requires": ["account"],
                }
            },
        },
    }
    for name, content in files.items():
        (directory / name).write_text(yaml.safe_dump(content))
    return {
        "name": "vault",
        "model": "gpt-4o",
        "plugin": str(directory / "plugin.yaml"),
        "tools": str(directory / "tools.yaml"),
        "tool_policies": str(directory / "tool_policies.yaml"),
    }


# -- every encoding ----------------------------------------------------------------------------------

CLIENT_SECRET = f'cs-"é"\\/+= &{uuid.uuid4().hex}'
"""An OAuth client secret: it travels as Basic (form-encoded first) or in a form, so it may hold
anything — non-ASCII too, which ``json.dumps`` escapes as ``\\u00e9`` by default."""

ENCODINGS: dict[str, Callable[[str], str]] = {
    "json.dumps": lambda s: json.dumps({"secret": s}),
    "json.dumps(ensure_ascii=False)": lambda s: json.dumps({"secret": s}, ensure_ascii=False),
    "JSON inside JSON": lambda s: json.dumps({"inner": json.dumps({"secret": s})}),
    "base64": lambda s: base64.b64encode(s.encode()).decode(),
    "base64url, unpadded": lambda s: base64.urlsafe_b64encode(s.encode()).decode().rstrip("="),
    "HTTP Basic of user:secret": lambda s: "Basic " + base64.b64encode(f"user:{s}".encode()).decode(),
    "HTTP Basic as RFC 6749 sends it": lambda s: (
        "Basic " + base64.b64encode(f"{quote_plus(CLIENT_ID)}:{quote_plus(s)}".encode()).decode()
    ),
    "quote": lambda s: f"https://api.example.com/?key={quote(s, safe='')}",
    "quote_plus (a form)": lambda s: urlencode({"client_secret": s}),
}


@pytest.fixture
def idp(
    secret_scanner: SecretScanner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[TokenEndpoint]:
    """A TLS token endpoint the gateways started after it trust (``SSL_CERT_FILE``)."""
    endpoint = TokenEndpoint(tmp_path).start()
    ca = tmp_path / "idp-ca.pem"
    endpoint.ca.cert_pem.write_to_path(str(ca))
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    yield endpoint
    endpoint.stop()
    secret_scanner.watch(*endpoint.issued)


def oauth_plugin(idp: TokenEndpoint, server: McpTestServer, **auth: Any) -> dict[str, Any]:
    oauth = {"type": "oauth", "token_url": idp.url, "client_id": CLIENT_ID, "secret_ref": "secret.client"}
    oauth = {k: v for k, v in (oauth | auth).items() if v is not None}
    return {"mcp_servers": [{"id": "billing", "url": server.url, "auth": oauth, "max_retries": 0}]}


@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_a_secret_a_tool_encodes_is_redacted_in_that_encoding(
    encoding: str,
    secret_scanner: SecretScanner,
    idp: TokenEndpoint,
    mcp_server_factory: Callable[..., McpTestServer],
    gateway_factory: Callable[..., RunningGateway],
    llm: ScriptedLLM,
    tmp_path: Path,
) -> None:
    secret_scanner.watch(CLIENT_SECRET)
    server = mcp_server_factory("billing")

    @server.mcp.tool(description="Show how this server was configured.")
    def config() -> str:
        return f"configured with {ENCODINGS[encoding](CLIENT_SECRET)} (debug)"

    gateway = gateway_factory(**rule_for(tmp_path, oauth_plugin(idp, server)))
    secret_scanner.watch_database(gateway.settings.database_url)
    put_secret(gateway, gateway.key, "client", CLIENT_SECRET, secret_scanner)
    llm.handler = rounds(Reply(tool_calls=[("billing__config", {})]), summarise)

    answer, record = chat(gateway, secret_scanner)
    observe_upstream(llm, secret_scanner)

    [seen] = tool_messages(llm.requests[-1])
    assert seen.startswith("configured with ") and REDACTED in seen, seen
    [step] = tool_steps(record)
    assert step["outcome"] == "ok" and REDACTED in step["result_preview"]
    assert REDACTED in answer


# -- the provider's key, echoed by the upstream ------------------------------------------------------

PROVIDER_ENV = "HATCHWAY_TEST_UPSTREAM_KEY"


def provider_gateway(
    source: str,
    key: str,
    gateway_factory: Callable[..., RunningGateway],
    llm: ScriptedLLM,
    monkeypatch: pytest.MonkeyPatch,
) -> RunningGateway:
    """A gateway whose provider key is ``key``, given as a literal, ``env:NAME`` or ``secret.<name>``."""
    api_key = {"literal": key, "env": f"env:{PROVIDER_ENV}", "vault": "secret.upstream_key"}[source]
    monkeypatch.setenv(PROVIDER_ENV, key)
    gateway = gateway_factory(providers=[{"id": "upstream", "base_url": llm.base_url, "api_key": api_key}])
    if source == "vault":
        gw = gateway.gateway
        system = gateway.server.call(OrgStore(gw.db).create_org(SYSTEM_ORG))
        gateway.server.call(gw.vault.put(system.id, "upstream_key", key))
    return gateway


def echoed_authorization(llm: ScriptedLLM) -> str:
    """The Authorization header of the request the upstream is answering."""
    return llm.headers[-1]["authorization"]


@pytest.mark.parametrize("source", ["literal", "env", "vault"])
def test_a_provider_key_echoed_in_a_4xx_reaches_neither_the_client_nor_the_logs(
    source: str,
    secret_scanner: SecretScanner,
    gateway_factory: Callable[..., RunningGateway],
    llm: ScriptedLLM,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = quoted_secret("sk-upstream")
    secret_scanner.watch(key)
    gateway = provider_gateway(source, key, gateway_factory, llm, monkeypatch)
    secret_scanner.watch_database(gateway.settings.database_url)
    llm.handler = lambda _: Reply(
        status=401, error=f"Incorrect API key provided: {echoed_authorization(llm)}. Find yours at …"
    )

    with pytest.raises(openai.AuthenticationError) as refused:
        gateway.client().chat.completions.create(model="gpt-4o", messages=USER)
    secret_scanner.observe("401 body", refused.value.response.text)
    [record] = observe_logs(gateway, secret_scanner)

    assert llm.headers[-1]["authorization"] == f"Bearer {key}", "the upstream did get the key"
    error = refused.value.response.json()["error"]
    assert error["message"] == f"Incorrect API key provided: Bearer {REDACTED}. Find yours at …"
    assert record["http_status"] == 401 and REDACTED in record["error"]


@pytest.mark.parametrize(("body", "stream"), [("json", False), ("text", False), ("json", True)])
def test_a_provider_key_echoed_in_a_5xx_reaches_neither_the_client_nor_the_logs(
    body: str,
    stream: bool,
    secret_scanner: SecretScanner,
    gateway_factory: Callable[..., RunningGateway],
    llm: ScriptedLLM,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = quoted_secret("sk-upstream")
    secret_scanner.watch(key)
    gateway = provider_gateway("literal", key, gateway_factory, llm, monkeypatch)

    def crash(_: dict[str, Any]) -> Reply:
        echo = f"upstream crashed handling Authorization: {echoed_authorization(llm)}"
        if body == "text":
            return Reply(status=500, raw_body=echo.encode())
        return Reply(status=500, error=echo)

    llm.handler = crash
    response = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": "gpt-4o", "messages": USER, "stream": stream},
        headers={"authorization": f"Bearer {gateway.key}"},
        timeout=30,
    )
    secret_scanner.observe("502 body", response.text)
    [record] = wait_until(lambda: observe_logs(gateway, secret_scanner), message="the run record")

    assert response.status_code == 502, response.text
    assert f"Authorization: Bearer {REDACTED}" in response.json()["error"]["message"]
    assert record["http_status"] == 502 and f"Bearer {REDACTED}" in record["error"]


# -- the token endpoint, echoing the client's credentials --------------------------------------------


def signing_key() -> tuple[str, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private, public.decode()


@pytest.mark.parametrize("client_auth", ["client_secret_basic", "client_secret_post", "private_key_jwt"])
def test_a_token_endpoint_echoing_the_client_credentials_leaks_none_of_them(
    client_auth: str,
    secret_scanner: SecretScanner,
    idp: TokenEndpoint,
    mcp_server_factory: Callable[..., McpTestServer],
    gateway_factory: Callable[..., RunningGateway],
    llm: ScriptedLLM,
    tmp_path: Path,
) -> None:
    idp.behaviour = "echo"
    server = mcp_server_factory("billing")
    auth: dict[str, Any] = {"client_auth": client_auth}
    secret = CLIENT_SECRET
    if client_auth == "private_key_jwt":
        secret, idp.public_key = signing_key()
        idp.client_id = CLIENT_ID
        auth |= {"private_key_ref": "secret.client", "secret_ref": None}
    secret_scanner.watch(secret)
    gateway = gateway_factory(**rule_for(tmp_path, oauth_plugin(idp, server, **auth)))
    secret_scanner.watch_database(gateway.settings.database_url)
    put_secret(gateway, gateway.key, "client", secret, secret_scanner)
    llm.reply("no tools today")

    answer, record = chat(gateway, secret_scanner)
    for assertion in (r.form["client_assertion"] for r in idp.requests if "client_assertion" in r.form):
        secret_scanner.watch(assertion, assertion.rsplit(".", 1)[1])  # and its signature alone

    assert idp.requests and server.requests == [], "the exchange failed; nothing went unauthenticated"
    [listing] = [s for s in record["steps"] if s["type"] == "list_tools"]
    assert "answered HTTP 401 (invalid_client: " in listing["error"] and REDACTED in listing["error"]
    assert answer == "no tools today"
