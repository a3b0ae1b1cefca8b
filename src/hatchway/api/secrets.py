"""``PUT/GET/DELETE /v1/secrets``: the organisation's vault. Values go in and never come back out."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Path, Request
from pydantic import BaseModel, ConfigDict, Field, StrictStr, WithJsonSchema, field_validator
from starlette.responses import Response

from hatchway.api.auth import audit, authenticate, gateway_of
from hatchway.api.errors import parse_json_body, validate_body
from hatchway.principal import Principal
from hatchway.vault.names import ENTRY_SCHEMA, MAX_ALLOWED_HOSTS, NAME_PATTERN, check_name
from hatchway.vault.store import MAX_VALUE_BYTES

router = APIRouter()
SecretName = Annotated[str, Path(json_schema_extra={"pattern": NAME_PATTERN})]
"""Checked by ``check_name`` (its message names the offending characters); documented here."""


HostEntry = Annotated[StrictStr, WithJsonSchema(ENTRY_SCHEMA)]


class SecretBody(BaseModel):
    """The body of ``PUT /v1/secrets/{name}``."""

    model_config = ConfigDict(extra="forbid")
    value: Annotated[Any, WithJsonSchema({"type": "string", "minLength": 1, "maxLength": MAX_VALUE_BYTES})]
    allowed_hosts: Annotated[list[HostEntry], Field(max_length=MAX_ALLOWED_HOSTS)] | None = None

    @field_validator("value")
    @classmethod
    def _non_empty_string(cls, value: Any) -> str:
        # Checked here rather than with pydantic constraints, whose messages quote the input value.
        if not isinstance(value, str) or not value:
            raise ValueError("must be a non-empty string")
        if len(value.encode("utf-8")) > MAX_VALUE_BYTES:
            raise ValueError(f"must be at most {MAX_VALUE_BYTES} bytes")
        return value


def _json(payload: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type="application/json")


@router.put("/v1/secrets/{name}")
async def put_secret(
    request: Request, name: SecretName, principal: Annotated[Principal, Depends(authenticate)]
) -> Response:
    """Create or replace a secret; 201 when created, 200 when replaced. The value is not echoed."""
    check_name(name)
    body = validate_body(SecretBody, parse_json_body(await request.body()))
    info, created = await gateway_of(request).vault.put(
        principal.org_id, name, body.value, body.allowed_hosts
    )
    detail = {"created": created, "allowed_hosts": info.allowed_hosts}  # as stored; never the value
    await audit(request, principal, "secret.put", f"secret:{name}", detail)
    return _json(info.to_dict(), 201 if created else 200)


@router.get("/v1/secrets")
async def list_secrets(request: Request, principal: Annotated[Principal, Depends(authenticate)]) -> Response:
    """Names, times and ``allowed_hosts`` of the organisation's secrets."""
    infos = await gateway_of(request).vault.list_secrets(principal.org_id)
    return _json({"object": "list", "data": [i.to_dict() for i in infos]})


@router.delete("/v1/secrets/{name}")
async def delete_secret(
    request: Request, name: SecretName, principal: Annotated[Principal, Depends(authenticate)]
) -> Response:
    check_name(name)
    await gateway_of(request).vault.delete(principal.org_id, name)
    await audit(request, principal, "secret.delete", f"secret:{name}")
    return _json({"object": "secret.deleted", "name": name, "deleted": True})
