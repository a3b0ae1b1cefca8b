"""The only fake in the suite: a scripted OpenAI-compatible upstream served over real HTTP.

Queue replies with ``reply()`` (or set ``handler`` to decide from each request); every request
body received is kept in ``requests``. Streaming requests get the same reply as SSE chunks.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.servers import ServerThread


@dataclass
class Reply:
    text: str | None = None
    tool_calls: list[tuple[str, dict[str, Any]] | tuple[str, dict[str, Any], str]] = field(
        default_factory=list
    )
    """(name, arguments) or (name, arguments, call_id)."""
    delay: float = 0.0
    status: int = 200
    error: str | None = None
    prompt_tokens: int = 11
    completion_tokens: int = 7
    finish_reason: str | None = None
    chunk_size: int = 4
    raw_body: bytes | None = None
    gate: threading.Event | None = None
    """When set, the reply waits until the test sets it (a request held in flight)."""


_ids = itertools.count(1)


def _completion(reply: Reply, model: str) -> dict[str, Any]:
    calls = [
        {
            "id": c[2] if len(c) > 2 else f"call_{next(_ids)}",
            "type": "function",
            "function": {"name": c[0], "arguments": json.dumps(c[1])},
        }
        for c in reply.tool_calls
    ]
    message: dict[str, Any] = {"role": "assistant", "content": reply.text}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": f"chatcmpl-scripted-{next(_ids)}",
        "object": "chat.completion",
        "created": 1700000000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": reply.finish_reason or ("tool_calls" if calls else "stop"),
            }
        ],
        "usage": {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        },
    }


def _chunks(reply: Reply, completion: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    base = {k: completion[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    message = completion["choices"][0]["message"]
    out = [
        base
        | {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}
    ]
    text = message.get("content") or ""
    for i in range(0, len(text), reply.chunk_size):
        out.append(
            base
            | {
                "choices": [
                    {"index": 0, "delta": {"content": text[i : i + reply.chunk_size]}, "finish_reason": None}
                ]
            }
        )
    for index, call in enumerate(message.get("tool_calls") or []):
        head = {
            "index": index,
            "id": call["id"],
            "type": "function",
            "function": {"name": call["function"]["name"], "arguments": ""},
        }
        out.append(base | {"choices": [{"index": 0, "delta": {"tool_calls": [head]}, "finish_reason": None}]})
        args = call["function"]["arguments"]
        for i in range(0, len(args), 8):
            part = {"index": index, "function": {"arguments": args[i : i + 8]}}
            out.append(
                base | {"choices": [{"index": 0, "delta": {"tool_calls": [part]}, "finish_reason": None}]}
            )
    finish = completion["choices"][0]["finish_reason"]
    out.append(base | {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    if include_usage:
        out.append(base | {"choices": [], "usage": completion["usage"]})
    return out


async def _sleep_unless_disconnected(request: Request, delay: float) -> None:
    """Wait ``delay`` seconds, or less if the caller hangs up (a cancelled run), like a real upstream."""

    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(disconnected(), delay)


class ScriptedLLM:
    """An OpenAI-compatible ``/v1/chat/completions`` that answers from a script."""

    def __init__(self, **server_config: Any) -> None:
        """``server_config`` goes to uvicorn (e.g. ``timeout_keep_alive``)."""
        self._script: deque[Reply] = deque()
        self._lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.handler: Callable[[dict[str, Any]], Reply] | None = None
        """When set, decides every reply from the request body (used when requests run in parallel)."""
        self.default: Reply | None = None
        app = Starlette(routes=[Route("/v1/chat/completions", self._endpoint, methods=["POST"])])
        self.server = ServerThread(app, **server_config)

    @property
    def base_url(self) -> str:
        return f"{self.server.url}/v1"

    def reply(self, text: str | None = None, **kwargs: Any) -> ScriptedLLM:
        with self._lock:
            self._script.append(Reply(text=text, **kwargs))
        return self

    def _next(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            self.requests.append(body)
            if self.handler is not None:
                return self.handler(body)
            if self._script:
                return self._script.popleft()
        if self.default is not None:
            return self.default
        return Reply(status=500, error="scripted LLM: no reply queued for this request")

    async def _endpoint(self, request: Request) -> Response:
        body = await request.json()
        with self._lock:
            self.headers.append({k.lower(): v for k, v in request.headers.items()})
        reply = self._next(body)
        if reply.gate is not None:
            await asyncio.to_thread(reply.gate.wait, 60)
        if reply.delay:
            await _sleep_unless_disconnected(request, reply.delay)
        if reply.raw_body is not None:
            return Response(reply.raw_body, status_code=reply.status, media_type="application/json")
        if reply.status >= 400:
            err = {
                "error": {"message": reply.error or "error", "type": "scripted", "param": None, "code": None}
            }
            return JSONResponse(err, status_code=reply.status)
        completion = _completion(reply, body.get("model", "scripted"))
        if not body.get("stream"):
            return JSONResponse(completion)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        chunks = _chunks(reply, completion, include_usage)

        async def frames():  # type: ignore[no-untyped-def]
            for chunk in chunks:
                yield f"data: {json.dumps(chunk)}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(frames(), media_type="text/event-stream")

    def start(self) -> ScriptedLLM:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()


def max_overlap(starts: list[float], duration: float) -> int:
    """The most calls in flight at once, from when each started and how long each took (its delay)."""
    return max(sum(1 for s in starts if s <= t < s + duration) for t in starts)
