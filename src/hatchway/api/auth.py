"""Bearer-key authentication: the key decides the organisation."""

from __future__ import annotations

from fastapi import Request

from hatchway.engine.context import Principal
from hatchway.gateway import Gateway


def gateway_of(request: Request) -> Gateway:
    return request.app.state.gateway


async def authenticate(request: Request) -> Principal:
    """FastAPI dependency for every ``/v1`` route."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    bearer = token.strip() if scheme.lower() == "bearer" else None
    return await gateway_of(request).orgs.authenticate(bearer)
