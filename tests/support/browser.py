"""Headless Chromium for dashboard tests: Debian's system browser driven by Playwright (no download)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

CHROMIUM = os.environ.get("HATCHWAY_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def missing_browser() -> str | None:
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        return f"Chromium not found at {CHROMIUM}: apt-get install chromium (.ci/run installs it)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed (pip install -e '.[dev]')"
    return None


class Dashboard:
    """Opens the dashboard in a fresh headless Chromium, lazily.

    Playwright's sync API owns an event loop in this thread while it runs, which makes
    ``asyncio.run`` fail here (starting a gateway, creating an org): so set up everything first,
    then call ``open()``.
    """

    def __init__(self) -> None:
        self._playwright: Any = None
        self._browser: Any = None
        self.page: Any = None
        self.errors: list[str] = []

    def open(self, url: str) -> Any:
        from playwright.sync_api import sync_playwright

        self._playwright = sync_playwright().start()
        self._browser = self._playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = self._browser.new_context(viewport={"width": 1280, "height": 900})
        context.set_default_timeout(10_000)
        self.page = context.new_page()
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.goto(url)
        return self.page

    def close(self) -> None:
        if self._browser is not None:
            self._browser.close()
        if self._playwright is not None:
            self._playwright.stop()
