"""WebSocket mode of ``/v1/responses``: one connection, one ``response.create`` after another.

Each client message ``{"type": "response.create", …}`` carries the body of ``POST /v1/responses``
(``stream`` is implicit, ``background`` is refused) and is answered with the same events an SSE
stream carries, one JSON text frame each, ``sequence_number`` included. Turns run one at a time,
in order. The socket remembers its most recent responses, so a turn may continue a
``store: false`` response by ``previous_response_id``; an id neither remembered nor stored gets
an ``error`` event with code ``previous_response_not_found``, and the socket stays open.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from typing import Any, cast

import orjson
from fastapi import APIRouter, Request, WebSocket, WebSocketDisconnect
from pydantic import ValidationError
from starlette.responses import Response

from hatchway.api.auth import authenticate
from hatchway.api.context import run_context
from hatchway.api.responses_compact import stored_conversation
from hatchway.api.responses_runs import ResponseRun, ResponseRunner
from hatchway.api.responses_wire import CreateResponseRequest
from hatchway.config.loading import validation_problems
from hatchway.engine.context import Principal
from hatchway.errors import HatchwayError, InvalidRequest
from hatchway.gateway import Gateway

router = APIRouter()
REMEMBERED_RESPONSES = 4
"""How many of its latest responses a socket keeps for ``previous_response_id`` continuation."""
_TRANSPORT_FIELDS = ("stream", "stream_options")


@router.websocket("/v1/responses")
async def responses_socket(websocket: WebSocket) -> None:
    gw: Gateway = websocket.app.state.gateway
    try:
        principal = await authenticate(cast(Request, websocket))
    except HatchwayError as exc:
        await _deny(websocket, exc)
        return
    await websocket.accept()
    session = SocketSession(gw, principal, websocket)
    with contextlib.suppress(WebSocketDisconnect):
        while True:
            await session.handle(await websocket.receive_text())


async def _deny(websocket: WebSocket, exc: HatchwayError) -> None:
    """Refuse the handshake with the HTTP error an HTTP request would get (close 1008 otherwise)."""
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(
            Response(orjson.dumps(exc.to_body()), status_code=exc.status_code, media_type="application/json")
        )
    else:
        await websocket.close(code=1008, reason=exc.message[:120])


class SocketSession:
    """One connection's turns and the conversations of its latest responses."""

    def __init__(self, gw: Gateway, principal: Principal, websocket: WebSocket) -> None:
        self.gw = gw
        self.principal = principal
        self.websocket = websocket
        self.runner = ResponseRunner(gw)
        self.remembered: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
        self._continued: str | None = None
        """The ``previous_response_id`` of the turn being handled."""

    async def handle(self, text: str) -> None:
        """Run one client message to its end; a bad one is answered with an ``error`` event.

        A turn that fails evicts the response it continued, as OpenAI's connection-local cache
        does: the client must start again from a state it knows to be good.
        """
        self._continued = None
        try:
            run, history = await self._prepare(text)
        except HatchwayError as exc:
            self._forget(self._continued)
            await self._send(socket_error(exc))
            return
        await self._stream(run)
        if run.record.status not in ("completed", "incomplete"):
            self._forget(self._continued)
        elif not run.stored:  # stored responses continue through the store, from any socket
            self._remember(run, history)

    async def _prepare(self, text: str) -> tuple[ResponseRun, list[dict[str, Any]]]:
        message = _client_event(text)
        previous = message.pop("previous_response_id", None)
        self._continued = previous if isinstance(previous, str) else None
        body = _body(message)  # validated without previous_response_id: store: false may continue here
        body.previous_response_id = previous
        ctx = run_context(
            cast(Request, self.websocket), self.principal, self.gw.settings.loop_deadline_seconds
        )
        if previous is None:
            return await self.runner.prepare(body, ctx), []
        history = self.remembered.get(previous)
        if history is None and body.store is not False:
            return await self.runner.prepare(body, ctx), []  # a stored chain, read as over HTTP
        if history is None:  # store: false, not on this socket: the stored chain, if there is one
            history = await stored_conversation(self.gw, self.principal.org_id, previous)
        return await self.runner.prepare(body, ctx, local_history=history), history

    async def _stream(self, run: ResponseRun) -> None:
        log = run.attach_stream()
        assert run.writer is not None
        run.writer.error_events = False
        run.writer.lifecycle("response.created", run.snapshot())
        run.writer.lifecycle("response.in_progress", run.snapshot())
        task = asyncio.ensure_future(self.runner.execute(run))
        try:
            async for event in log.follow():
                await self._send(event)
        finally:
            if not task.done():  # the client went away mid-turn: stop the upstream work
                task.cancel()
            with contextlib.suppress(HatchwayError, asyncio.CancelledError):
                await task  # a failure was already sent as error + response.failed

    def _forget(self, response_id: str | None) -> None:
        if response_id is not None:
            self.remembered.pop(response_id, None)

    def _remember(self, run: ResponseRun, history: list[dict[str, Any]]) -> None:
        self.remembered[run.record.id] = [*history, *run.input_records, *run.output]
        while len(self.remembered) > REMEMBERED_RESPONSES:
            self.remembered.popitem(last=False)

    async def _send(self, event: dict[str, Any]) -> None:
        await self.websocket.send_text(orjson.dumps(event).decode())


def _client_event(text: str) -> dict[str, Any]:
    try:
        message = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise InvalidRequest("the message is not valid JSON") from None
    if not isinstance(message, dict) or message.get("type") != "response.create":
        kind = message.get("type") if isinstance(message, dict) else None
        raise InvalidRequest(f"type: expected 'response.create' (got {kind!r})", param="type")
    message.pop("type")
    if message.get("background"):
        raise InvalidRequest("background: not supported over WebSocket", param="background")
    for name in _TRANSPORT_FIELDS:  # streaming is what a socket does
        message.pop(name, None)
    return message


def _body(message: dict[str, Any]) -> CreateResponseRequest:
    try:
        return CreateResponseRequest.model_validate(message)
    except ValidationError as exc:
        path, problem = validation_problems(exc)[0]
        raise InvalidRequest(f"{path}: {problem}" if path else problem, param=path or None) from None


def socket_error(exc: HatchwayError) -> dict[str, Any]:
    """A refused ``response.create`` as the WebSocket protocol's error event (no sequence number)."""
    status = 400 if exc.code == "previous_response_not_found" else exc.status_code
    return {
        "type": "error",
        "status": status,
        "error": {"type": exc.error_type, "code": exc.code, "message": exc.message, "param": exc.param},
    }
