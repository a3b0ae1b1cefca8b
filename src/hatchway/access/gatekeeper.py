"""Admitting a caller: the key (or signed-in person) behind a request, the route's role, and the
verified end user, in that order, for every entry point (``api/auth.py`` and the hot ASGI routes)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping

from hatchway.access.end_users import EndUsers
from hatchway.access.people import People, SessionCredentials
from hatchway.access.roles import check_route
from hatchway.errors import InsufficientRole, InvalidRequest
from hatchway.principal import Principal
from hatchway.store.orgs import OrgStore

Denied = Callable[[Principal, str, InsufficientRole, str | None, str | None], Awaitable[None]]
"""Told of each role denial: (principal, "METHOD route", error, source address, request id); the
audit trail records it."""

DENIAL_RECORD_SECONDS = 60.0
"""One key's denials of one route are recorded at most once per this many seconds: a client looping
on a forbidden route cannot fill the audit trail."""
DENIAL_RECORD_ENTRIES = 10_000


MAX_REQUEST_ID_CHARS = 128
IDENTITY_HEADERS = frozenset({b"authorization", b"x-api-key", b"x-on-behalf-of", b"x-hatchway-user-token"})
"""Headers that say who calls or for whom: each at most once. Repeated, one reader (Starlette's
``Headers.get``) takes the first and another (a dict of the headers) the last, so a request could be
admitted as one end user and run as another."""


def refuse_repeated_identity(raw: Iterable[tuple[bytes, bytes]]) -> None:
    """InvalidRequest (400) when a request repeats a header of ``IDENTITY_HEADERS``."""
    seen: set[bytes] = set()
    for name, _ in raw:
        lowered = name.lower()
        if lowered in IDENTITY_HEADERS:
            if lowered in seen:
                header = lowered.decode()
                raise InvalidRequest(f"{header}: sent more than once; send it once", param=header)
            seen.add(lowered)


def request_id_of(headers: Mapping[str, str]) -> str | None:
    """The caller's ``X-Request-Id`` (for the audit trail), when it is a short printable token."""
    value = headers.get("x-request-id")
    if value and len(value) <= MAX_REQUEST_ID_CHARS and value.isprintable():
        return value
    return None


class Gatekeeper:
    """Turns a request's credentials into a ``Principal`` allowed on its route."""

    def __init__(
        self,
        orgs: OrgStore,
        end_users: EndUsers,
        *,
        on_denied: Denied | None = None,
        people: People | None = None,
    ) -> None:
        self.orgs = orgs
        self.end_users = end_users
        self.on_denied = on_denied
        self.people = people
        """Signed-in people (``access.sso`` set); None: keys only."""
        self._denials: dict[tuple[str | None, str], float] = {}

    async def admit(
        self,
        bearer: str | None,
        headers: Mapping[str, str],
        method: str,
        route: str,
        *,
        source: str | None = None,
        session: SessionCredentials | None = None,
    ) -> Principal:
        """The principal behind ``bearer`` (or, without one, the person ``session`` names), allowed
        ``method route``, with its verified end user.

        AuthenticationError (401) for a missing, wrong, expired or revoked key, session or user token;
        InsufficientRole (403) for a role the route is not granted; PermissionDenied (403) for an
        ``X-On-Behalf-Of`` that a verified user token contradicts, or a session's change without its
        CSRF token. Only the routes that pass ``session`` accept people (the hot inference routes,
        ``/mcp`` and the WebSocket take keys only).
        """
        if bearer is None and session is not None and self.people is not None:
            principal = await self.people.principal(session, method, route)
        else:
            principal = await self.orgs.authenticate(bearer)
        await self.check(principal, method, route, source=source, request_id=request_id_of(headers))
        return await self.end_users.admit(principal, headers)

    async def check(
        self,
        principal: Principal,
        method: str,
        route: str,
        *,
        source: str | None = None,
        request_id: str | None = None,
    ) -> None:
        """``check_route``, with the denial recorded."""
        try:
            check_route(principal, method, route)
        except InsufficientRole as denied:
            await self._denied(principal, f"{method} {route}", denied, source, request_id)
            raise

    async def _denied(
        self,
        principal: Principal,
        target: str,
        denied: InsufficientRole,
        source: str | None,
        request_id: str | None,
    ) -> None:
        if self.on_denied is None:
            return
        now = time.monotonic()
        key = (principal.key_id or principal.subject, target.partition(" ")[2])  # the route, any method
        if self._denials.get(key, 0.0) > now:
            return
        if len(self._denials) > DENIAL_RECORD_ENTRIES:
            self._denials.clear()
        self._denials[key] = now + DENIAL_RECORD_SECONDS
        await self.on_denied(principal, target, denied, source, request_id)

    async def close(self) -> None:
        await self.end_users.close()
