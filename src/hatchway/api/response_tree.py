"""``GET /v1/responses``: the organisation's stored responses, as a delegation tree one level at a time.

Without ``parent_response_id`` it lists top-level responses (newest first, cursor ``after``);
with it, the children a hosted ``spawn_subagent`` created under that response, in creation order.
Each entry carries ``children_count`` so a client can expand the tree lazily.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request

from hatchway.api.auth import authenticate, gateway_of
from hatchway.errors import InvalidRequest
from hatchway.principal import Principal
from hatchway.responses.wire import response_object

router = APIRouter()


@router.get("/v1/responses")
async def list_responses(
    request: Request,
    principal: Annotated[Principal, Depends(authenticate)],
    parent_response_id: Annotated[str | None, Query(max_length=64)] = None,
    after: Annotated[str | None, Query(max_length=64, json_schema_extra={"pattern": "^resp_"})] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> dict[str, Any]:
    store = gateway_of(request).responses.store
    if after is not None and not after.startswith("resp_"):
        raise InvalidRequest("after: must be a response id (resp_…) from a previous page", param="after")
    if parent_response_id is not None:
        await store.get(principal.org_id, parent_response_id)  # 404 unless it is this org's
        rows = await store.children(principal.org_id, parent_response_id)
        has_more = False
    else:
        rows = await store.top_level(principal.org_id, after, limit + 1)
        has_more = len(rows) > limit
        rows = rows[:limit]
    outputs = await store.outputs([r.id for r in rows])
    counts = await store.children_counts([r.id for r in rows])
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
