"""Build the engine's RunContext from an HTTP request."""

from __future__ import annotations

import time
from collections.abc import Iterable

from fastapi import Request

from hatchway.engine.context import Principal, RunContext
from hatchway.errors import InvalidRequest

_MAX_ON_BEHALF_OF = 256
MAX_SESSION_KEY = 256


def run_context(request: Request, principal: Principal, deadline_seconds: float) -> RunContext:
    return headers_run_context(header_dict(request.scope["headers"]), principal, deadline_seconds)


def header_dict(raw: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """An ASGI scope's headers as ``{lower-case name: value}`` (the last of repeated ones wins)."""
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw}


def headers_run_context(headers: dict[str, str], principal: Principal, deadline_seconds: float) -> RunContext:
    """The RunContext of a request, from its headers (``header_dict``)."""
    on_behalf_of = headers.get("x-on-behalf-of") or None
    if on_behalf_of is not None and len(on_behalf_of) > _MAX_ON_BEHALF_OF:
        raise InvalidRequest(
            f"X-On-Behalf-Of: at most {_MAX_ON_BEHALF_OF} characters (got {len(on_behalf_of)})",
            param="X-On-Behalf-Of",
        )
    session_key = headers.get("hatchway-session") or None
    if session_key is not None and len(session_key) > MAX_SESSION_KEY:
        raise InvalidRequest(
            f"hatchway-session: at most {MAX_SESSION_KEY} characters (got {len(session_key)}); "
            "send a conversation id, not the conversation",
            param="hatchway-session",
        )
    return RunContext(
        principal=principal,
        request_headers=headers,
        on_behalf_of=on_behalf_of,
        session_key=session_key,
        deadline=time.monotonic() + deadline_seconds,
    )
