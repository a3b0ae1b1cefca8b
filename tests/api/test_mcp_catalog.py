"""One MCP catalog for the loop and the MCP endpoint (``engine/tools/mcp/catalog.py``): what either
path finds is the same — a withheld tool's name is never routed to another server's tool, and a
per-user server the end user has not authorized asks for the same consent on both paths."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import URL_ELICITATION_REQUIRED

from tests.engine.guards.test_tool_pinning import POISON, _until, _with_rug
from tests.support.agent_loop import write_plugin
from tests.support.gateway import RunningGateway
from tests.support.mcp_servers import McpTestServer
from tests.support.oauth_server import AuthorizedMcpServer, OAuthTestServer
from tests.support.scripted_llm import Reply, ScriptedLLM

LINK = re.compile(r"http://127\.0\.0\.1:\d+/oauth/connect/oc_[A-Za-z0-9_-]+")


async def _session(gateway: RunningGateway, name: str, work: Callable[[Client], Any], **headers: str) -> Any:
    http = httpx2.AsyncClient(headers={"authorization": f"Bearer {gateway.key}", **headers}, timeout=30)
    async with Client(streamable_http_client(f"{gateway.url}/mcp/{name}", http_client=http)) as client:  # type: ignore[arg-type]
        return await work(client)


async def _names(client: Client) -> list[str]:
    return [t.name for t in (await client.list_tools()).tools]


def test_a_withheld_tool_of_an_endpoint_with_upstream_names_is_never_answered_by_a_twin(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory: Any, tmp_path: Path
) -> None:
    """``namespace: false``: ``first`` and ``twin`` both have ``echo``; ``first`` comes first, so
    the name is its. When its ``echo`` drifts (a rug pull) and is withheld, ``echo`` is not listed
    and a call of it is refused — never routed to ``twin``'s ``echo``."""
    first = _with_rug(mcp_server_factory("first"))
    twin = mcp_server_factory("twin")
    servers = [
        {"id": "first", "url": first.url, "tool_drift": "block", "tools": ["echo", "rug"]},
        {"id": "twin", "url": twin.url, "tools": ["echo", "add"]},
    ]
    plugin = write_plugin(tmp_path, "pair", {"mcp_servers": servers})
    gateway = gateway_factory(
        allow_private_mcp_urls=True,
        agents=[{"name": "pair", "model": "gpt-4o", "plugin": plugin}],
        mcp_endpoints=[{"name": "pair", "agent": "pair", "namespace": False}],
    )
    assert asyncio.run(_session(gateway, "pair", _names)) == ["add", "echo", "rug"]  # pinned; echo is first's
    said = asyncio.run(_session(gateway, "pair", lambda c: c.call_tool("echo", {"text": "hi"})))
    assert (
        said.content[0].text == "echo:hi" and first.tool_calls("echo") == 1 and twin.tool_calls("echo") == 0
    )
    pulled = asyncio.run(_session(gateway, "pair", lambda c: c.call_tool("rug", {})))
    assert "pulled" in str(pulled.content)

    listed = _until(
        lambda: (names := asyncio.run(_session(gateway, "pair", _names))) and "echo" not in names and names,
        "first's echo to be withheld",
    )
    assert listed == ["add", "rug"]  # not twin's echo in its place
    refused = asyncio.run(_session(gateway, "pair", lambda c: c.call_tool("echo", {"text": "x"})))

    assert refused.is_error and json.loads(refused.content[0].text)["error"]["code"] == "tool_withheld"
    assert twin.tool_calls("echo") == 0 and POISON not in str(refused.content)


@pytest.fixture
def per_user(tmp_path: Path, llm: ScriptedLLM, gateway_factory: Any) -> Any:
    """An agent whose one server is a per-user OAuth server (``grant: authorization_code``), served
    by the loop (``agent:tickets``) and by the endpoint ``/mcp/tickets``."""
    gateway_holder: dict[str, RunningGateway] = {}
    idp = OAuthTestServer(users={"alice": "pw"}, redirect_uri="http://127.0.0.1:1/oauth/callback").start()
    mcp = AuthorizedMcpServer(idp).start()
    server = {
        "id": "tickets",
        "url": mcp.url,
        "auth": {
            "type": "oauth",
            "grant": "authorization_code",
            "client_id": idp.client.client_id,
            "secret_ref": "secret.idp_client",
        },
    }
    plugin = write_plugin(tmp_path, "tickets", {"mcp_servers": [server]})
    gateway = gateway_factory(
        allow_private_mcp_urls=True,
        agents=[{"name": "tickets", "model": "gpt-4o", "plugin": plugin}],
        mcp_endpoints=[{"name": "tickets", "agent": "tickets"}],
    )
    assert gateway.put_secret("idp_client", idp.client.client_secret).status_code == 201
    llm.handler = lambda body: Reply(tool_calls=[("tickets__whoami", {})])
    gateway_holder["gateway"] = gateway
    yield gateway, mcp
    mcp.stop()
    idp.stop()


def test_an_unauthorized_per_user_server_asks_for_the_same_consent_in_the_loop_and_on_the_endpoint(
    per_user: Any, llm: ScriptedLLM
) -> None:
    gateway, mcp = per_user

    # The loop: the run is answered with the consent link, the model not called.
    answer = gateway.client().chat.completions.create(
        model="agent:tickets",
        messages=[{"role": "user", "content": "Who am I?"}],
        extra_headers={"X-On-Behalf-Of": "alice"},
    )
    assert LINK.search(answer.choices[0].message.content or "") and llm.requests == []

    # The endpoint: the listing (and a call) is answered with the same step, as a URL elicitation.
    async def refused(work: Any) -> MCPError | None:
        try:
            await work
        except MCPError as exc:
            return exc
        return None

    for request in (lambda c: c.list_tools(), lambda c: c.call_tool("tickets__whoami", {})):
        asked = asyncio.run(
            _session(gateway, "tickets", lambda c, r=request: refused(r(c)), **{"x-on-behalf-of": "alice"})
        )
        assert asked is not None and asked.error.code == URL_ELICITATION_REQUIRED
        [elicitation] = asked.error.data["elicitations"]
        assert elicitation["mode"] == "url" and LINK.fullmatch(elicitation["url"])
        assert "tickets" in elicitation["message"]
    assert mcp.calls == []  # nothing reached the server without the user's own token
