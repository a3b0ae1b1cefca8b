"""Response items three ways: engine items ⇄ stored records ⇄ the Responses wire shapes.

A stored record is the canonical item as a dict (``message``, ``function_call``,
``function_call_output``) with its item id. Calls the gateway executed itself (MCP tools, the
hosted ``spawn_subagent``) are stored as a ``function_call`` + ``function_call_output`` pair
marked ``hosted``, so a chain always replays every call with its output; on the wire the pair is
one ``mcp_call`` item, because a client or SDK that saw a ``function_call`` would try to run it.
"""

from __future__ import annotations

from typing import Any

import orjson

from hatchway.engine.compaction import SUMMARY_PREFIX
from hatchway.engine.items import FunctionCall, FunctionCallOutput, Item, Message
from hatchway.engine.tools.base import ToolResult
from hatchway.engine.tools.payloads import is_error_body
from hatchway.ids import new_id

HOSTED_SERVER_LABEL = "hatchway"


# -- engine ⇄ stored -----------------------------------------------------------------------------


def record_of(item: Item, *, hosted: bool = False, result: ToolResult | None = None) -> dict[str, Any]:
    """The stored record of one engine item (assigning an id when it has none)."""
    if isinstance(item, Message):
        item.id = item.id or new_id("msg")
        return {"type": "message", "id": item.id, "role": item.role, "content": item.content}
    if isinstance(item, FunctionCall):
        item.id = item.id or new_id("mcp" if hosted else "fc")
        record: dict[str, Any] = {
            "type": "function_call",
            "id": item.id,
            "call_id": item.call_id,
            "name": item.name,
            "arguments": item.arguments,
        }
        if hosted:
            server = (result.meta.get("server") if result is not None else None) or HOSTED_SERVER_LABEL
            record.update(hosted=True, server_label=str(server))
        return record
    item.id = item.id or new_id("fco")
    output: dict[str, Any] = {
        "type": "function_call_output",
        "id": item.id,
        "call_id": item.call_id,
        "output": item.output,
    }
    if hosted:
        output.update(
            hosted=True, is_error=result.is_error if result is not None else is_error_body(item.output)
        )
    return output


def item_of(record: dict[str, Any]) -> Item:
    """The engine item of one stored record."""
    kind = record["type"]
    if kind == "message":
        return Message(role=record["role"], content=record["content"], id=record["id"])
    if kind == "compaction":  # opened when it arrived (see responses/compaction.py)
        summary, tainted_by = SUMMARY_PREFIX + record["summary"], tuple(record.get("tainted_by") or ())
        return Message(role="system", content=summary, id=record["id"], tainted_by=tainted_by)
    if kind == "function_call":
        name = record.get("model_name") or record["name"]  # a namespaced call: the name the model saw
        return FunctionCall(
            call_id=record["call_id"], name=name, arguments=record["arguments"], id=record["id"]
        )
    return FunctionCallOutput(call_id=record["call_id"], output=record["output"], id=record["id"])


def output_records(
    new_items: list[Item], hosted_call_ids: set[str], results: dict[str, ToolResult]
) -> list[dict[str, Any]]:
    """Stored records of what one run appended, marking the calls the gateway ran."""
    records = []
    for item in new_items:
        call_id = getattr(item, "call_id", None)
        hosted = call_id is not None and call_id in hosted_call_ids
        records.append(record_of(item, hosted=hosted, result=results.get(call_id) if call_id else None))
    return records


def pending_client_calls(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Client function calls in ``records`` that have no output yet, by call_id."""
    pending: dict[str, dict[str, Any]] = {}
    for record in records:
        if record["type"] == "function_call" and not record.get("hosted"):
            pending[record["call_id"]] = record
        elif record["type"] == "function_call_output":
            pending.pop(record["call_id"], None)
    return pending


# -- stored → wire -------------------------------------------------------------------------------


def message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(str(p.get("text") or p.get("refusal") or "") for p in content if isinstance(p, dict))


def wire_message(record: dict[str, Any]) -> dict[str, Any]:
    if record["role"] == "assistant":
        part = {
            "type": "output_text",
            "text": message_text(record["content"]),
            "annotations": [],
            "logprobs": [],
        }
        return {
            "id": record["id"],
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [part],
        }
    content = record["content"]
    parts = [{"type": "input_text", "text": content}] if isinstance(content, str) else content
    return {
        "id": record["id"],
        "type": "message",
        "role": record["role"],
        "status": "completed",
        "content": parts,
    }


def wire_function_call(record: dict[str, Any], status: str = "completed") -> dict[str, Any]:
    item = {
        "id": record["id"],
        "type": "function_call",
        "call_id": record["call_id"],
        "name": record["name"],
        "arguments": record["arguments"],
        "status": status,
    }
    if record.get("namespace"):
        item["namespace"] = record["namespace"]
    return item


def split_namespaced(records: list[dict[str, Any]], namespaced: dict[str, tuple[str, str]]) -> None:
    """Give the client's calls of namespaced tools their ``namespace`` and own ``name`` back (the
    model called ``<namespace>__<name>``, kept as ``model_name`` for the chain's replay)."""
    for record in records:
        if record["type"] == "function_call" and not record.get("hosted") and record["name"] in namespaced:
            namespace, name = namespaced[record["name"]]
            record.update(model_name=record["name"], namespace=namespace, name=name)


def wire_mcp_call(call: dict[str, Any], output: dict[str, Any] | None) -> dict[str, Any]:
    """A hosted call and its output as one ``mcp_call`` item."""
    item: dict[str, Any] = {
        "id": call["id"],
        "type": "mcp_call",
        "name": call["name"],
        "arguments": call["arguments"],
        "server_label": call.get("server_label") or HOSTED_SERVER_LABEL,
        "output": None,
        "error": None,
        "status": "in_progress",
    }
    if output is None:
        return item
    item["output"] = output["output"]
    if output.get("is_error"):
        item["status"] = "failed"
        item["error"] = {"type": "mcp_tool_execution_error", "content": _json_or_text(output["output"])}
    else:
        item["status"] = "completed"
    return item


def _json_or_text(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def wire_items(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stored records as Responses items; hosted call/output pairs become ``mcp_call`` items."""
    hosted_outputs = {
        r["call_id"]: r for r in records if r["type"] == "function_call_output" and r.get("hosted")
    }
    out: list[dict[str, Any]] = []
    for record in records:
        kind = record["type"]
        if kind == "message":
            out.append(wire_message(record))
        elif kind == "compaction":
            out.append(
                {"id": record["id"], "type": "compaction", "encrypted_content": record["encrypted_content"]}
            )
        elif kind == "function_call" and record.get("hosted"):
            out.append(wire_mcp_call(record, hosted_outputs.get(record["call_id"])))
        elif kind == "function_call":
            out.append(wire_function_call(record))
        elif not record.get("hosted"):
            out.append(
                {
                    "id": record["id"],
                    "type": "function_call_output",
                    "call_id": record["call_id"],
                    "output": record["output"],
                    "status": "completed",
                }
            )
    return out


def output_text(records: list[dict[str, Any]]) -> str:
    """The assistant text of an output, as the SDK's ``output_text`` computes it."""
    return "".join(
        message_text(r["content"]) for r in records if r["type"] == "message" and r["role"] == "assistant"
    )
