"""Queued responses whose job will not run them are queued again.

A Redis restart without its data (no persistence) drops every job while the database still holds
each response as ``queued`` with its stored request; a job can also end — given up after
``background.max_attempts`` takes, or done — and be kept by SAQ (for ten minutes) while its response
is still ``queued``. Every process with the queue checks, each lease heartbeat, a batch of queued
responses older than ``background.requeue_after_seconds`` and enqueues again those whose job is
missing or ended (same key, so a job that waits or runs is never doubled; a response runs only if
its worker moves it from ``queued`` to ``in_progress``, so it never runs twice). A stranded response
is queued again within ``requeue_after_seconds`` plus one heartbeat.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from hatchway.responses.store import ResponseStore

if TYPE_CHECKING:  # the job queue (saq, redis) loads only with redis_url set
    from hatchway.responses.queue import ResponseQueue

logger = logging.getLogger(__name__)

BATCH = 100
"""Queued responses checked per heartbeat; a larger backlog is checked in turns."""

Requeued = Callable[[int], None]
"""Told how many jobs one pass queued again (a metrics counter)."""


async def requeue_stranded(
    store: ResponseStore, queue: ResponseQueue, *, after_seconds: float, requeued: Requeued | None = None
) -> int:
    """One pass: enqueue again the stale queued responses whose job is gone or ended; returns how many."""
    count = 0
    for org_id, response_id in await store.stale_queued(after_seconds, BATCH):
        stranding = await queue.stranding(response_id)
        if stranding is None or not await queue.enqueue(org_id, response_id):
            continue  # its job waits or runs (or another process just queued it again)
        logger.warning(
            "background response %s was still queued but its job was %s%s: queued again",
            response_id,
            stranding,
            " (Redis lost it)" if stranding == "missing" else "",
        )
        count += 1
    if count and requeued is not None:
        requeued(count)
    return count


async def keep_requeueing(
    store: ResponseStore, queue: ResponseQueue, *, after_seconds: float, requeued: Requeued | None = None
) -> None:
    """Every lease heartbeat (a third of ``response_lease_seconds``), one ``requeue_stranded`` pass."""
    interval = store.lease_seconds / 3
    while True:
        await asyncio.sleep(interval)
        try:
            await requeue_stranded(store, queue, after_seconds=after_seconds, requeued=requeued)
        except Exception as exc:  # Redis or the database away: the next heartbeat tries again
            logger.warning("could not check queued responses against the job queue (%s)", type(exc).__name__)
