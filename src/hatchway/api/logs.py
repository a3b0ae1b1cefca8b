"""``GET /v1/logs`` and ``GET /v1/logs/{id}``: the organisation's request log."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request

from hatchway.api.auth import authenticate, gateway_of
from hatchway.errors import InvalidRequest
from hatchway.principal import Principal
from hatchway.store.logs import LOG_STATUSES, LogQuery, log_to_dict

router = APIRouter()


def _utc(value: datetime | None) -> datetime | None:
    """Times without an offset are read as UTC."""
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def time_range(since: datetime | None, until: datetime | None) -> tuple[datetime | None, datetime | None]:
    """``since``/``until`` in UTC, checked: ``until`` after ``since``, or a 400 naming it."""
    since, until = _utc(since), _utc(until)
    if since is not None and until is not None and since >= until:
        raise InvalidRequest("until: must be later than since", param="until")
    return since, until


def log_query(
    *,
    has_tool_calls: bool | None,
    model: str | None,
    status: str | None,
    on_behalf_of: str | None,
    since: datetime | None,
    until: datetime | None,
    after: str | None,
    limit: int,
    route: str | None = None,
) -> LogQuery:
    """The filters, checked: a bad one is a 400 naming the parameter."""
    if status is not None and status not in LOG_STATUSES:
        raise InvalidRequest(
            f"status: must be one of {', '.join(LOG_STATUSES)} (got {status!r})", param="status"
        )
    since, until = time_range(since, until)
    if after is not None and not after.startswith("log_"):
        raise InvalidRequest("after: must be a request log id (log_…) from a previous page", param="after")
    return LogQuery(
        has_tool_calls=has_tool_calls,
        model=model,
        status=status,
        on_behalf_of=on_behalf_of,
        route=route,
        since=since,
        until=until,
        after=after,
        limit=limit,
    )


INSTANT: dict[str, Any] = {"anyOf": [{"type": "string", "format": "date-time"}, {"type": "number"}]}
"""``since``/``until``: an ISO 8601 instant or Unix seconds (what pydantic parses a datetime from)."""


@router.get("/v1/logs")
async def list_logs(
    request: Request,
    principal: Annotated[Principal, Depends(authenticate)],
    has_tool_calls: bool | None = None,
    model: Annotated[str | None, Query(max_length=256)] = None,
    status: Annotated[str | None, Query(json_schema_extra={"enum": list(LOG_STATUSES)})] = None,
    on_behalf_of: Annotated[str | None, Query(max_length=256)] = None,
    route: Annotated[str | None, Query(max_length=256)] = None,
    since: Annotated[datetime | None, Query(json_schema_extra=INSTANT)] = None,
    until: Annotated[datetime | None, Query(json_schema_extra=INSTANT)] = None,
    after: Annotated[str | None, Query(max_length=40, json_schema_extra={"pattern": "^log_"})] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> dict[str, Any]:
    """Newest first; pass ``last_id`` back as ``after`` for the next page. ``route`` is exact
    (``chat.completions``, ``responses``, ``mcp:<endpoint>``)."""
    query = log_query(
        has_tool_calls=has_tool_calls,
        model=model,
        status=status,
        on_behalf_of=on_behalf_of,
        route=route,
        since=since,
        until=until,
        after=after,
        limit=limit + 1,
    )
    gw = gateway_of(request)
    await gw.log_writer.flush()  # read-your-writes on this replica
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
