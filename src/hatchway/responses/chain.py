"""A response's place in a chain: the stored conversation before it, and what its input must answer.

``previous_response_id`` continues a stored chain (its input and output items, oldest first). A new
input must answer every client function call the previous response left pending, and only those;
a hosted call that never ran (the run ended first) is given an output so the chain replays validly.
"""

from __future__ import annotations

from typing import Any

from hatchway.engine.items import FunctionCallOutput, Item
from hatchway.engine.tools.payloads import error_body
from hatchway.errors import InvalidRequest, NotFound
from hatchway.responses.items import pending_client_calls
from hatchway.responses.store import ACTIVE, ResponseStore


def previous_not_found(response_id: str) -> NotFound:
    """What both ``/v1/responses`` and ``/compact`` answer for an unknown ``previous_response_id``."""
    return NotFound(
        f"Previous response with id '{response_id}' not found.",
        param="previous_response_id",
        code="previous_response_not_found",
    )


async def stored_conversation(
    store: ResponseStore, org_id: str, previous_response_id: str | None, *, finished: bool = False
) -> tuple[list[dict[str, Any]], str | None]:
    """The stored chain ending at ``previous_response_id`` (none without one) and the id of its first
    response (the conversation's key). With ``finished``, a chain whose last response still runs is
    refused: a continuation waits for it to end."""
    if not previous_response_id:
        return [], None
    try:
        chain = await store.chain(org_id, previous_response_id)
    except NotFound:
        raise previous_not_found(previous_response_id) from None
    previous = chain[-1]
    if finished and previous.status in ACTIVE:
        raise InvalidRequest(
            f"previous_response_id: response '{previous.id}' is still {previous.status}; "
            "wait until it ends before continuing the chain",
            param="previous_response_id",
        )
    return await store.conversation(chain), chain[0].id


def check_call_outputs(history: list[dict[str, Any]], input_records: list[dict[str, Any]]) -> None:
    """Every function_call_output answers a pending call, and no pending call is left unanswered."""
    pending = pending_client_calls(history)
    from_previous = set(pending)
    for record in input_records:
        if record["type"] == "function_call" and not record.get("hosted"):
            pending[record["call_id"]] = record
        elif record["type"] == "function_call_output" and not record.get("hosted"):
            if record["call_id"] not in pending:
                raise InvalidRequest(
                    f"input: no pending function call with call_id '{record['call_id']}' "
                    "(it must match a function_call of the previous response or of this input)",
                    param="input",
                    code="invalid_call_id",
                )
            pending.pop(record["call_id"])
    missing = [call_id for call_id in pending if call_id in from_previous]
    if missing:
        raise InvalidRequest(
            f"input: no function_call_output for call_id '{missing[0]}' of the previous response; "
            "send one for every function_call it returned",
            param="input",
            code="missing_call_output",
        )


def close_unanswered(new_items: list[Item], hosted: set[str]) -> None:
    """Give a hosted call that never ran (max_rounds) an output, so a chain replays validly."""
    answered = {i.call_id for i in new_items if isinstance(i, FunctionCallOutput)}
    for call_id in [c for c in hosted if c not in answered]:
        output = error_body("not_run", "The run ended before this tool call ran.")
        new_items.append(FunctionCallOutput(call_id=call_id, output=output))


async def resolve_references(
    store: ResponseStore, org_id: str, records: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """``item_reference`` input items replaced by the stored items they name (the Vercel AI SDK
    replays a stored conversation so): the organisation's own items only; a hosted call (``mcp_…``)
    expands to the call and its output. An id not found is a 400 naming the input item."""
    wanted = [r["id"] for r in records if r["type"] == "item_reference"]
    if not wanted:
        return records
    found = await store.items_by_id(org_id, wanted)
    out: list[dict[str, Any]] = []
    for record in records:
        if record["type"] != "item_reference":
            out.append(record)
            continue
        stored = found.get(record["id"])
        if stored is None:
            path = record["path"]
            raise InvalidRequest(
                f"{path}.id: no stored item with id '{record['id']}' in this organisation",
                param=f"{path}.id",
                code="item_not_found",
            )
        out.extend(dict(r) for r in stored)
    return out
