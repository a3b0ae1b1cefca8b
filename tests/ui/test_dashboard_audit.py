"""The dashboard's Keys and Audit pages in headless Chromium: an admin key sees its organisation's
keys and the audit trail of the changes made (a key created, a secret written, a role denial), in
chain order, as text; a viewer key is told which role the pages need."""

from __future__ import annotations

import httpx
import pytest

from tests.support.browser import Dashboard
from tests.support.gateway import RunningGateway

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")
expect = sync_api.expect


def test_an_admin_reads_the_keys_and_the_audit_trail(gateway: RunningGateway, dashboard: Dashboard) -> None:
    assert gateway.org is not None
    admin = {"authorization": f"Bearer {gateway.key}"}
    made = httpx.post(
        f"{gateway.url}/v1/admin/orgs/{gateway.org.org_id}/keys", json={"name": "<b>web</b>"}, headers=admin
    )
    assert made.status_code == 201
    assert (
        httpx.put(
            f"{gateway.url}/v1/secrets/stripe", json={"value": "sk-page-3c1"}, headers=admin
        ).status_code
        == 201
    )
    viewer = httpx.post(
        f"{gateway.url}/v1/admin/orgs/{gateway.org.org_id}/keys",
        json={"name": "r", "role": "viewer"},
        headers=admin,
    ).json()["key"]
    denied = httpx.delete(f"{gateway.url}/v1/secrets/stripe", headers={"authorization": f"Bearer {viewer}"})
    assert denied.status_code == 403

    page = dashboard.open(f"{gateway.url}/ui")
    page.get_by_label("API key").fill(gateway.key)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("link", name="Keys").click()
    keys = page.get_by_role("table", name="API keys of this organisation (values are never shown)")
    expect(keys).to_contain_text("<b>web</b>")  # a name is text, never markup
    page.get_by_role("link", name="Audit").click()
    trail = page.get_by_role("table", name="Audit trail entries, oldest first")
    expect(trail.get_by_role("row").filter(has_text="key.create")).to_have_count(2)  # web, then the viewer
    expect(trail.get_by_role("row").filter(has_text="key.create").first).to_contain_text("key:")
    expect(trail.get_by_role("row").filter(has_text="secret.put")).to_contain_text("secret:stripe")
    expect(trail.get_by_role("row").filter(has_text="access.denied")).to_contain_text("denied")
    assert "sk-page-3c1" not in page.content()

    assert page.context.browser is not None
    other = page.context.browser.new_context().new_page()  # a second person, apart from the first
    other.goto(f"{gateway.url}/ui")
    other.get_by_label("API key").fill(viewer)
    other.get_by_role("button", name="Sign in").click()
    other.goto(f"{gateway.url}/ui/#/audit")
    expect(other.get_by_text("admin role")).to_be_visible()
