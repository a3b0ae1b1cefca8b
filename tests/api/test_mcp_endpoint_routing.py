"""An MCP endpoint in front of two servers routes a stateless ``tools/call`` to the one server its
name points at: the other server's slow OAuth token endpoint never delays it, and the run record's
latency is what the client waited, from the request's arrival (official ``mcp`` client, SDK-built
servers, a real TLS token endpoint)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support.agent_loop import write_plugin
from tests.support.gateway import RunningGateway
from tests.support.mcp_servers import McpTestServer
from tests.support.token_endpoint import IssuedTokens, TokenEndpoint

HEALTHY_CALL_MS = 500
"""How long the healthy server's tool works: the slow call is held at least that long."""
TOLERANCE_SECONDS = 0.2
"""What the client's wait may exceed the record's latency by: the request's way to the gateway and
the answer's way back."""


@pytest.fixture
def idp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TokenEndpoint]:
    """The ``billing`` server's token endpoint; the gateways started after it trust its CA."""
    endpoint = TokenEndpoint(tmp_path).start()
    ca = tmp_path / "idp-ca.pem"
    endpoint.ca.cert_pem.write_to_path(str(ca))
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    yield endpoint
    endpoint.stop()


@asynccontextmanager
async def _client(url: str, key: str) -> AsyncIterator[Client]:
    """A stateless (2026-07-28) client of the endpoint."""
    http = httpx2.AsyncClient(headers={"authorization": f"Bearer {key}"}, timeout=120)
    async with Client(streamable_http_client(url, http_client=http), read_timeout_seconds=120) as client:  # type: ignore[arg-type]
        yield client


async def _timed(client: Client, tool: str, arguments: dict[str, Any]) -> tuple[str, float]:
    """One call's text, and how long the client waited for it."""
    started = time.monotonic()
    result = await client.call_tool(tool, arguments)
    return "".join(getattr(block, "text", "") for block in result.content), time.monotonic() - started


async def _held_call(url: str, key: str) -> tuple[str, float]:
    """A call of billing's tool by a client that has not listed the tools (it lists them after)."""
    async with _client(url, key) as client:
        return await _timed(client, "billing__echo", {"text": "hi"})


def _latency_of(gateway: RunningGateway, tool: str) -> float:
    """The latency, in seconds, of the endpoint's run record for the call of ``tool``."""
    records = httpx.get(
        f"{gateway.url}/v1/logs",
        params={"route": "mcp:tools"},
        headers={"authorization": f"Bearer {gateway.key}"},
        timeout=30,
    ).json()["data"]
    [record] = [r for r in records if any(s.get("tool") == tool for s in r["steps"])]
    return float(record["latency_ms"]) / 1000


def test_a_call_goes_to_its_server_only_and_its_record_says_how_long_the_client_waited(
    idp: TokenEndpoint,
    mcp_server_factory: Callable[..., McpTestServer],
    gateway_factory: Callable[..., RunningGateway],
    tmp_path: Path,
) -> None:
    calc = mcp_server_factory("calc")
    billing = mcp_server_factory("billing", token_verifier=IssuedTokens(idp))
    oauth = {"type": "oauth", "token_url": idp.url, "client_id": "hatchway", "secret_ref": "secret.idp"}
    servers = [
        {"id": "calc", "url": calc.url},
        {"id": "billing", "url": billing.url, "auth": oauth, "timeout_ms": 120_000},
    ]
    plugin = write_plugin(tmp_path, "two", {"mcp_servers": servers})
    gateway = gateway_factory(
        allow_private_mcp_urls=True, mcp_endpoints=[{"name": "tools", "plugin": plugin}]
    )
    assert gateway.put_secret("idp", "client-secret-0c1d").status_code == 201
    url = f"{gateway.url}/mcp/tools"

    async def scenario() -> dict[str, Any]:
        async with _client(url, gateway.key) as healthy:
            idp.behaviour = "status_500"  # billing's token endpoint fails at once while the client lists
            listed = {t.name for t in (await healthy.list_tools()).tools}
            asked = len(idp.requests)
            idp.behaviour = "ok"
            idp.gate.clear()  # and now holds its answers until the test opens the gate
            held = asyncio.create_task(_held_call(url, gateway.key))
            with anyio.fail_after(60):
                while len(idp.requests) == asked:  # billing's call waits for its token
                    await asyncio.sleep(0.01)
            added, healthy_wait = await _timed(healthy, "calc__slow", {"ms": HEALTHY_CALL_MS})
            seen = {"still_held": not held.done(), "token_requests": len(idp.requests) - asked}
            idp.gate.set()
            with anyio.fail_after(120):
                echoed, held_wait = await held
        return {
            **seen,
            "listed": listed,
            "added": added,
            "echoed": echoed,
            "waits": (healthy_wait, held_wait),
        }

    outcome = asyncio.run(scenario())
    healthy_wait, held_wait = outcome["waits"]
    assert "calc__slow" in outcome["listed"]
    assert outcome["added"] == f"slept {HEALTHY_CALL_MS}" and outcome["echoed"] == "echo:hi"
    # The healthy call was answered while billing's token was still held, having asked it nothing.
    assert outcome["still_held"] and outcome["token_requests"] == 1
    # Each record covers what its client waited, the held token and the lookups before the call included.
    assert held_wait > HEALTHY_CALL_MS / 1000
    assert _latency_of(gateway, "slow") >= healthy_wait - TOLERANCE_SECONDS
    assert _latency_of(gateway, "echo") >= held_wait - TOLERANCE_SECONDS
