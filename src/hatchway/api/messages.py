"""``POST /v1/messages`` and ``POST /v1/messages/count_tokens``: Anthropic's Messages API over the
same engine as Chat Completions, so Claude Code and the Anthropic SDKs get the MCP loop, the vault,
operations and limits (docs/clients.md). The key is the Hatchway key, as ``x-api-key`` or a bearer
token; every error is in Anthropic's shape (``{"type": "error", "error": {"type", "message"}}``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import orjson
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from hatchway.access.gatekeeper import refuse_repeated_identity
from hatchway.api.auth import bearer_token, source_of
from hatchway.api.chat import chain, prefetch, read_body, run_headers
from hatchway.api.context import admit_run, header_dict
from hatchway.api.errors import error_response, parse_json_body, validate_body
from hatchway.api.messages_format import (
    EventWriter,
    MessagesRequest,
    error_body,
    estimated_tokens,
    message_body,
    request_items,
)
from hatchway.engine.context import RunContext
from hatchway.engine.items import Item
from hatchway.engine.loop import AgentLoop, OutputTextDelta, RunFinished, RunResult
from hatchway.engine.plan import RunRequest
from hatchway.engine.run import RunScope
from hatchway.errors import HatchwayError
from hatchway.gateway import Gateway

ROUTE = "/v1/messages"
COUNT_ROUTE = "/v1/messages/count_tokens"
ROUTE_NAME = "messages"
"""The route as the run log names it."""


def anthropic_error(exc: BaseException) -> Response:
    """``error_response``'s status and headers (the one mapping of errors to HTTP), in Anthropic's body."""
    openai_shaped = error_response(exc)
    message = orjson.loads(openai_shaped.body).get("error", {}).get("message") or "Internal error."
    headers = {k: v for k, v in openai_shaped.headers.items() if k not in ("content-length", "content-type")}
    body = orjson.dumps(error_body(openai_shaped.status_code, message))
    return Response(
        body, status_code=openai_shaped.status_code, media_type="application/json", headers=headers
    )


def _api_key(headers: dict[str, str]) -> str | None:
    return headers.get("x-api-key") or bearer_token(headers.get("authorization", ""))


class MessagesApp:
    """Either route as a plain ASGI app, served ahead of FastAPI like Chat Completions (wrapped in
    ``ErrorMiddleware(…, respond=anthropic_error)``)."""

    def __init__(self, gateway: Gateway, path: str) -> None:
        self.gw = gateway
        self.path = path
        """The route template ``observability.middleware.route_of`` reads."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["route"] = self
        if scope["method"] != "POST":
            raise StarletteHTTPException(405, "Method Not Allowed", headers={"allow": "POST"})
        headers = header_dict(scope["headers"])
        refuse_repeated_identity(scope["headers"])
        principal = await self.gw.access.admit(
            _api_key(headers), headers, "POST", self.path, source=source_of(scope)
        )
        if self.path == COUNT_ROUTE:
            raw = await read_body(receive)
            validate_body(MessagesRequest, parse_json_body(raw))
            count = orjson.dumps({"input_tokens": estimated_tokens(raw)})
            await Response(count, media_type="application/json")(scope, receive, send)
            return
        ctx = RunContext.from_headers(
            principal,
            headers,
            deadline_seconds=self.gw.settings.loop_deadline_seconds,
            known_secrets=self.gw.models.secrets,
        )
        async with self.gw.scopes.open(ROUTE_NAME, ctx) as run:
            response = await self._answer(run, receive)
            await response(scope, receive, send)

    async def _answer(self, run: RunScope, receive: Receive) -> Response:
        raw = await read_body(receive)
        body = validate_body(MessagesRequest, parse_json_body(raw))
        run.model = body.model
        admission = await admit_run(run, body.model, body.max_tokens, len(raw))
        tool_choice, parallel = body.tool_choice_and_parallel()
        prepared = await self.gw.planner.prepare(
            RunRequest(
                model=body.model,
                items=request_items(body),
                client_tools=body.client_tools(),
                tool_choice=tool_choice,
                parallel_tool_calls=parallel,
                params=body.params(),
            ),
            run,
        )
        loop, items = prepared.loop, prepared.conversation
        if body.stream:
            return await self._streamed(loop, items, body, run, admission.headers, run.settle)
        result = await loop.run(items, run.ctx)
        run.end(200, result)
        await run.settle()  # before the answer leaves: the client's next request finds its slot
        headers = {**run_headers(result, run), **admission.headers}
        return Response(
            orjson.dumps(message_body(result, body.model)), media_type="application/json", headers=headers
        )

    async def _streamed(
        self,
        loop: AgentLoop,
        items: list[Item],
        body: MessagesRequest,
        run: RunScope,
        limit_headers: dict[str, str],
        settle: Callable[[], Awaitable[None]],
    ) -> Response:
        """``settle``: gives the run's limits back, before the stream's last event (idempotent)."""
        writer = EventWriter(body.model)
        events = loop.events(items, run.ctx, stream=True)
        head = await prefetch(events)  # an upstream error before the first byte keeps its status

        async def frames() -> AsyncIterator[bytes]:
            yield writer.start()
            streamed = False
            try:
                async for item in chain(head, events):
                    if isinstance(item, OutputTextDelta) and item.text:
                        streamed = True
                        for frame in writer.text(item.text):
                            yield frame
                    elif isinstance(item, RunFinished):
                        result: RunResult = item.result
                        if unstreamed := result.unstreamed(after_text=streamed):
                            for frame in writer.text(unstreamed):
                                yield frame
                        *frames_before, last = writer.finish(result)
                        for frame in frames_before:
                            yield frame
                        run.end(200, result)
                        await settle()
                        yield last
            except HatchwayError as exc:
                await run.stream_failed(exc)
                yield writer.failed(exc)

        headers = {**writer.headers, **limit_headers}
        return StreamingResponse(frames(), media_type="text/event-stream", headers=headers)
