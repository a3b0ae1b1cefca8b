"""Managing organisations, keys and limits, each change recorded in the audit trail: the service the
admin API (``api/admin.py``) and the CLI (``hatchway orgs|keys|limits``) both call."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from hatchway.audit import AuditEvent, AuditTrail
from hatchway.config.access import AccessSettings
from hatchway.errors import InsufficientRole, InvalidRequest, NotFound
from hatchway.principal import Principal, Role
from hatchway.store.limit_overrides import LimitOverrides
from hatchway.store.limit_overrides import Table as Scope
from hatchway.store.orgs import OrgStore
from hatchway.store.tables import ApiKey, Organization

PLATFORM_TRAIL = "platform"
"""The audit chain of changes no one organisation owns (default limits, limits of every key)."""
MAX_ALLOWED_ENTRIES = 256
MAX_ALLOWED_ENTRY_CHARS = 256


@dataclass(frozen=True, slots=True)
class Actor:
    """Who makes a change, as the audit trail records it."""

    name: str
    """``key:<id>``, ``sso:<subject>``, ``cli:<os user>``."""
    role: Role = Role.ADMIN
    source: str | None = None
    """The client's address (None from the CLI)."""
    request_id: str | None = None

    @classmethod
    def of(cls, principal: Principal, source: str | None, request_id: str | None) -> Actor:
        return cls(principal.actor, principal.role, source, request_id)


@dataclass(slots=True)
class KeyChanges:
    """What a key is made with or changed to; ``None`` fields are left as they are (on a change)."""

    name: str | None = None
    role: Role | None = None
    description: str | None = None
    allowed_models: list[str] | None = None
    allowed_mcp_endpoints: list[str] | None = None
    expires_at: datetime | None = None
    cleared: set[str] = field(default_factory=set)
    """Fields set back to none (the restrictions, ``expires_at``, ``description``)."""

    def check(self, actor: Actor) -> None:
        """InvalidRequest naming the field for a value no key may have; InsufficientRole for a role
        the actor may not grant."""
        if self.role is Role.PLATFORM and actor.role is not Role.PLATFORM:
            raise InsufficientRole("role: only a platform admin grants the platform role", param="role")
        for name in ("allowed_models", "allowed_mcp_endpoints"):
            entries = getattr(self, name)
            if entries is None:
                continue
            if len(entries) > MAX_ALLOWED_ENTRIES:
                raise InvalidRequest(f"{name}: at most {MAX_ALLOWED_ENTRIES} entries", param=name)
            for i, entry in enumerate(entries):
                if not entry or len(entry) > MAX_ALLOWED_ENTRY_CHARS:
                    raise InvalidRequest(
                        f"{name}[{i}]: 1 to {MAX_ALLOWED_ENTRY_CHARS} characters", param=f"{name}[{i}]"
                    )
        if self.expires_at is not None:
            if self.expires_at.tzinfo is None:
                raise InvalidRequest(
                    "expires_at: give a time zone (e.g. 2027-01-01T00:00:00Z)", param="expires_at"
                )
            if self.expires_at <= datetime.now(UTC):
                raise InvalidRequest("expires_at: must be in the future", param="expires_at")

    def values(self) -> dict[str, Any]:
        """The columns to write."""
        found: dict[str, Any] = {
            name: getattr(self, name)
            for name in ("name", "description", "allowed_models", "allowed_mcp_endpoints", "expires_at")
            if getattr(self, name) is not None
        }
        if self.role is not None:
            found["role"] = self.role.value
        return found | dict.fromkeys(self.cleared)


def key_summary(row: ApiKey) -> dict[str, Any]:
    """A key as the admin API and ``keys list`` show it: never its hash, never the key."""
    return {
        "object": "api_key",
        "id": row.id,
        "name": row.name,
        "prefix": row.key_prefix,
        "role": row.role,
        "description": row.description,
        "allowed_models": row.allowed_models,
        "allowed_mcp_endpoints": row.allowed_mcp_endpoints,
        "created_at": _time(row.created_at),
        "expires_at": _time(row.expires_at),
        "revoked_at": _time(row.revoked_at),
        "replaced_by": row.replaced_by,
    }


def _time(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


class Administration:
    """Organisations, keys and limits, changed and recorded."""

    def __init__(
        self, orgs: OrgStore, overrides: LimitOverrides, audit: AuditTrail, settings: AccessSettings
    ) -> None:
        self.orgs = orgs
        self.overrides = overrides
        self.audit = audit
        self.settings = settings

    async def record(
        self,
        actor: Actor,
        org_id: str,
        action: str,
        target: str,
        *,
        outcome: str = "success",
        detail: dict[str, Any] | None = None,
    ) -> None:
        """One audit entry (names only: never a secret's value, never a key)."""
        await self.audit.record(
            AuditEvent(
                org_id=org_id,
                actor=actor.name,
                action=action,
                target=target,
                outcome=outcome,
                source=actor.source,
                request_id=actor.request_id,
                detail=detail or {},
            )
        )

    async def denied(
        self,
        principal: Principal,
        target: str,
        error: InsufficientRole,
        source: str | None,
        request_id: str | None,
    ) -> None:
        """A role denial, recorded (``Gatekeeper``'s ``on_denied``)."""
        actor = Actor.of(principal, source, request_id)
        detail = {"role": principal.role.value}
        await self.record(actor, principal.org_id, "access.denied", target, outcome="denied", detail=detail)

    async def create_org(self, actor: Actor, name: str) -> Organization:
        org = await self.orgs.create_org(name)
        await self.record(actor, org.id, "org.create", f"org:{org.id}", detail={"name": name})
        return org

    async def create_key(self, actor: Actor, org_id: str, changes: KeyChanges) -> tuple[ApiKey, str]:
        changes.check(actor)
        row, plaintext = await self.orgs.create_key(
            org_id,
            changes.name or "default",
            role=changes.role or Role.APP,
            description=changes.description,
            allowed_models=changes.allowed_models,
            allowed_mcp_endpoints=changes.allowed_mcp_endpoints,
            expires_at=changes.expires_at,
        )
        await self.record(actor, row.org_id, "key.create", f"key:{row.id}", detail=_key_detail(row))
        return row, plaintext

    async def _managed_key(self, actor: Actor, org_id: str, key_id: str, verb: str) -> ApiKey:
        """The organisation's key ``key_id``, when ``actor`` may manage it: only a platform admin
        ``verb`` (changes, rotates, revokes) a platform key."""
        current = await self.orgs.get_key(org_id, key_id)
        if Role(current.role) is Role.PLATFORM and actor.role is not Role.PLATFORM:
            raise InsufficientRole(f"Only a platform admin {verb} a platform key.", param="key_id")
        return current

    async def update_key(self, actor: Actor, org_id: str, key_id: str, changes: KeyChanges) -> ApiKey:
        changes.check(actor)
        current = await self._managed_key(actor, org_id, key_id, "changes")
        values = changes.values()
        if not values:
            raise InvalidRequest("Nothing to change: give at least one field.")
        row = await self.orgs.update_key(org_id, current.id, **values)
        await self.record(actor, org_id, "key.update", f"key:{row.id}", detail={"changed": sorted(values)})
        return row

    async def rotate_key(self, actor: Actor, org_id: str, key_id: str) -> tuple[ApiKey, str, ApiKey]:
        current = await self._managed_key(actor, org_id, key_id, "rotates")
        grace = self.settings.key_rotation_grace_seconds
        new, plaintext, old = await self.orgs.rotate_key(org_id, current.id, grace_seconds=grace)
        detail = {"new_key": new.id, "old_key_expires_at": _time(old.expires_at)}
        await self.record(actor, org_id, "key.rotate", f"key:{old.id}", detail=detail)
        return new, plaintext, old

    async def revoke_key(self, actor: Actor, org_id: str, key_id: str) -> ApiKey:
        current = await self._managed_key(actor, org_id, key_id, "revokes")
        row = await self.orgs.revoke_key(org_id, current.id)
        await self.record(actor, org_id, "key.revoke", f"key:{row.id}")
        return row

    async def set_limits(
        self, actor: Actor, table: Scope, name: str, values: dict[str, Any], unset: list[str]
    ) -> dict[str, Any]:
        """Lay ``values`` over one scope's limits and drop ``unset`` (``hatchway limits set``); recorded
        in the organisation's trail for an organisation's scope, in the platform's otherwise."""
        after = await self.overrides.set(table, name, values, unset)
        org_id = PLATFORM_TRAIL
        if table == "organisations":
            org_id = await self._org_id(name) or PLATFORM_TRAIL
        action = "limit.set" if values else "limit.unset"
        detail = {"set": sorted(values), "unset": sorted(unset)}
        await self.record(actor, org_id, action, f"limits:{table}:{name}", detail=detail)
        return after

    async def _org_id(self, name_or_id: str) -> str | None:
        try:
            return (await self.orgs.get_org(name_or_id)).id
        except NotFound:
            return None


def _key_detail(row: ApiKey) -> dict[str, Any]:
    return {
        "name": row.name,
        "role": row.role,
        "restricted": sorted(
            n
            for n in ("allowed_models", "allowed_mcp_endpoints", "expires_at")
            if getattr(row, n) is not None
        ),
    }
