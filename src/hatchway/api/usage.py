"""``GET /v1/usage``: the organisation's requests, tokens and spend, by key, end user, agent or model."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request

from hatchway.api.auth import authenticate, gateway_of
from hatchway.api.logs import INSTANT, time_range
from hatchway.errors import InvalidRequest
from hatchway.principal import Principal
from hatchway.store.usage import USAGE_GROUPS, UsageQuery, usage_to_dict

router = APIRouter()


def usage_query(group_by: str, since: datetime | None, until: datetime | None, limit: int) -> UsageQuery:
    """The query, checked: a bad parameter is a 400 naming it."""
    if group_by not in USAGE_GROUPS:
        raise InvalidRequest(
            f"group_by: must be one of {', '.join(USAGE_GROUPS)} (got {group_by!r})", param="group_by"
        )
    since, until = time_range(since, until)
    return UsageQuery(group_by=group_by, since=since, until=until, limit=limit)


@router.get("/v1/usage")
async def get_usage(
    request: Request,
    principal: Annotated[Principal, Depends(authenticate)],
    group_by: Annotated[str, Query(json_schema_extra={"enum": list(USAGE_GROUPS)})] = "model",
    since: Annotated[datetime | None, Query(json_schema_extra=INSTANT)] = None,
    until: Annotated[datetime | None, Query(json_schema_extra=INSTANT)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> dict[str, Any]:
    """Requests, tokens and ``cost_usd`` per group (``key``, ``user``: ``X-On-Behalf-Of``, ``agent``,
    ``model``), the costliest first, and the totals over ``[since, until)``. ``cost_usd`` sums the
    records whose cost is known; ``unpriced_requests`` counts the others (docs/limits.md, "Spend")."""
    query = usage_query(group_by, since, until, limit)
    gw = gateway_of(request)
    await gw.log_writer.flush()  # read-your-writes on this replica
    return usage_to_dict(await gw.usage.summarise(principal.org_id, query), query)
