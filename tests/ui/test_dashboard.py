"""The dashboard at /ui driven in headless Chromium: sign in, requests and a run's steps, secrets,
operations (confirm → verdict), MCP servers and the responses tree."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from hatchway.config.agent_files import agent_files_in, load_agent_tools
from hatchway.engine.context import RunContext
from hatchway.engine.tools.operations.service import OperationService
from hatchway.principal import Principal
from tests.support.agent_loop import rounds, rule_for, summarise
from tests.support.browser import Dashboard
from tests.support.contas import RunningContas
from tests.support.gateway import RunningGateway
from tests.support.mcp_servers import McpTestServer
from tests.support.paths import EXAMPLE_AGENT
from tests.support.scripted_llm import Reply, ScriptedLLM

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")
expect = sync_api.expect
Page = sync_api.Page


def sign_in(dashboard: Dashboard, gateway: RunningGateway, key: str | None = None) -> Page:
    page = dashboard.open(f"{gateway.url}/ui")
    page.get_by_label("API key").fill(key or gateway.key)
    page.get_by_role("button", name="Sign in").click()
    return page


def test_static_files_are_served_with_a_strict_policy_and_no_key(gateway: RunningGateway) -> None:
    index = httpx.get(f"{gateway.url}/ui", follow_redirects=True)
    assert index.status_code == 200 and "<title>Hatchway</title>" in index.text
    assert "default-src 'self'" in index.headers["content-security-policy"]
    script = httpx.get(f"{gateway.url}/ui/js/app.js")
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    assert "http://" not in index.text and "https://" not in index.text  # nothing from a CDN


def test_sign_in_filter_requests_and_open_a_run(
    mcp_server_factory: Callable[..., McpTestServer],
    gateway_factory,
    llm: ScriptedLLM,
    tmp_path: Path,
    dashboard: Dashboard,
) -> None:
    search = mcp_server_factory("search")
    plugin = {"mcp_servers": [{"id": "search", "url": search.url, "tools": ["echo", "add"]}]}
    gateway = gateway_factory(**rule_for(tmp_path, plugin))

    def script(body: dict[str, Any]) -> Reply:
        if body["messages"][-1]["content"] == "plain":
            return Reply("just text")
        return rounds(
            Reply(tool_calls=[("search__echo", {"text": "porto"}), ("search__add", {"a": 1, "b": 2})]),
            summarise,
        )(body)

    llm.handler = script
    client = gateway.client(default_headers={"X-On-Behalf-Of": "marta"})
    tool_run = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "tools please"}]
    )
    client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "plain"}])
    run_id = tool_run.headers["x-hatchway-request-id"]

    page = sign_in(dashboard, gateway, key="hw-not-a-key")
    expect(page.get_by_role("alert")).to_have_text("That API key was not accepted.")
    page.get_by_label("API key").fill(gateway.key)
    page.get_by_role("button", name="Sign in").click()

    rows = page.get_by_role("table", name="Request log, newest first").get_by_role("row")
    expect(rows).to_have_count(3)  # header + two runs
    page.get_by_label("Only runs with tool calls").check()
    expect(rows).to_have_count(2)
    expect(page.get_by_role("link", name=f"Open run {run_id}")).to_be_visible()

    page.get_by_role("link", name=f"Open run {run_id}").click()
    expect(page.get_by_role("heading", name=f"Run {run_id}")).to_be_visible()
    steps = page.get_by_role("list", name="Steps").get_by_role("listitem")
    expect(steps).to_have_count(4)
    expect(steps.nth(0)).to_have_accessible_name(re.compile(r"^Model call · round 1, \d+ ms, 11 tokens in"))
    expect(steps.nth(1)).to_have_accessible_name(re.compile(r"^Tool search › (echo|add) · round 1"))
    expect(steps.nth(3)).to_have_accessible_name(re.compile(r"^Model call · round 2"))
    echo = page.get_by_role("listitem").filter(has_text="Tool search › echo")
    echo.get_by_text("Details").click()
    expect(echo.get_by_text('{"text": "porto"}')).to_be_visible()
    expect(echo.get_by_text("echo:porto", exact=True)).to_be_visible()
    expect(page.get_by_text("rule:research")).to_be_visible()
    expect(page.get_by_text("marta")).to_be_visible()

    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_label("API key")).to_be_visible()


def test_add_a_secret_and_see_it_listed_without_its_value(
    gateway: RunningGateway, dashboard: Dashboard
) -> None:
    value = "sk-ui-test-0f9e8d7c6b5a"
    page = sign_in(dashboard, gateway)
    page.get_by_role("link", name="Secrets").click()
    expect(page.get_by_text("No secrets yet.")).to_be_visible()

    page.get_by_label("Name").fill("billing_key")
    page.get_by_label("Value").fill(value)
    page.get_by_label("Allowed hosts (optional, comma-separated)").fill("api.billing.example")
    page.get_by_role("button", name="Add secret").click()

    listed = page.get_by_role("table", name=re.compile("Secrets of this organisation"))
    expect(listed.get_by_role("row").filter(has_text="billing_key")).to_contain_text("api.billing.example")
    expect(page.get_by_label("Value")).to_have_value("")
    assert value not in page.content()
    stored = httpx.get(f"{gateway.url}/v1/secrets", headers={"authorization": f"Bearer {gateway.key}"}).json()
    assert [s["name"] for s in stored["data"]] == ["billing_key"]

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Delete secret billing_key").click()
    expect(page.get_by_text("No secrets yet.")).to_be_visible()


def pending_operation(gateway: RunningGateway, contas: RunningContas) -> str:
    """A cancellation put up for confirmation by the real operations flow against the example server."""
    assert gateway.org is not None
    agent = load_agent_tools(agent_files_in(EXAMPLE_AGENT))
    service = OperationService("contas", agent, gateway.gateway.operations, gateway.settings.operations)
    ctx = RunContext(principal=Principal(gateway.org.org_id, "acme"), session_key="s1", on_behalf_of="ana")
    arguments = {"subject": "Produto A, Produto B e Produto C"}
    step = gateway.server.call(
        service.call("cancelar_vas_avulso", arguments, ctx, contas.caller(), call_id="c1")
    )
    assert step.operation is not None
    return step.operation.id


def test_confirm_a_pending_operation_and_see_its_verdict(
    agent_gateway: RunningGateway, contas: RunningContas, dashboard: Dashboard
) -> None:
    op_id = pending_operation(agent_gateway, contas)
    page = sign_in(dashboard, agent_gateway)
    page.get_by_role("link", name="Operations").click()

    pending = page.get_by_role("region", name="Pending (1)")
    card = pending.get_by_role("article", name=re.compile(op_id))
    expect(card).to_contain_text("Você confirma o cancelamento de Produto A, Produto B e Produto C?")
    card.get_by_role("button", name=f"Confirm operation {op_id}").click()

    done = page.get_by_role("region", name="Others (1)").get_by_role("article", name=re.compile(op_id))
    expect(done.get_by_test_id("verdict")).to_have_text("PARTIAL_SUCCESS")
    items = done.get_by_role("table", name=f"Items of {op_id}")
    expect(items.get_by_role("row").filter(has_text="Produto B")).to_contain_text("failed")
    expect(items.get_by_role("row").filter(has_text="Produto A")).to_contain_text("succeeded")
    expect(page.get_by_role("region", name="Pending (0)")).to_be_visible()
    expect(page.get_by_role("status")).to_have_text(f"Operation {op_id}: PARTIAL_SUCCESS")
    assert contas.backend.executions == {op_id: 1}


def test_mcp_servers_and_the_responses_tree(
    mcp_server_factory: Callable[..., McpTestServer],
    gateway_factory,
    llm: ScriptedLLM,
    tmp_path: Path,
    dashboard: Dashboard,
) -> None:
    search = mcp_server_factory("search")
    plugin = {"mcp_servers": [{"id": "search", "url": search.url, "tools": ["echo"]}]}
    gateway = gateway_factory(
        **rule_for(tmp_path, plugin),
        agents=[{"name": "lead", "model": "gpt-4o", "subagents": {"enabled": True}}],
    )

    def script(body: dict[str, Any]) -> Reply:
        task = next(m["content"] for m in body["messages"] if m["role"] == "user")
        if any(m["role"] == "tool" for m in body["messages"]):
            return Reply("both children answered")
        if task == "top":
            return Reply(
                tool_calls=[("spawn_subagent", {"task": "north"}), ("spawn_subagent", {"task": "south"})]
            )
        return Reply(f"report from {task}")

    llm.handler = script
    parent = gateway.client().responses.create(model="agent:lead", input="top")

    page = sign_in(dashboard, gateway)
    page.get_by_role("link", name="MCP servers").click()
    servers = page.get_by_role("table", name="Servers configured in hatchway.yaml")
    row = servers.get_by_role("row").filter(has_text="rule:research")
    expect(row).to_contain_text("reachable")
    expect(row).to_contain_text("echo")

    page.get_by_role("link", name="Responses").click()
    tree = page.get_by_role("tree", name="Responses and their subagents")
    item = tree.get_by_role("treeitem", name=re.compile(parent.id))
    expect(item).to_contain_text("both children answered")
    item.get_by_role("button", name="Show 2 subagent responses").click()
    children = item.get_by_role("group").get_by_role("treeitem")
    expect(children).to_have_count(2)
    expect(item.get_by_role("group")).to_contain_text("report from north")
    expect(item.get_by_role("group")).to_contain_text("report from south")
