"""Vault secrets used by MCP plugins, end to end through ``/v1/chat/completions``: secrets stored
with ``PUT /v1/secrets``, an MCP server built with the official SDK that checks the bearer itself,
plugins from hatchway.yaml (trusted) and inline in the request header (scoped by ``allowed_hosts``),
and a leak scan of everything the test saw plus the database (and Redis when configured).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest
from mcp.server.mcpserver import Context

from tests.support.agent_loop import USER, inline, log_of, rounds, rule_for, summarise, tool_steps
from tests.support.backends import REDIS_URL
from tests.support.gateway import RunningGateway
from tests.support.leak_scanner import SecretScanner, put_secret
from tests.support.mcp_servers import McpTestServer, StaticBearers
from tests.support.scripted_llm import Reply, ScriptedLLM


def bearer_server(factory: Callable[..., McpTestServer], *accepted: str) -> McpTestServer:
    """An SDK MCP server that refuses (401) any bearer but ``accepted``, with a ``whoami`` tool that
    echoes the credentials it received (the kind of debugging tool that leaks secrets)."""
    server = factory("search", token_verifier=StaticBearers(*accepted))

    @server.mcp.tool(description="Echo the Authorization header this request carried.")
    def whoami(ctx: Context) -> str:
        return f"you sent {(ctx.headers or {}).get('authorization')}"

    return server


def search_plugin(server: McpTestServer, ref: str = "secret.search_key", **extra: Any) -> dict[str, Any]:
    return {
        "mcp_servers": [
            {"id": "search", "url": server.url, "auth": {"type": "bearer", "secret_ref": ref}, **extra}
        ]
    }


def chat(gateway: RunningGateway, scanner: SecretScanner, key: str | None = None, **headers: str) -> Any:
    """One chat completion (answer text, run record), everything handed to the leak scanner."""
    raw = gateway.client(key, default_headers=headers).chat.completions.with_raw_response.create(
        model="gpt-4o", messages=USER
    )
    record = log_of(gateway, raw.headers["x-hatchway-request-id"], key)
    scanner.observe("chat response", raw.text)
    scanner.observe("run record", json.dumps(record))
    return raw.parse().choices[0].message.content, record


def test_an_inline_plugin_needs_the_secret_allowed_for_its_host_and_the_echo_is_redacted(
    secret_scanner: SecretScanner,
    mcp_server_factory: Callable[..., McpTestServer],
    gateway_factory: Callable[..., RunningGateway],
    llm: ScriptedLLM,
    database_url: str,
) -> None:
    key = f"sk-search-{uuid.uuid4().hex}"
    secret_scanner.watch(key)
    server = bearer_server(mcp_server_factory, key)
    gateway = gateway_factory(database_url=database_url, allow_private_mcp_urls=True)
    secret_scanner.watch_database(database_url)
    put_secret(gateway, gateway.key, "search_key", key, secret_scanner, hosts=["mcp.example.com"])
    plugin = inline(search_plugin(server, tools=["whoami"]))

    with pytest.raises(openai.PermissionDeniedError) as denied:
        chat(gateway, secret_scanner, **{"hatchway-mcp-plugin": plugin})
    error = denied.value.body
    secret_scanner.observe("403 body", json.dumps(error))
    assert error["code"] == "secret_host_not_allowed" and error["param"] == "mcp_servers[0].auth.secret_ref"
    assert "secret 'search_key'" in error["message"] and "host '127.0.0.1'" in error["message"]
    assert server.requests == [] and llm.requests == []

    origin = server.url.removesuffix("/mcp")  # http://127.0.0.1:<port>: scheme and port count too
    put_secret(gateway, gateway.key, "search_key", key, secret_scanner, hosts=[origin])
    llm.handler = rounds(Reply(tool_calls=[("search__whoami", {})]), summarise)
    answer, record = chat(gateway, secret_scanner, **{"hatchway-mcp-plugin": plugin})

    assert answer == "Answer from: you sent Bearer [REDACTED]"
    [step] = tool_steps(record)
    assert step["outcome"] == "ok" and step["result_preview"] == "you sent Bearer [REDACTED]"
    assert [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "tool"] == [
        "you sent Bearer [REDACTED]"
    ]
    assert server.requests and set(server.bearers()) == {key}, "every request carried the bearer"
    assert all(r.answered == 200 for r in server.requests)


def test_organisation_b_gets_its_own_secret_or_not_found_never_a(
    secret_scanner: SecretScanner,
    mcp_server_factory: Callable[..., McpTestServer],
    gateway_factory: Callable[..., RunningGateway],
    llm: ScriptedLLM,
    tmp_path: Path,
) -> None:
    value_a, value_b = f"a-{uuid.uuid4().hex}", f"b-{uuid.uuid4().hex}"
    secret_scanner.watch(value_a, value_b)
    server = bearer_server(mcp_server_factory, value_a, value_b)
    gateway = gateway_factory(allow_private_mcp_urls=True, **rule_for(tmp_path, search_plugin(server)))
    secret_scanner.watch_database(gateway.settings.database_url)
    org_b = gateway.new_org()
    origin = server.url.removesuffix("/mcp")
    put_secret(gateway, gateway.key, "search_key", value_a, secret_scanner, hosts=[origin])
    llm.handler = rounds(Reply(tool_calls=[("search__whoami", {})]), summarise)

    for headers in ({}, {"hatchway-mcp-plugin": inline(search_plugin(server))}):  # hatchway.yaml, inline
        with pytest.raises(openai.NotFoundError) as missing:
            chat(gateway, secret_scanner, org_b.key, **headers)
        secret_scanner.observe("404 body", json.dumps(missing.value.body))
        assert missing.value.body["code"] == "secret_not_found"
        assert missing.value.body["param"] == "mcp_servers[0].auth.secret_ref"
        assert "secret 'search_key' not found" in missing.value.body["message"]
    assert server.requests == [] and llm.requests == []

    put_secret(gateway, org_b.key, "search_key", value_b, secret_scanner)
    answer_b, _ = chat(gateway, secret_scanner, org_b.key)
    answer_a, _ = chat(gateway, secret_scanner)

    assert answer_a == answer_b == "Answer from: you sent Bearer [REDACTED]"
    calls = server.tool_call_headers("whoami")
    assert [h["authorization"] for h in calls] == [f"Bearer {value_b}", f"Bearer {value_a}"]
    assert None not in server.bearers()


@pytest.mark.skipif(not REDIS_URL, reason="Redis not configured: set HATCHWAY_TEST_REDIS_URL")
def test_cached_tool_results_in_redis_are_redacted_too(
    secret_scanner: SecretScanner,
    mcp_server_factory: Callable[..., McpTestServer],
    gateway_factory: Callable[..., RunningGateway],
    llm: ScriptedLLM,
    tmp_path: Path,
) -> None:
    assert REDIS_URL is not None
    key = f"sk-cached-{uuid.uuid4().hex}"
    secret_scanner.watch(key)
    secret_scanner.watch_redis(REDIS_URL)
    server = bearer_server(mcp_server_factory, key)
    plugin = search_plugin(server) | {"agent": {"tool_cache_ttl_seconds": 60}}
    gateway = gateway_factory(redis_url=REDIS_URL, **rule_for(tmp_path, plugin))
    put_secret(gateway, gateway.key, "search_key", key, secret_scanner)
    llm.handler = rounds(Reply(tool_calls=[("search__whoami", {})]), summarise)

    first, _ = chat(gateway, secret_scanner)
    second, record = chat(gateway, secret_scanner)

    assert first == second == "Answer from: you sent Bearer [REDACTED]"
    assert tool_steps(record)[0]["cached"] and server.tool_calls("whoami") == 1


def test_a_secret_in_tool_arguments_and_results_never_reaches_a_debug_log(
    secret_scanner: SecretScanner,
    mcp_server_factory: Callable[..., McpTestServer],
    gateway_factory: Callable[..., RunningGateway],
    llm: ScriptedLLM,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    key = f"sk-debug-{uuid.uuid4().hex}"
    secret_scanner.watch(key)  # it scans every record at DEBUG (root and uvicorn) at teardown
    server = bearer_server(mcp_server_factory, key)
    gateway = gateway_factory(**rule_for(tmp_path, search_plugin(server, tools=["whoami", "echo"])))
    put_secret(gateway, gateway.key, "search_key", key, secret_scanner)
    # The secret rides a tool argument and comes back in a tool result and an echoed header.
    llm.handler = rounds(
        Reply(tool_calls=[("search__echo", {"text": key}), ("search__whoami", {})]), summarise
    )

    answer, _ = chat(gateway, secret_scanner)

    assert answer == "Answer from: echo:[REDACTED] | you sent Bearer [REDACTED]"
    sent = [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("mcp.client") and "'name': 'echo'" in r.getMessage()
    ]
    assert sent, "the MCP SDK logged the tools/call at DEBUG"
    assert all("'text': '[REDACTED]'" in line and key not in line for line in sent)
