"""Held: DNS rebinding cannot steer an inline plugin's session inwards.

The attack: the plugin names a host whose DNS answers a public address when the gateway checks it
(at plan time) and a loopback address afterwards, hoping the connection resolves the name again
and lands on an internal service. The address checked must be the address connected to
(``ScopedTransport._pin`` in ``engine/tools/mcp/http.py``): the transport resolves and checks once
per host and port, and connects to that IP, never to the name.

Through the gateway: no resolver hook is exposed, so the tests answer for one reserved name
(``rebind.test``) by replacing ``socket.getaddrinfo`` — what asyncio's resolver calls — and pass
every other name to the real one. An answer that changes after the plan-time check is refused at
connect time (both transports); a name with a public and a private record is refused at plan time.
That the pinned public address is where the bytes go cannot be seen through the gateway offline
(connecting to a public address needs a network), so it is tested on ``ScopedTransport`` directly
with a resolver that answers differently on each call: here for IPv6 and a second port, and in
``tests/engine/tools/mcp/test_http_scope.py`` ``test_a_guarded_connection_is_pinned_to_the_checked_address``.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Callable
from typing import Any

import httpx2
import openai
import pytest

from hatchway.engine.tools.mcp.http import EgressDenied, ScopedTransport
from tests.support.agent_loop import USER, inline, log_of, rounds, summarise
from tests.support.gateway import RunningGateway
from tests.support.mcp_servers import McpTestServer
from tests.support.scripted_llm import Reply, ScriptedLLM

NAME = "rebind.test"
PUBLIC = "93.184.216.34"


class RebindingDns:
    """``socket.getaddrinfo`` answering ``NAME`` with the n-th of ``answers`` (the last one after)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *answers: list[str]) -> None:
        self.answers = answers
        self.asked = 0
        self._lock = threading.Lock()
        self._real = socket.getaddrinfo
        monkeypatch.setattr(socket, "getaddrinfo", self)

    def __call__(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
        if host != NAME:
            return self._real(host, port, *args, **kwargs)
        with self._lock:
            answer = self.answers[min(self.asked, len(self.answers) - 1)]
            self.asked += 1
        infos = []
        for ip in answer:
            family = socket.AF_INET6 if ":" in ip else socket.AF_INET
            address = (ip, int(port), 0, 0) if family == socket.AF_INET6 else (ip, int(port))
            infos.append((family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", address))
        return infos


def through(server: McpTestServer) -> str:
    return server.url.replace("127.0.0.1", NAME)


@pytest.mark.parametrize(
    ("transport", "rebound"),
    [("streamable_http", "127.0.0.1"), ("streamable_http", "::ffff:127.0.0.1"), ("sse", "127.0.0.1")],
)
def test_an_answer_that_changes_after_the_check_is_refused_at_connect_time(
    transport: str,
    rebound: str,
    monkeypatch: pytest.MonkeyPatch,
    mcp_server_factory: Callable[..., McpTestServer],
    gateway: RunningGateway,
    llm: ScriptedLLM,
) -> None:
    server = mcp_server_factory("internal", transport=transport)
    dns = RebindingDns(monkeypatch, [PUBLIC], [rebound])
    llm.handler = rounds(Reply(tool_calls=[("s__echo", {"text": "x"})]), summarise)
    plugin = inline({"mcp_servers": [{"id": "s", "url": through(server), "transport": transport}]})
    client = gateway.client(default_headers={"hatchway-mcp-plugin": plugin})

    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=USER)

    assert raw.status_code == 200  # the plan-time check accepted the first (public) answer
    record = log_of(gateway, raw.headers["x-hatchway-request-id"])
    [listing] = [s for s in record["steps"] if s["type"] == "list_tools"]
    assert listing["outcome"] == "error" and f"{NAME} resolves to a loopback address" in listing["error"]
    assert dns.asked >= 2, "the connection checked its own answer"
    assert "tools" not in llm.requests[0] and server.requests == []


def test_a_name_with_a_public_and_a_private_record_is_refused(
    monkeypatch: pytest.MonkeyPatch,
    mcp_server_factory: Callable[..., McpTestServer],
    gateway: RunningGateway,
    llm: ScriptedLLM,
) -> None:
    server = mcp_server_factory("internal")
    RebindingDns(monkeypatch, [PUBLIC, "127.0.0.1"])
    plugin = inline({"mcp_servers": [{"id": "s", "url": through(server)}]})

    with pytest.raises(openai.PermissionDeniedError) as denied:
        gateway.client(default_headers={"hatchway-mcp-plugin": plugin}).chat.completions.create(
            model="gpt-4o", messages=USER
        )

    assert denied.value.body["code"] == "egress_denied"
    assert f"{NAME} (127.0.0.1) is a loopback address" in denied.value.body["message"]
    assert server.requests == [] and llm.requests == []


@pytest.mark.anyio
async def test_the_connection_goes_to_the_checked_ipv6_address_and_another_port_is_checked_again() -> None:
    answers = iter(["2606:4700:4700::1111", "::1", "::1"])  # public first, loopback ever after
    asked: list[tuple[str, int]] = []

    async def resolve(host: str, port: int) -> list[Any]:
        asked.append((host, port))
        return [ipaddress.ip_address(next(answers))]

    sent: list[httpx2.Request] = []
    inner = httpx2.MockTransport(lambda request: sent.append(request) or httpx2.Response(200, json={}))
    async with httpx2.AsyncClient(transport=ScopedTransport(inner, guard=True, resolver=resolve)) as client:
        for _ in range(3):
            await client.post("https://mcp.example.com:8443/mcp")
        with pytest.raises(EgressDenied):
            await client.post("https://mcp.example.com:9443/mcp")

    assert asked == [("mcp.example.com", 8443), ("mcp.example.com", 9443)]
    assert [r.url.netloc for r in sent] == [b"[2606:4700:4700::1111]:8443"] * 3
    assert {(r.headers["host"], r.extensions["sni_hostname"]) for r in sent} == {
        ("mcp.example.com:8443", "mcp.example.com")
    }
