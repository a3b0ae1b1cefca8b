"""``POST /v1/responses/compact``: a shorter conversation window to continue from.

What a compaction item is and how it is made: ``responses/compaction.py``.
"""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, model_validator
from starlette.responses import Response

from hatchway.access.roles import check_model
from hatchway.api.auth import authenticate, gateway_of
from hatchway.api.context import admit_run, run_context
from hatchway.api.errors import parse_json_body, validate_body
from hatchway.principal import Principal
from hatchway.responses.chain import stored_conversation
from hatchway.responses.compaction import compact, open_compactions
from hatchway.responses.wire import document_extras, parse_input

router = APIRouter()
_ACCEPTED_AND_IGNORED = {
    "prompt_cache_key",
    "prompt_cache_retention",
    "prompt_cache_options",
    "service_tier",
    "image",
}


_INPUT_OR_PREVIOUS = {  # what _consistent checks, in the served OpenAPI document
    "anyOf": [
        {"required": ["input"], "properties": {"input": {"minLength": 1, "minItems": 1}}},
        {"required": ["previous_response_id"], "properties": {"previous_response_id": {"type": "string"}}},
    ]
}


class CompactRequest(BaseModel):
    model_config = ConfigDict(
        extra="allow",
        json_schema_extra=lambda s: document_extras(s, _INPUT_OR_PREVIOUS, _ACCEPTED_AND_IGNORED),
    )

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
    async with gw.scopes.open("responses.compact", ctx) as scope:
        raw = await request.body()
        body = validate_body(CompactRequest, parse_json_body(raw))
        scope.model = body.model
        check_model(principal, body.model)  # the summariser is a model call like any other
        await admit_run(scope, body.model, None, len(raw))
        org_id = principal.org_id
        history, _ = await stored_conversation(gw.responses.store, org_id, body.previous_response_id)
        records = await open_compactions(gw.vault, org_id, [*history, *parse_input(body.input)])
        model = lambda: gw.planner.target(body.model).model  # noqa: E731 - resolved only to summarise
        payload, result = await compact(gw.vault, org_id, model, records, body.instructions)
        # The summariser's call is the run's: its record's usage, and what its hold settles.
        ctx.run.usage.add(result.usage)
        ctx.run.cost_usd += result.usage.cost_usd
        scope.end(200, result)
        await scope.settle()
    # Its record's id (x-hatchway-request-id) is added by ErrorMiddleware, as on every run's answer.
    return Response(orjson.dumps(payload), media_type="application/json")
