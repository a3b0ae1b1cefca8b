"""A fixed-latency OpenAI-compatible upstream for benchmarks: raw ASGI, canned body, no framework cost.

python -m bench.upstream --port 9100 --latency-ms 20
"""

from __future__ import annotations

import argparse
import asyncio
import json

from bench.asgi import asgi_lifespan, serve

BODY = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "bench-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
    }
).encode()


def make_app(latency_s: float):  # type: ignore[no-untyped-def]
    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] == "lifespan":
            await asgi_lifespan(receive, send)
            return
        more = True
        while more:
            message = await receive()
            more = message.get("more_body", False)
        if latency_s:
            await asyncio.sleep(latency_s)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(BODY)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": BODY})

    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    args = parser.parse_args()
    serve(make_app(args.latency_ms / 1000), args.port)


if __name__ == "__main__":
    main()
