"""Compacting a conversation: the user's messages stay, everything else becomes one model-written summary.

``POST /v1/responses/compact`` returns the user messages followed by one ``compaction`` item; the
summary inside it is sealed with the organisation's vault data key (opaque and tamper-evident to
the client, unreadable by any other organisation), and opened again when the item comes back as
input, where the model reads it as a system message.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from hatchway.engine.items import FunctionCall, FunctionCallOutput, Item, Message, Usage
from hatchway.engine.providers.base import ModelRequest
from hatchway.engine.providers.routing import ResolvedModel

COMPACTION_PURPOSE = "responses-compaction"
SUMMARY_PREFIX = "Summary of the earlier conversation (compacted):\n"
_INSTRUCTIONS = (
    "You compact a conversation between a user and an assistant so it can continue in a smaller "
    "context. Write a concise summary of everything that is not one of the user's own messages: what "
    "the assistant said and decided, every tool call with its arguments and result, facts learnt and "
    "open tasks. Keep names, numbers and identifiers exactly. Answer with the summary only."
)


@dataclass(frozen=True, slots=True)
class Compaction:
    summary: str
    usage: Usage


def transcript(items: list[Item]) -> str:
    """The conversation as plain text for the summariser, one entry per item."""
    lines = []
    for item in items:
        if isinstance(item, Message):
            lines.append(f"[{item.role}] {item.text}")
        elif isinstance(item, FunctionCall):
            lines.append(f"[tool call {item.call_id}] {item.name}({item.arguments})")
        elif isinstance(item, FunctionCallOutput):
            lines.append(f"[tool result {item.call_id}] {item.output}")
    return "\n".join(lines)


async def summarise(model: ResolvedModel, items: list[Item], instructions: str | None = None) -> Compaction:
    """Ask the model for the summary that replaces ``items`` (ProviderError when it cannot)."""
    prompt = [Message(role="system", content=_INSTRUCTIONS)]
    if instructions:
        prompt.append(Message(role="system", content=f"The assistant's instructions were:\n{instructions}"))
    prompt.append(Message(role="user", content=transcript(items)))
    response = await model.provider.request(ModelRequest(model=model.upstream_model, items=prompt))
    return Compaction(summary=(response.text or "").strip(), usage=response.usage)


def sealed_payload(summary: str, tainted_by: list[str] | None = None) -> bytes:
    """What a compaction item seals: the summary, and the tools whose output it summarises (the
    taint travels with the summary: a run given it back reads untrusted output in other words)."""
    return orjson.dumps({"v": 1, "summary": summary, "tainted_by": tainted_by or []})


def opened_summary(payload: bytes) -> tuple[str, list[str]]:
    """The summary and the tools whose output it summarises (none in an item sealed before v0.x)."""
    data = orjson.loads(payload)
    tainted = data.get("tainted_by")
    return str(data["summary"]), [str(t) for t in tainted] if isinstance(tainted, list) else []
