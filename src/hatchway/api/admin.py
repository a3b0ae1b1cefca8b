"""``/v1/admin``: organisations, keys, limits and the audit trail, for platform automation (Terraform,
a CI job) and the dashboard. An organisation's admin manages its own organisation; a platform admin
any (``access/roles.py``). Every change goes through ``access/administration.py``, as the CLI's do,
and is recorded in the audit trail."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from hatchway.access.administration import Actor, KeyChanges, key_summary
from hatchway.access.gatekeeper import request_id_of
from hatchway.access.roles import check_org
from hatchway.api.auth import authenticate, gateway_of, source_of
from hatchway.api.errors import parse_json_body, validate_body
from hatchway.config.settings import LimitsSettings, LimitValues
from hatchway.errors import InvalidRequest
from hatchway.gateway import Gateway
from hatchway.principal import Principal, Role
from hatchway.store.limit_overrides import LIMIT_KEYS, overlaid
from hatchway.store.tables import Organization

router = APIRouter(prefix="/v1/admin", tags=["admin"])
OrgRef = Annotated[str, Path(max_length=128, description="The organisation's name or id.")]
KeyRef = Annotated[str, Path(max_length=128, description="The key's id (or name).")]
Entries = Annotated[list[Annotated[str, Field(min_length=1, max_length=256)]], Field(max_length=256)]
KeyRole = Literal["app", "viewer", "admin", "platform"]


class OrgCreate(BaseModel):
    """``POST /v1/admin/orgs``."""

    model_config = ConfigDict(extra="forbid")
    name: Annotated[str, Field(min_length=1, max_length=128)]


class KeyCreate(BaseModel):
    """``POST /v1/admin/orgs/{org}/keys``: a new key (its value is in the answer, once)."""

    model_config = ConfigDict(extra="forbid")
    name: Annotated[str, Field(min_length=1, max_length=128)] = "default"
    role: KeyRole = "app"
    description: Annotated[str | None, Field(max_length=512)] = None
    allowed_models: Entries | None = None
    """Public model names, ``agent:<name>`` included; absent: any."""
    allowed_mcp_endpoints: Entries | None = None
    """``/mcp/<name>`` endpoint names; absent: any."""
    expires_at: datetime | None = None


class KeyUpdate(BaseModel):
    """``PATCH /v1/admin/orgs/{org}/keys/{key_id}``: the fields given change; ``null`` removes a
    restriction, the expiry or the description."""

    model_config = ConfigDict(extra="forbid")
    name: Annotated[str | None, Field(min_length=1, max_length=128)] = None
    role: KeyRole | None = None
    description: Annotated[str | None, Field(max_length=512)] = None
    allowed_models: Entries | None = None
    allowed_mcp_endpoints: Entries | None = None
    expires_at: datetime | None = None


class LimitsChange(BaseModel):
    """``PUT /v1/admin/orgs/{org}/limits``: keys to set and keys to drop, as ``hatchway limits set``."""

    model_config = ConfigDict(extra="forbid")
    values: LimitValues = Field(default_factory=LimitValues)
    unset: list[Literal[LIMIT_KEYS]] = Field(default_factory=list)  # type: ignore[valid-type]


def _json(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json")


def _actor(request: Request, principal: Principal) -> Actor:
    return Actor.of(principal, source_of(request.scope), request_id_of(request.headers))


async def _org(gw: Gateway, principal: Principal, ref: str) -> Organization:
    """The organisation ``ref`` names, when the principal may manage it (checked before the lookup,
    so another organisation's admin cannot tell which names exist)."""
    if ref not in (principal.org_id, principal.org_name):
        check_org(principal, ref)  # refuses all but a platform admin, who may name any organisation
    org = await gw.orgs.get_org(ref)
    check_org(principal, org.id)
    return org


def _org_limits(limits: LimitsSettings, org: Organization) -> dict[str, Any]:
    """The organisation's own limits in ``limits`` (by name, else id; hatchway.yaml may use either)."""
    values = limits.organisations.get(org.name) or limits.organisations.get(org.id)
    return values.model_dump(exclude_none=True) if values else {}


def _org_summary(org: Organization) -> dict[str, Any]:
    return {
        "object": "organization",
        "id": org.id,
        "name": org.name,
        "created_at": org.created_at.isoformat(),
    }


@router.get("/me")
async def me(principal: Annotated[Principal, Depends(authenticate)]) -> Response:
    """The caller: organisation, role, key or signed-in subject, restrictions."""
    return _json(
        {
            "object": "principal",
            "organization": {"id": principal.org_id, "name": principal.org_name},
            "role": principal.role.value,
            "key_id": principal.key_id,
            "subject": principal.subject,
            "end_user": principal.end_user,
            "allowed_models": sorted(principal.allowed_models)
            if principal.allowed_models is not None
            else None,
            "allowed_mcp_endpoints": (
                sorted(principal.allowed_mcp_endpoints)
                if principal.allowed_mcp_endpoints is not None
                else None
            ),
            "expires_at": principal.expires_at.isoformat() if principal.expires_at else None,
        }
    )


@router.get("/orgs")
async def list_orgs(request: Request, principal: Annotated[Principal, Depends(authenticate)]) -> Response:
    """Every organisation (platform admins)."""
    orgs = await gateway_of(request).orgs.list_orgs()
    return _json({"object": "list", "data": [_org_summary(o) for o in orgs]})


@router.post("/orgs", status_code=201)
async def create_org(request: Request, principal: Annotated[Principal, Depends(authenticate)]) -> Response:
    """A new organisation (platform admins); 409 if the name is taken."""
    body = validate_body(OrgCreate, parse_json_body(await request.body()))
    org = await gateway_of(request).admin.create_org(_actor(request, principal), body.name)
    return _json(_org_summary(org), 201)


@router.get("/orgs/{org}")
async def get_org(
    request: Request, org: OrgRef, principal: Annotated[Principal, Depends(authenticate)]
) -> Response:
    return _json(_org_summary(await _org(gateway_of(request), principal, org)))


@router.get("/orgs/{org}/keys")
async def list_keys(
    request: Request,
    org: OrgRef,
    principal: Annotated[Principal, Depends(authenticate)],
    include_revoked: bool = False,
) -> Response:
    """The organisation's keys (never a key's value or hash)."""
    gw = gateway_of(request)
    found = await _org(gw, principal, org)
    rows = await gw.orgs.list_keys(found.id, include_revoked=include_revoked)
    return _json({"object": "list", "data": [key_summary(r) for r in rows]})


@router.post("/orgs/{org}/keys", status_code=201)
async def create_key(
    request: Request, org: OrgRef, principal: Annotated[Principal, Depends(authenticate)]
) -> Response:
    """A new key; the answer's ``key`` is its value, shown this once."""
    gw = gateway_of(request)
    found = await _org(gw, principal, org)
    body = validate_body(KeyCreate, parse_json_body(await request.body()))
    changes = KeyChanges(
        name=body.name,
        role=Role(body.role),
        description=body.description,
        allowed_models=body.allowed_models,
        allowed_mcp_endpoints=body.allowed_mcp_endpoints,
        expires_at=body.expires_at,
    )
    row, plaintext = await gw.admin.create_key(_actor(request, principal), found.id, changes)
    return _json({**key_summary(row), "key": plaintext}, 201)


@router.get("/orgs/{org}/keys/{key_id}")
async def get_key(
    request: Request, org: OrgRef, key_id: KeyRef, principal: Annotated[Principal, Depends(authenticate)]
) -> Response:
    gw = gateway_of(request)
    found = await _org(gw, principal, org)
    return _json(key_summary(await gw.orgs.get_key(found.id, key_id)))


@router.patch("/orgs/{org}/keys/{key_id}")
async def update_key(
    request: Request, org: OrgRef, key_id: KeyRef, principal: Annotated[Principal, Depends(authenticate)]
) -> Response:
    """Change a key's role, restrictions, expiry, name or description: here at once, on other
    replicas within the key cache's 10 s."""
    gw = gateway_of(request)
    found = await _org(gw, principal, org)
    raw = parse_json_body(await request.body())
    body = validate_body(KeyUpdate, raw)
    if not isinstance(raw, dict) or not raw:
        raise InvalidRequest("Nothing to change: give at least one field.")
    cleared = {name for name, value in raw.items() if value is None}
    if cleared & {"name", "role"}:
        name = sorted(cleared & {"name", "role"})[0]
        raise InvalidRequest(f"{name}: cannot be null", param=name)
    changes = KeyChanges(
        name=body.name,
        role=Role(body.role) if body.role else None,
        description=body.description,
        allowed_models=body.allowed_models,
        allowed_mcp_endpoints=body.allowed_mcp_endpoints,
        expires_at=body.expires_at,
        cleared=cleared,
    )
    row = await gw.admin.update_key(_actor(request, principal), found.id, key_id, changes)
    return _json(key_summary(row))


@router.delete("/orgs/{org}/keys/{key_id}")
async def revoke_key(
    request: Request, org: OrgRef, key_id: KeyRef, principal: Annotated[Principal, Depends(authenticate)]
) -> Response:
    """Revoke a key: refused by this replica at once, by the others within the key cache's 10 s."""
    gw = gateway_of(request)
    found = await _org(gw, principal, org)
    return _json(key_summary(await gw.admin.revoke_key(_actor(request, principal), found.id, key_id)))


@router.post("/orgs/{org}/keys/{key_id}/rotate")
async def rotate_key(
    request: Request, org: OrgRef, key_id: KeyRef, principal: Annotated[Principal, Depends(authenticate)]
) -> Response:
    """A new key with the old one's role and restrictions (its value in ``key``, once); the old key
    works until ``access.key_rotation_grace_seconds`` (default 24 h) have passed."""
    gw = gateway_of(request)
    found = await _org(gw, principal, org)
    new, plaintext, old = await gw.admin.rotate_key(_actor(request, principal), found.id, key_id)
    return _json({**key_summary(new), "key": plaintext, "replaces": key_summary(old)}, 201)


@router.get("/orgs/{org}/limits")
async def get_limits(
    request: Request, org: OrgRef, principal: Annotated[Principal, Depends(authenticate)]
) -> Response:
    """The organisation's limits in force (hatchway.yaml's with the store's laid over them)."""
    gw = gateway_of(request)
    found = await _org(gw, principal, org)
    limits = overlaid(gw.settings.limits, await gw.limit_overrides.all())
    return _json(
        {
            "object": "limits",
            "organization": found.id,
            "values": _org_limits(limits, found),
            "defaults": limits.defaults.model_dump(exclude_none=True),
        }
    )


@router.put("/orgs/{org}/limits")
async def set_limits(
    request: Request, org: OrgRef, principal: Annotated[Principal, Depends(authenticate)]
) -> Response:
    """Set some of the organisation's limits and drop others (platform admins: an organisation does
    not raise its own budget). Every replica applies them within ``limits.refresh_seconds``."""
    gw = gateway_of(request)
    found = await _org(gw, principal, org)
    body = validate_body(LimitsChange, parse_json_body(await request.body()))
    values = body.values.model_dump(exclude_none=True)
    after = await gw.admin.set_limits(
        _actor(request, principal), "organisations", found.name, values, list(body.unset)
    )
    return _json({"object": "limits", "organization": found.id, "values": after})


@router.delete("/orgs/{org}/limits")
async def clear_limits(
    request: Request, org: OrgRef, principal: Annotated[Principal, Depends(authenticate)]
) -> Response:
    """Drop every limit set for the organisation through the store (hatchway.yaml's stay)."""
    gw = gateway_of(request)
    found = await _org(gw, principal, org)
    after = await gw.admin.set_limits(
        _actor(request, principal), "organisations", found.name, {}, list(LIMIT_KEYS)
    )
    return _json({"object": "limits", "organization": found.id, "values": after})


@router.get("/orgs/{org}/settings")
async def get_settings(
    request: Request, org: OrgRef, principal: Annotated[Principal, Depends(authenticate)]
) -> Response:
    """What hatchway.yaml sets for the organisation (read-only: those settings change with the file,
    on every replica at its restart): verified end users, the SSO groups that grant roles in it, the
    MCP endpoints its keys may use, and its limits in force."""
    gw = gateway_of(request)
    found = await _org(gw, principal, org)
    names = {found.id, found.name}
    access = gw.settings.access
    end_users = next((e for e in access.end_users if names & set(e.organisations)), None)
    mappings = access.sso.role_mappings if access.sso is not None else []
    limits = overlaid(gw.settings.limits, await gw.limit_overrides.all())
    return _json(
        {
            "object": "organization.settings",
            "organization": found.id,
            "verified_end_users": (
                {
                    "issuer": end_users.issuer,
                    "audience": end_users.audience,
                    "header": end_users.header,
                    "subject_claim": end_users.subject_claim,
                }
                if end_users is not None
                else None
            ),
            "sso_role_mappings": [
                {"group": m.group, "role": m.role} for m in mappings if m.organisation in names
            ],
            "mcp_endpoints": [
                e.name
                for e in gw.settings.mcp_endpoints
                if e.organisations is None or names & set(e.organisations)
            ],
            "limits": _org_limits(limits, found),
            "key_rotation_grace_seconds": access.key_rotation_grace_seconds,
        }
    )


@router.get("/orgs/{org}/audit")
async def read_audit(
    request: Request,
    org: OrgRef,
    principal: Annotated[Principal, Depends(authenticate)],
    since: datetime | None = None,
    after: Annotated[int | None, Query(ge=0)] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> Response:
    """The organisation's audit trail in chain order (``after``: the last ``seq`` of the previous page)."""
    gw = gateway_of(request)
    found = await _org(gw, principal, org)
    if since is not None and since.tzinfo is None:
        raise InvalidRequest("since: give a time zone (e.g. 2026-12-01T00:00:00Z)", param="since")
    entries = await gw.audit.list(found.id, since=since, after_seq=after, limit=limit + 1)
    page = entries[:limit]
    return _json(
        {
            "object": "list",
            "data": [e.to_dict() for e in page],
            "has_more": len(entries) > limit,
            "last_seq": page[-1].seq if page else None,
        }
    )
