"""The floor for bench/profile_hot.py: a bare aiohttp pass-through proxy as a raw ASGI app under uvicorn.

    python bench/profile_floor.py --port 9200 --upstream http://127.0.0.1:9100/v1

No auth, no parsing, no logging: what one Python hop (uvloop + httptools + one pooled aiohttp
session) costs on this machine, to compare the gateway's added latency with.
"""

from __future__ import annotations

import argparse

import aiohttp


def make_app(upstream: str):  # type: ignore[no-untyped-def]
    session: aiohttp.ClientSession | None = None

    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        nonlocal session
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if session is None:
            session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=200))
        if scope["path"] in ("/", "/healthz"):
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        async with session.post(
            upstream + "/chat/completions",
            data=b"".join(chunks),
            headers={"content-type": "application/json"},
        ) as response:
            body = await response.read()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": response.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    args = parser.parse_args()
    uvicorn.run(
        make_app(args.upstream),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        access_log=False,
        loop="uvloop",
        http="httptools",
    )


if __name__ == "__main__":
    main()
