"""Where a task's client wants to hear of it (A2A push notification configs), and which of them are
owed a notification.

A client registers a config (``CreateTaskPushNotificationConfig``, or
``configuration.taskPushNotificationConfig`` on ``SendMessage``): a URL, and optionally a ``token``
and ``authentication`` credentials. The URL is a caller's, so it passes the egress rule of plugins
sent inline (``egress.check_egress``: no loopback, private, link-local or metadata address unless
``allow_private_mcp_urls``), when it is registered (``check_config``) and again before every attempt
(``push.py``). The token and credentials are sealed with the organisation's vault key (purpose
``a2a-push``); the table holds no secret in clear.

Each config is claimed for a (response, state) before it is told it, with a compare-and-set on its
row (``notified``, held until ``claim_expires_at``), so that one replica at a time announces a state
to a config however many see it end; ``delivered`` says the announcement ended. ``untold`` is what
the sweep reads: configs whose task ended and that were never told, or whose claim lapsed.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

import orjson
from a2a.types import AuthenticationInfo, TaskPushNotificationConfig
from sqlalchemy import DDL, ColumnElement, LargeBinary, String, and_, delete, event, func, or_, select, update
from sqlalchemy.orm import Mapped, mapped_column

from hatchway.a2a.store import A2ATaskRecord
from hatchway.egress import check_egress
from hatchway.errors import PermissionDenied
from hatchway.responses.store import ACTIVE, ResponseRecord
from hatchway.store.db import Database
from hatchway.store.tables import Base, utcnow
from hatchway.vault.store import Vault

PURPOSE = "a2a-push"
"""The vault purpose the token and credentials are sealed under."""
MAX_CONFIGS_PER_TASK = 8
"""A task takes at most this many push configs (replacing one by its id does not count twice)."""
MAX_URL_CHARS = 2048
MAX_ID_CHARS = 128
MAX_SECRET_CHARS = 4096
"""The token, and the authentication's credentials, are each at most this long."""


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
                    _is(row),
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
                    _is(row),
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
        where = [_is(row)]
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


def _is(row: A2APushConfigRecord) -> ColumnElement[bool]:
    """The condition that names ``row`` (its primary key)."""
    return and_(A2APushConfigRecord.task_id == row.task_id, A2APushConfigRecord.id == row.id)


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
