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
put before the model as the call and its output. Roots requests get an empty list; sampling is
answered by the run's model when the plugin allows it (``sampling.py``), refused otherwise; an
unanswerable reply asks again.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson
from sqlalchemy import Integer, LargeBinary, String, Text, delete, select, update
from sqlalchemy.orm import Mapped, mapped_column

from hatchway.engine.context import RunContext
from hatchway.engine.tools.operations.confirmation import ReplyKind, classify_reply, normalize
from hatchway.errors import PermissionDenied, ToolError
from hatchway.store.db import Database
from hatchway.store.tables import Base, utcnow
from hatchway.vault.store import Vault

_PURPOSE = "mcp-input-request"
_DECLINE = frozenset({"cancel", "cancelar", "cancele", "decline", "recusar", "recuso", "no", "nao", "não"})


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
            check_requested_schema(round_.server_id, _schema(request))
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
MAX_QUESTION_FIELDS = 32
MAX_MESSAGE_CHARS = 2000
_PRIMITIVE_KEYS = {
    # What MCP allows in an elicitation's requested schema: a flat object of primitive properties.
    "string": {
        "type",
        "title",
        "description",
        "default",
        "minLength",
        "maxLength",
        "format",
        "enum",
        "enumNames",
    },
    "number": {"type", "title", "description", "default", "minimum", "maximum"},
    "integer": {"type", "title", "description", "default", "minimum", "maximum"},
    "boolean": {"type", "title", "description", "default"},
}


_TOP_KEYS = {"type", "properties", "required", "title", "description", "$schema"}
_SCALAR = (str, int, float, bool)


def check_requested_schema(server_id: str, schema: dict[str, Any]) -> None:
    """Refuse a requested schema outside what MCP allows for elicitation: a flat object of at most
    ``MAX_QUESTION_FIELDS`` string, number, integer or boolean properties with the spec's few
    keywords, each of the right type (no ``pattern``, no combinators, no ``$ref``). The answer is then
    checked by ``_check_answer`` (written here, not jsonschema: a server must not make the check cost
    anything, and a schema this small needs nothing more)."""

    def refuse(reason: str) -> ToolError:
        return ToolError(
            f"{server_id}: the tool's question cannot be asked ({reason})", code="mcp_input_unsupported"
        )

    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        raise refuse("its schema is not an object")
    extra = set(schema) - _TOP_KEYS
    if extra:
        raise refuse(f"its schema uses {', '.join(sorted(map(str, extra)))[:120]}")
    properties = schema.get("properties") or {}
    if not isinstance(properties, dict) or len(properties) > MAX_QUESTION_FIELDS:
        raise refuse(f"it needs a properties object of at most {MAX_QUESTION_FIELDS} fields")
    for name, prop in properties.items():
        if reason := _property_problem(repr(str(name)[:64]), prop):
            raise refuse(reason)
    required = schema.get("required") or []
    if not isinstance(required, list) or not all(isinstance(r, str) and r in properties for r in required):
        raise refuse("its required fields are not among its properties")


def _property_problem(label: str, prop: Any) -> str | None:
    """Why one requested field is outside the elicitation subset, or None."""
    kind = prop.get("type") if isinstance(prop, dict) else None
    allowed = _PRIMITIVE_KEYS.get(kind) if isinstance(kind, str) else None
    if allowed is None:
        return f"field {label} is not a string, number, integer or boolean"
    unknown = set(prop) - allowed
    if unknown:
        return f"field {label} uses {', '.join(sorted(map(str, unknown)))[:120]}"
    if len(orjson.dumps(prop)) > 4096:
        return f"field {label} is too large"
    for key in ("minLength", "maxLength"):
        if key in prop and (not isinstance(prop[key], int) or isinstance(prop[key], bool)):
            return f"field {label}: {key} is not an integer"
    for key in ("minimum", "maximum"):
        if key in prop and (not isinstance(prop[key], int | float) or isinstance(prop[key], bool)):
            return f"field {label}: {key} is not a number"
    if "enum" in prop and (
        not isinstance(prop["enum"], list) or not all(isinstance(v, _SCALAR) for v in prop["enum"])
    ):
        return f"field {label}: enum is not a list of values"
    if any(key in prop and not isinstance(prop[key], str) for key in ("title", "description", "format")):
        return f"field {label}: title, description and format are text"
    return None


def _check_answer(content: dict[str, Any], schema: dict[str, Any]) -> None:
    """The answer against a schema ``check_requested_schema`` accepted; UnreadableAnswer says why not."""
    properties: dict[str, Any] = schema.get("properties") or {}
    for name in schema.get("required") or []:
        if name not in content:
            raise UnreadableAnswer(f"{name}: required")
    for name, value in content.items():
        prop = properties.get(name)
        if prop is None:
            raise UnreadableAnswer(f"{str(name)[:64]}: not asked for")
        kind = prop["type"]
        ok = {
            "string": isinstance(value, str),
            "boolean": isinstance(value, bool),
            "integer": isinstance(value, int) and not isinstance(value, bool),
            "number": isinstance(value, int | float) and not isinstance(value, bool),
        }[kind]
        if not ok:
            raise UnreadableAnswer(f"{name}: must be {'an' if kind == 'integer' else 'a'} {kind}")
        if "enum" in prop and value not in prop["enum"]:
            raise UnreadableAnswer(f"{name}: one of {', '.join(map(str, prop['enum']))}")
        if isinstance(value, str):
            if len(value) < prop.get("minLength", 0) or len(value) > prop.get("maxLength", 10_000):
                raise UnreadableAnswer(f"{name}: the length is out of bounds")
        elif kind in ("integer", "number"):
            if value < prop.get("minimum", value) or value > prop.get("maximum", value):
                raise UnreadableAnswer(f"{name}: out of bounds")


def _schema(request: Any) -> dict[str, Any]:
    params = request.get("params", {}) if isinstance(request, dict) else getattr(request, "params", None)
    if isinstance(params, dict):
        schema = params.get("requestedSchema") or {}
    else:
        schema = getattr(params, "requested_schema", None) or {}
    return schema if isinstance(schema, dict) else {}


def _message(request: Any) -> str:
    params = request.get("params", {}) if isinstance(request, dict) else getattr(request, "params", None)
    if isinstance(params, dict):
        return str(params.get("message") or "")
    return str(getattr(params, "message", "") or "")


def describe(request: Any) -> str:
    """The question as the end user reads it: the server's message and the fields it wants."""
    schema = _schema(request)
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    lines = [_message(request)[:MAX_MESSAGE_CHARS] or "The tool needs more information."]
    for name, prop in properties.items():
        if not isinstance(prop, dict):
            continue
        kind = "one of " + ", ".join(map(str, prop["enum"])) if "enum" in prop else prop.get("type", "text")
        extra = [] if name in required else ["optional"]
        if "default" in prop:
            extra.append(f"default {prop['default']}")
        title = prop.get("title") or prop.get("description") or ""
        detail = f" ({'; '.join(extra)})" if extra else ""
        lines.append(f"- {name}: {kind}{detail}{f' — {title}' if title else ''}")
    if len(properties) > 1:
        lines.append('Answer with "name: value" lines (or JSON), or "cancel".')
    return "\n".join(lines)


class UnreadableAnswer(Exception):
    """The reply does not answer the question; ``reason`` says why (it is asked again)."""


_PAIR = re.compile(r"^\s*([A-Za-z_][\w.-]*)\s*[:=]\s*(.*?)\s*$")


def answer_from_reply(text: str, request: dict[str, Any]) -> dict[str, Any]:
    """The ``ElicitResult`` (as JSON) the end user's reply gives; UnreadableAnswer if none."""
    schema = _schema(request)
    properties: dict[str, Any] = schema.get("properties") or {}
    if normalize(text) in _DECLINE and not _wants_free_text(properties):
        return {"action": "decline"}
    content = _content(text, properties)
    for name, prop in properties.items():
        if name not in content and isinstance(prop, dict) and "default" in prop:
            content[name] = prop["default"]
    _check_answer(content, schema)
    return {"action": "accept", "content": content}


def _wants_free_text(properties: dict[str, Any]) -> bool:
    return len(properties) == 1 and next(iter(properties.values()), {}).get("type") == "string"


def _content(text: str, properties: dict[str, Any]) -> dict[str, Any]:
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            value = orjson.loads(stripped)
        except orjson.JSONDecodeError:
            raise UnreadableAnswer("the answer is not valid JSON") from None
        if not isinstance(value, dict):
            raise UnreadableAnswer("the answer must be an object")
        return value
    pairs = [_PAIR.match(line) for line in stripped.splitlines() if line.strip()]
    if pairs and all(pairs) and all(m.group(1) in properties for m in pairs if m):
        return {m.group(1): _coerce(m.group(2), properties[m.group(1)]) for m in pairs if m}
    if len(properties) == 1:
        name, prop = next(iter(properties.items()))
        return {name: _coerce(stripped, prop)}
    raise UnreadableAnswer('answer with "name: value" lines, one per field')


def _coerce(value: str, prop: Any) -> Any:
    kind = prop.get("type") if isinstance(prop, dict) else None
    if kind == "boolean":
        reply = classify_reply(value)
        if reply is ReplyKind.AMBIGUOUS:
            raise UnreadableAnswer("answer yes or no")
        return reply is ReplyKind.YES
    if kind in ("integer", "number"):
        try:
            number = float(value.replace(",", "."))
        except ValueError:
            raise UnreadableAnswer(f"{value!r} is not a number") from None
        return int(number) if kind == "integer" and number.is_integer() else number
    return value
