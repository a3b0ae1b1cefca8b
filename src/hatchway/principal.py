"""Who a request is from: the organisation, the key or person behind it, what that one may do, and the
end user it acts for when that user is proven (foundation: imported by anyone)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


class Role(StrEnum):
    """What a key or a signed-in person may do within its organisation (docs/access.md).

    ``app`` runs inference (chat, responses, messages, the MCP endpoints) and reaches only its own end
    users' objects; ``viewer`` reads (logs, usage, operations, pins, connections) and changes nothing;
    ``admin`` does both and manages the organisation (secrets, tool approvals, connections, keys,
    limits, the audit trail). ``platform`` is an admin of every organisation (created only by the CLI).
    """

    APP = "app"
    VIEWER = "viewer"
    ADMIN = "admin"
    PLATFORM = "platform"


@dataclass(slots=True)
class Principal:
    """The organisation and key (or signed-in person) behind a request."""

    org_id: str
    org_name: str
    key_id: str | None = None
    key_name: str | None = None
    role: Role = Role.APP
    """Internally built principals (a queued run, a probe) act for a request already admitted: ``app``."""
    allowed_models: frozenset[str] | None = None
    """The public model names (``agent:<name>`` included) this key may call; None: any."""
    allowed_mcp_endpoints: frozenset[str] | None = None
    """The ``/mcp/<name>`` endpoints this key may use; None: any."""
    expires_at: datetime | None = None
    end_user: str | None = None
    """The end user proven by a verified user token (``access/end_users.py``): it, not the app's
    ``X-On-Behalf-Of``, is the end user everywhere."""
    subject: str | None = None
    """A person signed in with SSO (the ID token's ``sub``), when not a key."""
    verified_end_users: bool = False
    """The organisation accepts only verified end users: ``end_user`` (or none) is the end user, and
    ``X-On-Behalf-Of`` is never read (``end_user_of``)."""
    groups: tuple[str, ...] = ()
    """The verified person's groups (an SSO session's ``groups_claim``, a verified user token's):
    whom an approval routed to a group is offered to."""

    @property
    def actor(self) -> str:
        """Who acts, as the audit trail names it: ``key:<id>``, ``sso:<subject>`` or ``system``."""
        if self.subject is not None:
            return f"sso:{self.subject}"
        return f"key:{self.key_id}" if self.key_id else "system"


def end_user_of(principal: Principal, headers: Mapping[str, str]) -> str | None:
    """The end user a request acts for: the verified one where the organisation requires proof (the
    app's ``X-On-Behalf-Of`` is then never taken), else the app's ``X-On-Behalf-Of``."""
    if principal.verified_end_users or principal.end_user is not None:
        return principal.end_user
    return headers.get("x-on-behalf-of") or None
