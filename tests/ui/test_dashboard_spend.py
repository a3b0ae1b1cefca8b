"""The dashboard's Spend page in headless Chromium: the organisation's cost per day and per model,
key, end user or agent from ``GET /v1/usage``, drawn as bars, with the figures in a table; a run's
own cost on its page."""

from __future__ import annotations

import math
import re

import pytest

from tests.api.test_usage import MODELS, local_usd, table_usd
from tests.support.agent_loop import USER
from tests.support.browser import Dashboard
from tests.support.gateway import RunningGateway
from tests.support.scripted_llm import Reply, ScriptedLLM

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")
expect = sync_api.expect


def usd(value: float) -> str:
    """As the dashboard writes a cost (``dom.js`` ``usd``: cents, or three significant digits)."""
    if value >= 0.01:
        return f"${value:.2f}"
    return f"${value:.{2 - math.floor(math.log10(value))}f}"


def test_the_spend_page_charts_the_cost_per_day_and_per_group(
    gateway_factory, llm: ScriptedLLM, dashboard: Dashboard
) -> None:
    llm.handler = lambda _: Reply("ok", prompt_tokens=11, completion_tokens=7)
    gateway: RunningGateway = gateway_factory(models=MODELS)
    for model, user in (("mini", "alice"), ("mini", "alice"), ("local", "bob"), ("mystery", "bob")):
        gateway.client(default_headers={"X-On-Behalf-Of": user}).chat.completions.create(
            model=model, messages=USER
        )
    mini, local = 2 * table_usd(11, 7), local_usd(11, 7)

    page = dashboard.open(f"{gateway.url}/ui")
    page.get_by_label("API key").fill(gateway.key)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("link", name="Spend").click()
    expect(page.get_by_role("heading", name="Spend", level=1)).to_be_visible()
    expect(page.locator(".spend-total")).to_contain_text(usd(mini + local))
    expect(page.locator(".spend-total")).to_contain_text("4 requests")
    expect(page.locator(".spend-total")).to_contain_text("1 unpriced")

    by_model = page.get_by_role("list", name="Spend by model")
    expect(by_model.get_by_role("listitem")).to_have_count(3)
    expect(by_model.get_by_label(f"local: {usd(local)}")).to_be_visible()
    expect(by_model.get_by_label(f"mini: {usd(mini)}")).to_be_visible()
    expect(by_model.get_by_label("mystery: unknown")).to_be_visible()  # no request of it was priced
    widths = by_model.locator(".bar").evaluate_all("bars => bars.map(b => parseFloat(b.style.width))")
    assert widths[0] == 100 and widths[1] == pytest.approx(100 * mini / local, abs=0.01) and widths[2] == 0

    days = page.get_by_role("list", name="Spend per day (UTC)").get_by_role("listitem")
    expect(days).to_have_count(7)
    expect(days.last).to_have_attribute("aria-label", re.compile(rf": {re.escape(usd(mini + local))}$"))
    heights = days.locator(".bar").evaluate_all("bars => bars.map(b => b.getBoundingClientRect().height)")
    assert heights[-1] > 100 and heights[:-1] == [0] * 6  # today's column, drawn to the chart's height

    rows = page.get_by_role("table", name="Spend by model, the costliest first").get_by_role("row")
    expect(rows).to_have_count(4)
    expect(rows.nth(1)).to_contain_text("local")
    mystery = rows.filter(has_text="mystery").get_by_role("cell")
    expect(mystery.nth(4)).to_have_text("unknown")
    expect(mystery.last).to_have_text("1")  # its unpriced request

    page.get_by_label("Group by").select_option("user")
    by_user = page.get_by_role("list", name="Spend by end user")
    expect(by_user.get_by_role("listitem")).to_have_count(2)
    expect(by_user.get_by_label(f"alice: {usd(mini)}")).to_be_visible()

    page.get_by_role("link", name="Requests").click()
    page.get_by_role("table", name="Request log, newest first").get_by_role("link").last.click()
    expect(page.get_by_role("region", name="Run summary")).to_contain_text(usd(table_usd(11, 7)))
