"""Following a response's stream: live while it runs on this replica, else replayed from the store.

A response running here has an ``EventLog`` (its task's attachment), read from any
``starting_after``. One that runs elsewhere (another replica, a worker) or has ended is waited for,
polling the store, and its stored output is then streamed as the events it would have produced.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from hatchway.responses.events import EventLog, ResponseStreamWriter, terminal_event
from hatchway.responses.store import ACTIVE, ResponseRecord, ResponseStore
from hatchway.responses.wire import response_object
from hatchway.tasks import TaskRegistry

POLL_SECONDS = 0.1


def follow(
    store: ResponseStore,
    tasks: TaskRegistry,
    record: ResponseRecord,
    starting_after: int | None,
    *,
    wait_seconds: float,
) -> AsyncIterator[dict[str, Any]]:
    """The events of ``record`` after ``starting_after``, waiting up to ``wait_seconds`` for its end."""
    live = tasks.attachment(record.id)
    if isinstance(live, EventLog):
        return live.follow(starting_after)
    return _replayed(store, record, starting_after, wait_seconds)


async def _replayed(
    store: ResponseStore, record: ResponseRecord, starting_after: int | None, wait_seconds: float
) -> AsyncIterator[dict[str, Any]]:
    deadline = time.monotonic() + wait_seconds
    while record.status in ACTIVE and time.monotonic() < deadline:
        await asyncio.sleep(POLL_SECONDS)
        record = await store.get(record.org_id, record.id)
    log = EventLog()
    replay(ResponseStreamWriter(log), response_object(record, await store.items(record.id, "output")))
    async for event in log.follow(starting_after):
        yield event


def replay(writer: ResponseStreamWriter, response: dict[str, Any]) -> None:
    """The events of a response that already ended, for a client streaming it afterwards."""
    snapshot = {
        **response,
        "status": "in_progress",
        "output": [],
        "output_text": "",
        "usage": None,
        "error": None,
        "completed_at": None,
        "incomplete_details": None,
    }
    writer.lifecycle("response.created", snapshot)
    writer.lifecycle("response.in_progress", snapshot)
    writer.finish(response["output"])
    writer.lifecycle(terminal_event(response["status"]), response)
    writer.log.close()
