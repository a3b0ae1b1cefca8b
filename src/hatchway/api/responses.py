"""``/v1/responses``: the Responses API over HTTP — create, retrieve, delete, cancel, input items —
with streaming as server-sent events. What a response does is ``hatchway.responses``; this module
only translates."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response, StreamingResponse

from hatchway.api.auth import authenticate, gateway_of
from hatchway.api.context import budget_header, run_context
from hatchway.api.errors import json_error, parse_json_body, validate_body
from hatchway.api.sse import SSE_HEADERS, typed_event
from hatchway.engine.tools.mcp.forwarding import dropped_headers_header
from hatchway.errors import HatchwayError, InvalidRequest
from hatchway.principal import Principal
from hatchway.responses.items import wire_items
from hatchway.responses.runs import StartedRun
from hatchway.responses.wire import CreateResponseRequest, check_hosted_tools

router = APIRouter()


def _json(payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json", headers=headers)


def ignored_header(body: CreateResponseRequest) -> dict[str, str] | None:
    """``x-hatchway-ignored-params``: what the request set that has no effect here."""
    ignored = body.ignored()
    return {IGNORED_HEADER: ", ".join(ignored)} if ignored else None


IGNORED_HEADER = "x-hatchway-ignored-params"


def _sse(
    events: AsyncIterator[dict[str, Any]],
    on_close: Callable[[], None] | None = None,
    headers: dict[str, str] | None = None,
) -> StreamingResponse:
    async def frames() -> AsyncIterator[bytes]:
        try:
            async for event in events:
                yield typed_event(event)
        finally:
            if on_close is not None:
                on_close()

    return StreamingResponse(
        frames(), media_type="text/event-stream", headers={**SSE_HEADERS, **(headers or {})}
    )


@router.post("/v1/responses")
async def create_response(
    request: Request, principal: Annotated[Principal, Depends(authenticate)]
) -> Response:
    gw = gateway_of(request)
    ctx = run_context(request, principal, gw.settings.loop_deadline_seconds)
    raw = await request.body()
    body = validate_body(CreateResponseRequest, parse_json_body(raw))
    check_hosted_tools(body, gw.settings.hosted_tools)
    # Admitted to the limits in its run's scope, which gives the hold back when the run ends.
    created = await gw.responses.create(body, ctx, body_bytes=len(raw))
    headers = {**(ignored_header(body) or {}), **created.admission.headers}
    if created.started is None or not body.stream:
        dropped = dropped_headers_header(ctx.run.dropped_headers)
        return _json(created.response, headers={**headers, **dropped, **budget_header(ctx)})
    # A foreground stream whose client went away is not worth finishing: stop the upstream work.
    # A background one goes on; its client may follow it again.
    if body.background:
        return _sse(created.started.events.follow(), headers=headers)
    events = created.started.events.follow()
    try:
        head = await _prefetch(events)
    except asyncio.CancelledError:  # the client went away while the first output was awaited
        _canceller(created.started)()
        raise
    failure = created.started.run.failure
    if failure is not None and all(e["type"] in _BEFORE_OUTPUT for e in head):
        # Failed before any output (an upstream 429 or 5xx, a refused request): the HTTP status
        # the error has, as Chat Completions answers it, so every SDK's retry and backoff apply.
        answer = _failure_response(failure, created.started)
        answer.headers.update(headers)
        return answer
    headers = {**headers, **dropped_headers_header(ctx.run.dropped_headers)}
    return _sse(_chain(head, events), on_close=_canceller(created.started), headers=headers)


_BEFORE_OUTPUT = {"response.created", "response.queued", "response.in_progress", "error", "response.failed"}
"""Events a run that failed before any output has sent; the stream is held until another comes."""


async def _prefetch(events: AsyncIterator[dict[str, Any]]) -> list[dict[str, Any]]:
    """The stream's first events, up to the first that is output or an ending."""
    head: list[dict[str, Any]] = []
    async for event in events:
        head.append(event)
        if event["type"] not in _BEFORE_OUTPUT or event["type"] == "response.failed":
            break
    return head


async def _chain(
    head: list[dict[str, Any]], rest: AsyncIterator[dict[str, Any]]
) -> AsyncIterator[dict[str, Any]]:
    for event in head:
        yield event
    async for event in rest:
        yield event


def _failure_response(failure: HatchwayError, started: StartedRun) -> Response:
    """``failure`` as its HTTP error, the run's secrets scrubbed from the message (as stored)."""
    body = failure.to_body()
    error = body.get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        body = {**body, "error": {**error, "message": started.run.ctx.redact(error["message"])}}
    return json_error(failure.status_code, body)


def _canceller(started: StartedRun) -> Callable[[], None]:
    def cancel() -> None:
        if not started.task.done():
            started.task.cancel()

    return cancel


@router.get("/v1/responses/{response_id}")
async def retrieve_response(
    request: Request,
    response_id: str,
    principal: Annotated[Principal, Depends(authenticate)],
    stream: bool = False,
    starting_after: Annotated[int | None, Query(ge=-1)] = None,
) -> Response:
    responses = gateway_of(request).responses
    record = await responses.get(principal.org_id, response_id)
    if not stream:
        return _json(await responses.response(record))
    return _sse(responses.follow(record, starting_after))


@router.delete("/v1/responses/{response_id}")
async def delete_response(
    request: Request, response_id: str, principal: Annotated[Principal, Depends(authenticate)]
) -> Response:
    await gateway_of(request).responses.delete(principal.org_id, response_id)
    return _json({"id": response_id, "object": "response.deleted", "deleted": True})


@router.post("/v1/responses/{response_id}/cancel")
async def cancel_response(
    request: Request, response_id: str, principal: Annotated[Principal, Depends(authenticate)]
) -> Response:
    return _json(await gateway_of(request).responses.cancel(principal.org_id, response_id))


@router.get("/v1/responses/{response_id}/input_items")
async def list_input_items(
    request: Request,
    response_id: str,
    principal: Annotated[Principal, Depends(authenticate)],
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    order: Literal["asc", "desc"] = "desc",
) -> Response:
    responses = gateway_of(request).responses
    record = await responses.get(principal.org_id, response_id)
    items = wire_items(await responses.store.items(record.id, "input"))
    if order == "desc":
        items.reverse()
    if after is not None:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise InvalidRequest(f"after: no input item '{after}' in response '{response_id}'", param="after")
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    return _json(
        {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(items) > limit,
        }
    )
