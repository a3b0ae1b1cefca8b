"""The floor for bench/profile_hot.py: a bare aiohttp pass-through proxy as a raw ASGI app under uvicorn.

    python -m bench.profile_floor --port 9200 --upstream http://127.0.0.1:9100/v1

No auth, no parsing, no logging: what one Python hop (uvloop + httptools + one pooled aiohttp
session) costs on this machine, to compare the gateway's added latency with. ``--client httpx``
runs the same proxy on one pooled httpx client, ``--client hatchway`` on the gateway's own pool
(``engine/providers/upstream_http.py``), to compare the three.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Awaitable, Callable

import aiohttp

from bench.asgi import asgi_lifespan

HEADERS = {"content-type": "application/json"}


Forward = Callable[[bytes], Awaitable[tuple[int, bytes]]]


def proxy_app(open_client: Callable[[], Forward]):  # type: ignore[no-untyped-def]
    """The proxy: its client is opened on the first request, inside the running loop."""
    forward: Forward | None = None

    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        nonlocal forward
        if scope["type"] == "lifespan":
            await asgi_lifespan(receive, send)
            return
        if forward is None:
            forward = open_client()
        if scope["path"] in ("/", "/healthz"):
            await _ok(send)
            return
        status, body = await forward(await _body(receive))
        await _answer(send, status, body)

    return app


def aiohttp_client(upstream: str) -> Forward:
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=200))

    async def forward(body: bytes) -> tuple[int, bytes]:
        async with session.post(upstream + "/chat/completions", data=body, headers=HEADERS) as response:
            return response.status, await response.read()

    return forward


def httpx_client(upstream: str) -> Forward:
    import httpx

    limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
    client = httpx.AsyncClient(limits=limits, timeout=120.0)

    async def forward(body: bytes) -> tuple[int, bytes]:
        response = await client.post(upstream + "/chat/completions", content=body, headers=HEADERS)
        return response.status_code, response.content

    return forward


def pool_client(upstream: str) -> Forward:
    """The gateway's own upstream pool (``engine/providers/upstream_http.py``)."""
    from hatchway.engine.providers.upstream_http import UpstreamPool

    url = upstream + "/chat/completions"
    pool = UpstreamPool(url, headers=HEADERS, connect_timeout=5, read_timeout=120, max_connections=200)

    async def forward(body: bytes) -> tuple[int, bytes]:
        async with await pool.post(body) as response:
            return response.status, await response.read()

    return forward


CLIENTS = {"aiohttp": aiohttp_client, "httpx": httpx_client, "hatchway": pool_client}


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
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--client", choices=tuple(CLIENTS), default="aiohttp")
    args = parser.parse_args()
    uvicorn.run(
        proxy_app(functools.partial(CLIENTS[args.client], args.upstream)),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        access_log=False,
        loop="uvloop",
        http="httptools",
    )


if __name__ == "__main__":
    main()
