"""``GET /v1/logs`` and ``GET /v1/logs/{id}``: the organisation's request log."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request

from hatchway.api.auth import authenticate, gateway_of
from hatchway.engine.context import Principal
from hatchway.store.logs import LogQuery, log_to_dict

router = APIRouter()


@router.get("/v1/logs")
async def list_logs(
    request: Request,
    principal: Annotated[Principal, Depends(authenticate)],
    has_tool_calls: bool | None = None,
    model: str | None = None,
    status: str | None = None,
    on_behalf_of: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> dict[str, Any]:
    gw = gateway_of(request)
    await gw.log_writer.flush()  # read-your-writes on this replica
    query = LogQuery(
        has_tool_calls=has_tool_calls,
        model=model,
        status=status,
        on_behalf_of=on_behalf_of,
        since=since,
        until=until,
        after=after,
        limit=limit + 1,
    )
    rows = await gw.logs.list(principal.org_id, query)
    page = rows[:limit]
    return {
        "object": "list",
        "data": [log_to_dict(r) for r in page],
        "has_more": len(rows) > limit,
        "last_id": page[-1].id if page else None,
    }


@router.get("/v1/logs/{log_id}")
async def get_log(
    request: Request, log_id: str, principal: Annotated[Principal, Depends(authenticate)]
) -> dict[str, Any]:
    gw = gateway_of(request)
    await gw.log_writer.flush()
    return log_to_dict(await gw.logs.get(principal.org_id, log_id))
