"""``GET /v1/tools/drift`` and ``POST /v1/tools/drift/{server}/approve``: the organisation's MCP tools
whose definition is not the approved one (docs/security.md, "Tool-definition pinning"), for the
dashboard; what ``hatchway tools diff|approve`` do for the operator.

An organisation approves its own servers' definitions: a pin protects it from a server that changes
under it, not from itself. Both routes see only the caller's organisation.
"""

from __future__ import annotations

from typing import Annotated

import orjson
from fastapi import APIRouter, Depends, Path, Request
from pydantic import BaseModel, Field
from starlette.responses import Response

from hatchway.api.auth import audit, authenticate, gateway_of
from hatchway.errors import NotFound
from hatchway.principal import Principal

router = APIRouter()


class Approval(BaseModel):
    tools: list[Annotated[str, Field(min_length=1, max_length=256)]] | None = Field(
        default=None, max_length=1000
    )
    """The tools to approve (default: each waiting tool of the server)."""


@router.get("/v1/tools/drift")
async def list_drift(request: Request, principal: Annotated[Principal, Depends(authenticate)]) -> Response:
    waiting = await gateway_of(request).tool_pins.waiting(principal.org_id)
    return Response(orjson.dumps({"object": "list", "data": waiting}), media_type="application/json")


@router.post("/v1/tools/drift/{server}/approve")
async def approve_drift(
    request: Request,
    server: Annotated[str, Path(max_length=128)],
    principal: Annotated[Principal, Depends(authenticate)],
    body: Approval = Approval(),  # noqa: B008 - optional: {} approves each waiting tool
) -> Response:
    tools = body.tools
    approved = await gateway_of(request).tool_pins.approve(principal.org_id, server, tools)
    if not approved:
        raise NotFound(f"no tool of '{server}' waits for approval")
    await audit(request, principal, "tool.approve", f"mcp_server:{server}", {"tools": approved})
    payload = {"object": "tools.approved", "server": server, "tools": approved}
    return Response(orjson.dumps(payload), media_type="application/json")
