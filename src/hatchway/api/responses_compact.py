"""``POST /v1/responses/compact``: a shorter conversation window to continue from.

The answer keeps every user message and replaces the rest with one ``compaction`` item whose
``encrypted_content`` holds a model-written summary sealed with the organisation's vault data key.
Sent back as input (to ``/v1/responses``, over HTTP or WebSocket), the item is opened and the
model reads the summary as a system message. See ``engine/compaction.py``.
"""

from __future__ import annotations

import base64
import binascii
import time
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, model_validator
from starlette.responses import Response

from hatchway.api.auth import authenticate, gateway_of
from hatchway.api.context import run_context
from hatchway.api.errors import parse_json_body, validate_body
from hatchway.api.responses_items import item_of, wire_message
from hatchway.api.responses_wire import parse_input
from hatchway.engine.compaction import COMPACTION_PURPOSE, opened_summary, sealed_payload, summarise
from hatchway.engine.context import Principal
from hatchway.engine.items import Usage
from hatchway.engine.loop import RunResult
from hatchway.errors import DecryptionError, HatchwayError, InvalidRequest, NotFound
from hatchway.gateway import Gateway
from hatchway.ids import new_id
from hatchway.observability.runlog import RequestTrace

router = APIRouter()
_ACCEPTED_AND_IGNORED = {
    "prompt_cache_key",
    "prompt_cache_retention",
    "prompt_cache_options",
    "service_tier",
    "image",
}


class CompactRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: Annotated[str, Field(min_length=1)]
    input: str | Annotated[list[Any], Field(max_length=2048)] = ""
    instructions: str | None = None
    previous_response_id: Annotated[str, Field(min_length=1, max_length=64)] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> CompactRequest:
        unknown = sorted(set(self.model_extra or {}) - _ACCEPTED_AND_IGNORED)
        if unknown:
            raise ValueError(f"{unknown[0]}: unsupported parameter")
        if not self.input and not self.previous_response_id:
            raise ValueError("input: give the conversation to compact, or previous_response_id")
        return self


@router.post("/v1/responses/compact")
async def compact_response(
    request: Request, principal: Annotated[Principal, Depends(authenticate)]
) -> Response:
    gw = gateway_of(request)
    ctx = run_context(request, principal, gw.settings.loop_deadline_seconds)
    trace = RequestTrace("responses.compact", ctx)
    try:
        body = validate_body(CompactRequest, parse_json_body(await request.body()))
        trace.model = body.model
        payload, result = await _compact(gw, principal.org_id, body)
    except HatchwayError as exc:
        gw.log_writer.submit(trace.to_record(http_status=exc.status_code, error=exc.message))
        raise
    gw.log_writer.submit(trace.to_record(http_status=200, result=result))
    return Response(
        orjson.dumps(payload),
        media_type="application/json",
        headers={"x-hatchway-request-id": trace.log_id},
    )


async def _compact(gw: Gateway, org_id: str, body: CompactRequest) -> tuple[dict[str, Any], RunResult]:
    """The compacted window, and what the run log records of it (the summariser's call and usage)."""
    history = await stored_conversation(gw, org_id, body.previous_response_id)
    records = await open_compactions(gw, org_id, [*history, *parse_input(body.input)])
    users = [r for r in records if r["type"] == "message" and r["role"] == "user"]
    rest = [r for r in records if not (r["type"] == "message" and r["role"] == "user")]
    summary, result = "", RunResult()
    if rest:
        agent = gw.agent(body.model)
        started, started_at = time.monotonic(), time.time()
        compaction = await summarise(
            gw.models.resolve(agent.model if agent else body.model),
            [item_of(r) for r in rest],
            body.instructions,
        )
        summary = compaction.summary
        result.rounds = 1
        result.usage.add(compaction.usage)
        result.steps.append(
            {
                "type": "model_call",
                "round": 1,
                "started_at_ms": round(started_at * 1000, 1),
                "duration_ms": round((time.monotonic() - started) * 1000, 3),
                "outcome": "ok",
                "prompt_tokens": compaction.usage.prompt_tokens,
                "completion_tokens": compaction.usage.completion_tokens,
            }
        )
    sealed = await gw.vault.seal_blob(org_id, sealed_payload(summary), purpose=COMPACTION_PURPOSE)
    item = {"id": new_id("cmp"), "type": "compaction", "encrypted_content": _encode(sealed)}
    payload = {
        "id": new_id("cmpresp"),
        "object": "response.compaction",
        "created_at": int(time.time()),
        "output": [*(wire_message(u) for u in users), item],
        "usage": _usage(result.usage),
    }
    return payload, result


async def stored_conversation(
    gw: Gateway, org_id: str, previous_response_id: str | None
) -> list[dict[str, Any]]:
    """The stored chain ending at ``previous_response_id`` (none without one)."""
    if not previous_response_id:
        return []
    try:
        chain = await gw.responses.chain(org_id, previous_response_id)
    except NotFound:
        raise previous_not_found(previous_response_id) from None
    return await gw.responses.conversation(chain)


def previous_not_found(response_id: str) -> NotFound:
    """What both ``/v1/responses`` and ``/compact`` answer for an unknown ``previous_response_id``."""
    return NotFound(
        f"Previous response with id '{response_id}' not found.",
        param="previous_response_id",
        code="previous_response_not_found",
    )


async def open_compactions(gw: Gateway, org_id: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Give each compaction record its summary; 400 naming the item when it cannot be opened."""
    opened = []
    for i, record in enumerate(records):
        if record["type"] == "compaction" and "summary" not in record:
            try:
                blob = base64.urlsafe_b64decode(record["encrypted_content"].encode())
                payload = await gw.vault.open_blob(org_id, blob, purpose=COMPACTION_PURPOSE)
                record = {**record, "summary": opened_summary(payload)}
            except (binascii.Error, ValueError, DecryptionError):
                raise InvalidRequest(
                    f"input[{i}].encrypted_content: this compaction item was not made for this organisation "
                    "by this gateway, or it was altered",
                    param=f"input[{i}].encrypted_content",
                    code="invalid_encrypted_content",
                ) from None
        opened.append(record)
    return opened


def _encode(blob: bytes) -> str:
    return base64.urlsafe_b64encode(blob).decode("ascii")


def _usage(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.total_tokens,
    }
