"""The floor for bench/profile_hot.py: a bare aiohttp pass-through proxy as a raw ASGI app under uvicorn.

    python -m bench.profile_floor --port 9200 --upstream http://127.0.0.1:9100/v1

No auth, no parsing, no logging: what one Python hop (uvloop + httptools + one pooled aiohttp
session) costs on this machine, to compare the gateway's added latency with. ``--client httpx``
runs the same proxy on one pooled httpx client, ``--client hatchway`` on the gateway's own pool
(``engine/providers/upstream_http.py``), to compare the three.
"""

from __future__ import annotations

import argparse

from bench.asgi import serve
from bench.http_clients import CLIENTS, Forward
from hatchway.demo.upstream import answer_lifespan


def proxy_app(upstream: str, client: str):  # type: ignore[no-untyped-def]
    """The proxy: its client (``bench.http_clients.CLIENTS``) is opened on the first request,
    inside the running loop."""
    forward: Forward | None = None

    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        nonlocal forward
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        if forward is None:
            forward, _ = CLIENTS[client](upstream + "/chat/completions", 200)
        if scope["path"] in ("/", "/healthz"):
            await _ok(send)
            return
        status, body = await forward(await _body(receive))
        await _answer(send, status, body)

    return app


async def _ok(send):  # type: ignore[no-untyped-def]
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


async def _body(receive) -> bytes:  # type: ignore[no-untyped-def]
    chunks, more = [], True
    while more:
        message = await receive()
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    return b"".join(chunks)


async def _answer(send, status: int, body: bytes) -> None:  # type: ignore[no-untyped-def]
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--client", choices=tuple(CLIENTS), default="aiohttp")
    args = parser.parse_args()
    serve(proxy_app(args.upstream, args.client), args.port)


if __name__ == "__main__":
    main()
