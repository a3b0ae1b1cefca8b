"""Held: an inline plugin's server cannot send the gateway on to another address by redirecting it.

The attack: the plugin names a server that looks harmless and passes the egress rule, and that
server answers with a redirect (or, over SSE, an ``endpoint`` event) naming an internal address.
The MCP client follows a redirect only within the same origin, so the internal server must receive
nothing — on the first request, mid-session on a ``tools/call``, and over SSE.

What makes this meaningful: every server here is on loopback, so the gateway runs with
``allow_private_mcp_urls: true``. That lets the gateway reach the redirecting server, and it also
turns off the address check at connect time, so the no-cross-origin-redirect rule is the only thing
between the redirect and its target (another port on loopback = another origin, standing in for an
internal service). Without it the redirecting server itself would be refused and nothing tested.
The token endpoint's redirects are ``tests/credentials/test_oauth.py``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from mcp.server import MCPServer
from starlette.applications import Starlette
from starlette.responses import RedirectResponse, StreamingResponse
from starlette.routing import Route

from tests.support.agent_loop import USER, inline, log_of, rounds, summarise, tool_messages
from tests.support.gateway import RunningGateway
from tests.support.mcp_servers import McpTestServer
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import ServerThread


class Redirector:
    """An SDK MCP server (tool ``echo``) that answers the JSON-RPC methods ``redirected`` picks with
    a redirect to ``location`` instead."""

    def __init__(self, location: str, status: int, redirected: Callable[[str | None], bool]) -> None:
        mcp = MCPServer("redirector", log_level="WARNING")

        @mcp.tool(description="Echo the text back.")
        def echo(text: str) -> str:
            return f"echo:{text}"

        self.inner = mcp.streamable_http_app()
        self.location, self.status, self.redirected = location, status, redirected
        self.methods: list[str | None] = []
        self.server = ServerThread(self, timeout_graceful_shutdown=1)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return
        messages, body = [], b""
        while not messages or messages[-1].get("more_body"):
            messages.append(await receive())
            body += messages[-1].get("body", b"")
        method = json.loads(body).get("method") if body.startswith(b"{") else None
        self.methods.append(method)
        if self.redirected(method):
            await RedirectResponse(self.location, status_code=self.status)(scope, receive, send)
            return
        replay = iter(messages)
        await self.inner(scope, lambda: _next(replay, receive), send)


async def _next(replay: Iterator[Any], receive: Any) -> Any:
    return next(replay, None) or await receive()


@pytest.fixture
def target(mcp_server_factory: Callable[..., McpTestServer]) -> McpTestServer:
    """The internal service the redirects point at; it records every request it gets."""
    return mcp_server_factory("internal")


def ask(gw: RunningGateway, url: str, **server: Any) -> dict[str, Any]:
    """One chat turn with an inline plugin of one server at ``url``; its run record."""
    plugin = {"id": "s", "url": url, "max_retries": 0, "timeout_ms": 3000, **server}
    client = gw.client(default_headers={"hatchway-mcp-plugin": inline({"mcp_servers": [plugin]})})
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=USER)
    return log_of(gw, raw.headers["x-hatchway-request-id"])


@pytest.mark.parametrize("status", [302, 307, 308])
def test_a_redirect_on_the_first_request_is_not_followed(
    status: int, target: McpTestServer, gateway_factory: Callable[..., RunningGateway], llm: ScriptedLLM
) -> None:
    gw = gateway_factory(allow_private_mcp_urls=True)
    llm.handler = rounds(Reply(tool_calls=[("s__echo", {"text": "x"})]), summarise)
    redirector = Redirector(target.url, status, lambda _: True)
    with redirector.server:
        record = ask(gw, f"{redirector.server.url}/mcp")

    [listing] = [s for s in record["steps"] if s["type"] == "list_tools"]
    assert listing["outcome"] == "error" and f"Redirect to {target.url} not followed" in listing["error"]
    assert "tools" not in llm.requests[0]  # nothing was listed, so nothing is offered
    assert target.requests == []


def test_a_redirect_of_a_tool_call_mid_session_is_not_followed(
    target: McpTestServer, gateway_factory: Callable[..., RunningGateway], llm: ScriptedLLM
) -> None:
    gw = gateway_factory(allow_private_mcp_urls=True)
    llm.handler = rounds(Reply(tool_calls=[("s__echo", {"text": "x"})]), summarise)
    redirector = Redirector(target.url, 307, lambda method: method == "tools/call")
    with redirector.server:
        record = ask(gw, f"{redirector.server.url}/mcp")

    assert [t["function"]["name"] for t in llm.requests[0]["tools"]] == ["s__echo"]  # the session works
    assert "tools/call" in redirector.methods  # the call was sent, and redirected
    [step] = [s for s in record["steps"] if s["type"] == "tool_call"]
    assert step["outcome"] == "error" and step["error_code"] == "mcp_protocol_error"
    [result] = tool_messages(llm.requests[-1])  # the model gets the refusal, not the internal answer
    assert f"Redirect to {target.url} not followed" in json.loads(result)["error"]["message"]
    assert target.requests == []


def test_an_sse_endpoint_on_another_origin_is_not_used(
    target: McpTestServer,
    gateway_factory: Callable[..., RunningGateway],
    llm: ScriptedLLM,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The SDK refuses the endpoint (and logs why); the session then never opens, so the listing
    ends at the server's ``timeout_ms``."""
    elsewhere = f"{target.server.url}/messages/?session_id=0123456789abcdef"

    async def stream(request: Any) -> StreamingResponse:
        async def events() -> AsyncIterator[bytes]:
            yield f"event: endpoint\ndata: {elsewhere}\n\n".encode()

        return StreamingResponse(events(), media_type="text/event-stream")

    gw = gateway_factory(allow_private_mcp_urls=True)
    llm.handler = rounds(Reply(tool_calls=[("s__echo", {"text": "x"})]), summarise)
    with ServerThread(Starlette(routes=[Route("/sse", stream)]), timeout_graceful_shutdown=1) as sse:
        record = ask(gw, f"{sse.url}/sse", transport="sse", timeout_ms=1000)

    [listing] = [s for s in record["steps"] if s["type"] == "list_tools"]
    assert listing["outcome"] == "error" and "tools" not in llm.requests[0]
    refusal = f"Endpoint origin does not match connection origin: {elsewhere}"
    assert any(r.name == "mcp.client.sse" and r.getMessage() == refusal for r in caplog.records)
    assert target.requests == []
