"""Held: ``forward_headers`` can never carry the caller's credentials or steer the MCP request.

The attack: a plugin lists ``authorization`` (to hand the caller's Hatchway key to a server it
controls), ``cookie``, ``proxy-authorization``, ``host``, the MCP session headers, or hop-by-hop and
framing headers — in any case, or hidden in a malformed name. A real name is accepted and dropped
at call time (the seed's rule, which Floopy plugins rely on; the response's
``x-hatchway-dropped-headers`` says so) and never reaches the server; a malformed one is refused
when the plugin is loaded: a 400 ``invalid_plugin`` naming ``mcp_servers[0].forward_headers[i]`` for
an inline plugin, exit code 1 from ``hatchway plugin check`` naming each entry, and a gateway that
does not start for a hatchway.yaml plugin. And whatever the caller sends, the MCP server never
receives the caller's key. Known: a hatchway.yaml
plugin's servers get neither the key nor cookies (``tests/api/test_chat_mcp_loop.py``
``test_forwarded_headers_reach_only_their_server_and_credentials_never``); a scope never overrides
the transport's own headers (``tests/engine/tools/mcp/test_http_scope.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import openai
import pytest
import yaml

from hatchway.errors import ConfigError
from tests.support.agent_loop import USER, inline, rounds, rule_for, summarise
from tests.support.cli import run
from tests.support.gateway import RunningGateway
from tests.support.mcp_servers import McpTestServer
from tests.support.scripted_llm import Reply, ScriptedLLM

NEVER = [
    "Authorization",
    "PROXY-AUTHORIZATION",
    "cookie",
    "Host",
    "Mcp-Session-Id",
    "mcp-protocol-version",
    "connection",
    "content-length",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "keep-alive",
    "proxy-connection",
]
"""Listed, accepted (Floopy plugins list some: the seed says they are simply never forwarded), and
dropped: never sent."""

MALFORMED = ["authorization ", " cookie", "authorization:x", "x-ok\r\nauthorization"]
"""Not header names at all: refused when the plugin is loaded."""


def plugin(names: list[str], url: str = "https://mcp.example.com/mcp") -> dict[str, object]:
    return {"mcp_servers": [{"id": "s", "url": url, "forward_headers": ["x-tenant-id", *names]}]}


def test_a_malformed_forward_header_name_is_refused_at_load(
    gateway_factory: Callable[..., RunningGateway], llm: ScriptedLLM, tmp_path: Path
) -> None:
    gw = gateway_factory()
    for name in MALFORMED:
        client = gw.client(default_headers={"hatchway-mcp-plugin": inline(plugin([name]))})
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model="gpt-4o", messages=USER)
        assert refused.value.body["code"] == "invalid_plugin", name
        assert "mcp_servers[0].forward_headers[1]" in refused.value.body["message"], name
    assert llm.requests == []

    (tmp_path / "p.yaml").write_text(yaml.safe_dump({"version": "1", **plugin(MALFORMED)}))
    checked = run(["plugin", "check", "p.yaml"], tmp_path)
    assert checked.returncode == 1 and "Traceback" not in checked.stderr
    for i in range(1, len(MALFORMED) + 1):
        assert f"mcp_servers[0].forward_headers[{i}]:" in checked.stderr, MALFORMED[i - 1]

    with pytest.raises(ConfigError) as broken:
        gateway_factory(**rule_for(tmp_path, plugin(["authorization:x"])))
    assert any("forward_headers[1]" in path for path, _ in broken.value.problems)


def test_listed_never_forwarded_headers_are_dropped_and_never_reach_the_server(
    mcp_server_factory: Callable[..., McpTestServer],
    gateway_factory: Callable[..., RunningGateway],
    llm: ScriptedLLM,
) -> None:
    server = mcp_server_factory("s")
    gw = gateway_factory(allow_private_mcp_urls=True)
    llm.handler = rounds(Reply(tool_calls=[("s__echo", {"text": "x"})]), summarise)
    sent = {
        "authorization": f"Bearer {gw.key}",
        "hatchway-mcp-plugin": inline(plugin(NEVER, url=server.url)),
        "x-tenant-id": "acme",
        "cookie": f"session={gw.key}",
        "proxy-authorization": f"Bearer {gw.key}",
        "mcp-session-id": "chosen-by-the-caller",
        "mcp-protocol-version": "1999-01-01",
    }

    answered = httpx.post(
        f"{gw.url}/v1/chat/completions", json={"model": "gpt-4o", "messages": USER}, headers=sent
    )

    assert answered.status_code == 200, answered.text
    dropped = answered.headers["x-hatchway-dropped-headers"]
    assert dropped == "s: " + ", ".join(name.lower() for name in NEVER)
    [call] = server.tool_call_headers("echo")
    assert call["x-tenant-id"] == "acme"  # forwarding works
    for request in server.requests:
        assert not any(gw.key in value for value in request.headers.values()), request.headers
        assert {"cookie", "proxy-authorization"}.isdisjoint(request.headers)
        assert request.headers.get("mcp-session-id") != "chosen-by-the-caller"
        assert request.headers.get("mcp-protocol-version") != "1999-01-01"


def test_the_mcp_server_never_receives_the_callers_key(
    mcp_server_factory: Callable[..., McpTestServer],
    gateway_factory: Callable[..., RunningGateway],
    llm: ScriptedLLM,
) -> None:
    server = mcp_server_factory("s")
    gw = gateway_factory(allow_private_mcp_urls=True)
    llm.handler = rounds(Reply(tool_calls=[("s__echo", {"text": "x"})]), summarise)
    sent = {
        "authorization": f"Bearer {gw.key}",
        "hatchway-mcp-plugin": inline(plugin([], url=server.url)),
        "x-tenant-id": "acme",
        "cookie": f"session={gw.key}",
        "proxy-authorization": f"Bearer {gw.key}",
        "mcp-session-id": "chosen-by-the-caller",
        "x-forwarded-authorization": gw.key,
    }
    for path, body in (
        ("/v1/chat/completions", {"model": "gpt-4o", "messages": USER}),
        ("/v1/responses", {"model": "gpt-4o", "input": "go"}),
    ):
        answered = httpx.post(f"{gw.url}{path}", json=body, headers=sent, timeout=30)
        assert answered.status_code == 200, answered.text

    calls = server.tool_call_headers("echo")
    assert len(calls) == 2 and all(h["x-tenant-id"] == "acme" for h in calls)  # forwarding works
    for request in server.requests:
        assert not any(gw.key in value for value in request.headers.values()), request.headers
        assert {"authorization", "cookie", "proxy-authorization", "x-forwarded-authorization"}.isdisjoint(
            request.headers
        )
        assert request.headers.get("mcp-session-id") != "chosen-by-the-caller"
        assert "hatchway-mcp-plugin" not in request.headers
