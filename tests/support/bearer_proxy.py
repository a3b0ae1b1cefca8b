"""A loopback reverse proxy that adds ``Authorization: Bearer <key>`` to every request, for clients
that cannot send a header (the MCP conformance suite's server mode has no option for one).

Everything else passes through unchanged — ``Host`` and ``Origin`` included, so the gateway's own
DNS-rebinding checks are what a test exercises — and responses stream as they arrive (SSE).
"""

from __future__ import annotations

from typing import Any

import httpx
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "content-length"}


def bearer_proxy(target: str, key: str) -> Any:
    """An ASGI app forwarding to ``target`` (``http://127.0.0.1:port``) with ``key`` as bearer."""
    client = httpx.AsyncClient(base_url=target, timeout=httpx.Timeout(60.0))

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        headers = [(k, v) for k, v in request.headers.raw if k.decode().lower() not in _HOP_BY_HOP]
        headers = [(k, v) for k, v in headers if k.decode().lower() != "authorization"]
        headers.append((b"authorization", f"Bearer {key}".encode()))
        upstream = client.build_request(
            request.method,
            request.url.path + (f"?{request.url.query}" if request.url.query else ""),
            headers=headers,
            content=await request.body(),
        )
        try:
            response = await client.send(upstream, stream=True)
        except httpx.HTTPError as exc:  # e.g. a header value httpx refuses to send
            await Response(f"bearer_proxy: {exc}", status_code=502)(scope, receive, send)
            return
        kept = {k: v for k, v in response.headers.items() if k.lower() not in _HOP_BY_HOP}
        streamed = StreamingResponse(
            response.aiter_raw(),
            status_code=response.status_code,
            headers=kept,
            background=BackgroundTask(response.aclose),
        )
        await streamed(scope, receive, send)

    return app
