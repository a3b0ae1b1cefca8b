"""The dashboard's Tool pins page in headless Chromium: a tool an MCP server redefined after it was
pinned, shown with its diff and approved from the page (``GET/POST /v1/tools/drift``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.engine.guards.test_tool_pinning import POISON, _offered, withheld_echo
from tests.support.browser import Dashboard
from tests.support.mcp_servers import McpTestServer
from tests.support.scripted_llm import ScriptedLLM

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")
expect = sync_api.expect


def test_a_drifted_tool_is_shown_with_its_diff_and_approved_from_the_page(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory, llm: ScriptedLLM, dashboard: Dashboard
) -> None:
    gateway, headers = withheld_echo(mcp_server_factory, gateway_factory, llm)

    page = dashboard.open(f"{gateway.url}/ui")
    page.get_by_label("API key").fill(gateway.key)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("link", name="Tool pins").click()
    pin = page.get_by_role("region", name="inl/echo")
    expect(pin).to_contain_text("changed")
    expect(pin.locator(".removed")).to_contain_text('"description": "Echo the text back."')
    expect(pin.locator(".added")).to_contain_text(POISON)  # as text: a description is never markup

    page.on("dialog", lambda dialog: dialog.accept())
    pin.get_by_role("button", name="Approve inl/echo").click()
    expect(page.get_by_text("Every tool is as it was approved.")).to_be_visible()
    assert _offered(gateway, llm, headers)[0]["inl__echo"] == POISON
