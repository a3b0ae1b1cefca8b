"""``POST /v1/chat/completions``: the Chat Completions adapter over the agent loop."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, StrictBool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from hatchway.api.auth import admit, source_of
from hatchway.api.context import admit_run, budget_header, header_dict
from hatchway.api.errors import parse_json_body, validate_body
from hatchway.api.sse import DONE, SSE_HEADERS, data_event
from hatchway.engine.context import RunContext
from hatchway.engine.items import FunctionCall, ToolSpec
from hatchway.engine.loop import (
    LoopEvent,
    OutputTextDelta,
    RunFinished,
    RunResult,
    ToolCallStarted,
)
from hatchway.engine.plan import PreparedRun, RunRequest
from hatchway.engine.providers.base import output_limit
from hatchway.engine.providers.chat_format import messages_to_items
from hatchway.engine.run import RunScope
from hatchway.engine.tools.mcp.forwarding import dropped_headers_header
from hatchway.errors import ClientGone, HatchwayError
from hatchway.gateway import Gateway
from hatchway.ids import new_id

ROUTE = "/v1/chat/completions"
ROUTE_NAME = "chat.completions"
"""The route as the run log names it."""
_HANDLED = {"model", "messages", "stream", "stream_options", "tools", "tool_choice", "parallel_tool_calls"}


class ChatFunction(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: Annotated[str, Field(min_length=1, max_length=128)]
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ChatTool(BaseModel):
    type: Literal["function"]
    function: ChatFunction


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: Annotated[str, Field(min_length=1)]
    messages: Annotated[list[Any], Field(min_length=1)]
    stream: StrictBool = False
    stream_options: dict[str, Any] | None = None
    tools: list[ChatTool] | None = None
    tool_choice: Any = None
    parallel_tool_calls: StrictBool | None = None
    n: Annotated[int, Field(ge=1, le=1)] | None = None

    def passthrough(self) -> dict[str, Any]:
        extra = {k: v for k, v in (self.model_extra or {}).items() if k not in _HANDLED}
        if self.n is not None:
            extra["n"] = self.n
        return extra

    def client_tools(self) -> list[ToolSpec]:
        return [
            ToolSpec(
                name=t.function.name,
                description=t.function.description or "",
                parameters=t.function.parameters or {"type": "object", "properties": {}},
                strict=t.function.strict,
            )
            for t in self.tools or []
        ]


class ChatCompletionsApp:
    """``POST /v1/chat/completions`` as a plain ASGI app, served ahead of FastAPI (``api/app.py``).

    Hand-written rather than a FastAPI route because this is the hot path: on a pass-through
    completion, FastAPI's middleware stack, router and dependency injection cost more CPU than the
    rest of the request (``bench/profile_hot.py --profile``). It answers as the route did: the same
    authentication, OpenAI-shaped errors with the field path, headers, run log, metrics and spans.
    """

    path = ROUTE
    """The route template ``observability.middleware.route_of`` reads for labels and span names."""

    def __init__(self, gateway: Gateway) -> None:
        self.gw = gateway

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["route"] = self
        if scope["method"] != "POST":
            raise StarletteHTTPException(405, "Method Not Allowed", headers={"allow": "POST"})
        gw = self.gw
        headers = header_dict(scope["headers"])
        principal = await admit(gw, scope["headers"], headers, "POST", self.path, source_of(scope))
        ctx = RunContext.from_headers(
            principal,
            headers,
            deadline_seconds=gw.settings.loop_deadline_seconds,
            known_secrets=gw.models.secrets,
        )
        # The record is written when the scope closes: after the answer is on its way; the run's
        # hold on its limits is settled before it leaves (``RunScope.settle``).
        async with gw.scopes.open(ROUTE_NAME, ctx) as run:
            response = await self._answer(run, receive)
            await response(scope, receive, send)

    async def _answer(self, run: RunScope, receive: Receive) -> Response:
        raw = await read_body(receive)
        body = validate_body(ChatRequest, parse_json_body(raw))
        run.model = body.model
        extra = body.model_extra or {}
        max_tokens = output_limit(extra)
        admission = await admit_run(run, body.model, max_tokens, len(raw))
        prepared = await self.gw.planner.prepare(
            RunRequest(
                model=body.model,
                items=messages_to_items(body.messages),
                client_tools=body.client_tools(),
                tool_choice=body.tool_choice,
                parallel_tool_calls=body.parallel_tool_calls,
                params=body.passthrough(),
            ),
            run,
        )
        if body.stream:
            return await _streamed(prepared, body, run, admission.headers, run.settle)
        result = await prepared.loop.run(prepared.conversation, run.ctx)
        payload = orjson.dumps(completion_body(result, body.model, created=int(time.time())))
        run.end(200, result)
        await run.settle()  # before the answer leaves: the client's next request finds its slot
        headers = {**run_headers(result, run), **admission.headers}
        return Response(payload, media_type="application/json", headers=headers)


async def read_body(receive: Receive) -> bytes:
    """The whole request body (what Starlette's ``Request.body()`` does, without a Request)."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone("The client went away before its request body arrived.")
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


SERVED_BY_HEADER = "x-hatchway-served-by"
"""``<provider>/<upstream model>`` that answered, for a model with several targets or fallbacks."""


def run_headers(result: RunResult, run: RunScope) -> dict[str, str]:
    """The ``x-hatchway-*`` headers of a finished run (rounds, operation, budget…); its record's
    id is on every answer, errors included (``ErrorMiddleware``)."""
    headers = {"x-hatchway-rounds": str(result.rounds)}
    headers.update(dropped_headers_header(run.ctx.run.dropped_headers))
    served_by = result.last_response.served_by if result.last_response is not None else None
    if served_by is not None:  # which of a model's targets answered (its last call)
        headers[SERVED_BY_HEADER] = served_by
    if result.max_rounds_hit:
        headers["x-hatchway-max-rounds-hit"] = "true"
    headers.update(budget_header(run.ctx))
    if result.operation_id:  # the question (or outcome) is this operation's (GET /v1/operations/{id})
        headers["x-hatchway-operation-id"] = str(result.operation_id)
    return headers


def _tool_call_dict(call: FunctionCall, index: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": call.call_id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }
    if index is not None:
        out["index"] = index
    return out


def completion_body(result: RunResult, model: str, *, created: int) -> dict[str, Any]:
    """A ``chat.completion`` object for a finished run."""
    message: dict[str, Any] = {"role": "assistant", "content": result.text, "refusal": None}
    if result.client_calls:
        message["tool_calls"] = [_tool_call_dict(c) for c in result.client_calls]
    raw = result.last_response.raw if result.last_response else {}
    body: dict[str, Any] = {
        "id": new_id("chatcmpl").replace("_", "-", 1),
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": result.finish_reason, "logprobs": None}
        ],
        "usage": result.usage.to_chat(),
    }
    if "system_fingerprint" in raw:
        body["system_fingerprint"] = raw["system_fingerprint"]
    return body


async def _streamed(
    prepared: PreparedRun,
    body: ChatRequest,
    run: RunScope,
    limit_headers: dict[str, str],
    settle: Callable[[], Awaitable[None]],
) -> Response:
    """``settle``: gives the run's limits back, before the stream's last event (idempotent)."""
    chunks = _ChunkWriter(body.model, include_usage=_include_usage(body))
    loop, items = prepared.loop, prepared.conversation
    if prepared.plan.stream_mode == "disabled":
        # The plugin asked for no streaming: run to the end, then send the answer as one chunk so
        # streaming clients still work; the header says what happened.
        result = await loop.run(items, run.ctx)
        run.end(200, result)
        await settle()
        whole = [chunks.role(), *chunks.text(result.text or ""), *chunks.finish(result), DONE]
        headers = {**SSE_HEADERS, **run_headers(result, run), "x-hatchway-stream-mode": "disabled"}
        headers.update(limit_headers)
        return StreamingResponse(iter(whole), media_type="text/event-stream", headers=headers)

    events = loop.events(items, run.ctx, stream=True)
    head = await prefetch(events)  # upstream errors before the first byte keep their HTTP status

    async def frames() -> AsyncIterator[bytes]:
        # A client that hangs up cancels this generator: the scope then records the run as 499.
        streamed = False
        try:
            yield chunks.role()
            async for event in chain(head, events):
                if isinstance(event, OutputTextDelta):
                    streamed = True
                    yield chunks.delta(event.text)
                elif isinstance(event, RunFinished):
                    result = event.result
                    for frame in chunks.unstreamed_text(result, after_text=streamed):
                        yield frame
                    for frame in chunks.finish(result):
                        yield frame
                    run.end(200, result)
            await settle()
            yield DONE
        except HatchwayError as exc:
            await run.stream_failed(exc)
            yield data_event(exc.to_body())
            yield DONE

    headers = {**SSE_HEADERS, **limit_headers}
    headers.update(dropped_headers_header(run.ctx.run.dropped_headers))  # listed before the first event
    return StreamingResponse(frames(), media_type="text/event-stream", headers=headers)


def _include_usage(body: ChatRequest) -> bool:
    return bool((body.stream_options or {}).get("include_usage"))


async def prefetch(events: AsyncIterator[LoopEvent]) -> list[LoopEvent]:
    """The events up to the first output (or the end): an error before it keeps its HTTP status."""
    head: list[LoopEvent] = []
    async for event in events:
        head.append(event)
        if isinstance(event, OutputTextDelta | RunFinished | ToolCallStarted):
            break
    return head


async def chain(head: list[LoopEvent], rest: AsyncIterator[LoopEvent]) -> AsyncIterator[LoopEvent]:
    """``prefetch``'s events, then the rest."""
    for event in head:
        yield event
    if head and isinstance(head[-1], RunFinished):
        return
    async for event in rest:
        yield event


class _ChunkWriter:
    """Frames ``chat.completion.chunk`` objects with one id for the whole stream."""

    def __init__(self, model: str, *, include_usage: bool) -> None:
        self.id = new_id("chatcmpl").replace("_", "-", 1)
        self.created = int(time.time())
        self.model = model
        self.include_usage = include_usage

    def _chunk(
        self, delta: dict[str, Any], finish_reason: str | None = None, extra: dict[str, Any] | None = None
    ) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
        chunk = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [choice],
        }
        return data_event(chunk | extra if extra else chunk)

    def role(self) -> bytes:
        return self._chunk({"role": "assistant", "content": ""})

    def delta(self, text: str) -> bytes:
        return self._chunk({"content": text})

    def text(self, text: str) -> list[bytes]:
        return [self.delta(text)] if text else []

    def unstreamed_text(self, result: RunResult, *, after_text: bool) -> list[bytes]:
        """The answer the model did not stream (``RunResult.unstreamed``)."""
        return self.text(result.unstreamed(after_text=after_text))

    def finish(self, result: RunResult) -> list[bytes]:
        frames = []
        if result.client_calls:
            calls = [_tool_call_dict(c, i) for i, c in enumerate(result.client_calls)]
            frames.append(self._chunk({"tool_calls": calls}))
        # A stream's headers leave before its end: the operation the answer is about (a question, or
        # an outcome) rides on the last chunk, as ``x-hatchway-operation-id`` does on a whole answer.
        about = {"hatchway": {"operation_id": result.operation_id}} if result.operation_id else None
        frames.append(self._chunk({}, result.finish_reason, about))
        if self.include_usage:
            frames.append(
                data_event(
                    {
                        "id": self.id,
                        "object": "chat.completion.chunk",
                        "created": self.created,
                        "model": self.model,
                        "choices": [],
                        "usage": result.usage.to_chat(),
                    }
                )
            )
        return frames
