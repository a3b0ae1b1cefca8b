"""A2A push notifications: the POSTs that tell a task's configs (``push_configs.py``) its state.

When the task reaches a terminal state or ``input-required``, each of its configs that this replica
claims for that (response, state) is POSTed::

    Content-Type: application/json
    X-A2A-Notification-Token: <the client's token>      (when it gave one)
    Authorization: <scheme> <credentials>               (when it gave authentication)
    X-Hatchway-Timestamp / X-Hatchway-Signature          (when a2a.push_signing_secret is set;
                                                           as the approval webhooks sign)

with the body a ``StreamResponse`` carrying the Task (A2A 1.0, 4.3.3; as the ``a2a-sdk``'s own
sender). 2xx is delivered; 5xx, 408, 429, timeouts and connection errors are retried with backoff
(``RetrySchedule``) up to ``DELIVERY_ATTEMPTS``; a redirect or any other answer ends it. Redirects
are never followed and the receiver's body is never read. When the attempts end, the config is marked
told (``delivered``).

Nothing depends on the replica that took the task staying up: the replica that took it follows the
run and announces at once, and every replica also sweeps (``a2a.push_sweep_seconds``) for configs
whose task has ended (or asks) but that were never told, or whose claim lapsed before they were told
(the claiming replica died mid-delivery: ``a2a.push_claim_seconds``). Delivery is at-least-once:
a receiver that must act once deduplicates by the task id and state.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from a2a.types import StreamResponse, Task, TaskState
from google.protobuf.json_format import MessageToJson

from hatchway.a2a.push_configs import A2APushConfigRecord, PushConfigs, PushSecrets, mark_of
from hatchway.a2a.store import A2ATaskRecord
from hatchway.a2a.tasks import ENDED, WAITING
from hatchway.egress import check_egress
from hatchway.engine.tools.operations.deliveries import RetrySchedule
from hatchway.engine.tools.operations.notifications import AttemptOutcome, classify_answer, sign
from hatchway.errors import HatchwayError, PermissionDenied

if TYPE_CHECKING:
    import httpx

logger = logging.getLogger(__name__)

DELIVERY_ATTEMPTS = 5
"""POSTs of one notification at most (the first and four retries)."""
BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 30.0
TIMEOUT_SECONDS = 10.0
"""One attempt's time: connecting, sending, and the receiver's status line."""
SWEEP_BATCH = 64
"""Configs one sweep looks at, at most (the next sweep takes the rest)."""
SWEEP_PER_ORGANISATION = 8
"""Notifications the sweeps of one replica send at a time for one organisation."""
SWEEP_SENDING = 64
"""Notifications the sweeps of one replica send at a time in all."""


class PushNotifier:
    """Announces a task's state to its configs: claimed per (config, state) for ``claim_seconds``
    at a time, POSTed with retries, then marked told. ``signing_key``: signs each POST as the
    approval webhooks are signed."""

    def __init__(
        self,
        configs: PushConfigs,
        *,
        allow_private: bool,
        signing_key: Callable[[], bytes | None] = lambda: None,
        http: httpx.AsyncClient | None = None,
        schedule: RetrySchedule | None = None,
        timeout: float = TIMEOUT_SECONDS,
        claim_seconds: float = 60.0,
    ) -> None:
        self.configs = configs
        self.allow_private = allow_private
        self.signing_key = signing_key
        self.schedule = schedule or RetrySchedule(DELIVERY_ATTEMPTS, BACKOFF_SECONDS, MAX_BACKOFF_SECONDS)
        self.timeout = timeout
        self.claim_seconds = claim_seconds
        self._http = http
        self._sending: dict[asyncio.Task[None], str] = {}
        """The sweeps' deliveries going on, and whose organisation each is."""

    async def announce(
        self,
        task: Task,
        mark: str,
        rows: list[A2APushConfigRecord] | None = None,
        *,
        wait: bool = True,
    ) -> int:
        """POST ``task`` to each of its configs (or of ``rows``) that this caller claims for
        ``mark``: not told it yet, nor being told by another replica; how many. ``wait=False``: the
        deliveries go on in the background (the sweep's: one slow receiver holds up no other)."""
        if rows is None:
            rows = await self.configs.of_task(task.id)
        claimed = [row for row in rows if await self.configs.claim(row, mark, self.claim_seconds)]
        if not claimed:
            return 0
        body = MessageToJson(StreamResponse(task=task), indent=None).encode()
        if wait:
            await asyncio.gather(*(self._deliver(row, mark, body) for row in claimed))
        else:
            for row in claimed:
                self._in_background(row, self._deliver(row, mark, body))
        return len(claimed)

    def _in_background(self, row: A2APushConfigRecord, delivery: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(delivery)
        self._sending[task] = row.org_id
        task.add_done_callback(self._sending.pop)

    async def sweep(self, snapshot_of: Callable[[A2ATaskRecord], Awaitable[Task | None]]) -> int:
        """Announce what configs are owed (``PushConfigs.untold``: a task that ended while nobody
        followed it, a claim whose replica died); how many were claimed. Their deliveries go on in
        the background, at most ``SWEEP_PER_ORGANISATION`` of an organisation and ``SWEEP_SENDING``
        in all at a time: an organisation at its bound is not looked at until one ends.
        ``snapshot_of``: the task as its agent tells it now, None when no published agent tells it
        any more — its configs are then given up, as those of a task that cannot be read."""
        busy = Counter(self._sending.values())
        if len(self._sending) >= SWEEP_SENDING:
            return 0
        full = {org for org, n in busy.items() if n >= SWEEP_PER_ORGANISATION}
        owed: dict[str, tuple[A2ATaskRecord, list[A2APushConfigRecord]]] = {}
        for row, task in await self.configs.untold(SWEEP_BATCH, skip_orgs=full):
            owed.setdefault(task.id, (task, []))[1].append(row)

        async def one(task: A2ATaskRecord, rows: list[A2APushConfigRecord]) -> int:
            room = SWEEP_PER_ORGANISATION - busy[task.org_id]
            if room <= 0 or len(self._sending) >= SWEEP_SENDING:
                return 0
            rows = rows[:room]
            busy[task.org_id] += len(rows)
            why = "UNPUBLISHED"
            try:
                snapshot = await snapshot_of(task)
            except HatchwayError as exc:  # its response deleted…: nothing can tell it any more
                logger.warning("a2a push: task %s cannot be read (%s); given up", task.id, exc.code)
                snapshot, why = None, "UNREADABLE"
            if snapshot is None:
                for row in rows:
                    await self.configs.told(row, mark_of(task.response_id, why), claimed=False)
                return 0
            state = snapshot.status.state
            if state not in ENDED and state not in WAITING:
                return 0
            mark = mark_of(task.response_id, TaskState.Name(state))
            return await self.announce(snapshot, mark, rows, wait=False)

        return sum(await asyncio.gather(*(one(task, rows) for task, rows in owed.values())))

    async def _deliver(self, row: A2APushConfigRecord, mark: str, body: bytes) -> None:
        """Attempts until one is delivered or the schedule gives up; then the config is told. A
        replica stopping meanwhile leaves the claim to lapse: another announces it. A config deleted
        or replaced meanwhile (or claimed for a newer state) is not posted to again."""
        try:
            secrets = await self.configs.secrets(row)
            attempts = 0
            while True:
                attempts += 1
                outcome = await self._attempt(row, secrets, body)
                if outcome.error is None:
                    logger.info("a2a push %s of task %s delivered", row.id, row.task_id)
                    break
                wait = self.schedule.wait(attempts, outcome.retry_after) if outcome.retry else None
                if wait is None:
                    logger.warning(
                        "a2a push %s of task %s not delivered after %d attempt(s): %s",
                        row.id,
                        row.task_id,
                        attempts,
                        outcome.error,
                    )
                    break
                if not await self.configs.extend(row, mark, wait + self.claim_seconds):
                    return  # deleted, replaced or superseded: nothing of this to tell any more
                await asyncio.sleep(wait)
                if not await self.configs.extend(row, mark, self.claim_seconds):
                    return
        except Exception:  # a bug or the vault: logged, never raised into the task's lifecycle
            logger.exception("a2a push %s of task %s failed", row.id, row.task_id)
        try:
            await self.configs.told(row, mark)
        except Exception:  # the database: the claim lapses and the notification is sent again
            logger.warning("a2a push %s of task %s: could not mark it told", row.id, row.task_id)

    async def _attempt(self, row: A2APushConfigRecord, secrets: PushSecrets, body: bytes) -> AttemptOutcome:
        try:  # again at each attempt: where the name points may have changed since it was registered
            await check_egress(row.url, allow_private=self.allow_private)
        except PermissionDenied as exc:
            return AttemptOutcome(error=exc.message, retry=False)
        headers = {"Content-Type": "application/json", "User-Agent": "Hatchway-A2A-Push/1"}
        if secrets.token:
            headers["X-A2A-Notification-Token"] = secrets.token
        if secrets.scheme and secrets.credentials:
            headers["Authorization"] = f"{secrets.scheme} {secrets.credentials}"
        key = self.signing_key()
        if key is not None:
            timestamp = int(time.time())
            headers["X-Hatchway-Timestamp"] = str(timestamp)
            headers["X-Hatchway-Signature"] = sign(key, timestamp, body)
        import httpx

        try:
            async with self._client().stream(
                "POST", row.url, content=body, headers=headers, timeout=self.timeout, follow_redirects=False
            ) as response:  # the status line is all that is read
                return classify_answer(response.status_code, response.headers.get("retry-after"))
        except httpx.TimeoutException:
            return AttemptOutcome(error=f"timed out after {self.timeout:g} s")
        except httpx.HTTPError as exc:  # nothing of the exception's text: it may carry the URL
            return AttemptOutcome(error=f"could not reach the receiver ({type(exc).__name__})")

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            import httpx

            self._http = httpx.AsyncClient(follow_redirects=False, trust_env=False)
        return self._http

    async def aclose(self) -> None:
        for task in list(self._sending):  # their claims lapse: another replica sends them
            task.cancel()
        if self._http is not None:
            client, self._http = self._http, None
            await client.aclose()
