"""Peers' 2026 advisories as regression tests: each test names the class of flaw a peer gateway
shipped, and shows Hatchway does not have it — over real HTTP, with real processes and clients.

- LiteLLM CVE-2026-42271: an MCP stdio server started through an HTTP route.
- ContextForge #5601: SSRF through a tenant-supplied OAuth token URL.
- ContextForge #4737: an API key's scope not enforced on a route.
- ContextForge #6968: a cache shared across tenants.
- LiteLLM CVE-2026-47101: a route grant (a wildcard) reaching admin routes.
- Kuadrant GHSA-g53w-w6mj-hrpp: a default shared secret that bypasses authentication.
- ContextForge #6443: a remote ``$ref`` fetched from a tool's schema.
"""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import httpx
import httpx2
import openai
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from pydantic import Field

from tests.api.test_mcp_endpoint_oauth import ScriptedIdp, _gateway
from tests.support.agent_loop import USER, inline, rounds, summarise, write_plugin
from tests.support.contas import RunningContas
from tests.support.gateway import RunningGateway
from tests.support.mcp_endpoints import UPSTREAM_TOKEN, calc_endpoint
from tests.support.mcp_rpc import rpc
from tests.support.mcp_servers import McpTestServer
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import connections


def _status(call: Callable[[], Any]) -> tuple[int, str | None]:
    try:
        call()
    except openai.APIStatusError as exc:
        body = exc.body if isinstance(exc.body, dict) else {}
        return exc.status_code, body.get("code")
    return 200, None


def test_litellm_cve_2026_42271_no_stdio_server_is_started_through_any_http_route(
    gateway: RunningGateway, llm: ScriptedLLM, tmp_path: Path
) -> None:
    """A key holder's inline plugin naming a command is refused on every route that takes a plugin
    (Chat Completions, Responses, Messages), before anything runs: the command's mark never appears."""
    mark = tmp_path / f"pwned-{uuid.uuid4().hex}"
    stdio = inline({"mcp_servers": [{"id": "x", "command": "touch", "args": [str(mark)]}]})
    headers = {"hatchway-mcp-plugin": stdio}
    client = gateway.client(default_headers=headers)
    outcomes = {
        "chat": _status(lambda: client.chat.completions.create(model="gpt-4o", messages=USER)),
        "responses": _status(lambda: client.responses.create(model="gpt-4o", input="hi")),
    }
    messages = httpx.post(
        f"{gateway.url}/v1/messages",
        json={"model": "gpt-4o", "max_tokens": 16, "messages": USER},
        headers={"x-api-key": gateway.key, "anthropic-version": "2023-06-01", **headers},
    )
    outcomes["messages"] = (messages.status_code, messages.json().get("error", {}).get("type"))
    assert outcomes["chat"] == (403, "egress_denied") and outcomes["responses"] == (403, "egress_denied")
    assert outcomes["messages"][0] == 403, messages.text
    assert not mark.exists() and llm.requests == []


def test_contextforge_5601_no_ssrf_through_a_tenant_supplied_token_url(
    gateway: RunningGateway, llm: ScriptedLLM, listener: socket.socket
) -> None:
    port = listener.getsockname()[1]
    auth = {
        "type": "oauth",
        "token_url": f"https://127.0.0.1:{port}/token",
        "client_id": "c",
        "secret_ref": "secret.idp",
    }
    plugin = inline({"mcp_servers": [{"id": "s", "url": "https://93.184.216.34/mcp", "auth": auth}]})
    client = gateway.client(default_headers={"hatchway-mcp-plugin": plugin})
    assert _status(lambda: client.chat.completions.create(model="gpt-4o", messages=USER)) == (
        403,
        "egress_denied",
    )
    assert connections(listener) == 0 and llm.requests == []


def _rpc(url: str, key: str, method: str, params: dict[str, Any] | None = None) -> httpx.Response:
    """One stateless 2026-07-28 request (``tests/api/test_mcp_endpoint_attacks.py``'s ``rpc``)."""
    name = str((params or {}).get("name")) if method == "tools/call" else None
    return rpc(url, key, method, params, name=name)[0]


def test_contextforge_4737_a_keys_scope_is_enforced_on_every_method_of_the_route(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory: Any, tmp_path: Path
) -> None:
    """An endpoint open to one organisation: another organisation's valid key is refused on every
    method — listing, calling, resources, prompts, the session's DELETE — not only on tools/call."""
    upstream, gateway = calc_endpoint(
        mcp_server_factory,
        gateway_factory,
        tmp_path,
        organisations=["acme"],
        resources=True,
        prompts=True,
    )
    acme = gateway.new_org("acme")
    assert gateway.put_secret("calc_token", UPSTREAM_TOKEN, key=acme.key).status_code == 201
    url = f"{gateway.url}/mcp/tools"
    methods = {
        "tools/list": {},
        "tools/call": {"name": "calc__add", "arguments": {"a": 1, "b": 2}},
        "resources/list": {},
        "prompts/list": {},
    }
    outsider = {m: _rpc(url, gateway.key, m, p).status_code for m, p in methods.items()}
    deleted = httpx.delete(url, headers={"authorization": f"Bearer {gateway.key}", "mcp-session-id": "x"})
    assert outsider == dict.fromkeys(methods, 403) and deleted.status_code == 403
    assert _rpc(url, acme.key, "tools/list").status_code == 200  # the organisation it is for
    assert upstream.tool_calls("add") == 0


def test_contextforge_6968_no_cache_is_shared_across_tenants(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory: Any, tmp_path: Path
) -> None:
    """The tool-result cache on: one organisation's result is never another's. The second
    organisation holds a wrong upstream token, so a result served to it can only be the first's."""
    _upstream, gateway = calc_endpoint(
        mcp_server_factory, gateway_factory, tmp_path, agent={"tool_cache_ttl_seconds": 300}
    )
    other = gateway.new_org()
    assert gateway.put_secret("calc_token", "not-the-token", key=other.key).status_code == 201

    async def echo(key: str) -> Any:
        http = httpx2.AsyncClient(headers={"authorization": f"Bearer {key}"}, timeout=30)
        async with Client(streamable_http_client(f"{gateway.url}/mcp/tools", http_client=http)) as client:  # type: ignore[arg-type]
            return await client.call_tool("calc__echo", {"text": "private to acme"})

    mine = asyncio.run(echo(gateway.key))
    assert not mine.is_error and mine.content[0].text == "echo:private to acme"
    theirs = asyncio.run(echo(other.key))
    assert theirs.is_error and "private to acme" not in str(theirs.content)  # refused upstream, not cached


def test_litellm_cve_2026_47101_an_mcp_grant_reaches_no_admin_route(
    contas: RunningContas, gateway_factory: Any, tmp_path: Path
) -> None:
    """A token the endpoint's authorization server grants for ``/mcp/contas`` (the widest scope the
    endpoint knows) authenticates that endpoint only: never the gateway's own routes."""
    idp = ScriptedIdp()
    idp.thread.start()
    try:
        gateway, _acme = _gateway(gateway_factory, contas, tmp_path, {"jwks_url": f"{idp.thread.url}/jwks"})
        url = f"{gateway.url}/mcp/contas"
        token = idp.token("alice", url, scope="mcp:tools *")
        assert _rpc(url, token, "tools/list").status_code == 200  # good where it was granted
        bearer = {"authorization": f"Bearer {token}"}
        admin = {
            "GET /v1/secrets": httpx.get(f"{gateway.url}/v1/secrets", headers=bearer),
            "PUT /v1/secrets/x": httpx.put(
                f"{gateway.url}/v1/secrets/x", json={"value": "v"}, headers=bearer
            ),
            "GET /v1/logs": httpx.get(f"{gateway.url}/v1/logs", headers=bearer),
            "GET /v1/usage": httpx.get(f"{gateway.url}/v1/usage", headers=bearer),
            "GET /v1/operations": httpx.get(f"{gateway.url}/v1/operations", headers=bearer),
            "GET /v1/connections": httpx.get(f"{gateway.url}/v1/connections", headers=bearer),
            "POST /v1/chat/completions": httpx.post(
                f"{gateway.url}/v1/chat/completions",
                json={"model": "gpt-4o", "messages": USER},
                headers=bearer,
            ),
        }
        assert {route: r.status_code for route, r in admin.items()} == dict.fromkeys(admin, 401)
    finally:
        idp.thread.stop()


@pytest.mark.parametrize(
    "secret",
    ["sk-1234", "hatchway", "changeme", "admin", "secret", "master", "local", "test", "hw-", "Bearer"],
)
def test_kuadrant_ghsa_g53w_w6mj_hrpp_no_default_secret_authenticates(
    gateway: RunningGateway, secret: str
) -> None:
    """No key, token or secret ships with the gateway: the usual defaults open nothing."""
    for route in ("/v1/models", "/v1/secrets", "/v1/logs", "/mcp/anything"):
        response = httpx.get(f"{gateway.url}{route}", headers={"authorization": f"Bearer {secret}"})
        assert response.status_code in (401, 404), (route, response.status_code)
        assert response.status_code == 401 or route.startswith("/mcp/")


def test_kuadrant_ghsa_g53w_w6mj_hrpp_the_local_master_key_is_drawn_not_shipped(tmp_path: Path) -> None:
    """``make run``'s embedded default generates its master key: two installs never share one."""
    from hatchway.vault import load_master_key

    first = load_master_key(tmp_path / "a.key", env={})
    second = load_master_key(tmp_path / "b.key", env={})
    assert first.key != second.key and len(first.key) >= 32


def test_contextforge_6443_no_remote_ref_is_fetched_from_a_tool_schema(
    mcp_server_factory: Callable[..., McpTestServer],
    gateway_factory: Any,
    tmp_path: Path,
    llm: ScriptedLLM,
    listener: socket.socket,
) -> None:
    """A server lists a tool whose input schema points at a remote ``$ref``: listed to the model and
    to an endpoint's client, and called, the reference is never fetched."""
    port = listener.getsockname()[1]
    upstream = mcp_server_factory("refs")
    remote = {"$ref": f"http://127.0.0.1:{port}/schema.json"}

    def lookup(query: str) -> str:
        return f"found {query}"

    # The annotation built here, with the listener's address (postponed annotations are strings).
    lookup.__annotations__ = {"query": Annotated[str, Field(json_schema_extra=remote)], "return": str}
    upstream.mcp.tool(description="A tool whose schema names a remote definition.")(lookup)
    plugin = write_plugin(tmp_path, "refs", {"mcp_servers": [{"id": "refs", "url": upstream.url}]})
    gateway: RunningGateway = gateway_factory(
        allow_private_mcp_urls=True,
        agents=[{"name": "refs", "model": "gpt-4o", "plugin": plugin}],
        mcp_endpoints=[{"name": "refs", "agent": "refs"}],
    )
    llm.handler = rounds(Reply(tool_calls=[("refs__lookup", {"query": "x"})]), summarise)
    answer = gateway.client().chat.completions.create(model="agent:refs", messages=USER)
    assert "found x" in (answer.choices[0].message.content or "")
    listed = _rpc(f"{gateway.url}/mcp/refs", gateway.key, "tools/list")
    assert listed.status_code == 200 and "refs__lookup" in listed.text and "schema.json" in listed.text
    assert connections(listener) == 0
