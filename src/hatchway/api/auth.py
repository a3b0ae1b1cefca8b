"""Bearer-key authentication: the key decides the organisation."""

from __future__ import annotations

from fastapi import Request

from hatchway.gateway import Gateway
from hatchway.principal import Principal


def gateway_of(request: Request) -> Gateway:
    return request.app.state.gateway


def bearer_token(authorization: str) -> str | None:
    """The key of an ``Authorization: Bearer <key>`` header value, None for any other scheme."""
    scheme, _, token = authorization.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


async def authenticate(request: Request) -> Principal:
    """FastAPI dependency for every ``/v1`` route."""
    bearer = bearer_token(request.headers.get("authorization", ""))
    return await gateway_of(request).orgs.authenticate(bearer)
