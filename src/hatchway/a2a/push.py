"""A2A push notifications: where a task's client wants to hear that it ended, and the POSTs.

A client registers a config (``CreateTaskPushNotificationConfig``, or
``configuration.taskPushNotificationConfig`` on ``SendMessage``): a URL, and optionally a ``token``
and ``authentication`` credentials. The URL is a caller's, so it passes the egress rule of plugins
sent inline (``egress.check_egress``: no loopback, private, link-local or metadata address unless
``allow_private_mcp_urls``), when it is registered and again before every attempt (DNS may change
in between). The token and credentials are sealed with the organisation's vault key (purpose
``a2a-push``); the table holds no secret in clear.

When the task reaches a terminal state or ``input-required``, each of its configs is claimed for that
(response, state) with a compare-and-set on the row (``notified``, held until ``claim_expires_at``),
so that one replica at a time announces a state to a config however many see it end, then POSTed::

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
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import orjson
from a2a.types import AuthenticationInfo, StreamResponse, Task, TaskPushNotificationConfig, TaskState
from google.protobuf.json_format import MessageToJson
from sqlalchemy import DDL, LargeBinary, String, and_, delete, event, func, or_, select, update
from sqlalchemy.orm import Mapped, mapped_column

from hatchway.a2a.store import A2ATaskRecord
from hatchway.a2a.tasks import ENDED, WAITING
from hatchway.egress import check_egress
from hatchway.engine.tools.operations.deliveries import RetrySchedule
from hatchway.engine.tools.operations.notifications import AttemptOutcome, classify_answer, sign
from hatchway.errors import HatchwayError, PermissionDenied
from hatchway.responses.store import ACTIVE, ResponseRecord
from hatchway.store.db import Database
from hatchway.store.tables import Base, utcnow
from hatchway.vault.store import Vault

if TYPE_CHECKING:
    import httpx

logger = logging.getLogger(__name__)

PURPOSE = "a2a-push"
"""The vault purpose the token and credentials are sealed under."""
MAX_CONFIGS_PER_TASK = 8
"""A task takes at most this many push configs (replacing one by its id does not count twice)."""
MAX_URL_CHARS = 2048
MAX_ID_CHARS = 128
MAX_SECRET_CHARS = 4096
"""The token, and the authentication's credentials, are each at most this long."""
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


class A2APushConfigRecord(Base):
    """One push config of one task; its organisation is the task's."""

    __tablename__ = "a2a_push_configs"

    task_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    id: Mapped[str] = mapped_column(String(MAX_ID_CHARS), primary_key=True)
    org_id: Mapped[str] = mapped_column(String(40))
    url: Mapped[str] = mapped_column(String(MAX_URL_CHARS))
    sealed: Mapped[bytes] = mapped_column(LargeBinary)
    """``{"token", "scheme", "credentials"}``, sealed with the organisation's vault key."""
    notified: Mapped[str | None] = mapped_column(String(200), default=None)
    """``<response id>|<state>`` last claimed to be announced (``mark_of``)."""
    delivered: Mapped[str | None] = mapped_column(String(200), default=None)
    """The mark whose announcement ended (delivered, or refused for good, or out of attempts)."""
    claim_expires_at: Mapped[datetime | None] = mapped_column(default=None)
    """Until when the replica that claimed ``notified`` holds it; then another may announce it."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


UNTOLD = "delivered IS NULL OR delivered <> notified"
"""A config not told what it was last claimed for (or never claimed); the sweep's partial index."""
# Written as DDL (as operations' partial index, engine/tools/operations/models.py), so that
# `create_all` makes it too without SQLAlchemy loading its PostgreSQL dialect in every gateway.
event.listen(
    A2APushConfigRecord.__table__,
    "after_create",
    DDL(f"CREATE INDEX ix_a2a_push_configs_untold ON a2a_push_configs (created_at) WHERE {UNTOLD}"),
)


def mark_of(response_id: str | None, state: str) -> str:
    """What a config is told: this response of the task reached ``state`` (a ``TaskState`` name)."""
    return f"{response_id or '-'}|{state}"


@dataclass(frozen=True, slots=True)
class PushSecrets:
    token: str = ""
    scheme: str = ""
    credentials: str = ""


class PushConfigs:
    """The table, and the vault that seals what it holds."""

    def __init__(self, db: Database, vault: Vault) -> None:
        self.db = db
        self.vault = vault

    async def put(self, org_id: str, task_id: str, config: TaskPushNotificationConfig) -> A2APushConfigRecord:
        """Store (or replace, by its id) a config already checked by ``check_config``; InvalidParams
        past ``MAX_CONFIGS_PER_TASK``."""
        config_id = config.id or f"push_{uuid.uuid4().hex}"
        secrets = {
            "token": config.token,
            "scheme": config.authentication.scheme,
            "credentials": config.authentication.credentials,
        }
        sealed = await self.vault.seal_blob(org_id, orjson.dumps(secrets), purpose=PURPOSE)
        async with self.db.session() as s:
            row = await s.get(A2APushConfigRecord, (task_id, config_id))
            if row is None:
                count = (
                    await s.execute(
                        select(func.count())
                        .select_from(A2APushConfigRecord)
                        .where(A2APushConfigRecord.task_id == task_id)
                    )
                ).scalar_one()
                if count >= MAX_CONFIGS_PER_TASK:
                    raise ConfigRefused(f"task {task_id} already has {MAX_CONFIGS_PER_TASK} push configs")
                row = A2APushConfigRecord(task_id=task_id, id=config_id, org_id=org_id, url=config.url)
                s.add(row)
            row.url = config.url
            row.sealed = sealed
            row.notified = row.delivered = row.claim_expires_at = None
        return row

    async def get(self, task_id: str, config_id: str) -> A2APushConfigRecord | None:
        async with self.db.session() as s:
            return await s.get(A2APushConfigRecord, (task_id, config_id))

    async def of_task(self, task_id: str) -> list[A2APushConfigRecord]:
        async with self.db.session() as s:
            return list(
                (
                    await s.execute(
                        select(A2APushConfigRecord)
                        .where(A2APushConfigRecord.task_id == task_id)
                        .order_by(A2APushConfigRecord.created_at, A2APushConfigRecord.id)
                    )
                ).scalars()
            )

    async def delete(self, task_id: str, config_id: str) -> bool:
        async with self.db.session() as s:
            result = await s.execute(
                delete(A2APushConfigRecord).where(
                    A2APushConfigRecord.task_id == task_id, A2APushConfigRecord.id == config_id
                )
            )
        return bool(result.rowcount)  # type: ignore[attr-defined]

    async def claim(self, row: A2APushConfigRecord, mark: str, hold_seconds: float) -> bool:
        """Whether this caller is the one to announce ``mark`` to this config now (compare-and-set):
        a mark not claimed yet, or one whose claim lapsed before its announcement ended."""
        now = utcnow()
        config = A2APushConfigRecord
        lapsed = and_(
            config.notified == mark,
            or_(config.delivered.is_(None), config.delivered != mark),
            config.claim_expires_at < now,
        )
        async with self.db.session() as s:
            result = await s.execute(
                update(config)
                .where(
                    config.task_id == row.task_id,
                    config.id == row.id,
                    or_(config.notified.is_(None), config.notified != mark, lapsed),
                )
                .values(notified=mark, claim_expires_at=now + timedelta(seconds=hold_seconds))
            )
        return bool(result.rowcount)  # type: ignore[attr-defined]

    async def extend(self, row: A2APushConfigRecord, mark: str, seconds: float) -> bool:
        """Hold the claim on ``mark`` ``seconds`` more from now (a retry is waited for); False when
        the config is gone, was replaced, or was claimed for another state meanwhile."""
        config = A2APushConfigRecord
        async with self.db.session() as s:
            result = await s.execute(
                update(config)
                .where(
                    config.task_id == row.task_id,
                    config.id == row.id,
                    config.notified == mark,
                    config.sealed == row.sealed,  # replaced (put) seals again
                )
                .values(claim_expires_at=utcnow() + timedelta(seconds=seconds))
            )
        return bool(result.rowcount)  # type: ignore[attr-defined]

    async def reopen(self, task_id: str) -> None:
        """The task changed under its configs (a new response after its question was answered, the
        question withdrawn): each is owed its next state, as if its last claim had lapsed."""
        config = A2APushConfigRecord
        async with self.db.session() as s:
            await s.execute(
                update(config)
                .where(config.task_id == task_id)
                .values(delivered=None, claim_expires_at=utcnow() - timedelta(seconds=1))
            )

    async def told(self, row: A2APushConfigRecord, mark: str, *, claimed: bool = True) -> None:
        """The announcement of ``mark`` to this config ended: no replica sends it again.
        ``claimed=False``: given up without a claim (nobody can tell the task any more)."""
        config = A2APushConfigRecord
        where = [config.task_id == row.task_id, config.id == row.id]
        if claimed:
            where.append(config.notified == mark)
        async with self.db.session() as s:
            await s.execute(
                update(config).where(*where).values(notified=mark, delivered=mark, claim_expires_at=None)
            )

    async def untold(
        self, limit: int, *, skip_orgs: set[str] | frozenset[str] = frozenset()
    ) -> list[tuple[A2APushConfigRecord, A2ATaskRecord]]:
        """Configs (with their task) owed an announcement: their task's response has ended (or the
        task was refused) and they were never told of that response, or their claim lapsed before
        its announcement ended. Oldest first, at most ``limit``, none of ``skip_orgs``."""
        now = utcnow()
        config, task = A2APushConfigRecord, A2ATaskRecord
        this_response = func.coalesce(task.response_id, "-") + "|"
        untold = or_(config.delivered.is_(None), config.delivered != config.notified)  # ``UNTOLD``
        owed = or_(
            config.notified.is_(None),
            func.substr(config.notified, 1, func.length(this_response)) != this_response,
            config.claim_expires_at < now,
        )
        refused = task.refusal["state"].as_string().is_not(None)  # SQL NULL or JSON null: none
        ended = or_(refused, ResponseRecord.status.not_in(ACTIVE))
        query = (
            select(config, task)
            .join(task, task.id == config.task_id)
            .outerjoin(ResponseRecord, ResponseRecord.id == task.response_id)
            .where(untold, ended, owed, *([config.org_id.not_in(skip_orgs)] if skip_orgs else []))
            .order_by(config.created_at)
            .limit(limit)
        )
        async with self.db.session() as s:
            return [(row[0], row[1]) for row in (await s.execute(query)).all()]

    async def secrets(self, row: A2APushConfigRecord) -> PushSecrets:
        plain = orjson.loads(await self.vault.open_blob(row.org_id, row.sealed, purpose=PURPOSE))
        return PushSecrets(plain.get("token", ""), plain.get("scheme", ""), plain.get("credentials", ""))

    async def as_config(self, row: A2APushConfigRecord) -> TaskPushNotificationConfig:
        """The config as its owner reads it back: the token, and the authentication's scheme (its
        credentials are write-only)."""
        secrets = await self.secrets(row)
        config = TaskPushNotificationConfig(id=row.id, task_id=row.task_id, url=row.url, token=secrets.token)
        if secrets.scheme:
            config.authentication.CopyFrom(AuthenticationInfo(scheme=secrets.scheme))
        return config


class ConfigRefused(Exception):
    """A push config this server does not take; the message says why (for InvalidParams)."""


async def check_config(config: TaskPushNotificationConfig, *, allow_private: bool) -> None:
    """ConfigRefused unless the config's sizes are within bounds and its URL passes the egress rule."""
    if not config.url:
        raise ConfigRefused("url: required")
    if len(config.url) > MAX_URL_CHARS:
        raise ConfigRefused(f"url: at most {MAX_URL_CHARS} characters")
    if len(config.id) > MAX_ID_CHARS:
        raise ConfigRefused(f"id: at most {MAX_ID_CHARS} characters")
    if len(config.token) > MAX_SECRET_CHARS or len(config.authentication.credentials) > MAX_SECRET_CHARS:
        raise ConfigRefused(f"token and credentials: at most {MAX_SECRET_CHARS} characters each")
    if any(c in config.authentication.scheme for c in "\r\n ") or len(config.authentication.scheme) > 64:
        raise ConfigRefused("authentication.scheme: one word")
    if any(c in config.token + config.authentication.credentials for c in "\r\n"):
        raise ConfigRefused("token and credentials: no line breaks")
    try:
        await check_egress(config.url, allow_private=allow_private)
    except PermissionDenied as exc:
        raise ConfigRefused(f"url: {exc.message}") from None


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
