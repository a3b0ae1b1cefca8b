"""Leases of running responses: this replica renews those it still runs, fails those whose run is gone
(another replica died, or a run here ended without storing its ending), and stops its runs that were
cancelled elsewhere (see ``responses/store.py`` for the rule). A dead run ends within
``response_lease_seconds`` plus a third of it (the renewal interval)."""

from __future__ import annotations

import asyncio
import logging

from hatchway.responses.store import ResponseStore, Resumable
from hatchway.tasks import TaskRegistry

logger = logging.getLogger(__name__)

RUN_LOST = (
    "The gateway process running this response stopped (crash or restart) before it finished; "
    "create the response again."
)


async def keep_leases(store: ResponseStore, tasks: TaskRegistry, resumable: Resumable | None = None) -> None:
    """Renew this replica's leases, fail runs whose owner is gone (or queue again those ``resumable``
    picks: background responses waiting on an upstream MCP task), and stop runs cancelled elsewhere."""
    interval = store.lease_seconds / 3
    while True:
        await asyncio.sleep(interval)
        try:
            running = tasks.running()
            await store.renew_leases(running)
            await store.fail_expired(RUN_LOST, resumable)
            for response_id in await store.cancelled_among(running):
                tasks.cancel(response_id)
        except Exception:  # a database hiccup must not end the heartbeat
            logger.exception("could not renew response leases")
