"""Compaction items: a shorter conversation window to continue from (``POST /v1/responses/compact``).

The window keeps every user message and replaces the rest with one ``compaction`` item whose
``encrypted_content`` holds a model-written summary sealed with the organisation's vault data key.
Sent back as input (to ``/v1/responses``, over HTTP or WebSocket), the item is opened
(``open_compactions``) and the model reads the summary as a system message. The summariser itself
is ``engine/compaction.py``.
"""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Callable
from typing import Any

from hatchway.engine.compaction import COMPACTION_PURPOSE, opened_summary, sealed_payload, summarise
from hatchway.engine.items import output_sources
from hatchway.engine.loop import RunResult
from hatchway.engine.providers.routing import ResolvedModel
from hatchway.engine.run_log import ModelCallStep, StepTokens
from hatchway.errors import DecryptionError, InvalidRequest
from hatchway.ids import new_id
from hatchway.responses.items import item_of, wire_message
from hatchway.responses.wire import usage_object
from hatchway.vault import Vault


async def open_compactions(vault: Vault, org_id: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Give each compaction record its summary; 400 naming the item when it cannot be opened."""
    opened = []
    for i, record in enumerate(records):
        if record["type"] == "compaction" and "summary" not in record:
            try:
                blob = base64.urlsafe_b64decode(record["encrypted_content"].encode())
                payload = await vault.open_blob(org_id, blob, purpose=COMPACTION_PURPOSE)
                summary, tainted_by = opened_summary(payload)
                record = {**record, "summary": summary, "tainted_by": tainted_by}
            except (binascii.Error, ValueError, DecryptionError):
                raise InvalidRequest(
                    f"input[{i}].encrypted_content: this compaction item was not made for this organisation "
                    "by this gateway, or it was altered",
                    param=f"input[{i}].encrypted_content",
                    code="invalid_encrypted_content",
                ) from None
        opened.append(record)
    return opened


async def compact(
    vault: Vault,
    org_id: str,
    model: Callable[[], ResolvedModel],
    records: list[dict[str, Any]],
    instructions: str | None,
) -> tuple[dict[str, Any], RunResult]:
    """The compacted window of ``records`` (opened), and what the run log records of it (the
    summariser's call and usage). ``model`` is resolved only when there is something to summarise."""
    users = [r for r in records if r["type"] == "message" and r["role"] == "user"]
    rest = [r for r in records if not (r["type"] == "message" and r["role"] == "user")]
    summary, result = "", RunResult()
    summarised = [item_of(r) for r in rest]
    if rest:
        started, started_at = time.monotonic(), time.time()
        compaction = await summarise(model(), summarised, instructions)
        summary = compaction.summary
        result.rounds = 1
        result.usage.add(compaction.usage)
        result.steps.append(
            ModelCallStep(
                round=1,
                started_at_ms=round(started_at * 1000, 1),
                duration_ms=round((time.monotonic() - started) * 1000, 3),
                tokens=StepTokens.of(compaction.usage),
            )
        )
    sealed = await vault.seal_blob(
        org_id, sealed_payload(summary, output_sources(summarised)), purpose=COMPACTION_PURPOSE
    )
    item = {"id": new_id("cmp"), "type": "compaction", "encrypted_content": _encode(sealed)}
    payload = {
        "id": new_id("cmpresp"),
        "object": "response.compaction",
        "created_at": int(time.time()),
        "output": [*(wire_message(u) for u in users), item],
        "usage": usage_object(result.usage),
    }
    return payload, result


def _encode(blob: bytes) -> str:
    return base64.urlsafe_b64encode(blob).decode("ascii")
