"""The MCP client pool and a plugin's client against real SDK-built servers on loopback."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from hatchway.config.plugin import PluginConfig, parse_plugin
from hatchway.engine.context import RunContext
from hatchway.engine.tools.mcp.plugin_client import PluginMcpClient
from hatchway.engine.tools.mcp.pool import McpServerPool
from hatchway.errors import McpServerError, ToolOutcomeUnknown
from hatchway.principal import Principal
from tests.support.mcp_servers import BearerCredentials, McpTestServer, NoCredentials, stdio_command

pytestmark = pytest.mark.anyio


def plugin_of(*servers: dict[str, Any]) -> PluginConfig:
    return parse_plugin(json.dumps({"version": "1", "mcp_servers": list(servers)}), "test plugin")


def ctx(org: str = "org-1", **headers: str) -> RunContext:
    return RunContext(principal=Principal(org, org), request_headers=headers)


def client(plugin: PluginConfig, pool: McpServerPool, credentials: Any = None) -> PluginMcpClient:
    return PluginMcpClient(
        plugin, trusted=True, pool=pool, credentials=credentials or NoCredentials(), backoff_seconds=0.01
    )


async def test_sessions_are_reused_across_requests_and_kept_apart_per_org(
    mcp_server_factory: Callable[..., McpTestServer], pool: McpServerPool
) -> None:
    server = mcp_server_factory("s")
    plugin = plugin_of({"id": "s", "url": server.url})
    [config] = plugin.mcp_servers

    for _ in range(3):  # three requests, each with its own client, as the gateway does
        outcome = await client(plugin, pool).call(config, "echo", {"text": "hi"}, ctx())
        assert outcome.result is not None and outcome.result.text == "echo:hi"

    handshakes = len(server.calls_of("server/discover")) + len(server.calls_of("initialize"))
    assert handshakes == 1 and server.tool_calls("echo") == 3 and len(pool) == 1

    await client(plugin, pool).call(config, "echo", {"text": "other org"}, ctx("org-2"))
    assert len(server.calls_of("server/discover")) + len(server.calls_of("initialize")) == 2
    assert len(pool) == 2


async def test_listing_is_cached_and_refreshed_when_the_server_announces_a_change(
    mcp_server_factory: Callable[..., McpTestServer], pool: McpServerPool
) -> None:
    server = mcp_server_factory("s")
    plugin = plugin_of({"id": "s", "url": server.url})
    [config] = plugin.mcp_servers
    mcp = client(plugin, pool)

    first = {t.name for t in await mcp.list_tools(config, ctx())}
    again = {t.name for t in await mcp.list_tools(config, ctx())}
    assert first == again == {"echo", "slow", "fail", "add", "grow"}
    assert len(server.calls_of("tools/list")) == 1

    await mcp.call(config, "grow", {}, ctx())  # adds "extra" and sends tools/list_changed

    async def listed() -> set[str]:
        return {t.name for t in await mcp.list_tools(config, ctx())}

    with anyio.fail_after(10):
        while "extra" not in await listed():
            await asyncio.sleep(0.02)
    assert len(server.calls_of("tools/list")) >= 2


async def test_listing_expires_after_the_pool_ttl(mcp_server_factory: Callable[..., McpTestServer]) -> None:
    server = mcp_server_factory("s")
    plugin = plugin_of({"id": "s", "url": server.url})
    pool = McpServerPool(tools_ttl_seconds=0)
    try:
        await client(plugin, pool).list_tools(plugin.mcp_servers[0], ctx())
        await client(plugin, pool).list_tools(plugin.mcp_servers[0], ctx())
    finally:
        await pool.aclose()
    assert len(server.calls_of("tools/list")) == 2


async def test_a_503_is_retried_for_an_idempotent_tool_and_a_tool_error_is_not(
    mcp_server_factory: Callable[..., McpTestServer], pool: McpServerPool
) -> None:
    server = mcp_server_factory("s")
    plugin = plugin_of({"id": "s", "url": server.url, "max_retries": 2, "idempotent_tools": ["*"]})
    [config] = plugin.mcp_servers
    mcp = client(plugin, pool)

    server.fail_next(2, status=503)
    outcome = await mcp.call(config, "echo", {"text": "x"}, ctx())
    assert outcome.result is not None and outcome.result.text == "echo:x" and outcome.retries == 2
    assert server.tool_calls("echo") == 3 and server.executions["echo"] == 1

    failed = await mcp.call(config, "fail", {"message": "card declined"}, ctx())
    assert failed.error is None and failed.result is not None and failed.result.is_error
    assert "card declined" in failed.result.text and failed.retries == 0
    assert server.tool_calls("fail") == 1 and server.executions["fail"] == 1


async def test_retries_stop_at_max_retries(
    mcp_server_factory: Callable[..., McpTestServer], pool: McpServerPool
) -> None:
    server = mcp_server_factory("s")
    plugin = plugin_of({"id": "s", "url": server.url, "max_retries": 1, "idempotent_tools": ["echo"]})
    [config] = plugin.mcp_servers
    server.fail_next(5, status=503)

    outcome = await client(plugin, pool).call(config, "echo", {"text": "x"}, ctx())

    assert isinstance(outcome.error, McpServerError) and "HTTP 503" in outcome.error.message
    assert outcome.retries == 1 and server.tool_calls("echo") == 2


async def test_a_slow_tool_times_out_at_the_servers_timeout(
    mcp_server_factory: Callable[..., McpTestServer], pool: McpServerPool
) -> None:
    server = mcp_server_factory("s")
    plugin = plugin_of({"id": "s", "url": server.url, "timeout_ms": 300, "max_retries": 2})
    [config] = plugin.mcp_servers
    mcp = client(plugin, pool)
    await mcp.list_tools(config, ctx())  # connect first: the timeout under test is the call's

    started = time.monotonic()
    outcome = await mcp.call(config, "slow", {"ms": 3000}, ctx())

    assert isinstance(outcome.error, ToolOutcomeUnknown) and outcome.error.timed_out
    assert "300 ms" in outcome.error.message and time.monotonic() - started < 2.0
    assert outcome.retries == 0 and server.tool_calls("slow") == 1  # it may have run: not sent again
    after = await mcp.call(config, "echo", {"text": "still fine"}, ctx())  # the session survives
    assert after.result is not None and after.result.text == "echo:still fine"


async def test_an_at_most_once_call_is_not_retried_once_it_may_have_reached_the_tool(
    mcp_server_factory: Callable[..., McpTestServer], pool: McpServerPool
) -> None:
    """An operation's execution: a 503 or a timeout after sending is reported, never sent again,
    even for a tool declared idempotent."""
    server = mcp_server_factory("s")
    plugin = plugin_of(
        {"id": "s", "url": server.url, "max_retries": 3, "timeout_ms": 400, "idempotent_tools": ["*"]}
    )
    [config] = plugin.mcp_servers
    mcp = client(plugin, pool)
    await mcp.list_tools(config, ctx())  # the session is open: what fails below is the call itself

    server.fail_next(1, status=503)
    refused = await mcp.call(config, "echo", {"text": "x"}, ctx(), at_most_once=True)
    assert isinstance(refused.error, ToolOutcomeUnknown) and not refused.error.transient
    assert "may or may not have acted" in refused.error.message and refused.retries == 0
    assert server.tool_calls("echo") == 1

    slow = await mcp.call(config, "slow", {"ms": 3000}, ctx(), at_most_once=True)
    assert isinstance(slow.error, ToolOutcomeUnknown) and slow.error.timed_out and slow.retries == 0
    assert server.tool_calls("slow") == 1

    server.fail_next(1, status=503)  # the same failure on an ordinary call of it is retried
    retried = await mcp.call(config, "echo", {"text": "y"}, ctx())
    assert retried.result is not None and retried.retries == 1


async def test_an_at_most_once_call_that_could_not_connect_is_retried(
    mcp_server_factory: Callable[..., McpTestServer],
) -> None:
    server = mcp_server_factory("s")
    plugin = plugin_of({"id": "s", "url": server.url, "max_retries": 1, "timeout_ms": 2000})
    server.stop()  # nothing listens: the request provably never left
    pool = McpServerPool()
    try:
        outcome = await client(plugin, pool).call(
            plugin.mcp_servers[0], "echo", {"text": "down"}, ctx(), at_most_once=True
        )
    finally:
        await pool.aclose()
    assert isinstance(outcome.error, McpServerError) and not isinstance(outcome.error, ToolOutcomeUnknown)
    assert outcome.retries == 1


async def test_a_server_that_goes_down_gives_a_transient_error_after_retries(
    mcp_server_factory: Callable[..., McpTestServer], pool: McpServerPool
) -> None:
    server = mcp_server_factory("s")
    plugin = plugin_of({"id": "s", "url": server.url, "max_retries": 1, "timeout_ms": 2000})
    [config] = plugin.mcp_servers
    mcp = client(plugin, pool)
    await mcp.call(config, "echo", {"text": "up"}, ctx())
    await pool.aclose()  # end the open event stream, then stop the server
    server.stop()
    pool_after = McpServerPool()
    try:
        outcome = await client(plugin, pool_after).call(config, "echo", {"text": "down"}, ctx())
    finally:
        await pool_after.aclose()
    assert isinstance(outcome.error, McpServerError) and outcome.error.transient
    assert outcome.retries == 1


async def test_a_session_whose_server_died_is_replaced(
    mcp_server_factory: Callable[..., McpTestServer], pool: McpServerPool
) -> None:
    server = mcp_server_factory("s")
    plugin = plugin_of({"id": "s", "url": server.url, "max_retries": 0, "timeout_ms": 2000})
    [config] = plugin.mcp_servers
    mcp = client(plugin, pool)
    await mcp.call(config, "echo", {"text": "up"}, ctx())
    server.fail_next(1, status=502, rpc_method=None)

    failed = await mcp.call(config, "echo", {"text": "x"}, ctx())
    ok = await mcp.call(config, "echo", {"text": "y"}, ctx())

    assert isinstance(failed.error, ToolOutcomeUnknown) and failed.error.cause.transient
    assert ok.result is not None and ok.result.text == "echo:y"


async def test_a_401_refreshes_the_credentials_and_retries_once(
    mcp_server_factory: Callable[..., McpTestServer], pool: McpServerPool
) -> None:
    server = mcp_server_factory("s", required_bearer="fresh-token-e41c")
    plugin = plugin_of(
        {
            "id": "s",
            "url": server.url,
            "max_retries": 0,
            "auth": {"type": "bearer", "secret_ref": "secret.tok"},
        }
    )
    [config] = plugin.mcp_servers
    vault = BearerCredentials("stale-token-e41c", "fresh-token-e41c")
    run = ctx()

    outcome = await client(plugin, pool, vault).call(config, "echo", {"text": "x"}, run)

    assert outcome.result is not None and outcome.result.text == "echo:x"
    assert vault.invalidated == ["s"]
    statuses = [r.status for r in server.requests]
    assert statuses.count(401) >= 1 and server.executions["echo"] == 1
    assert {"stale-token-e41c", "fresh-token-e41c"} <= run.secret_values  # registered for redaction
    assert all(h["authorization"] == "Bearer fresh-token-e41c" for h in server.tool_call_headers()[-1:])


async def test_credentials_still_refused_after_one_refresh_is_an_error(
    mcp_server_factory: Callable[..., McpTestServer], pool: McpServerPool
) -> None:
    server = mcp_server_factory("s", required_bearer="right")
    plugin = plugin_of(
        {
            "id": "s",
            "url": server.url,
            "max_retries": 3,
            "auth": {"type": "bearer", "secret_ref": "secret.tok"},
        }
    )
    vault = BearerCredentials("wrong-token-e41c")

    outcome = await client(plugin, pool, vault).call(plugin.mcp_servers[0], "echo", {"text": "x"}, ctx())

    assert isinstance(outcome.error, McpServerError) and outcome.error.code == "mcp_unauthorized"
    assert vault.invalidated == ["s"]  # once, and 401 is not retried as a transient failure


async def test_auth_headers_are_fetched_for_every_request_on_a_long_lived_session(
    mcp_server_factory: Callable[..., McpTestServer], pool: McpServerPool
) -> None:
    server = mcp_server_factory("s", required_bearer="tok-e41c")
    plugin = plugin_of({"id": "s", "url": server.url, "auth": {"type": "bearer", "secret_ref": "secret.tok"}})
    vault = BearerCredentials("tok-e41c")
    mcp = client(plugin, pool, vault)

    await mcp.list_tools(plugin.mcp_servers[0], ctx())
    await mcp.call(plugin.mcp_servers[0], "echo", {"text": "1"}, ctx())
    await mcp.call(plugin.mcp_servers[0], "echo", {"text": "2"}, ctx())

    assert vault.requests == 3
    assert all(r.headers.get("authorization") == "Bearer tok-e41c" for r in server.requests)


async def test_forwarded_headers_reach_only_the_server_that_lists_them(
    mcp_server_factory: Callable[..., McpTestServer], pool: McpServerPool
) -> None:
    tenant = mcp_server_factory("tenant")
    other = mcp_server_factory("other")
    plugin = plugin_of(
        {"id": "tenant", "url": tenant.url, "forward_headers": ["x-tenant-id"]},
        {"id": "other", "url": other.url},
    )
    run = ctx(**{"x-tenant-id": "acme", "authorization": "Bearer hw-gateway-key", "cookie": "s=1"})
    mcp = client(plugin, pool)

    await mcp.call(plugin.mcp_servers[0], "echo", {"text": "a"}, run)
    await mcp.call(plugin.mcp_servers[1], "echo", {"text": "b"}, run)

    [sent_tenant] = tenant.tool_call_headers("echo")
    [sent_other] = other.tool_call_headers("echo")
    assert sent_tenant["x-tenant-id"] == "acme" and "x-tenant-id" not in sent_other
    for headers in (sent_tenant, sent_other):
        assert "authorization" not in headers and "cookie" not in headers


async def test_meta_is_sent_in_the_request(
    mcp_server_factory: Callable[..., McpTestServer], pool: McpServerPool
) -> None:
    server = mcp_server_factory("s")
    plugin = plugin_of({"id": "s", "url": server.url})
    mcp = client(plugin, pool)
    assert mcp.has_server("s") and not mcp.has_server("nope")

    result = await mcp.call_mcp_tool("s", "add", {"a": 2, "b": 3}, ctx(), meta={"hatchway/operation": "op_1"})

    assert result.structured == {"result": 5} and not result.is_error
    [request] = server.calls_of("tools/call")
    assert request.meta is not None and request.meta["hatchway/operation"] == "op_1"
    with pytest.raises(McpServerError):
        await mcp.call_mcp_tool("nope", "add", {}, ctx())


async def test_call_mcp_tool_raises_transport_failures_and_returns_tool_errors(
    mcp_server_factory: Callable[..., McpTestServer], pool: McpServerPool
) -> None:
    server = mcp_server_factory("s")
    mcp = client(plugin_of({"id": "s", "url": server.url, "max_retries": 0}), pool)
    assert (await mcp.call_mcp_tool("s", "fail", {"message": "no"}, ctx())).is_error
    server.fail_next(1, status=500)
    with pytest.raises(ToolOutcomeUnknown):
        await mcp.call_mcp_tool("s", "echo", {"text": "x"}, ctx())


async def test_sse_transport(mcp_server_factory: Callable[..., McpTestServer], pool: McpServerPool) -> None:
    server = mcp_server_factory("legacy", transport="sse")
    legacy = {"id": "legacy", "url": server.url, "transport": "sse", "max_retries": 1}
    plugin = plugin_of({**legacy, "idempotent_tools": ["echo"]})
    [config] = plugin.mcp_servers
    mcp = client(plugin, pool)

    assert "echo" in {t.name for t in await mcp.list_tools(config, ctx())}
    ok = await mcp.call(config, "echo", {"text": "over sse"}, ctx())
    server.fail_next(1, status=503)
    retried = await mcp.call(config, "echo", {"text": "again"}, ctx())

    assert ok.result is not None and ok.result.text == "echo:over sse"
    assert retried.result is not None and retried.result.text == "echo:again" and retried.retries == 1


async def test_stdio_transport_reuses_one_process_and_stops_it_on_close() -> None:
    command, args = stdio_command()
    plugin = plugin_of({"id": "local", "command": command, "args": args})
    [config] = plugin.mcp_servers
    pool = McpServerPool()
    mcp = client(plugin, pool)
    try:
        echo = await mcp.call(config, "echo", {"text": "hi"}, ctx())
        first = await mcp.call_mcp_tool("local", "pid", {}, ctx())
        second = await mcp.call_mcp_tool("local", "pid", {}, ctx())
    finally:
        await pool.aclose()
    assert echo.result is not None and echo.result.text == "stdio-echo:hi"
    pid = int(first.text)
    assert pid == int(second.text) and pid != os.getpid()

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    with anyio.fail_after(10):
        while not gone():
            await asyncio.sleep(0.02)


async def test_closing_the_pool_ends_every_session_task(
    mcp_server_factory: Callable[..., McpTestServer],
) -> None:
    server = mcp_server_factory("s")
    pool = McpServerPool()
    plugin = plugin_of({"id": "s", "url": server.url})
    await client(plugin, pool).call(plugin.mcp_servers[0], "echo", {"text": "x"}, ctx())
    assert any(t.get_name() == "mcp:s" for t in asyncio.all_tasks())

    await pool.aclose()

    assert not any(t.get_name() == "mcp:s" and not t.done() for t in asyncio.all_tasks())
    assert len(pool) == 0


async def test_an_untrusted_guarded_client_cannot_connect_to_loopback_even_past_the_plan_check(
    mcp_server_factory: Callable[..., McpTestServer], pool: McpServerPool
) -> None:
    server = mcp_server_factory("s")
    plugin = plugin_of({"id": "s", "url": server.url.replace("127.0.0.1", "localhost")})
    guarded = PluginMcpClient(
        plugin, trusted=False, pool=pool, credentials=NoCredentials(), guard_egress=True, backoff_seconds=0.01
    )

    outcome = await guarded.call(plugin.mcp_servers[0], "echo", {"text": "x"}, ctx())

    assert isinstance(outcome.error, McpServerError) and outcome.error.code == "egress_denied"
    assert not outcome.error.transient and outcome.retries == 0
    assert server.requests == []


async def test_a_server_that_never_answers_the_handshake_does_not_wedge_the_pool(pool: McpServerPool) -> None:
    import socket

    with socket.socket() as silent:  # accepts connections (backlog) but never reads or answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/mcp"
        plugin = plugin_of({"id": "s", "url": url, "timeout_ms": 300, "max_retries": 0})
        mcp = client(plugin, pool)

        for _ in range(2):  # the second call opens a new session instead of waiting on the first
            started = time.monotonic()
            outcome = await mcp.call(plugin.mcp_servers[0], "echo", {"text": "x"}, ctx())
            assert outcome.error is not None and outcome.error.transient
            assert time.monotonic() - started < 2.0
        with anyio.fail_after(5):  # the half-open session gives up by itself, it does not linger
            while len(pool):
                await asyncio.sleep(0.02)
