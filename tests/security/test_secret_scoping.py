"""A secret's ``allowed_hosts`` binds scheme, host and port: a secret scoped to a host is sent by an
inline plugin only over https to that host on 443 (or to the exact origin listed), never over plain
http or to another port of the same host."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import httpx
import openai
import pytest

from tests.support.agent_loop import USER, inline, rounds, summarise
from tests.support.gateway import RunningGateway
from tests.support.mcp_servers import McpTestServer, StaticBearers
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import free_port


def test_a_secret_scoped_to_a_host_is_not_sent_over_http_or_to_another_port(
    mcp_server_factory: Callable[..., McpTestServer],
    gateway_factory: Callable[..., RunningGateway],
    llm: ScriptedLLM,
) -> None:
    key = f"sk-{uuid.uuid4().hex}"
    server = mcp_server_factory("search", token_verifier=StaticBearers(key))  # http://127.0.0.1:<port>
    gateway = gateway_factory(allow_private_mcp_urls=True)  # loopback allowed: only the scope decides
    auth = {"type": "bearer", "secret_ref": "secret.search_key"}
    plugin = inline({"mcp_servers": [{"id": "search", "url": server.url, "auth": auth}]})
    client = gateway.client(default_headers={"hatchway-mcp-plugin": plugin})
    origin = server.url.removesuffix("/mcp")
    port = int(origin.rsplit(":", 1)[1])

    for scope in (["127.0.0.1"], [f"127.0.0.1:{port}"], [f"http://127.0.0.1:{free_port()}"]):
        assert gateway.put_secret("search_key", key, allowed_hosts=scope).status_code in (200, 201)
        with pytest.raises(openai.PermissionDeniedError) as denied:
            client.chat.completions.create(model="gpt-4o", messages=USER)
        assert denied.value.code == "secret_host_not_allowed", scope
        assert f"http, port {port}" in denied.value.message
    assert server.requests == [] and llm.requests == []

    assert gateway.put_secret("search_key", key, allowed_hosts=[origin]).status_code == 200
    llm.handler = rounds(Reply(tool_calls=[("search__echo", {"text": "hi"})]), summarise)
    answer = client.chat.completions.create(model="gpt-4o", messages=USER)
    assert answer.choices[0].message.content == "Answer from: echo:hi"
    assert set(server.bearers()) == {key}


def test_allowed_hosts_take_a_host_a_host_and_port_or_an_origin(gateway_factory) -> None:
    gateway = gateway_factory()
    stored = gateway.put_secret(
        "k", "v", allowed_hosts=["MCP.example.com", "mcp.example.com:8443", "HTTP://10.0.0.5:8080"]
    )
    assert stored.json()["allowed_hosts"] == [
        "mcp.example.com",
        "https://mcp.example.com:8443",
        "http://10.0.0.5:8080",
    ]
    for bad in ("https://mcp.example.com/path", "ftp://mcp.example.com", "mcp.example.com:99999"):
        response = httpx.put(
            f"{gateway.url}/v1/secrets/k",
            json={"value": "v", "allowed_hosts": [bad]},
            headers={"authorization": f"Bearer {gateway.key}"},
        )
        assert response.status_code == 400 and response.json()["error"]["param"] == "allowed_hosts[0]", bad
