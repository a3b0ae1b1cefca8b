"""A tool's question to the end user (MCP 2026-07-28 MRTR elicitation), held across turns.

When a tool call answers ``input_required`` with an elicitation, the gateway cannot answer it
itself: the question is for the person the run acts for. ``InputQuestions`` is the run's
``InputAnswerer`` for that case. It stores the round (the call, its arguments, the server's
``inputRequests`` and its opaque ``requestState``, sealed with the organisation's vault key) in
``mcp_input_requests``, bound to the conversation (``hatchway-session``, or the Responses chain)
and its end user, with an expiry, and stops the call with ``InputRequested``: the loop pauses
with the question as its answer, like a pending confirmation.

On the conversation's next turn (``McpToolset.before_run``), only that end user's message is read
as the answer (anyone else's is refused, 403): it becomes ``inputResponses`` validated against the
requested schema with its defaults applied (``answer_from_reply``), and the call is sent again with
the state echoed byte for byte and a new JSON-RPC id. Another round asks again; the final result is
put before the model as the call and its output (``answers.py`` checks what a server may ask and
reads the reply). Roots requests get an empty list; sampling is
answered by the run's model when the plugin allows it (``sampling.py``), refused otherwise; an
unanswerable reply asks again.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson
from sqlalchemy import Integer, LargeBinary, String, Text, delete, select, update
from sqlalchemy.orm import Mapped, mapped_column

from hatchway.engine.context import RunContext
from hatchway.engine.tools.mcp.answers import check_requested_schema, describe, requested_schema
from hatchway.errors import PermissionDenied, ToolError
from hatchway.store.db import Database
from hatchway.store.tables import Base, utcnow
from hatchway.vault.store import Vault

_PURPOSE = "mcp-input-request"


class InputRequestRow(Base):
    __tablename__ = "mcp_input_requests"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    org_id: Mapped[str] = mapped_column(String(40), index=True)
    session_key: Mapped[str] = mapped_column(Text)
    end_user: Mapped[str | None] = mapped_column(String(256), default=None)
    server_id: Mapped[str] = mapped_column(String(128))
    tool: Mapped[str] = mapped_column(String(256))
    round: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16))
    """``pending`` (asked), ``answered`` (the reply was taken), ``expired``."""
    question: Mapped[str] = mapped_column(Text)
    sealed: Mapped[bytes] = mapped_column(LargeBinary)
    """The call's arguments, the server's input requests and its request state."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column()


class InputRequested(ToolError):
    """The call waits for the end user's answer to ``question`` (a stored ``InputRequestRow``)."""

    default_code = "input_requested"

    def __init__(self, question: str, request_id: str, server_id: str, round_: int) -> None:
        super().__init__(f"{server_id}: the tool asks the user: {question}")
        self.question = question
        self.request_id = request_id
        self.server_id = server_id
        self.round = round_


@dataclass(slots=True)
class PendingInput:
    """One stored round, as the next turn needs it."""

    id: str
    server_id: str
    tool: str
    round: int
    end_user: str | None
    question: str
    arguments: dict[str, Any]
    requests: dict[str, Any]
    """The server's ``inputRequests`` as JSON (by key)."""
    request_state: str | None
    expired: bool
    task_id: str | None = None
    """An MCP task's question: the task the answer is sent to (``tasks/update``)."""


class InputQuestions:
    """Stores questions and reads answers; the gateway's ``InputAnswerer`` for elicitation."""

    def __init__(self, db: Database, vault: Vault, *, ttl_seconds: float = 900.0) -> None:
        self.db = db
        self.vault = vault
        self.ttl = timedelta(seconds=ttl_seconds)

    async def answer(self, round_: Any) -> dict[str, Any]:
        """``InputAnswerer``: roots answered, sampling refused, elicitation asked of the end user."""
        from hatchway.engine.tools.mcp.inputs import roots_answer

        responses: dict[str, Any] = {}
        asks: dict[str, Any] = {}
        samples = sum(
            1 for r in round_.requests.values() if getattr(r, "method", "") == "sampling/createMessage"
        )
        if samples > MAX_SAMPLES_PER_ROUND:
            raise ToolError(
                f"{round_.server_id}: the tool asked for {samples} samples in one round "
                f"(at most {MAX_SAMPLES_PER_ROUND})",
                code="mcp_input_unsupported",
            )
        for key, request in round_.requests.items():
            method = getattr(request, "method", "")
            if method == "roots/list":
                responses[key] = roots_answer()
            elif method == "elicitation/create":
                asks[key] = request
            elif method == "sampling/createMessage" and round_.sampler is not None:
                responses[key] = await round_.sampler(request, round_.ctx)
            else:
                raise ToolError(
                    f"{round_.server_id}: the tool asked for {method or 'an unknown kind of input'}, "
                    "which this plugin does not allow (sampling needs agent.allow_sampling)",
                    code="mcp_input_unsupported",
                )
        if not asks:
            return responses
        if len(responses) > len(
            [r for r in round_.requests.values() if getattr(r, "method", "") == "roots/list"]
        ):
            raise ToolError(  # a sampled answer cannot wait for the user's turn alongside a question
                f"{round_.server_id}: the tool asked for a sample and a question in one round",
                code="mcp_input_unsupported",
            )
        ctx: RunContext | None = round_.ctx
        if ctx is None or ctx.session_key is None:
            raise ToolError(
                f"{round_.server_id}: the tool asks the user a question, which needs a conversation: "
                "send the hatchway-session header (Chat) or use Responses",
                code="mcp_input_unsupported",
            )
        for request in asks.values():
            check_requested_schema(round_.server_id, requested_schema(request))
        asked = "\n\n".join(describe(request) for request in asks.values())
        question = f"The {round_.server_id} tool asks:\n{asked}"
        request_id = await self._store(round_, ctx, question)
        raise InputRequested(question, request_id, round_.server_id, round_.number)

    async def _store(self, round_: Any, ctx: RunContext, question: str) -> str:
        request_id = "inq_" + secrets.token_urlsafe(18)
        payload = {
            "server_url": round_.server_url,
            "arguments": round_.arguments,
            "requests": {
                key: request.model_dump(mode="json", by_alias=True, exclude_none=True)
                for key, request in round_.requests.items()
            },
            "request_state": round_.request_state,
            "task_id": getattr(round_, "task_id", None),
        }
        sealed = await self.vault.seal_blob(ctx.org_id, orjson.dumps(payload), purpose=_PURPOSE)
        assert ctx.session_key is not None
        async with self.db.session() as session:
            await session.execute(  # questions long past their expiry are of no use to anyone
                delete(InputRequestRow).where(
                    InputRequestRow.org_id == ctx.org_id, InputRequestRow.expires_at < utcnow() - self.ttl
                )
            )
            await session.execute(  # one open question per conversation: a newer call replaces it
                update(InputRequestRow)
                .where(
                    InputRequestRow.org_id == ctx.org_id,
                    InputRequestRow.session_key == ctx.session_key,
                    InputRequestRow.status == "pending",
                )
                .values(status="superseded")
            )
            session.add(
                InputRequestRow(
                    id=request_id,
                    org_id=ctx.org_id,
                    session_key=ctx.session_key,
                    end_user=ctx.on_behalf_of,
                    server_id=round_.server_id,
                    tool=round_.tool,
                    round=round_.number,
                    status="pending",
                    question=question,
                    sealed=sealed,
                    expires_at=utcnow() + self.ttl,
                )
            )
        return request_id

    async def pending(self, ctx: RunContext, servers: dict[str, Any]) -> PendingInput | None:
        """The conversation's open question from one of ``servers`` (by id), if any: the same server,
        not one that merely has the same id in another plugin (it would receive the call's state)."""
        if ctx.session_key is None:
            return None
        async with self.db.session() as session:
            row = (
                await session.execute(
                    select(InputRequestRow)
                    .where(
                        InputRequestRow.org_id == ctx.org_id,
                        InputRequestRow.session_key == ctx.session_key,
                        InputRequestRow.status == "pending",
                        InputRequestRow.expires_at > utcnow(),  # an expired question answers nothing
                    )
                    .order_by(InputRequestRow.created_at.desc())
                    .limit(1)
                )
            ).scalar_one_or_none()
        if row is None or row.server_id not in servers:
            return None
        payload = orjson.loads(await self.vault.open_blob(ctx.org_id, row.sealed, purpose=_PURPOSE))
        asked_by = servers[row.server_id]
        if payload.get("server_url") != (asked_by.url or asked_by.command):
            return None
        return PendingInput(
            id=row.id,
            server_id=row.server_id,
            tool=row.tool,
            round=row.round,
            end_user=row.end_user,
            question=row.question,
            arguments=payload["arguments"],
            requests=payload["requests"],
            request_state=payload["request_state"],
            expired=row.expires_at <= utcnow(),
            task_id=payload.get("task_id"),
        )

    async def take(self, pending: PendingInput, ctx: RunContext) -> bool:
        """Mark the question answered (once: a concurrent turn with the same answer loses)."""
        status = "expired" if pending.expired else "answered"
        async with self.db.session() as session:
            done = await session.execute(
                update(InputRequestRow)
                .where(InputRequestRow.id == pending.id, InputRequestRow.status == "pending")
                .values(status=status)
            )
        return bool(done.rowcount == 1)  # type: ignore[attr-defined]


def check_answerer(pending: PendingInput, ctx: RunContext) -> None:
    """Only the end user the question was asked of answers it (``input_not_yours``, 403)."""
    if (pending.end_user or None) == (ctx.on_behalf_of or None):
        return
    raise PermissionDenied(
        f"The question of {pending.server_id} can only be answered by the end user it was asked of; "
        "it stays open.",
        param="X-On-Behalf-Of",
        code="input_not_yours",
    )


# -- questions and answers ------------------------------------------------------------------------


MAX_SAMPLES_PER_ROUND = 1
"""Sampling requests one round may carry: each is a model call the organisation pays for."""
