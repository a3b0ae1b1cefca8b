"""Hatchway as an MCP server: an ``mcp_endpoints`` entry at ``/mcp/{name}``, used by the official MCP
Python SDK's client on both protocol revisions, with a Hatchway key as bearer. The endpoint fronts
an SDK-built upstream server whose bearer comes from the vault: the MCP client never sees it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support.agent_loop import write_plugin
from tests.support.gateway import RunningGateway
from tests.support.mcp_endpoints import UPSTREAM_TOKEN, calc_endpoint
from tests.support.mcp_servers import McpTestServer


async def _session(url: str, key: str, mode: str, action: Callable[[Client], Any]) -> Any:
    http = httpx2.AsyncClient(headers={"authorization": f"Bearer {key}"}, timeout=20)
    async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:  # type: ignore[arg-type]
        return await action(client)


@pytest.mark.parametrize("mode", ["auto", "legacy"])  # 2026-07-28 stateless, and 2025-11-25 sessions
def test_an_mcp_client_lists_and_calls_the_plugins_tools_through_hatchway(
    mode: str, mcp_server_factory: Callable[..., McpTestServer], gateway_factory: Any, tmp_path: Path
) -> None:
    upstream, gateway = calc_endpoint(
        mcp_server_factory, gateway_factory, tmp_path, tools=["calc__add", "calc__echo"]
    )
    url = f"{gateway.url}/mcp/tools"

    async def use(client: Client) -> tuple[list[str], str, str, bool]:
        listed = await client.list_tools()
        added = await client.call_tool("calc__add", {"a": 2, "b": 3})
        echoed = await client.call_tool("calc__echo", {"text": f"say {UPSTREAM_TOKEN}"})
        missing = await client.call_tool("calc__fail", {"message": "x"})
        return [t.name for t in listed.tools], added.content[0].text, echoed.content[0].text, missing.is_error

    names, added, echoed, missing_is_error = asyncio.run(_session(url, gateway.key, mode, use))
    assert names == ["calc__add", "calc__echo"]  # the allowlist, namespaced, in order
    assert added == "5"
    assert UPSTREAM_TOKEN not in echoed  # a vault secret echoed by the upstream is redacted
    assert missing_is_error  # not exposed: a tool error, not a protocol failure
    assert upstream.bearers() and set(upstream.bearers()) == {UPSTREAM_TOKEN}  # from the vault


def test_the_endpoint_wants_a_hatchway_key_and_an_allowed_organisation(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory: Any, tmp_path: Path
) -> None:
    upstream = mcp_server_factory("calc")
    plugin = write_plugin(tmp_path, "calc", {"mcp_servers": [{"id": "calc", "url": upstream.url}]})
    gateway: RunningGateway = gateway_factory(
        allow_private_mcp_urls=True,
        mcp_endpoints=[{"name": "only-acme", "plugin": plugin, "organisations": ["acme"]}],
    )
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    anonymous = httpx.post(f"{gateway.url}/mcp/only-acme", json=body)
    assert anonymous.status_code == 401 and anonymous.headers["www-authenticate"].startswith("Bearer")
    other_org = httpx.post(
        f"{gateway.url}/mcp/only-acme", json=body, headers={"authorization": f"Bearer {gateway.key}"}
    )
    assert other_org.status_code == 403
    unknown = httpx.post(
        f"{gateway.url}/mcp/nope", json=body, headers={"authorization": f"Bearer {gateway.key}"}
    )
    assert unknown.status_code == 404
    assert httpx.post(f"{gateway.url}/mcp/nope", json=body).status_code == 401  # no key: no telling
    acme = gateway.new_org("acme")

    async def names(client: Client) -> list[str]:
        return [t.name for t in (await client.list_tools()).tools]

    listed = asyncio.run(_session(f"{gateway.url}/mcp/only-acme", acme.key, "auto", names))
    assert "calc__add" in listed and listed == sorted(listed)


def test_hatchway_mcp_endpoints_lists_them(tmp_path: Path) -> None:
    from tests.support.cli import minimal_config, run

    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "calc.yaml").write_text(
        'version: "1"\nmcp_servers:\n  - {id: calc, url: "https://mcp.example.com/mcp"}\n'
    )
    config = minimal_config(
        tmp_path,
        mcp_endpoints=[
            {"name": "tools", "plugin": "plugins/calc.yaml", "tools": ["calc__*"], "organisations": ["acme"]}
        ],
    )
    shown = run(["mcp", "endpoints", "--config", str(config)], tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "/mcp/tools" in shown.stdout and "calc__*" in shown.stdout and "acme" in shown.stdout


def test_a_session_belongs_to_the_key_that_opened_it(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory: Any, tmp_path: Path
) -> None:
    """2025-11-25 sessions: another organisation's key presenting the session id gets what an unknown
    session gets (404), and cannot end it."""
    upstream = mcp_server_factory("calc")
    plugin = write_plugin(tmp_path, "calc", {"mcp_servers": [{"id": "calc", "url": upstream.url}]})
    gateway: RunningGateway = gateway_factory(
        allow_private_mcp_urls=True, mcp_endpoints=[{"name": "tools", "plugin": plugin}]
    )
    other = gateway.new_org()
    url = f"{gateway.url}/mcp/tools"
    accept = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    opened = httpx.post(
        url,
        headers={**accept, "authorization": f"Bearer {gateway.key}"},
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        },
    )
    assert opened.status_code == 200, opened.text
    session = opened.headers["mcp-session-id"]
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    session_headers = {**accept, "mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
    stolen = httpx.post(
        url, headers={**session_headers, "authorization": f"Bearer {other.key}"}, json=listing
    )
    assert stolen.status_code == 404
    ended = httpx.delete(url, headers={**session_headers, "authorization": f"Bearer {other.key}"})
    assert ended.status_code == 404
    own = httpx.post(url, headers={**session_headers, "authorization": f"Bearer {gateway.key}"}, json=listing)
    assert own.status_code == 200 and "calc__add" in own.text


def test_dns_rebinding_is_refused_and_a_down_upstream_is_a_tool_error_in_the_run_log(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory: Any, tmp_path: Path
) -> None:
    upstream = mcp_server_factory("calc")
    plugin = write_plugin(
        tmp_path, "calc", {"mcp_servers": [{"id": "calc", "url": upstream.url, "max_retries": 0}]}
    )
    gateway: RunningGateway = gateway_factory(
        allow_private_mcp_urls=True,
        mcp_allowed_hosts=["mcp.example.com"],
        mcp_endpoints=[{"name": "tools", "plugin": plugin}],
    )
    url = f"{gateway.url}/mcp/tools"
    headers = {
        "authorization": f"Bearer {gateway.key}",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/list",
    }
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}}
    # A page on evil.example whose name now resolves to the gateway: its Host and Origin give it away.
    assert httpx.post(url, json=body, headers={**headers, "host": "evil.example"}).status_code == 421
    assert httpx.post(url, json=body, headers={**headers, "origin": "http://evil.example"}).status_code == 403
    assert httpx.post(url, json=body, headers={**headers, "host": "mcp.example.com"}).status_code == 200
    assert httpx.post(url, json=body, headers=headers).status_code == 200  # loopback, no Origin

    async def call_while_down(client: Client) -> Any:
        await client.list_tools()
        upstream.stop()
        return await client.call_tool("calc__add", {"a": 1, "b": 2})

    result = asyncio.run(_session(url, gateway.key, "auto", call_while_down))
    assert result.is_error and "calc" in result.content[0].text  # a tool error, not a protocol failure
    logs = httpx.get(f"{gateway.url}/v1/logs", headers={"authorization": f"Bearer {gateway.key}"}).json()
    record = next(r for r in logs["data"] if r["route"] == "mcp:tools")
    step = record["steps"][-1]
    assert step["type"] == "tool_call" and step["name"] == "calc__add" and step["server"] == "calc"
    assert step["outcome"] == "error"


def test_an_upstream_tool_list_change_reaches_a_2025_session(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory: Any, tmp_path: Path
) -> None:
    import mcp_types as types

    upstream = mcp_server_factory("calc")
    plugin = write_plugin(tmp_path, "calc", {"mcp_servers": [{"id": "calc", "url": upstream.url}]})
    gateway: RunningGateway = gateway_factory(
        allow_private_mcp_urls=True, mcp_endpoints=[{"name": "tools", "plugin": plugin}]
    )

    async def use() -> tuple[bool, list[str], list[str]]:
        changed = asyncio.Event()

        async def on_message(message: Any) -> None:
            if isinstance(message, types.ToolListChangedNotification):
                changed.set()

        http = httpx2.AsyncClient(headers={"authorization": f"Bearer {gateway.key}"}, timeout=20)
        transport = streamable_http_client(f"{gateway.url}/mcp/tools", http_client=http)
        async with Client(transport, mode="legacy", message_handler=on_message) as client:  # type: ignore[arg-type]
            before = [t.name for t in (await client.list_tools()).tools]
            assert client.server_capabilities.tools.list_changed  # declared to 2025-11-25 clients
            await client.call_tool("calc__grow", {})  # the upstream adds a tool and says so
            async with asyncio.timeout(10):
                await changed.wait()
            after = [t.name for t in (await client.list_tools()).tools]
            return changed.is_set(), before, after

    announced, before, after = asyncio.run(use())
    assert announced and "calc__extra" not in before and "calc__extra" in after


def test_the_plugins_tool_result_cache_serves_an_endpoints_repeated_call(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory: Any, tmp_path: Path
) -> None:
    upstream, gateway = calc_endpoint(
        mcp_server_factory, gateway_factory, tmp_path, agent={"tool_cache_ttl_seconds": 60}
    )
    other = gateway.new_org()
    assert gateway.put_secret("calc_token", UPSTREAM_TOKEN, key=other.key).status_code == 201

    async def echo_twice(client: Client) -> list[str]:
        texts = []
        for _ in range(2):
            result = await client.call_tool("calc__echo", {"text": f"hi {UPSTREAM_TOKEN}"})
            texts.append(result.content[0].text)
        return texts

    url = f"{gateway.url}/mcp/tools"
    first = asyncio.run(_session(url, gateway.key, "auto", echo_twice))
    assert first[0] == first[1] and UPSTREAM_TOKEN not in first[0]  # cached as the client saw it
    assert upstream.tool_calls("echo") == 1
    asyncio.run(_session(url, other.key, "auto", echo_twice))  # another organisation: its own entry
    assert upstream.tool_calls("echo") == 2
    logs = httpx.get(
        f"{gateway.url}/v1/logs?route=mcp:tools", headers={"authorization": f"Bearer {gateway.key}"}
    )
    cached = [r["steps"][-1]["cached"] for r in logs.json()["data"]]
    assert sorted(cached) == [False, True]


def test_one_organisation_cannot_take_every_session_of_an_endpoint(
    mcp_server_factory: Callable[..., McpTestServer],
    gateway_factory: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import hatchway.api.mcp_endpoints as endpoints

    monkeypatch.setattr(endpoints, "MAX_SESSIONS_PER_ORG", 3)
    upstream = mcp_server_factory("calc")
    plugin = write_plugin(tmp_path, "calc", {"mcp_servers": [{"id": "calc", "url": upstream.url}]})
    gateway: RunningGateway = gateway_factory(
        allow_private_mcp_urls=True, mcp_endpoints=[{"name": "tools", "plugin": plugin}]
    )
    url = f"{gateway.url}/mcp/tools"
    accept = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }

    def open_session(key: str) -> httpx.Response:
        return httpx.post(url, headers={**accept, "authorization": f"Bearer {key}"}, json=initialize)

    opened = [open_session(gateway.key) for _ in range(3)]
    assert all(r.status_code == 200 for r in opened)
    refused = open_session(gateway.key)
    assert refused.status_code == 429 and refused.headers["retry-after"]
    other = gateway.new_org()
    assert open_session(other.key).status_code == 200  # another tenant is not starved
    session = opened[0].headers["mcp-session-id"]
    closed = httpx.delete(
        url,
        headers={
            **accept,
            "authorization": f"Bearer {gateway.key}",
            "mcp-session-id": session,
            "mcp-protocol-version": "2025-11-25",
        },
    )
    assert closed.status_code == 200
    assert open_session(gateway.key).status_code == 200  # a closed session frees its place


def test_an_allowlist_written_as_documented_works_with_namespace_false(
    mcp_server_factory: Callable[..., McpTestServer],
    gateway_factory: Any,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """docs/configuration.md names tools ``<server>__<tool>``; with ``namespace: false`` such an
    allowlist exposed nothing, silently (issue 41). Now it matches, and an entry that matches no tool
    any server offers is said in the log."""
    upstream, gateway = calc_endpoint(
        mcp_server_factory, gateway_factory, tmp_path, namespace=False, tools=["calc__add", "calc__nope"]
    )

    async def use(client: Client) -> tuple[list[str], str]:
        names = [t.name for t in (await client.list_tools()).tools]
        added = await client.call_tool("add", {"a": 2, "b": 3})
        return names, added.content[0].text

    names, added = asyncio.run(_session(f"{gateway.url}/mcp/tools", gateway.key, "auto", use))
    assert names == ["add"] and added == "5"
    warned = [r.getMessage() for r in caplog.records if "matches none of the tools" in r.getMessage()]
    assert len(warned) == 1 and "'calc__nope'" in warned[0]
    assert upstream.tool_calls("add") == 1
    ready = httpx.get(f"{gateway.url}/readyz", timeout=30)
    assert ready.status_code == 200, ready.text  # the rest serves: a warning, not a failure
    [warning] = ready.json()["warnings"]  # counted, not named: /readyz answers anyone
    assert warning.startswith("1 mcp_endpoints[].tools entry matches none") and "calc__nope" not in warning
