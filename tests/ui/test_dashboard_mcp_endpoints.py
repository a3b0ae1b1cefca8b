"""The dashboard's MCP endpoints page in headless Chromium: each endpoint the organisation may use,
its tools (operations marked) and its recent calls, each opening the run it was logged as."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support.agent_loop import write_plugin
from tests.support.browser import Dashboard
from tests.support.contas import RunningContas
from tests.support.gateway import RunningGateway
from tests.support.mcp_servers import McpTestServer

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")
expect = sync_api.expect
Page = sync_api.Page


def sign_in(dashboard: Dashboard, gateway: RunningGateway) -> Page:
    page = dashboard.open(f"{gateway.url}/ui")
    page.get_by_label("API key").fill(gateway.key)
    page.get_by_role("button", name="Sign in").click()
    return page


def call_add(gateway: RunningGateway) -> None:
    async def run() -> None:
        headers = {"authorization": f"Bearer {gateway.key}", "x-on-behalf-of": "marta"}
        http = httpx2.AsyncClient(headers=headers, timeout=30)
        transport = streamable_http_client(f"{gateway.url}/mcp/tools", http_client=http)
        async with Client(transport, mode="auto") as client:  # type: ignore[arg-type]
            assert (await client.call_tool("calc__add", {"a": 2, "b": 3})).content[0].text == "5"

    asyncio.run(run())


def test_mcp_endpoints_their_tools_and_recent_calls(
    mcp_server_factory: Callable[..., McpTestServer],
    contas: RunningContas,
    gateway_factory: Any,
    tmp_path: Path,
    dashboard: Dashboard,
) -> None:
    upstream = mcp_server_factory("calc")
    plugin = write_plugin(tmp_path, "calc", {"mcp_servers": [{"id": "calc", "url": upstream.url}]})
    gateway: RunningGateway = gateway_factory(
        allow_private_mcp_urls=True,
        agents=[contas.agent(tmp_path / "contas")],
        mcp_endpoints=[
            {"name": "tools", "plugin": plugin, "tools": ["calc__add", "calc__echo"]},
            {"name": "only-acme", "plugin": plugin, "organisations": ["acme"]},
            {"name": "contas", "agent": "contas"},
        ],
    )
    call_add(gateway)  # before the browser: Playwright's sync API owns this thread's event loop

    page = sign_in(dashboard, gateway)
    page.get_by_role("link", name="MCP endpoints").click()
    expect(page.get_by_role("heading", name="MCP endpoints", level=1)).to_be_visible()
    tools = page.get_by_role("article", name="tools /mcp/tools")
    expect(tools).to_contain_text("plugin:calc.yaml")
    tool_rows = tools.get_by_role("table", name="Tools of tools").get_by_role("row")
    expect(tool_rows).to_have_count(3)  # header + the allowlist's two tools
    expect(tool_rows.filter(has_text="calc__add")).to_contain_text("Add two integers.")
    calls = tools.get_by_role("table", name="Recent calls to tools, newest first").get_by_role("row")
    expect(calls).to_have_count(2)
    expect(calls.nth(1)).to_contain_text("calc__add")
    expect(calls.nth(1)).to_contain_text("marta")
    expect(calls.nth(1)).to_contain_text("ok")
    expect(page.get_by_role("article", name=re.compile("only-acme"))).to_have_count(0)

    contas_card = page.get_by_role("article", name="contas /mcp/contas")
    operations = contas_card.get_by_role("table", name="Tools of contas").get_by_role("row")
    expect(operations.filter(has_text="cancelar_vas_avulso")).to_contain_text("operation")
    expect(operations.filter(has_text="consultar_pedidos")).not_to_contain_text("operation")
    expect(contas_card.get_by_text("No calls through this endpoint yet.")).to_be_visible()

    link = calls.nth(1).get_by_role("link", name=re.compile(r"^Open run log_"))
    run_id = link.get_attribute("aria-label").removeprefix("Open run ")  # type: ignore[union-attr]
    link.click()
    expect(page.get_by_role("heading", name=f"Run {run_id}")).to_be_visible()
    expect(page.get_by_text("endpoint:tools")).to_be_visible()
