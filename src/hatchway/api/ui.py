"""``/ui``: the dashboard, static files shipped in the package (no build step, nothing from a CDN).

The pages call the ``/v1`` API with the API key the user signs in with; the files themselves are
public. A strict Content-Security-Policy keeps the pages to their own scripts and the gateway.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI
from starlette.responses import RedirectResponse
from starlette.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).resolve().parent.parent / "ui" / "static"
SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-cache"),
]


class DashboardFiles(StaticFiles):
    """``StaticFiles`` that adds the dashboard's security headers to every answer."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def send_with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await super().__call__(scope, receive, send_with_headers)


def mount_dashboard(app: FastAPI) -> None:
    """Serve the dashboard at ``/ui/`` (``/ui`` redirects there)."""

    @app.get("/ui", include_in_schema=False)
    async def _ui_root() -> RedirectResponse:
        return RedirectResponse("/ui/", status_code=307)

    app.mount("/ui", DashboardFiles(directory=STATIC_DIR, html=True), name="ui")
