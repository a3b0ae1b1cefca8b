"""``/v1/responses``: the Responses API over HTTP — create, retrieve, delete, cancel, input items —
with streaming as server-sent events. What a response does is ``hatchway.responses``; this module
only translates."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response, StreamingResponse

from hatchway.api.auth import authenticate, gateway_of
from hatchway.api.context import run_context
from hatchway.api.errors import parse_json_body, validate_body
from hatchway.api.sse import SSE_HEADERS, typed_event
from hatchway.engine.context import Principal
from hatchway.errors import InvalidRequest
from hatchway.responses.items import wire_items
from hatchway.responses.runs import StartedRun
from hatchway.responses.wire import CreateResponseRequest

router = APIRouter()


def _json(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json")


def _sse(
    events: AsyncIterator[dict[str, Any]], on_close: Callable[[], None] | None = None
) -> StreamingResponse:
    async def frames() -> AsyncIterator[bytes]:
        try:
            async for event in events:
                yield typed_event(event)
        finally:
            if on_close is not None:
                on_close()

    return StreamingResponse(frames(), media_type="text/event-stream", headers=SSE_HEADERS)


@router.post("/v1/responses")
async def create_response(
    request: Request, principal: Annotated[Principal, Depends(authenticate)]
) -> Response:
    gw = gateway_of(request)
    ctx = run_context(request, principal, gw.settings.loop_deadline_seconds)
    body = validate_body(CreateResponseRequest, parse_json_body(await request.body()))
    created = await gw.responses.create(body, ctx)
    if created.started is None or not body.stream:
        return _json(created.response)
    # A foreground stream whose client went away is not worth finishing: stop the upstream work.
    # A background one goes on; its client may follow it again.
    on_close = None if body.background else _canceller(created.started)
    return _sse(created.started.events.follow(), on_close=on_close)


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
