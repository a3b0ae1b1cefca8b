"""Per-call headers and outcomes on shared sessions, and connect-time egress pinning."""

from __future__ import annotations

import ipaddress

import httpx2
import pytest

from hatchway.engine.tools.mcp.http import EgressDenied, ScopedTransport, request_scope

pytestmark = pytest.mark.anyio


class Capture:
    def __init__(self, status: int = 200) -> None:
        self.requests: list[httpx2.Request] = []
        self.status = status

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        return httpx2.Response(self.status, json={})


def resolver(*answers: str):  # type: ignore[no-untyped-def]
    calls: list[str] = []

    async def resolve(host: str, port: int) -> list:  # type: ignore[type-arg]
        calls.append(host)
        return [ipaddress.ip_address(a) for a in answers[min(len(calls) - 1, len(answers) - 1)].split(",")]

    resolve.calls = calls  # type: ignore[attr-defined]
    return resolve


async def test_scope_headers_are_added_and_the_outcome_recorded() -> None:
    capture = Capture(status=503)
    async with httpx2.AsyncClient(transport=ScopedTransport(httpx2.MockTransport(capture))) as client:
        with request_scope(
            {"authorization": "Bearer t", "x-tenant-id": "acme", "mcp-session-id": "evil"}
        ) as scope:
            await client.post("http://mcp.example/mcp", headers={"mcp-session-id": "real"})
        await client.post("http://mcp.example/mcp")  # outside any scope: nothing added
    first, second = capture.requests
    assert first.headers["authorization"] == "Bearer t" and first.headers["x-tenant-id"] == "acme"
    assert first.headers["mcp-session-id"] == "real"  # the transport's own headers are never overridden
    assert "authorization" not in second.headers
    assert scope.status == 503 and scope.failed.is_set()


async def test_a_guarded_connection_is_pinned_to_the_checked_address() -> None:
    capture = Capture()
    resolve = resolver("93.184.216.34", "127.0.0.1")  # a rebinding DNS: public first, loopback next
    transport = ScopedTransport(httpx2.MockTransport(capture), guard=True, resolver=resolve)
    async with httpx2.AsyncClient(transport=transport) as client:
        await client.post("https://mcp.example.com/mcp")
        await client.post("https://mcp.example.com/mcp")
    assert resolve.calls == ["mcp.example.com"]  # resolved once; later requests reuse the pin
    for request in capture.requests:
        assert request.url.host == "93.184.216.34" and request.headers["host"] == "mcp.example.com"
        assert request.extensions["sni_hostname"] == "mcp.example.com"  # TLS still checks the name


async def test_a_guarded_connection_refuses_private_answers_before_sending() -> None:
    capture = Capture()
    transport = ScopedTransport(
        httpx2.MockTransport(capture), guard=True, resolver=resolver("93.184.216.34,10.0.0.7")
    )
    async with httpx2.AsyncClient(transport=transport) as client:
        with request_scope({}) as scope, pytest.raises(EgressDenied):
            await client.post("https://mcp.example.com/mcp")
    assert capture.requests == [] and isinstance(scope.error, EgressDenied)
