"""``GET /v1/responses``: the organisation's stored responses, as a delegation tree one level at a time.

Without ``parent_response_id`` it lists top-level responses (newest first, cursor ``after``);
with it, the children a hosted ``spawn_subagent`` created under that response, in creation order.
Each entry carries ``children_count`` so a client can expand the tree lazily.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from sqlalchemy import func, select

from hatchway.api.auth import authenticate, gateway_of
from hatchway.api.responses_wire import response_object
from hatchway.engine.context import Principal
from hatchway.errors import InvalidRequest
from hatchway.gateway import Gateway
from hatchway.store.responses import ResponseRecord

router = APIRouter()


@router.get("/v1/responses")
async def list_responses(
    request: Request,
    principal: Annotated[Principal, Depends(authenticate)],
    parent_response_id: Annotated[str | None, Query(max_length=64)] = None,
    after: Annotated[str | None, Query(max_length=64)] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> dict[str, Any]:
    gw = gateway_of(request)
    if after is not None and not after.startswith("resp_"):
        raise InvalidRequest("after: must be a response id (resp_…) from a previous page", param="after")
    if parent_response_id is not None:
        await gw.responses.get(principal.org_id, parent_response_id)  # 404 unless it is this org's
        rows = await gw.responses.children(principal.org_id, parent_response_id)
        has_more = False
    else:
        rows = await _top_level(gw, principal.org_id, after, limit + 1)
        has_more = len(rows) > limit
        rows = rows[:limit]
    outputs = await gw.responses.outputs([r.id for r in rows])
    counts = await _children_counts(gw, [r.id for r in rows])
    data = [
        {
            **response_object(r, outputs.get(r.id, [])),
            "parent_response_id": r.parent_response_id,
            "depth": r.depth,
            "on_behalf_of": r.on_behalf_of,
            "children_count": counts.get(r.id, 0),
        }
        for r in rows
    ]
    return {"object": "list", "data": data, "has_more": has_more, "last_id": data[-1]["id"] if data else None}


async def _top_level(gw: Gateway, org_id: str, after: str | None, limit: int) -> list[ResponseRecord]:
    stmt = select(ResponseRecord).where(
        ResponseRecord.org_id == org_id, ResponseRecord.parent_response_id.is_(None)
    )
    if after is not None:
        stmt = stmt.where(ResponseRecord.id < after)
    async with gw.db.session() as s:
        return list(await s.scalars(stmt.order_by(ResponseRecord.id.desc()).limit(limit)))


async def _children_counts(gw: Gateway, ids: list[str]) -> dict[str, int]:
    if not ids:
        return {}
    stmt = (
        select(ResponseRecord.parent_response_id, func.count())
        .where(ResponseRecord.parent_response_id.in_(ids))
        .group_by(ResponseRecord.parent_response_id)
    )
    async with gw.db.session() as s:
        return {parent: count for parent, count in (await s.execute(stmt)).all() if parent}
