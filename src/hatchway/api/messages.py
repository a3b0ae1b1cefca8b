"""``POST /v1/messages`` and ``POST /v1/messages/count_tokens``: Anthropic's Messages API over the
same engine as Chat Completions, so Claude Code and the Anthropic SDKs get the MCP loop, the vault,
operations and limits (docs/clients.md). The key is the Hatchway key, as ``x-api-key`` or a bearer
token; every error is in Anthropic's shape (``{"type": "error", "error": {"type", "message"}}``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import orjson
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from hatchway.api.auth import bearer_token
from hatchway.api.chat import chain, prefetch, read_body, run_headers, run_limits
from hatchway.api.context import header_dict
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
from hatchway.engine.plan import PlanRequest
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
        principal = await self.gw.orgs.authenticate(_api_key(headers))
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
        async with self.gw.scopes.open(ROUTE_NAME, ctx) as run, AsyncExitStack() as holds:
            response = await self._answer(run, receive, holds)
            await response(scope, receive, send)

    async def _answer(self, run: RunScope, receive: Receive, holds: AsyncExitStack) -> Response:
        raw = await read_body(receive)
        body = validate_body(MessagesRequest, parse_json_body(raw))
        run.model = body.model
        limits = run_limits(self.gw, run, body.model, body.max_tokens, len(raw))
        admission = await holds.enter_async_context(limits)
        plan = await self.gw.planner.plan(PlanRequest(model=body.model), run.ctx, run)
        items = plan.conversation(request_items(body))
        tool_choice, parallel = body.tool_choice_and_parallel()
        loop = plan.agent_loop(
            client_tools=body.client_tools(),
            tool_choice=tool_choice,
            parallel_tool_calls=parallel,
            params=body.params(),
        )
        if body.stream:
            return await self._streamed(loop, items, body, run, admission.headers)
        result = await loop.run(items, run.ctx)
        run.end(200, result)
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
    ) -> Response:
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
                        if result.text and (result.interruption is not None or result.rounds == 0):
                            # The question of a confirmation (or an answer given without a model call).
                            for frame in writer.text(("\n\n" if streamed else "") + result.text):
                                yield frame
                        for frame in writer.finish(result):
                            yield frame
                        run.end(200, result)
            except HatchwayError as exc:
                run.end(502, error=exc.message)
                yield writer.failed(exc)

        headers = {**writer.headers, "x-hatchway-request-id": run.log_id, **limit_headers}
        return StreamingResponse(frames(), media_type="text/event-stream", headers=headers)
