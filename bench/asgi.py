"""How the benchmarks' raw ASGI servers are served (no imports at the top: an upstream stays small)."""

from __future__ import annotations

from typing import Any


def serve(app: Any, port: int) -> None:
    """Serve ``app`` on loopback as the benchmarks' servers run: uvloop + httptools, no access log."""
    import uvicorn

    options = {"log_level": "warning", "access_log": False, "loop": "uvloop", "http": "httptools"}
    uvicorn.run(app, host="127.0.0.1", port=port, **options)
