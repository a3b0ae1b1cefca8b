"""A scripted two-round OpenAI-compatible upstream for the agent-loop benchmark (raw ASGI).

    python bench/rounds_upstream.py --port 9101 --latency-ms 20

For upstream model ``tools``: the first call of a conversation asks for one call of
``bench__lookup``; once the conversation holds a tool result, it answers. For any other model it
answers at once. Every response waits ``--latency-ms`` first, so model time is known exactly.
"""

from __future__ import annotations

import argparse
import asyncio
import json

USAGE = {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}


def _completion(message: dict, finish_reason: str) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 1700000000,
            "model": "bench-model",
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": USAGE,
        }
    ).encode()


TOOL_CALL = _completion(
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "bench__lookup", "arguments": '{"q": "x"}'},
            }
        ],
    },
    "tool_calls",
)
ANSWER = _completion({"role": "assistant", "content": "ok"}, "stop")


def reply_for(body: dict) -> bytes:
    if body.get("model") != "tools" or any(m.get("role") == "tool" for m in body.get("messages", [])):
        return ANSWER
    return TOOL_CALL


def make_app(latency_s: float):  # type: ignore[no-untyped-def]
    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        raw = b"".join(chunks)
        body = reply_for(json.loads(raw)) if raw else ANSWER
        if latency_s:
            await asyncio.sleep(latency_s)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    args = parser.parse_args()
    uvicorn.run(
        make_app(args.latency_ms / 1000),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
