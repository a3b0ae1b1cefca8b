"""Authentication and the route's role: the key (or the signed-in person and the organisation they
act in) decides the organisation and what may be done."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from fastapi import Request
from starlette.requests import HTTPConnection

from hatchway.access.administration import Actor
from hatchway.access.gatekeeper import refuse_repeated_identity, request_id_of
from hatchway.access.people import SessionCredentials
from hatchway.access.roles import WEBSOCKET
from hatchway.api.session_cookie import SESSION_COOKIE, read_cookie
from hatchway.gateway import Gateway
from hatchway.principal import Principal


def gateway_of(request: HTTPConnection) -> Gateway:
    return request.app.state.gateway


def bearer_token(authorization: str) -> str | None:
    """The key of an ``Authorization: Bearer <key>`` header value, None for any other scheme."""
    scheme, _, token = authorization.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def route_of(connection: HTTPConnection) -> tuple[str, str]:
    """(method, path template) of the matched route, as ``access/roles.py`` names it."""
    route = connection.scope.get("route")
    path = getattr(route, "path", connection.url.path)
    method = WEBSOCKET if connection.scope["type"] == "websocket" else connection.scope["method"]
    return method, path


async def authenticate(request: Request) -> Principal:
    """FastAPI dependency for every ``/v1`` route: the principal, allowed on this route (403 otherwise).

    Without a key, the person of the SSO session cookie (over plain HTTP only: a cookie would open the
    WebSocket to any page the browser visits, so it takes keys alone).
    """
    refuse_repeated_identity(request.scope["headers"])
    method, route = route_of(request)
    gw = gateway_of(request)
    bearer = bearer_token(request.headers.get("authorization", ""))
    session = None
    if bearer is None and request.scope["type"] == "http":
        session = session_credentials(request, gw)
    return await gw.access.admit(
        bearer, request.headers, method, route, source=source_of(request.scope), session=session
    )


def session_credentials(request: HTTPConnection, gw: Gateway) -> SessionCredentials | None:
    """The SSO session cookie and its headers, when SSO is on and the browser sent the cookie."""
    if gw.sessions is None:
        return None
    cookie = read_cookie(request, gw.settings, SESSION_COOKIE)
    if cookie is None:
        return None
    return SessionCredentials(
        cookie=cookie,
        csrf_token=request.headers.get("x-csrf-token"),
        organization=request.headers.get("hatchway-organization") or None,
        path_organization=request.path_params.get("org"),
    )


async def admit(
    gw: Gateway,
    scope_headers: Iterable[tuple[bytes, bytes]],
    headers: Mapping[str, str],
    method: str,
    route: str,
    source: str | None,
) -> Principal:
    """The principal behind ``headers`` (lower-cased names; ``scope_headers`` as received), allowed
    ``method route``: keys only (the hot inference routes and the MCP endpoints are called by
    programs, never by a signed-in page)."""
    refuse_repeated_identity(scope_headers)
    bearer = bearer_token(headers.get("authorization", ""))
    return await gw.access.admit(bearer, headers, method, route, source=source)


def source_of(scope: Mapping[str, Any]) -> str | None:
    """The client's address as the server saw it (behind a proxy: the proxy's, unless uvicorn's
    ``--forwarded-allow-ips`` trusts it to say otherwise)."""
    client = scope.get("client")
    return client[0] if client else None


async def audit(
    request: Request, principal: Principal, action: str, target: str, detail: dict[str, Any] | None = None
) -> None:
    """Record a change a route made (``access/administration.py``): names only, never a value."""
    actor = Actor.of(principal, source_of(request.scope), request_id_of(request.headers))
    await gateway_of(request).admin.record(actor, principal.org_id, action, target, detail=detail)
