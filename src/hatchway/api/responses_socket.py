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
from hatchway.api.errors import check_nesting
from hatchway.config.loading import validation_problems
from hatchway.engine.context import RunContext
from hatchway.errors import HatchwayError, InvalidRequest
from hatchway.gateway import Gateway
from hatchway.principal import Principal
from hatchway.responses.chain import stored_conversation
from hatchway.responses.runs import ResponseRun, StartedRun
from hatchway.responses.wire import CreateResponseRequest, check_hosted_tools

router = APIRouter()
REMEMBERED_RESPONSES = 4
"""How many of its latest responses a socket keeps for ``previous_response_id`` continuation."""
_TRANSPORT_FIELDS = ("stream", "stream_options")
UNSUPPORTED_DATA = 1003
POLICY_VIOLATION = 1008
"""The close code of a connection whose key or role no longer admits it (RFC 6455 §7.4.1)."""
"""The close code for a binary frame (RFC 6455 §7.4.1)."""


@router.websocket("/v1/responses")
async def responses_socket(websocket: WebSocket) -> None:
    gw: Gateway = websocket.app.state.gateway
    try:
        principal = await authenticate(cast(Request, websocket))
    except HatchwayError as exc:
        await _deny(websocket, exc)
        return
    await websocket.accept()
    await SocketSession(gw, principal, websocket).serve()


async def _deny(websocket: WebSocket, exc: HatchwayError) -> None:
    """Refuse the handshake with the HTTP error an HTTP request would get (close 1008 otherwise)."""
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(
            Response(orjson.dumps(exc.to_body()), status_code=exc.status_code, media_type="application/json")
        )
    else:
        await websocket.close(code=POLICY_VIOLATION, reason=exc.message[:120])


class SocketSession:
    """One connection's turns and the conversations of its latest responses.

    The socket is read all along, turns or not: messages sent during a turn wait for the next one,
    and a client that goes away mid-turn is noticed at once (``gone``), which stops the turn — a
    turn whose tool runs for minutes sends nothing meanwhile, so a failed send would come too late.
    """

    def __init__(self, gw: Gateway, principal: Principal, websocket: WebSocket) -> None:
        self.gw = gw
        self.principal = principal
        self.websocket = websocket
        self.remembered: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
        self._continued: str | None = None
        """The ``previous_response_id`` of the turn being handled."""
        self._inbox: asyncio.Queue[str | None] = asyncio.Queue()
        """Client messages in order; None once the client is gone."""
        self.gone = asyncio.Event()

    async def serve(self) -> None:
        """Handle the client's messages one turn at a time until it goes away."""
        reader = asyncio.create_task(self._read(), name="responses-socket:read")
        try:
            while (text := await self._inbox.get()) is not None:
                with contextlib.suppress(WebSocketDisconnect):
                    await self.handle(text)
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader

    async def _read(self) -> None:
        try:
            while True:
                message = await self.websocket.receive()
                if message["type"] == "websocket.disconnect":
                    return
                if message.get("text") is None:  # a binary frame: the protocol is JSON text
                    await self.websocket.close(
                        code=UNSUPPORTED_DATA, reason="send events as JSON text frames"
                    )
                    return
                await self._inbox.put(message["text"])
        except (WebSocketDisconnect, RuntimeError):  # the connection is already gone
            return
        finally:
            self.gone.set()
            self._inbox.put_nowait(None)

    async def handle(self, text: str) -> None:
        """Run one client message to its end; a bad one is answered with an ``error`` event.

        A turn that fails evicts the response it continued, as OpenAI's connection-local cache
        does: the client must start again from a state it knows to be good.
        """
        self._continued = None
        try:
            # Admitted again for each turn (the key lookup is cached): a key revoked, expired or
            # narrowed since the handshake, or a user token past its expiry, counts from its next turn.
            self.principal = await authenticate(cast(Request, self.websocket))
        except HatchwayError as exc:
            await self._send(socket_error(exc))
            await self.websocket.close(code=POLICY_VIOLATION, reason=exc.message[:120])
            return
        try:
            started, history = await self._start(text)
        except HatchwayError as exc:
            self._forget(self._continued)
            await self._send(socket_error(exc))
            return
        await self._stream(started)  # the turn's hold on the limits is given back as its run ends
        run = started.run
        if run.record.status not in ("completed", "incomplete"):
            self._forget(self._continued)
        elif not run.stored:  # stored responses continue through the store, from any socket
            self._remember(run, history)

    async def _start(self, text: str) -> tuple[StartedRun, list[dict[str, Any]]]:
        message = _client_event(text)
        previous = message.pop("previous_response_id", None)
        self._continued = previous if isinstance(previous, str) else None
        body = _body(message)  # validated without previous_response_id: store: false may continue here
        body.previous_response_id = previous
        check_hosted_tools(body, self.gw.settings.hosted_tools)
        ctx = run_context(self.websocket, self.principal, self.gw.settings.loop_deadline_seconds)
        return await self._start_turn(body, ctx, previous, len(text))

    async def _start_turn(
        self, body: CreateResponseRequest, ctx: RunContext, previous: str | None, body_bytes: int
    ) -> tuple[StartedRun, list[dict[str, Any]]]:
        responses = self.gw.responses
        history = self.remembered.get(previous) if previous is not None else None
        if previous is None or (history is None and body.store is not False):
            # A stored chain, read as over HTTP.
            return await responses.start_turn(body, ctx, None, body_bytes=body_bytes), []
        if history is None:  # store: false, not on this socket: the stored chain, if there is one
            history, _ = await stored_conversation(responses.store, self.principal.org_id, previous)
        return await responses.start_turn(body, ctx, history, body_bytes=body_bytes), history

    async def _stream(self, started: StartedRun) -> None:
        watcher = asyncio.create_task(self._stop_when_gone(started.task))
        try:
            async for event in started.events.follow():
                if not self.gone.is_set():
                    await self._send(event)
        finally:
            watcher.cancel()
            if not started.task.done():  # the client went away mid-turn: stop the upstream work
                started.task.cancel()
            await asyncio.wait([started.task])  # its scope records how it ended

    async def _stop_when_gone(self, task: asyncio.Task[None]) -> None:
        await self.gone.wait()
        task.cancel()

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
    check_nesting(text, message)
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
