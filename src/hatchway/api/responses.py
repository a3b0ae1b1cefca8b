"""``/v1/responses``: the Responses API adapter over the agent loop (create, retrieve, delete,
cancel, input items), with streaming and background mode."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response, StreamingResponse

from hatchway.api.auth import authenticate, gateway_of
from hatchway.api.context import run_context
from hatchway.api.errors import parse_json_body, validate_body
from hatchway.api.responses_items import wire_items
from hatchway.api.responses_queue import abort, enqueue
from hatchway.api.responses_runs import ResponseRun, ResponseRunner
from hatchway.api.responses_stream import EventLog, ResponseStreamWriter, replay
from hatchway.api.responses_wire import CreateResponseRequest, response_object
from hatchway.api.sse import SSE_HEADERS, typed_event
from hatchway.engine.context import Principal
from hatchway.errors import Conflict, InvalidRequest
from hatchway.gateway import Gateway
from hatchway.store.responses import ACTIVE, ResponseRecord

router = APIRouter()
_POLL_SECONDS = 0.1


def _json(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json")


def _sse(events: AsyncIterator[dict[str, Any]], on_close: Any = None) -> StreamingResponse:
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
    runner = ResponseRunner(gw)
    run = await runner.prepare(body, ctx)
    if run.queued:  # Redis: any replica's or worker's queue consumer runs it
        await enqueue(gw, run)
        return _json(run.snapshot())
    if body.background:
        return _start_background(gw, runner, run, stream=bool(body.stream))
    if body.stream:
        return _start_stream(gw, runner, run)
    await runner.execute(run)
    return _json(run.snapshot())


def _start_background(gw: Gateway, runner: ResponseRunner, run: ResponseRun, *, stream: bool) -> Response:
    log = run.attach_stream()
    assert run.writer is not None
    run.writer.lifecycle("response.created", run.snapshot())
    run.writer.lifecycle("response.queued", run.snapshot())
    gw.tasks.spawn(run.record.id, runner.run_background(run), attachment=log)
    if stream:
        return _sse(log.follow())
    return _json(run.snapshot())


def _start_stream(gw: Gateway, runner: ResponseRunner, run: ResponseRun) -> Response:
    log = run.attach_stream()
    assert run.writer is not None
    run.writer.lifecycle("response.created", run.snapshot())
    run.writer.lifecycle("response.in_progress", run.snapshot())
    task = gw.tasks.spawn(run.record.id, _swallow_failure(runner.execute(run)), attachment=log)
    # A foreground stream whose client went away is not worth finishing: stop the upstream work.
    return _sse(log.follow(), on_close=lambda: task.cancel() if not task.done() else None)


async def _swallow_failure(execution: Any) -> None:
    try:
        await execution
    except Exception:  # recorded on the response and sent as error + response.failed events
        return


async def _record(gw: Gateway, principal: Principal, response_id: str) -> ResponseRecord:
    return await gw.responses.get(principal.org_id, response_id)


@router.get("/v1/responses/{response_id}")
async def retrieve_response(
    request: Request,
    response_id: str,
    principal: Annotated[Principal, Depends(authenticate)],
    stream: bool = False,
    starting_after: Annotated[int | None, Query(ge=-1)] = None,
) -> Response:
    gw = gateway_of(request)
    record = await _record(gw, principal, response_id)
    if not stream:
        return _json(response_object(record, await gw.responses.items(record.id, "output")))
    live = gw.tasks.attachment(record.id)
    if isinstance(live, EventLog):
        return _sse(live.follow(starting_after))
    return _sse(_replayed(gw, record, starting_after))


async def _replayed(
    gw: Gateway, record: ResponseRecord, starting_after: int | None
) -> AsyncIterator[dict[str, Any]]:
    """A stream of a response not running here: wait (polling the store) until it ends, then replay."""
    deadline = time.monotonic() + gw.settings.loop_deadline_seconds + gw.settings.response_lease_seconds * 2
    while record.status in ACTIVE and time.monotonic() < deadline:
        await asyncio.sleep(_POLL_SECONDS)
        record = await gw.responses.get(record.org_id, record.id)
    log = EventLog()
    replay(ResponseStreamWriter(log), response_object(record, await gw.responses.items(record.id, "output")))
    async for event in log.follow(starting_after):
        yield event


@router.delete("/v1/responses/{response_id}")
async def delete_response(
    request: Request, response_id: str, principal: Annotated[Principal, Depends(authenticate)]
) -> Response:
    gw = gateway_of(request)
    record = await _record(gw, principal, response_id)
    if record.status in ACTIVE:
        await gw.responses.cancel(record.id)
        gw.tasks.cancel(record.id)
        await abort(gw, record.id)
    await gw.responses.delete(principal.org_id, response_id)
    return _json({"id": response_id, "object": "response.deleted", "deleted": True})


@router.post("/v1/responses/{response_id}/cancel")
async def cancel_response(
    request: Request, response_id: str, principal: Annotated[Principal, Depends(authenticate)]
) -> Response:
    gw = gateway_of(request)
    record = await _record(gw, principal, response_id)
    if not record.background:
        raise InvalidRequest(
            "Only responses created with background: true can be cancelled.", param="response_id"
        )
    if record.status in ACTIVE and await gw.responses.cancel(record.id):
        gw.tasks.cancel(record.id)  # elsewhere: the queue aborts it, or its lease heartbeat sees the cancel
        await abort(gw, record.id)
    record = await _record(gw, principal, response_id)
    if record.status != "cancelled":
        raise Conflict(
            f"The response already ended with status '{record.status}'; it cannot be cancelled.",
            param="response_id",
        )
    return _json(response_object(record, await gw.responses.items(record.id, "output")))


@router.get("/v1/responses/{response_id}/input_items")
async def list_input_items(
    request: Request,
    response_id: str,
    principal: Annotated[Principal, Depends(authenticate)],
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    order: Literal["asc", "desc"] = "desc",
) -> Response:
    gw = gateway_of(request)
    record = await _record(gw, principal, response_id)
    items = wire_items(await gw.responses.items(record.id, "input"))
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
