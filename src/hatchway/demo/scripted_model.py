"""The demo's stand-in for an LLM: an OpenAI-compatible ``/v1/chat/completions`` that answers from
``script.decide`` (deterministic, no model weights, no network). Streaming requests get the same
answer as SSE chunks. Every completion names its model ``SCRIPTED_MODEL``.

Run alone as the upstream of ``make run`` (examples/hatchway.yaml expects one on port 9000):
``python -m hatchway.demo.scripted_model --port 9000``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from hatchway.demo.script import Turn, decide

SCRIPTED_MODEL = "hatchway-demo-scripted"
_ids = itertools.count(1)


def completion(turn: Turn) -> dict[str, Any]:
    """The Chat Completions object for one scripted turn."""
    n = next(_ids)
    message: dict[str, Any] = {"role": "assistant", "content": turn.text}
    if turn.tool_calls:
        message["tool_calls"] = [
            {
                "id": f"call_scripted_{n}_{i}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
            }
            for i, (name, args) in enumerate(turn.tool_calls)
        ]
    words = len((turn.text or "").split()) + 8 * len(turn.tool_calls)
    return {
        "id": f"chatcmpl-scripted-{n}",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": SCRIPTED_MODEL,
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if turn.tool_calls else "stop"}
        ],
        "usage": {"prompt_tokens": 20, "completion_tokens": words, "total_tokens": 20 + words},
    }


def chunks(done: dict[str, Any]) -> list[dict[str, Any]]:
    """The same completion as stream chunks: the text, each tool call whole, then the usage."""
    base = {k: done[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    message = done["choices"][0]["message"]
    delta: dict[str, Any] = {"role": "assistant", "content": message["content"] or ""}
    if message.get("tool_calls"):
        delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
    finish = done["choices"][0]["finish_reason"]
    return [
        base | {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        base | {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
        base | {"choices": [], "usage": done["usage"]},
    ]


async def _complete(request: Request) -> Response:
    body = await request.json()
    turn = decide(body)
    if turn.delay:
        await asyncio.sleep(turn.delay)
    done = completion(turn)
    if not body.get("stream"):
        return JSONResponse(done)

    async def frames() -> AsyncIterator[str]:
        for chunk in chunks(done):
            yield f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(frames(), media_type="text/event-stream")


async def _models(_: Request) -> Response:
    return JSONResponse({"object": "list", "data": [{"id": SCRIPTED_MODEL, "object": "model"}]})


def create_app() -> Starlette:
    """The scripted model as an ASGI app (``/v1/chat/completions``, ``/v1/models``)."""
    return Starlette(
        routes=[
            Route("/v1/chat/completions", _complete, methods=["POST"]),
            Route("/v1/models", _models, methods=["GET"]),
        ]
    )


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description="The demo's scripted OpenAI-compatible model (not an LLM).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    args = parser.parse_args(argv)
    print(f"scripted model (deterministic, not an LLM) at http://{args.host}:{args.port}/v1")
    uvicorn.run(create_app(), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
