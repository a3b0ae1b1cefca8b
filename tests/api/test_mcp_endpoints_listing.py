"""``GET /v1/mcp/endpoints``: the ``mcp_endpoints`` an organisation may use, with their tools now
(transactional operations marked) and their recent calls from the run log — only the
organisation's own — after real calls through the endpoints with the official MCP SDK client."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from hatchway.api.mcp_servers import _tools
from hatchway.engine.context import RunContext
from hatchway.errors import McpServerError
from hatchway.principal import Principal
from hatchway.redaction import Redactor
from tests.support.agent_loop import write_plugin
from tests.support.contas import ABC, RunningContas
from tests.support.gateway import RunningGateway
from tests.support.mcp_servers import McpTestServer

OPERATION = "cancelar_vas_avulso"
SECRET = "sk-provider-4d3c2b1a0f9e"


def endpoints(gateway: RunningGateway, key: str | None = None) -> httpx.Response:
    return httpx.get(
        f"{gateway.url}/v1/mcp/endpoints",
        headers={"authorization": f"Bearer {key or gateway.key}"},
        timeout=30,
    )


def call(gateway: RunningGateway, endpoint: str, key: str, user: str, tool: str, arguments: dict) -> Any:
    async def run() -> types.CallToolResult:
        headers = {"authorization": f"Bearer {key}", "x-on-behalf-of": user}
        http = httpx2.AsyncClient(headers=headers, timeout=30)
        transport = streamable_http_client(f"{gateway.url}/mcp/{endpoint}", http_client=http)
        async with Client(transport, mode="auto") as client:  # type: ignore[arg-type]
            return await client.call_tool(tool, arguments)

    return asyncio.run(run())


def test_each_endpoint_with_its_tools_and_the_organisations_own_recent_calls(
    mcp_server_factory: Callable[..., McpTestServer],
    contas: RunningContas,
    gateway_factory: Any,
    tmp_path: Path,
) -> None:
    upstream = mcp_server_factory("calc")
    plugin = write_plugin(tmp_path, "calc", {"mcp_servers": [{"id": "calc", "url": upstream.url}]})
    gateway: RunningGateway = gateway_factory(
        allow_private_mcp_urls=True,
        agents=[contas.agent(tmp_path / "contas")],
        mcp_endpoints=[
            {"name": "tools", "plugin": plugin, "tools": ["calc__add", "calc__echo"]},
            {"name": "only-acme", "plugin": plugin, "organisations": ["acme"], "resources": True},
            {"name": "contas", "agent": "contas"},
        ],
    )
    acme = gateway.new_org("acme")
    assert call(gateway, "tools", gateway.key, "alice", "calc__add", {"a": 2, "b": 3}).content[0].text == "5"
    assert not call(gateway, "tools", gateway.key, "bob", "calc__echo", {"text": "hi"}).is_error
    pending = call(gateway, "contas", gateway.key, "alice", OPERATION, ABC).structured_content
    assert pending is not None and pending["status"] == "AWAITING_CONFIRMATION"
    call(gateway, "tools", acme.key, "carol", "calc__add", {"a": 1, "b": 1})
    call(gateway, "only-acme", acme.key, "carol", "calc__fail", {"message": "no"})

    response = endpoints(gateway)
    assert response.status_code == 200, response.text
    mine = {e["name"]: e for e in response.json()["data"]}
    assert list(mine) == ["tools", "contas"]  # 'only-acme' is not this organisation's
    tools = mine["tools"]
    assert tools["path"] == "/mcp/tools" and tools["source"] == "plugin:calc.yaml"
    assert tools["allowed_tools"] == ["calc__add", "calc__echo"] and tools["tools_error"] is None
    assert (tools["namespace"], tools["resources"], tools["prompts"]) == (True, False, False)
    assert [(t["name"], t["description"], t["operation"]) for t in tools["tools"]] == [
        ("calc__add", "Add two integers.", False),
        ("calc__echo", "Echo the text back.", False),
    ]
    recent = tools["recent_calls"]  # newest first; acme's call through the same endpoint is not here
    assert [(c["tool"], c["on_behalf_of"], c["outcome"], c["server"]) for c in recent] == [
        ("calc__echo", "bob", "ok", "calc"),
        ("calc__add", "alice", "ok", "calc"),
    ]
    assert all(c["duration_ms"] > 0 and c["at"] > 0 and "operation_id" not in c for c in recent)
    logged = httpx.get(
        f"{gateway.url}/v1/logs",
        params={"route": "mcp:tools"},
        headers={"authorization": f"Bearer {gateway.key}"},
    ).json()["data"]
    assert [c["log_id"] for c in recent] == [r["id"] for r in logged]
    assert {r["route"] for r in logged} == {"mcp:tools"} and len(logged) == 2

    contas_endpoint = mine["contas"]
    assert contas_endpoint["source"] == "agent:contas" and contas_endpoint["allowed_tools"] == "*"
    kinds = {t["name"]: t["operation"] for t in contas_endpoint["tools"]}
    assert kinds[OPERATION] is True and kinds["consultar_pedidos"] is False
    assert kinds["confirm_operation"] is False  # the endpoint's own tool, not an operation
    [asked] = contas_endpoint["recent_calls"]
    assert asked["tool"] == OPERATION and asked["on_behalf_of"] == "alice"
    assert asked["operation_id"] == pending["operation_id"]
    assert asked["operation_status"] == "AWAITING_CONFIRMATION"

    theirs = {e["name"]: e for e in endpoints(gateway, acme.key).json()["data"]}
    assert list(theirs) == ["tools", "only-acme", "contas"]
    assert [(c["tool"], c["on_behalf_of"]) for c in theirs["tools"]["recent_calls"]] == [
        ("calc__add", "carol")
    ]
    assert theirs["contas"]["recent_calls"] == []  # the first organisation's operation is not theirs
    only = theirs["only-acme"]
    assert only["resources"] is True and only["allowed_tools"] == "*"
    assert {"calc__add", "calc__echo", "calc__fail"} <= {t["name"] for t in only["tools"]}
    assert [(c["tool"], c["outcome"]) for c in only["recent_calls"]] == [("calc__fail", "tool_error")]
    assert endpoints(gateway, "hw-wrong").status_code == 401


def test_no_endpoint_configured_is_an_empty_list(gateway: RunningGateway) -> None:
    response = endpoints(gateway)
    assert response.status_code == 200 and response.json() == {"object": "list", "data": []}


class _Failing:
    """An endpoint whose listing fails: ``listed_tools`` raises."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.operations = None
        self.config = type("Config", (), {"name": "broken"})()

    async def listed_tools(self, ctx: RunContext) -> list[types.Tool]:
        raise self.error


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (McpServerError(f"the server answered 500 with {SECRET}"), "the server answered 500 with [REDACTED]"),
        (RuntimeError("a bug"), "listing the tools failed (RuntimeError)"),
    ],
)
async def test_a_listing_that_fails_is_reported_not_raised(error: Exception, expected: str) -> None:
    known = Redactor([SECRET])
    ctx = RunContext.from_headers(Principal("org_1", "acme"), {}, deadline_seconds=5, known_secrets=known)
    assert await _tools(_Failing(error), ctx) == (None, expected)  # type: ignore[arg-type]
