"""Headless Chromium for the dashboard tests: Debian's system browser driven by Playwright.

No browser is downloaded: Playwright launches ``/usr/bin/chromium`` (``.ci/run`` installs Debian's
``chromium``). Without it the browser tests skip and say why. When a test fails, a screenshot of
the page it was on and of every dashboard page is saved under the test's ``tmp_path``.

A module that drives its own browser (people signing in with SSO) asks for ``new_context`` and
defines ``before_browser``: what must be set up before ``chromium`` starts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, Dashboard, missing_browser

if TYPE_CHECKING:  # Playwright is imported when a browser starts: without it, its tests skip
    from playwright.sync_api import Browser, BrowserContext

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
TIMEOUT_MS = 30_000
"""How long a page of ``new_context`` waits (the SSO modules' ``expect`` waits as long)."""


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


@pytest.fixture(scope="module")
def chromium(before_browser: Any) -> Iterator[Browser]:
    """One headless Chromium for the module, started after the module's ``before_browser`` (whose
    set-up runs ``asyncio.run``, which fails in a thread where Playwright's sync API runs); each test
    opens fresh contexts (fresh cookie jars)."""
    from playwright.sync_api import sync_playwright

    playwright = sync_playwright().start()
    browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    yield browser
    browser.close()
    playwright.stop()


@pytest.fixture
def new_context(chromium: Browser) -> Iterator[Callable[[], BrowserContext]]:
    """``new_context()`` → a fresh browser profile (one person); the pages' JavaScript errors fail the
    test."""
    contexts: list[BrowserContext] = []
    errors: list[str] = []

    def make() -> BrowserContext:
        context = chromium.new_context(viewport={"width": 1280, "height": 900})
        context.set_default_timeout(TIMEOUT_MS)
        context.on("page", lambda page: page.on("pageerror", lambda exc: errors.append(str(exc))))
        contexts.append(context)
        return context

    yield make
    for context in contexts:
        context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"
