"""An organisation's usage and spend, summed over its request log by key, end user, agent or model.

One aggregate query per answer (``GROUP BY`` the chosen column, over ``ix_request_logs_org_id_created_at``),
the same on SQLite and PostgreSQL. Every record counts, subagent children included (each is a
record of its own, with its own cost).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import JSON, Select, case, func, literal, select
from sqlalchemy.sql.elements import ColumnElement

from hatchway.store.db import Database
from hatchway.store.tables import RequestLog

USAGE_GROUPS: dict[str, Any] = {
    "key": RequestLog.key_id,
    "user": RequestLog.on_behalf_of,
    "agent": RequestLog.agent,
    "model": RequestLog.model,
}
"""``group_by`` → the request-log column: the API key, the end user (``X-On-Behalf-Of``), the agent,
the model the request named (``agent:<name>`` for an agent)."""


@dataclass(slots=True)
class UsageQuery:
    group_by: str = "model"
    since: datetime | None = None
    until: datetime | None = None
    limit: int = 100
    """Groups per answer, the costliest first."""


@dataclass(slots=True)
class UsageGroup:
    """What one group (or, with ``group`` None and ``totals``, the whole range) used and cost."""

    group: str | None
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float = 0.0
    """USD of the records whose cost is known."""
    unpriced_requests: int = 0
    """Records that made a model call of unknown price: their tokens count, their cost does not."""
    key_name: str | None = None
    """With ``group_by=key``: the key's name."""

    def to_dict(self, group_by: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {"object": "usage.group", group_by: self.group} if group_by else {}
        if group_by == "key":
            body["key_name"] = self.key_name
        body.update(
            requests=self.requests,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            total_tokens=self.total_tokens,
            cost_usd=round(self.cost_usd, 10),
            unpriced_requests=self.unpriced_requests,
        )
        return body


@dataclass(slots=True)
class UsageReport:
    groups: list[UsageGroup]
    totals: UsageGroup
    has_more: bool


def _sums() -> list[ColumnElement[Any]]:
    return [
        # Labels unlike the columns' names: ORDER BY names the sums, not the columns.
        func.count().label("n_requests"),
        func.coalesce(func.sum(RequestLog.prompt_tokens), 0).label("sum_prompt"),
        func.coalesce(func.sum(RequestLog.completion_tokens), 0).label("sum_completion"),
        func.coalesce(func.sum(RequestLog.total_tokens), 0).label("sum_total"),
        func.coalesce(func.sum(RequestLog.cost_usd), 0.0).label("sum_cost"),
        func.coalesce(func.sum(case((RequestLog.cost_usd.is_(None), 1), else_=0)), 0).label("n_unpriced"),
    ]


def _group(group: str | None, row: Any, key_name: str | None = None) -> UsageGroup:
    return UsageGroup(
        group=group,
        requests=int(row.n_requests),
        prompt_tokens=int(row.sum_prompt),
        completion_tokens=int(row.sum_completion),
        total_tokens=int(row.sum_total),
        cost_usd=float(row.sum_cost),
        unpriced_requests=int(row.n_unpriced),
        key_name=key_name,
    )


class UsageStore:
    """Org-scoped sums over the request log."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def summarise(self, org_id: str, query: UsageQuery) -> UsageReport:
        """The groups of ``query.group_by`` (costliest first, then busiest), and the totals."""
        column = USAGE_GROUPS[query.group_by]
        where = [RequestLog.org_id == org_id]
        if query.since is not None:
            where.append(RequestLog.created_at >= query.since)
        if query.until is not None:
            where.append(RequestLog.created_at < query.until)
        sums = _sums()
        grouped = (
            select(column.label("grp"), func.max(RequestLog.key_name).label("key_name"), *sums)
            .where(*where)
            .group_by(column)
            .order_by(sums[4].desc(), sums[0].desc(), column.asc().nulls_last())
            .limit(query.limit + 1)
        )
        async with self.db.session() as s:
            rows = (await s.execute(grouped)).all()
            totals = (await s.execute(select(*_sums()).where(*where))).one()
        key = query.group_by == "key"
        groups = [_group(row.grp, row, row.key_name if key else None) for row in rows[: query.limit]]
        return UsageReport(groups=groups, totals=_group(None, totals), has_more=len(rows) > query.limit)


def usage_to_dict(report: UsageReport, query: UsageQuery) -> dict[str, Any]:
    """What ``GET /v1/usage`` answers (and ``hatchway usage --json`` prints)."""
    return {
        "object": "list",
        "group_by": query.group_by,
        "since": int(query.since.timestamp()) if query.since else None,
        "until": int(query.until.timestamp()) if query.until else None,
        "data": [group.to_dict(query.group_by) for group in report.groups],
        "totals": report.totals.to_dict(None),
        "has_more": report.has_more,
    }


async def spent_since(
    db: Database,
    org_id: str,
    since: datetime,
    group: str | None = None,
    name: str | None = None,
    excluded: Sequence[str] = (),
) -> float:
    """USD of an organisation's records since ``since`` (of one key, end user or agent: ``group`` of
    ``USAGE_GROUPS`` and its value), but those whose id is ``excluded``: where a budget's count
    starts (``limits/budgets.py``)."""
    # A record of a negative cost (written before upstreams' usage was validated) is no credit.
    where = [RequestLog.org_id == org_id, RequestLog.created_at >= since, RequestLog.cost_usd > 0]
    if group is not None:
        where.append(USAGE_GROUPS[group] == name)
    if excluded:
        where.append(RequestLog.id.not_in(_listed(db, excluded)))
    async with db.session() as s:
        return float(
            await s.scalar(select(func.coalesce(func.sum(RequestLog.cost_usd), 0.0)).where(*where)) or 0.0
        )


def _listed(db: Database, ids: Sequence[str]) -> Select[Any]:
    """``ids`` as a subquery of one bound JSON array, however many they are (no bind-parameter limit)."""
    if db.engine.dialect.name == "sqlite":
        values = func.json_each(orjson.dumps(list(ids)).decode()).table_valued("value")
    else:
        values = func.json_array_elements_text(literal(list(ids), JSON)).table_valued("value")
    return select(values.c.value)
