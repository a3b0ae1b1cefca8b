"""The floor for bench/profile_hot.py: a bare aiohttp pass-through proxy as a raw ASGI app under uvicorn.

    python -m bench.profile_floor --port 9200 --upstream http://127.0.0.1:9100/v1

No auth, no parsing, no logging: what one Python hop (uvloop + httptools + one pooled aiohttp
session) costs on this machine, to compare the gateway's added latency with. ``--client httpx``
runs the same proxy on one pooled httpx client, ``--client hatchway`` on the gateway's own pool
(``engine/providers/upstream_http.py``), to compare the three.
"""

from __future__ import annotations

import argparse

import aiohttp

from bench.asgi import asgi_lifespan


def make_httpx_app(upstream: str):  # type: ignore[no-untyped-def]
    """The same proxy on one pooled httpx.AsyncClient (to compare the two clients under load)."""
    import httpx

    client: httpx.AsyncClient | None = None

    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        nonlocal client
        if scope["type"] == "lifespan":
            await asgi_lifespan(receive, send)
            return
        if client is None:
            limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
            client = httpx.AsyncClient(limits=limits, timeout=120.0)
        if scope["path"] in ("/", "/healthz"):
            await _ok(send)
            return
        body = await _body(receive)
        headers = {"content-type": "application/json"}
        response = await client.post(upstream + "/chat/completions", content=body, headers=headers)
        await _answer(send, response.status_code, response.content)

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


def make_pool_app(upstream: str):  # type: ignore[no-untyped-def]
    """The same proxy on the gateway's own upstream pool."""
    from hatchway.engine.providers.upstream_http import UpstreamPool

    pool: UpstreamPool | None = None

    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        nonlocal pool
        if scope["type"] == "lifespan":
            await asgi_lifespan(receive, send)
            return
        if pool is None:
            headers = {"content-type": "application/json"}
            url = upstream + "/chat/completions"
            pool = UpstreamPool(
                url, headers=headers, connect_timeout=5, read_timeout=120, max_connections=200
            )
        if scope["path"] in ("/", "/healthz"):
            await _ok(send)
            return
        body = await _body(receive)
        async with await pool.post(body) as response:
            await _answer(send, response.status, await response.read())

    return app


def make_app(upstream: str):  # type: ignore[no-untyped-def]
    session: aiohttp.ClientSession | None = None

    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        nonlocal session
        if scope["type"] == "lifespan":
            await asgi_lifespan(receive, send)
            return
        if session is None:
            session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=200))
        if scope["path"] in ("/", "/healthz"):
            await _ok(send)
            return
        body = await _body(receive)
        headers = {"content-type": "application/json"}
        async with session.post(upstream + "/chat/completions", data=body, headers=headers) as response:
            await _answer(send, response.status, await response.read())

    return app


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--client", choices=("aiohttp", "httpx", "hatchway"), default="aiohttp")
    args = parser.parse_args()
    factory = {"aiohttp": make_app, "httpx": make_httpx_app, "hatchway": make_pool_app}[args.client]
    uvicorn.run(
        factory(args.upstream),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        access_log=False,
        loop="uvloop",
        http="httptools",
    )


if __name__ == "__main__":
    main()
