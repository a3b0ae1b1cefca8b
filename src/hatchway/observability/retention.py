"""Request-log retention: records older than ``log_retention_days`` are deleted by a periodic task.

Every replica runs the task; a marker in the shared cache (Redis with several replicas) lets one
of them do the work per interval. Two replicas purging at once is harmless anyway: deleting rows
older than a cutoff is idempotent, and it is done in small batches so no transaction holds many
row locks for long.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy import delete, select

from hatchway.store.cache import Cache
from hatchway.store.db import Database
from hatchway.store.tables import RequestLog, utcnow

logger = logging.getLogger(__name__)

PURGE_MARKER = "logs:retention:last-purge"
BATCH_SIZE = 1000


async def purge_request_logs(db: Database, older_than: datetime, *, batch_size: int = BATCH_SIZE) -> int:
    """Delete every record created before ``older_than``; returns how many went."""
    removed = 0
    while True:
        async with db.session() as s:
            ids = list(
                await s.scalars(
                    select(RequestLog.id).where(RequestLog.created_at < older_than).limit(batch_size)
                )
            )
            if ids:
                await s.execute(delete(RequestLog).where(RequestLog.id.in_(ids)))
        removed += len(ids)
        if len(ids) < batch_size:
            return removed


async def keep_purging_logs(
    db: Database,
    cache: Cache,
    *,
    retention_days: int,
    interval_seconds: float,
    clock: Callable[[], datetime] = utcnow,
) -> None:
    """Purge now, then every ``interval_seconds``, until cancelled (the gateway's shutdown)."""
    while True:
        try:
            if await cache.get(PURGE_MARKER) is None:
                await cache.set(PURGE_MARKER, {"at": clock().isoformat()}, interval_seconds * 0.9)
                removed = await purge_request_logs(db, clock() - timedelta(days=retention_days))
                if removed:
                    logger.info(
                        "request log retention: deleted %d record(s) older than %d days",
                        removed,
                        retention_days,
                    )
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("request log retention: purge failed; retrying at the next interval")
        await asyncio.sleep(interval_seconds)
