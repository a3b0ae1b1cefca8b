"""``GET /v1/models``."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Depends, Request

from hatchway.api.auth import authenticate, gateway_of
from hatchway.principal import Principal

router = APIRouter()
_CREATED = int(time.time())


@router.get("/v1/models")
async def list_models(request: Request, _: Annotated[Principal, Depends(authenticate)]) -> dict[str, object]:
    gw = gateway_of(request)
    names = [*gw.models.public_models(), *(f"agent:{a.name}" for a in gw.settings.agents)]
    data = [{"id": name, "object": "model", "created": _CREATED, "owned_by": "hatchway"} for name in names]
    return {"object": "list", "data": data}
