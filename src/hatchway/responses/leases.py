"""Leases of running responses: this replica renews its own, fails those of replicas that are gone,
and stops its runs that were cancelled elsewhere (see ``responses/store.py`` for the rule)."""

from __future__ import annotations

import asyncio
import logging

from hatchway.responses.store import ResponseStore
from hatchway.tasks import TaskRegistry

logger = logging.getLogger(__name__)

RUN_LOST = (
    "The gateway process running this response stopped (crash or restart) before it finished; "
    "create the response again."
)


async def keep_leases(store: ResponseStore, tasks: TaskRegistry) -> None:
    """Renew this replica's leases, fail runs whose owner is gone, and stop runs cancelled elsewhere."""
    interval = store.lease_seconds / 3
    while True:
        await asyncio.sleep(interval)
        try:
            await store.renew_leases()
            await store.fail_expired(RUN_LOST)
            for response_id in await store.cancelled_among(tasks.running()):
                tasks.cancel(response_id)
        except Exception:  # a database hiccup must not end the heartbeat
            logger.exception("could not renew response leases")
