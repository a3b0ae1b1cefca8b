"""The one place errors become HTTP responses: ``{"error": {message, type, param, code}}``.

``error_response`` maps every error a request can end in; ``ErrorMiddleware``, a plain ASGI
middleware, applies it to whatever escapes an app before its response started. It wraps the
FastAPI app and the raw chat route alike; FastAPI's own handlers for the errors its router catches
itself (validation, routing) are this same function (``install_error_handlers``).

It also names the run record of the request on its response, whatever the response — an error
included, which is when the client most needs it: ``x-hatchway-request-id`` (``RecordNote``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hatchway.config.loading import format_loc, validation_problems
from hatchway.engine.run import RecordNote
from hatchway.errors import ClientGone, HatchwayError, InvalidRequest
from hatchway.json_limits import MAX_JSON_DEPTH, too_deep
from hatchway.store.db import DATABASE_UNAVAILABLE, database_unreachable

logger = logging.getLogger("hatchway.api")
M = TypeVar("M", bound=BaseModel)


def json_error(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json", headers=headers)


def error_response(exc: BaseException) -> Response:
    """The response for any error a request ends in; a bug is a 500 in the same shape, never a
    traceback (the log has it)."""
    if isinstance(exc, HatchwayError):
        if exc.status_code >= 500:
            logger.warning("%s: %s", type(exc).__name__, exc.message)
        return json_error(exc.status_code, exc.to_body(), headers=getattr(exc, "headers", None))
    if isinstance(exc, RequestValidationError):
        return json_error(400, _validation_error(exc).to_body())
    if isinstance(exc, StarletteHTTPException):
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        body = {"error": {"message": str(exc.detail), "type": kind, "param": None, "code": None}}
        return json_error(exc.status_code, body, headers=getattr(exc, "headers", None))
    if database_unreachable(exc):
        logger.warning("database unreachable (%s)", type(exc).__name__)
        return json_error(503, DATABASE_UNAVAILABLE.to_body(), headers={"retry-after": "5"})
    logger.error("unhandled error", exc_info=exc)
    body = {"error": {"message": "Internal error.", "type": "server_error", "param": None, "code": None}}
    return json_error(500, body)


def _validation_error(exc: RequestValidationError) -> InvalidRequest:
    parts = []
    for err in exc.errors():
        loc = tuple(p for p in err.get("loc", ()) if p not in ("body", "query", "path", "header"))
        parts.append((format_loc(loc), str(err.get("msg", "invalid"))))
    message = "; ".join(f"{p}: {m}" if p else m for p, m in parts) or "Invalid request."
    return InvalidRequest(message, param=parts[0][0] if parts else None)


class ErrorMiddleware:
    """Answers an error that escapes ``app`` before its response started; nothing escapes further.

    A client that went away gets nothing; an error after the response started can only be logged
    (the server closes the connection).
    """

    def __init__(self, app: ASGIApp, respond: Callable[[BaseException], Response] | None = None) -> None:
        """``respond``: the response for an error (``error_response``, OpenAI's shape, by default)."""
        self.app = app
        self.respond = respond or error_response

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_and_note(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if note.log_id is not None:
                    message = _naming_record(message, note.log_id)
            await send(message)

        with RecordNote() as note:
            try:
                await self.app(scope, receive, send_and_note)
            except (ClientGone, ClientDisconnect):
                return
            except Exception as exc:
                if started:
                    logger.error("error after the response started", exc_info=exc)
                    return
                await self.respond(exc)(scope, receive, send_and_note)


REQUEST_ID_HEADER = "x-hatchway-request-id"
"""The id of the request's run record (``GET /v1/logs/{id}``), on every response of a request that has one."""
_REQUEST_ID = REQUEST_ID_HEADER.encode()


def _naming_record(start: Message, log_id: str) -> Message:
    """``http.response.start`` with ``x-hatchway-request-id``, unless the app set it already."""
    headers = list(start.get("headers", ()))
    if any(name.lower() == _REQUEST_ID for name, _ in headers):
        return start
    return {**start, "headers": [*headers, (_REQUEST_ID, log_id.encode())]}


def install_error_handlers(app: FastAPI) -> None:
    """Errors FastAPI's router catches itself go through ``error_response`` too."""

    async def handle(request: Request, exc: Exception) -> Response:
        if isinstance(exc, StarletteHTTPException) and exc.status_code == 405:
            exc = StarletteHTTPException(405, exc.detail, headers={"allow": _allowed(app, request)})
        return error_response(exc)

    app.add_exception_handler(RequestValidationError, handle)
    app.add_exception_handler(StarletteHTTPException, handle)


def _allowed(app: FastAPI, request: Request) -> str:
    """The methods of this path: Starlette's 405 names only the first route's, and FastAPI declares
    one route per method. Of the templates that match, the most literal one is the resource
    (``/v1/responses/compact``, not ``/v1/responses/{response_id}``)."""
    by_template: dict[str, set[str]] = {}
    for route in _leaf_routes(app.router.routes):
        match, _ = route.matches(request.scope)
        if match is not Match.NONE:
            template = getattr(route, "path_format", "")
            by_template.setdefault(template, set()).update(getattr(route, "methods", None) or ())
    if not by_template:
        return ""
    resource = min(by_template, key=lambda template: template.count("{"))
    return ", ".join(sorted(by_template[resource]))


def _leaf_routes(routes: list[BaseRoute]) -> Iterator[BaseRoute]:
    for route in routes:
        inner = getattr(route, "original_router", None)  # FastAPI 0.16x wraps each included router
        if inner is not None:
            yield from _leaf_routes(inner.routes)  # the routers are included without a prefix
        else:
            yield route


"""Deeper JSON is refused: the gateway serialises again what it forwards and stores (orjson stops at
254 levels, inside the gateway's own wrapping), and no API field needs more."""


def parse_json_body(raw: bytes) -> Any:
    """The request body as JSON, or a 400 that says where it broke (or where it nests too deep)."""
    if not raw:
        raise InvalidRequest("The request body is empty; send a JSON object.")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"The request body is not valid JSON ({exc}).", code="invalid_json") from None
    check_nesting(raw, data)
    return data


def check_nesting(raw: bytes | str, data: Any) -> None:
    """A 400 naming the field when ``data`` (parsed from ``raw``) nests past MAX_JSON_DEPTH."""
    opened = raw.count("[") + raw.count("{") if isinstance(raw, str) else raw.count(b"[") + raw.count(b"{")
    if opened > MAX_JSON_DEPTH and (path := too_deep(data)) is not None:  # counting is cheap, walking is not
        raise InvalidRequest(
            f"{path or '(root)'}: nested deeper than {MAX_JSON_DEPTH} levels", param=path or None
        )


def validate_body(model: type[M], data: Any) -> M:
    """Validate a parsed body; the first problem's field path becomes ``param``."""
    if not isinstance(data, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = validation_problems(exc)
        message = "; ".join(f"{path}: {msg}" if path else msg for path, msg in problems)
        raise InvalidRequest(message, param=problems[0][0] or None) from None
