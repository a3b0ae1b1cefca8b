"""A signed-in person as a request's principal: the session cookie, the organisation acted in, the
role the person has there, and the CSRF token that every state-changing request must carry.

A cookie is an ambient credential: the browser sends it with any request to the gateway, whoever's
page made it. So a request that changes something (POST, PUT, PATCH, DELETE) must also send the
session's CSRF token in ``X-CSRF-Token``, which only the dashboard's own pages can read
(``GET /ui/session``, same origin). A key in ``Authorization`` is not ambient and needs none.

The organisation is the one named by the route's path (``/v1/admin/orgs/{org}/…``), else by the
``Hatchway-Organization`` header (a name or an id), else the person's only one. A person acts only
where a mapped group grants a role; a platform person in any organisation, as ``platform``.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from hatchway.access.roles import PLATFORM, ROUTE_ROLES
from hatchway.access.sessions import Session, SsoSessions
from hatchway.errors import CsrfFailed, InsufficientRole, InvalidRequest, SessionEnded
from hatchway.principal import Principal, Role
from hatchway.store.orgs import OrgStore

ORGANIZATION_HEADER = "Hatchway-Organization"
CSRF_HEADER = "X-CSRF-Token"
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
PLATFORM_SCOPE = ("platform", "platform")
"""(org id, name) of a platform person's requests that concern no one organisation (listing or
creating organisations): the audit trail's platform chain."""


@dataclass(frozen=True, slots=True)
class SessionCredentials:
    """What a request brings for a person: the session cookie and the headers that go with it."""

    cookie: str
    csrf_token: str | None = None
    organization: str | None = None
    """``Hatchway-Organization``."""
    path_organization: str | None = None
    """The ``{org}`` of an ``/v1/admin/orgs/{org}/…`` route."""


class People:
    """Turns a session cookie into the principal of a person in one organisation."""

    def __init__(self, sessions: SsoSessions, orgs: OrgStore) -> None:
        self.sessions = sessions
        self.orgs = orgs

    async def principal(self, credentials: SessionCredentials, method: str, route: str) -> Principal:
        """SessionEnded (401), CsrfFailed (403), InsufficientRole (403) for an organisation the person
        has no role in, InvalidRequest when the organisation cannot be told."""
        session = await self.sessions.find(credentials.cookie)
        if session is None:
            raise SessionEnded(
                "Your sign-in session has ended (signed out, expired or unknown): sign in again."
            )
        if method in STATE_CHANGING:
            check_csrf(session, credentials.csrf_token)
        org_id, org_name, role = await self._organisation(session, credentials, method, route)
        return Principal(
            org_id=org_id, org_name=org_name, role=role, subject=session.subject, groups=session.groups
        )

    async def _organisation(
        self, session: Session, credentials: SessionCredentials, method: str, route: str
    ) -> tuple[str, str, Role]:
        grants = session.grants
        ref = credentials.path_organization or credentials.organization
        if ref is None:
            if len(grants.orgs) == 1:
                ref = grants.orgs[0].org_id
            elif grants.platform and ROUTE_ROLES.get((method, route)) == PLATFORM and "{org}" not in route:
                return (*PLATFORM_SCOPE, Role.PLATFORM)
            else:
                names = ", ".join(sorted(g.name for g in grants.orgs)) or "any, as a platform admin"
                raise InvalidRequest(
                    f"{ORGANIZATION_HEADER}: name the organisation to act in (you may act in {names})",
                    param=ORGANIZATION_HEADER,
                )
        grant = grants.find(ref)
        if grant is not None:
            return grant.org_id, grant.name, Role.PLATFORM if grants.platform else grant.role
        if not grants.platform:  # refused before any lookup: which names exist is not told
            raise InsufficientRole(f"You have no role in the organisation '{ref}'.", param="org")
        org = await self.orgs.get_org(ref)
        return org.id, org.name, Role.PLATFORM


def check_csrf(session: Session, given: str | None) -> None:
    """CsrfFailed unless ``given`` is the session's CSRF token (compared in constant time)."""
    if given is None or not hmac.compare_digest(given.encode(), session.csrf_token.encode()):
        raise CsrfFailed(
            f"{CSRF_HEADER}: a change made with a signed-in session must send the session's CSRF "
            "token (GET /ui/session gives it to the dashboard)",
            param=CSRF_HEADER,
        )
