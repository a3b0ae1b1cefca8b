"""Headless Chromium for the dashboard tests: Debian's system browser driven by Playwright.

No browser is downloaded: Playwright launches ``/usr/bin/chromium`` (``.ci/run`` installs Debian's
``chromium``). Without it the browser tests skip and say why. When a test fails, a screenshot of
the page it was on and of every dashboard page is saved under the test's ``tmp_path``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import Dashboard, missing_browser

DASHBOARD_PAGES = (
    "requests",
    "spend",
    "operations",
    "approvals",
    "secrets",
    "mcp",
    "mcp-endpoints",
    "pins",
    "responses",
)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.stash[_FAILED] = report.failed
    return report


_FAILED = pytest.StashKey[bool]()


@pytest.fixture
def dashboard(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Dashboard]:
    """``dashboard.open(url)`` → a Playwright page; screenshots under ``tmp_path`` on failure."""
    reason = missing_browser()
    if reason:
        pytest.skip(reason)
    opened = Dashboard()
    try:
        yield opened
        if opened.page is not None and request.node.stash.get(_FAILED, False):
            save_screenshots(opened.page, tmp_path)
    finally:
        opened.close()
    assert not opened.errors, f"JavaScript errors on the page: {opened.errors}"


def save_screenshots(page: Any, tmp_path: Path) -> None:
    """The page as the failure left it, then each dashboard page, as PNGs in ``tmp_path``."""
    shots = tmp_path / "screenshots"
    shots.mkdir(exist_ok=True)
    try:
        page.screenshot(path=str(shots / "at-failure.png"), full_page=True)
        base = page.url.split("#", 1)[0]
        for name in DASHBOARD_PAGES:
            page.goto(f"{base}#/{name}")
            page.wait_for_load_state("networkidle")
            page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
    except Exception as exc:  # a screenshot must never hide the test's own failure
        (shots / "screenshot-error.txt").write_text(repr(exc))
    print(f"dashboard screenshots saved in {shots}")
