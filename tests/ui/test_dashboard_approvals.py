"""The dashboard's Approvals inbox in a real browser: Debian's Chromium driven by Playwright, people
signed in with SSO against a real OpenID provider on loopback (the npm ``oidc-provider``, its own
login page filled in, as ``test_sso.py`` does), over two gateway replicas on one database
(PostgreSQL when ``HATCHWAY_TEST_DATABASE_URL`` is set, else one SQLite file), no Redis.

The shop agent of ``tests/engine/tools/operations/test_approvals.py`` (its tools.yaml and
tool_policies.yaml; the shop's MCP server, its ledger and the scripted model of
``tests/support/approvals.py``): a refund over 500 waits for the group ``supervisors``. The
requester, ana, is an app's end user (an ``app`` key with ``X-On-Behalf-Of``). sam is in
``supervisors`` (mapped to role ``app``); rita is an admin of the organisation but not a supervisor.

sam approves ana's background refund in the inbox, and her background response (running on the
replica that accepted it) completes with the verdict; rita, opening the notification's link, is told
why she cannot decide it; a rejection in the inbox cancels, and a run that read a tool's output
carries its warning to the approver.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from hatchway.principal import Role
from tests.engine.tools.operations.test_approvals import POLICIES, TOOLS
from tests.support.approvals import (
    Shop,
    ended_response,
    start_background,
    start_shop_and_model,
    write_shop_agent,
)
from tests.support.gateway import OrgKey, RunningGateway, base_config, create_org_key
from tests.support.servers import wait_until
from tests.ui.test_sso import TIMEOUT_MS, sign_in, sso_set_up

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")
expect = sync_api.Expect()  # this module's own, with generous waits
expect.set_options(timeout=TIMEOUT_MS)
Page = sync_api.Page
BrowserContext = sync_api.BrowserContext

ORG = "shop"
ACCOUNTS = {
    "sam": {"name": "Sam Supervisor", "email": "sam@example.com", "groups": ["supervisors"]},
    "rita": {"name": "Rita Admin", "email": "rita@example.com", "groups": ["shop-admins"]},
}
ROLE_MAPPINGS = [
    {"group": "supervisors", "role": "app", "organisation": ORG},
    {"group": "shop-admins", "role": "admin", "organisation": ORG},
]
DEADLINE = 60.0
"""Seconds a poll waits for the gateway (a background run, an operation reaching the inbox)."""


@dataclass
class World:
    a: RunningGateway
    b: RunningGateway
    shop: Shop
    requester: OrgKey
    """The app's key (role ``app``) of the organisation ``shop``."""

    def as_ana(self, **extra: str) -> dict[str, str]:
        return {"authorization": f"Bearer {self.requester.key}", "x-on-behalf-of": "ana", **extra}

    def awaiting(self, match: Callable[[dict[str, Any]], bool], message: str) -> dict[str, Any]:
        """ana's operation that ``match``es, once it awaits approval (polled, with a deadline)."""

        def found() -> dict[str, Any] | None:
            answer = httpx.get(
                f"{self.a.url}/v1/operations",
                params={"status": "AWAITING_APPROVAL", "limit": 200},
                headers=self.as_ana(),
                timeout=30,
            )
            assert answer.status_code == 200, answer.text
            return next((op for op in answer.json()["data"] if match(op)), None)

        return wait_until(found, timeout=DEADLINE, interval=0.2, message=message)

    def chat(self, session: str, text: str) -> httpx.Response:
        return httpx.post(
            f"{self.a.url}/v1/chat/completions",
            json={"model": "agent:shop", "messages": [{"role": "user", "content": text}]},
            headers=self.as_ana(**{"hatchway-session": session}),
            timeout=60,
        )


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with sso_set_up(tmp_path_factory, "approvals_ui", ACCOUNTS, ROLE_MAPPINGS) as setup:
        llm, shop = start_shop_and_model(setup.cleanup)
        agent = write_shop_agent(setup.tmp, shop, TOOLS, POLICIES, {"prompt_guard_on_tool_output": True})
        config = base_config(
            setup.tmp,
            llm.base_url,
            setup.database_url,
            access={"sso": setup.sso},
            allow_private_mcp_urls=True,
            agents=[agent],
        )
        requester = asyncio.run(create_org_key(setup.database_url, ORG, role=Role.APP))
        a, b = setup.replicas(config, requester)
        yield World(a, b, shop, requester)


@pytest.fixture(scope="module")
def before_browser(world: World) -> World:
    """What ``chromium`` (tests/ui/conftest.py) starts after: the world."""
    return world


def inbox_row(page: Page, order_id: str) -> Any:
    """The inbox's row of the refund of ``order_id`` (its arguments are in the row)."""
    return page.get_by_role("row").filter(has_text=order_id)


def test_a_supervisor_approves_in_the_inbox_and_the_background_response_completes(
    world: World, new_context: Callable[[], BrowserContext]
) -> None:
    text = 'CALL issue_refund {"order_id": "R-UI", "amount": 900}'
    response_id = start_background(world.a.url, text, world.as_ana())["id"]
    op = world.awaiting(lambda o: o["response_id"] == response_id, "the refund to await approval")
    assert world.shop.count("issue_refund", order_id="R-UI") == 0

    # sam opens the inbox on the other replica: what waits, who asked, for how much
    page = sign_in(new_context(), world.b, "sam", "#/approvals")
    assert page.url == f"{world.b.url}/ui/#/approvals"
    expect(page.get_by_role("heading", name="Approvals", exact=True)).to_be_visible()
    expect(page.get_by_role("link", name="Approvals", exact=True)).to_have_attribute("aria-current", "page")
    row = inbox_row(page, "R-UI")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("issue_refund")
    expect(row).to_contain_text("ana")
    expect(row).to_contain_text("amount: 900")
    expect(row).to_contain_text("supervisor_over_500")
    expect(row).to_contain_text("group supervisors")
    expect(row).to_contain_text("0 / 1")
    expect(row).to_contain_text("you may decide")

    row.get_by_role("link", name=re.compile("issue_refund")).click()
    page.wait_for_url(f"{world.b.url}/ui/#/approvals/{op['id']}")
    expect(page.get_by_role("heading", name=re.compile("Approval of issue_refund"))).to_be_visible()
    arguments = page.get_by_role("table", name="The arguments it runs with (as resolved)")
    expect(arguments.get_by_role("row").filter(has_text="amount")).to_contain_text("900")
    expect(arguments.get_by_role("row").filter(has_text="order_id")).to_contain_text("R-UI")
    summary = page.get_by_label("Approval summary")
    expect(summary).to_contain_text("ana")
    expect(summary).to_contain_text("AWAITING_APPROVAL")
    expect(page.get_by_role("region", name="The run that led here")).to_contain_text(response_id)
    expect(page.get_by_role("region", name="The run that led here")).to_contain_text("none")

    page.get_by_label("Comment").fill("customer is right <b>ok</b>")
    page.get_by_role("button", name="Approve").click()
    outcome = page.get_by_test_id("approval-outcome")
    expect(outcome.get_by_test_id("outcome-status")).to_have_text("COMPLETED")
    expect(outcome.get_by_test_id("outcome-verdict")).to_have_text("SUCCESS")
    expect(outcome).to_contain_text("sam")
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    decisions = page.get_by_role("table", name="Decisions so far, oldest first")
    expect(decisions).to_contain_text("customer is right <b>ok</b>")  # as text, never as markup
    expect(decisions.locator("b")).to_have_count(0)

    # ana's background response, on the replica that accepted it, ends with the verdict
    done = wait_until(
        lambda: ended_response(world.a.url, response_id, world.as_ana()),
        timeout=DEADLINE,
        interval=0.2,
        message="the background response to end",
    )
    assert done["status"] == "completed", done
    output = json.dumps(done["output"])
    assert "COMPLETED" in output and "SUCCESS" in output, output
    assert world.shop.count("issue_refund", order_id="R-UI") == 1

    page.get_by_role("link", name="← All approvals").click()
    expect(page.get_by_role("heading", name="Approvals", exact=True)).to_be_visible()
    expect(inbox_row(page, "R-UI")).to_have_count(0)  # decided: no longer waiting


def test_a_non_supervisor_is_told_why_and_a_rejection_cancels_a_tainted_run(
    world: World, new_context: Callable[[], BrowserContext]
) -> None:
    text = 'CALL read_order {"order_id": "T-UI"} THEN issue_refund {"order_id": "R-TAINT", "amount": 700}'
    asked = world.chat("ui-tainted", text)
    assert asked.status_code == 200, asked.text
    op_id = asked.headers["x-hatchway-operation-id"]
    world.awaiting(lambda o: o["id"] == op_id, "the tainted refund to await approval")

    # rita follows the notification's link ({inbox_url}/ui/#/approvals/<id>) and signs in on the way
    rita = sign_in(new_context(), world.a, "rita", f"#/approvals/{op_id}")
    assert rita.url == f"{world.a.url}/ui/#/approvals/{op_id}"
    expect(rita.get_by_role("heading", name=re.compile("Approval of issue_refund"))).to_be_visible()
    expect(rita.get_by_test_id("why-not")).to_contain_text("only members of group supervisors decide it")
    expect(rita.get_by_role("button", name="Approve")).to_have_count(0)
    expect(rita.get_by_role("button", name="Reject")).to_have_count(0)
    tainted = rita.get_by_test_id("tainted")
    expect(tainted).to_contain_text("untrusted tool output preceded this")
    expect(tainted).to_contain_text("read_order")
    rita.get_by_role("link", name="← All approvals").click()
    row = inbox_row(rita, "R-TAINT")  # an admin sees the whole inbox, with why not
    expect(row).to_contain_text("only members of group supervisors decide it")
    expect(row).to_contain_text("untrusted tool output preceded this (read_order)")

    sam = sign_in(new_context(), world.b, "sam", "#/approvals")
    inbox_row(sam, "R-TAINT").get_by_role("link", name=re.compile("issue_refund")).click()
    expect(sam.get_by_test_id("tainted")).to_contain_text("read_order")
    sam.get_by_label("Comment").fill("the customer never asked for this")
    sam.get_by_role("button", name="Reject").click()
    outcome = sam.get_by_test_id("approval-outcome")
    expect(outcome.get_by_test_id("outcome-status")).to_have_text("CANCELLED")
    expect(outcome).to_contain_text("rejected by sam: the customer never asked for this")
    assert world.shop.count("issue_refund", order_id="R-TAINT") == 0

    # and rita, who could not decide it, now sees how it ended
    rita.goto(f"{world.a.url}/ui/#/approvals/{op_id}")
    expect(rita.get_by_test_id("outcome-status")).to_have_text("CANCELLED")
    expect(rita.get_by_test_id("why-not")).to_have_count(0)
