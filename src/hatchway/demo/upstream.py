"""A scripted OpenAI-compatible upstream, not an LLM: the Chat Completions wire format written once,
the answers decided by a callable.

``ScriptedUpstream(decide)`` is a raw ASGI app (no framework, so a benchmark's fixed-latency upstream
costs microseconds). ``decide`` gets each request body and returns a ``Reply``, or an awaitable of
one. The demo's scripted model, the test suite's ``ScriptedLLM`` and the upstreams of ``bench/`` are
all this app with their own ``decide``.

- ``POST /v1/chat/completions``: a completion object, or with ``"stream": true`` SSE chunks (the
  text, then each tool call's head and arguments, ``chunk_size`` characters at a time; the usage
  when ``stream_options.include_usage`` asks; ``[DONE]``);
- ``POST /v1/responses`` (``responses=True``): a minimal, non-streaming Responses API object;
- ``GET /v1/models`` (``models=[...]``): the list;
- ``POST /v1/messages`` (``anthropic=True``): Anthropic's Messages API, a message or its stream of
  events; ``POST /v1beta/models/<model>:generateContent`` and ``:streamGenerateContent?alt=sse``
  (``gemini=True``): Gemini's (``demo/vendor_wire.py``), each failing in its vendor's error shape.

A reply can wait (``delay``, cut short when the caller hangs up, as a real upstream stops), fail
(``status`` and ``error``, in OpenAI's error body) or answer bytes as they are (``raw_body``).
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hatchway.demo import vendor_wire

ToolCall = tuple[str, dict[str, Any]] | tuple[str, dict[str, Any], str]
"""``(name, arguments)`` or ``(name, arguments, call_id)``."""


@dataclass
class Reply:
    """One scripted answer: text and/or tool calls, or an error, after ``delay`` seconds."""

    text: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    """(name, arguments) or (name, arguments, call_id)."""
    delay: float = 0.0
    status: int = 200
    error: str | None = None
    prompt_tokens: int = 11
    completion_tokens: int = 7
    finish_reason: str | None = None
    """Default: ``tool_calls`` when there are any, else ``stop``."""
    chunk_size: int = 4
    """Characters per streamed delta, of the text and of each tool call's arguments."""
    raw_body: bytes | None = None
    """Sent as it is (``application/json``, with ``status``), whatever the request asked."""
    stop_sequence: str | None = None
    """Anthropic-shaped answers: the stop sequence that ended it (``stop_reason: stop_sequence``)."""
    chunk_delay: float = 0.0
    """Streamed: seconds between chunks (a long answer, for a client that leaves mid-stream)."""
    abort_after: int | None = None
    """Streamed: send this many chunks, then drop the connection (an upstream dying mid-answer)."""
    cached_tokens: int = 0
    """Prompt tokens read from the prompt cache (Anthropic's ``cache_read_input_tokens``, Gemini's
    ``cachedContentTokenCount``), on top of ``prompt_tokens``."""


Decide = Callable[[dict[str, Any]], Reply | Awaitable[Reply]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]

CREATED = 1_700_000_000
_ids = itertools.count(1)
_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def json_bytes(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON, as the upstream writes every body."""
    return _encode(value).encode()


# -- the wire format -----------------------------------------------------------------------------


def completion(reply: Reply, model: str) -> dict[str, Any]:
    """The ``chat.completion`` object of ``reply``."""
    calls = [
        {
            "id": call[2] if len(call) > 2 else f"call_{next(_ids)}",
            "type": "function",
            "function": {"name": call[0], "arguments": json.dumps(call[1])},
        }
        for call in reply.tool_calls
    ]
    message: dict[str, Any] = {"role": "assistant", "content": reply.text}
    if calls:
        message["tool_calls"] = calls
    finish = reply.finish_reason or ("tool_calls" if calls else "stop")
    return {
        "id": f"chatcmpl-scripted-{next(_ids)}",
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        },
    }


def chunks(reply: Reply, done: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    """``done`` (``completion(reply, …)``) as ``chat.completion.chunk`` objects, ``[DONE]`` not included."""
    base = {k: done[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    step = max(1, reply.chunk_size)

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return base | {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    message = done["choices"][0]["message"]
    out = [chunk({"role": "assistant", "content": ""})]
    text = message.get("content") or ""
    out += [chunk({"content": text[i : i + step]}) for i in range(0, len(text), step)]
    for index, call in enumerate(message.get("tool_calls") or []):
        name, args = call["function"]["name"], call["function"]["arguments"]
        head = {"index": index, "id": call["id"], "type": "function"}
        out.append(chunk({"tool_calls": [head | {"function": {"name": name, "arguments": ""}}]}))
        out += [
            chunk({"tool_calls": [{"index": index, "function": {"arguments": args[i : i + step]}}]})
            for i in range(0, len(args), step)
        ]
    out.append(chunk({}, done["choices"][0]["finish_reason"]))
    if include_usage:
        out.append(base | {"choices": [], "usage": done["usage"]})
    return out


def response(reply: Reply, model: str) -> dict[str, Any]:
    """The Responses API object of ``reply``: a message for the text, a ``function_call`` per call."""
    n = next(_ids)
    output: list[dict[str, Any]] = []
    if reply.text is not None:
        text = {"type": "output_text", "text": reply.text, "annotations": []}
        message = {"type": "message", "id": f"msg_scripted_{n}", "role": "assistant", "content": [text]}
        output.append(message | {"status": "completed"})
    for call in reply.tool_calls:
        call_id = call[2] if len(call) > 2 else f"call_{next(_ids)}"
        item = {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": call[0]}
        output.append(item | {"arguments": json.dumps(call[1]), "status": "completed"})
    return {
        "id": f"resp_scripted_{n}",
        "object": "response",
        "created_at": CREATED,
        "status": "completed",
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": reply.prompt_tokens,
            "output_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        },
    }


def error_body(message: str) -> dict[str, Any]:
    """OpenAI's error object."""
    return {"error": {"message": message, "type": "scripted", "param": None, "code": None}}


# -- the ASGI app --------------------------------------------------------------------------------

_JSON = b"application/json"
_SSE = b"text/event-stream; charset=utf-8"
_CHAT, _RESPONSES, _MODELS, _ANTHROPIC, _GEMINI = "chat", "responses", "models", "anthropic", "gemini"
_GEMINI_PREFIX = "/v1beta/models/"


class ScriptedUpstream:
    """An OpenAI-compatible upstream (raw ASGI) whose every answer is ``decide(request body)``."""

    def __init__(
        self,
        decide: Decide,
        *,
        model: str | None = None,
        models: Sequence[str] = (),
        responses: bool = False,
        anthropic: bool = False,
        gemini: bool = False,
    ) -> None:
        """Answer every request with ``decide``'s reply.

        Args:
            decide: the request body → the ``Reply`` (or an awaitable of it).
            model: the model every answer names (default: the request's ``model``).
            models: listed by ``GET /v1/models`` (none: that route is not served).
            responses: also serve ``POST /v1/responses``.
            anthropic: also serve ``POST /v1/messages``.
            gemini: also serve ``POST /v1beta/models/<model>:generateContent`` (and streamed).
        """
        self.decide = decide
        self.model = model
        self._routes = {("POST", "/v1/chat/completions"): _CHAT}
        if responses:
            self._routes["POST", "/v1/responses"] = _RESPONSES
        if anthropic:
            self._routes["POST", "/v1/messages"] = _ANTHROPIC
        self._gemini = gemini
        if models:
            self._routes["GET", "/v1/models"] = _MODELS
            listed = [{"id": name, "object": "model"} for name in models]
            self._model_list = json_bytes({"object": "list", "data": listed})

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        route = self._routes.get((scope["method"], scope["path"]))
        model_in_path = None
        if route is None and self._gemini and scope["path"].startswith(_GEMINI_PREFIX):
            route, model_in_path = _GEMINI, scope["path"][len(_GEMINI_PREFIX) :].partition(":")
        if route is None:
            missing = f"scripted upstream: no route {scope['method']} {scope['path']}"
            await _send(send, 404, json_bytes(error_body(missing)))
        elif route == _MODELS:
            await _send(send, 200, self._model_list)
        else:
            model, _, method = model_in_path or (None, "", "")
            await self._answer(route, receive, send, model, method == "streamGenerateContent")

    async def _answer(
        self, route: str, receive: Receive, send: Send, path_model: str | None, path_stream: bool
    ) -> None:
        raw = await _read_body(receive)
        if raw is None:  # the caller hung up first
            return
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            await _send(send, 400, json_bytes(error_body("scripted upstream: the body is not JSON")))
            return
        reply = self.decide(body)
        if inspect.isawaitable(reply):
            reply = await reply
        if reply.delay and not await _wait_unless_disconnected(receive, reply.delay):
            return
        model = self.model or path_model or body.get("model", "scripted")
        if reply.raw_body is not None:
            await _send(send, reply.status, reply.raw_body)
        elif route in (_ANTHROPIC, _GEMINI):
            await _vendor_answer(route, send, reply, bool(body.get("stream") or path_stream), model)
        elif reply.status >= 400:
            await _send(send, reply.status, json_bytes(error_body(reply.error or "error")))
        elif route == _RESPONSES:
            await _send(send, 200, json_bytes(response(reply, model)))
        elif body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            parts = chunks(reply, completion(reply, model), include_usage)
            await _stream(send, parts if reply.abort_after is None else parts[: reply.abort_after], reply)
        else:
            await _send(send, 200, json_bytes(completion(reply, model)))


async def _vendor_answer(route: str, send: Send, reply: Reply, stream: bool, model: str) -> None:
    if route == _ANTHROPIC:
        if reply.status >= 400:
            await _send(
                send,
                reply.status,
                json_bytes(vendor_wire.anthropic_error(reply.status, reply.error or "error")),
            )
        elif stream:
            message = vendor_wire.anthropic_message(reply, model)
            await _stream_events(send, vendor_wire.anthropic_events(reply, message))
        else:
            await _send(send, 200, json_bytes(vendor_wire.anthropic_message(reply, model)))
    elif reply.status >= 400:
        await _send(
            send, reply.status, json_bytes(vendor_wire.gemini_error(reply.status, reply.error or "error"))
        )
    elif stream:
        chunks = vendor_wire.gemini_chunks(reply, vendor_wire.gemini_response(reply, model))
        await _stream_events(send, [(None, chunk) for chunk in chunks])
    else:
        await _send(send, 200, json_bytes(vendor_wire.gemini_response(reply, model)))


async def _read_body(receive: Receive) -> bytes | None:
    """The request body, or None when the caller disconnected before sending all of it."""
    parts, more = [], True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        parts.append(message.get("body", b""))
        more = message.get("more_body", False)
    return b"".join(parts)


async def _wait_unless_disconnected(receive: Receive, delay: float) -> bool:
    """Wait ``delay`` seconds; False as soon as the caller hangs up (a cancelled run upstream).

    Once the body is read, ``receive`` only returns at a disconnect, so this waits on it and a timer
    cancels the wait: no task. It is what ``asyncio.timeout`` does, written out: the context manager
    costs ~2 µs more per request, a tenth of what the fixed-latency benchmark upstream spends."""
    task = asyncio.current_task()
    assert task is not None
    cancelling, expired = task.cancelling(), False

    def expire() -> None:
        nonlocal expired
        expired = True
        task.cancel()

    timer = asyncio.get_running_loop().call_later(delay, expire)
    try:
        while (await receive())["type"] != "http.disconnect":
            pass
    except asyncio.CancelledError:
        if expired and task.uncancel() <= cancelling:
            return True
        raise
    finally:
        timer.cancel()
    return False


async def _send(send: Send, status: int, body: bytes) -> None:
    headers = [(b"content-type", _JSON), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _stream(send: Send, parts: list[dict[str, Any]], reply: Reply | None = None) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", _SSE)]})
    for part in parts:
        frame = b"data: " + json_bytes(part) + b"\n\n"
        await send({"type": "http.response.body", "body": frame, "more_body": True})
        if reply is not None and reply.chunk_delay:
            await asyncio.sleep(reply.chunk_delay)
    if reply is not None and reply.abort_after is not None:
        raise ConnectionAbortedError("scripted upstream: the stream is cut (abort_after)")
    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})


async def _stream_events(send: Send, events: list[tuple[str | None, dict[str, Any]]]) -> None:
    """Server-sent events with an ``event:`` line when named (Anthropic's), else data only."""
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", _SSE)]})
    for name, data in events:
        head = b"event: %s\n" % name.encode() if name else b""
        frame = head + b"data: " + json_bytes(data) + b"\n\n"
        await send({"type": "http.response.body", "body": frame, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


async def answer_lifespan(receive: Receive, send: Send) -> None:
    """Answer an ASGI lifespan scope for an app that has nothing to start or stop."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
