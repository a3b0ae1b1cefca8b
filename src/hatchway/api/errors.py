"""The one place errors become HTTP responses: ``{"error": {message, type, param, code}}``."""

from __future__ import annotations

import logging
from typing import Any, TypeVar

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from hatchway.config.loading import format_loc, validation_problems
from hatchway.errors import HatchwayError, InvalidRequest

logger = logging.getLogger("hatchway.api")
M = TypeVar("M", bound=BaseModel)


def error_response(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json", headers=headers)


def hatchway_error_response(exc: HatchwayError) -> Response:
    """The response for an error Hatchway raised on purpose (server-side ones are logged, one line)."""
    if exc.status_code >= 500:
        logger.warning("%s: %s", type(exc).__name__, exc.message)
    return error_response(exc.status_code, exc.to_body())


def internal_error_response() -> Response:
    """A bug: the caller gets a 500 in the error shape, never a traceback (the log has it)."""
    body = {"error": {"message": "Internal error.", "type": "server_error", "param": None, "code": None}}
    return error_response(500, body)


def parse_json_body(raw: bytes) -> Any:
    """The request body as JSON, or a 400 that says where it broke."""
    if not raw:
        raise InvalidRequest("The request body is empty; send a JSON object.")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"The request body is not valid JSON ({exc}).", code="invalid_json") from None


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


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(HatchwayError)
    async def _hatchway(_: Request, exc: HatchwayError) -> Response:
        return hatchway_error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> Response:
        errors = exc.errors()
        parts = []
        for err in errors:
            loc = tuple(p for p in err.get("loc", ()) if p not in ("body", "query", "path", "header"))
            parts.append((format_loc(loc), str(err.get("msg", "invalid"))))
        message = "; ".join(f"{p}: {m}" if p else m for p, m in parts) or "Invalid request."
        body = InvalidRequest(message, param=parts[0][0] if parts else None).to_body()
        return error_response(400, body)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> Response:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        body = {"error": {"message": str(exc.detail), "type": kind, "param": None, "code": None}}
        return error_response(exc.status_code, body, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> Response:
        logger.exception("unhandled error")
        return internal_error_response()
