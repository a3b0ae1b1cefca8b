"""Background responses through the job queue (``redis_url`` set): what is stored, and the enqueue.

A background response that is not streamed goes to the queue: its request is stored with it (see
``store/response_jobs.py``) and the job names only the organisation and the response. A streamed
background response (``background`` and ``stream``) keeps running on the replica that accepted it,
whose client is following its live events; its lease rule applies as without Redis.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import orjson

from hatchway.api.responses_wire import CreateResponseRequest
from hatchway.engine.context import RunContext
from hatchway.engine.tools.mcp.forwarding import NEVER_FORWARDED
from hatchway.errors import Unavailable
from hatchway.gateway import Gateway
from hatchway.store.response_jobs import ResponseJobRecord
from hatchway.store.responses import Outcome

if TYPE_CHECKING:
    from hatchway.api.responses_runs import ResponseRun

logger = logging.getLogger(__name__)
ENQUEUE_FAILED = "The job queue (Redis) could not take this background response; create it again."


def headers_purpose(response_id: str) -> str:
    """What the sealed headers of a queued response are bound to (they open for it alone)."""
    return f"response_job:{response_id}"


async def queued_job(gw: Gateway, body: CreateResponseRequest, ctx: RunContext) -> ResponseJobRecord | None:
    """The stored request of a background response bound for the queue; None when it runs here."""
    if gw.jobs is None or not body.background or body.stream:
        return None
    assert ctx.response_id is not None
    # Credentials of the caller (the Hatchway key, cookies) and framing headers are never kept.
    headers = {k: v for k, v in ctx.request_headers.items() if k not in NEVER_FORWARDED}
    sealed = await gw.vault.seal_blob(
        ctx.org_id, orjson.dumps(headers), purpose=headers_purpose(ctx.response_id)
    )
    return ResponseJobRecord(
        response_id=ctx.response_id,
        body=body.model_dump(mode="json", by_alias=True, exclude={"input"}, exclude_none=True),
        key_id=ctx.principal.key_id,
        key_name=ctx.principal.key_name,
        sealed_headers=sealed,
    )


async def enqueue(gw: Gateway, run: ResponseRun) -> None:
    """Put a stored, queued response on the queue; if Redis refuses, fail it (never left queued)."""
    assert gw.jobs is not None
    try:
        await gw.jobs.enqueue(run.record.org_id, run.record.id)
    except Exception as exc:
        logger.error("could not enqueue background response %s: %s", run.record.id, type(exc).__name__)
        error = {"code": "server_error", "message": ENQUEUE_FAILED, "type": "unavailable"}
        await gw.responses.finish(run.record.id, Outcome(status="failed", output=[], error=error))
        gw.log_writer.submit(run.trace.to_record(http_status=503, error=ENQUEUE_FAILED))
        raise Unavailable(ENQUEUE_FAILED) from None


async def abort(gw: Gateway, response_id: str) -> None:
    """Tell the queue a response was cancelled: off the queue, or its worker stops within a second.

    Best effort: the response row already says ``cancelled`` (the truth), and the worker also sees
    it at its next lease renewal.
    """
    if gw.jobs is None:
        return
    try:
        await gw.jobs.abort(response_id)
    except Exception as exc:
        logger.warning(
            "could not abort the job of %s (%s); its lease renewal will stop it",
            response_id,
            type(exc).__name__,
        )
