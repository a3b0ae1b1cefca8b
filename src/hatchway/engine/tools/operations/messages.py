"""What operations say: the confirmation question for the user, compact summaries for the model."""

from __future__ import annotations

from typing import Any

import orjson

from hatchway.engine.items import FunctionCall, FunctionCallOutput, Item
from hatchway.engine.tools.operations.models import OperationRecord, OperationStatus
from hatchway.engine.tools.operations.prevalidation import ValidatorAnswer

_MAX_LISTED = 50


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def describe_item(item: Any) -> str:
    """``{"name": "Produto A", "id": "1001"}`` → ``Produto A (1001)``."""
    if not isinstance(item, dict):
        return str(item)
    name, ident = item.get("name"), item.get("id")
    if name is not None and ident is not None and str(ident) != str(name):
        return f"{name} ({ident})"
    return str(name if name is not None else ident if ident is not None else _dumps(item))


def write_confirmation_message(
    tool: str, description: str, arguments: dict[str, Any], answer: ValidatorAnswer | None
) -> str:
    """The question the user answers when the validator did not write one: every item listed."""
    listed = _listed_items(arguments)
    action = description.strip().rstrip(".") or tool
    lines = [f"Please confirm: {action} ({tool})."]
    if listed:
        lines.append(f"{len(listed)} item(s):")
        lines += [f"- {describe_item(i)}" for i in listed[:_MAX_LISTED]]
        if len(listed) > _MAX_LISTED:
            lines.append(f"- … and {len(listed) - _MAX_LISTED} more")
    else:
        lines += [f"- {name}: {_scalar(value)}" for name, value in arguments.items()]
    skipped = [i for i in (answer.items if answer else []) if i.get("eligible") is False]
    if skipped:
        lines.append("Not included:")
        lines += [f"- {describe_item(i)}: {i.get('reason', 'not eligible')}" for i in skipped]
    lines.append("Reply yes to go ahead or no to cancel.")
    return "\n".join(lines)


def _listed_items(arguments: dict[str, Any]) -> list[Any]:
    for key in ("items", "ids"):
        if isinstance(arguments.get(key), list):
            return list(arguments[key])
    lists = [v for v in arguments.values() if isinstance(v, list)]
    return list(lists[0]) if len(lists) == 1 else []


def _scalar(value: Any) -> str:
    return value if isinstance(value, str) else _dumps(value)


def missing_arguments_output(
    tool: str, missing: list[str], labels: dict[str, str], prompt: str | None
) -> str:
    """What the model reads when required arguments are missing: ask the user, nothing ran."""
    named = ", ".join(f"{m} ({labels[m]})" if labels.get(m) else m for m in missing)
    message = f"Not executed: {tool} needs {named}. Ask the user for it, then call {tool} again."
    if prompt:
        message += f" Suggested question: {prompt}"
    return _dumps({"error": {"code": "missing_arguments", "message": message, "missing": missing}})


def operation_output(op: OperationRecord, **extra: Any) -> str:
    """The compact per-item summary of an operation the model reads."""
    body: dict[str, Any] = {"operation_id": op.id, "tool": op.tool, "status": op.status}
    if op.status_reason:
        body["reason"] = op.status_reason
    verdict = op.verdict or {}
    if verdict:
        body["verdict"] = verdict.get("status")
        body["items"] = [_compact_item(i) for i in op.items or []]
        body["multi_item"] = verdict.get("multi_item")
        if verdict.get("secondary_error") is not None:
            body["secondary_error"] = verdict["secondary_error"]
    if op.error:
        body["error"] = op.error
    if op.confirmed_via == "approval":
        body["approved_by"] = op.confirmed_by
    body["instructions"] = _instructions(op)
    body.update(extra)
    return _dumps(body)


def operation_summary(op: OperationRecord) -> dict[str, Any]:
    """The operation as an MCP client reads it (a call's ``structuredContent``): status, verdict and
    per-item ``results[]`` in full, where ``operation_output`` gives the model a compact summary."""
    verdict = op.verdict or {}
    body: dict[str, Any] = {
        "operation_id": op.id,
        "tool": op.tool,
        "status": op.status,
        "verdict": verdict.get("status"),
        "results": op.items or [],
    }
    if op.status_reason:
        body["reason"] = op.status_reason
    if op.error:
        body["error"] = op.error
    return body


def _compact_item(item: dict[str, Any]) -> dict[str, Any]:
    return {k: item[k] for k in ("name", "id", "success", "outcome", "error") if k in item}


def _instructions(op: OperationRecord) -> str:
    status = op.state
    if status is OperationStatus.COMPLETED:
        return "Tell the user the outcome of every item, successes and failures alike."
    if status is OperationStatus.AWAITING_CONFIRMATION:
        return "The user has been asked to confirm; nothing has been executed yet."
    if status is OperationStatus.AWAITING_APPROVAL:
        return (
            "It awaits approval by people other than the user; nothing has been executed yet. Tell "
            "the user it was sent for approval; do not call it again."
        )
    if status is OperationStatus.INTERRUPTED:
        return "The outcome is unknown and it will not be retried automatically; tell the user so."
    return "Nothing was executed; tell the user why."


def preamble_items(op: OperationRecord) -> list[Item]:
    """The operation as a call and its output, for the model's next turn (after a yes/no reply).

    The call id is the operation's own, not the model's first call's: in a Responses chain that
    first call is already in the history, and call ids must stay unique in a conversation.
    """
    call_id = f"call_{op.id}"
    arguments = op.resolved_arguments if op.resolved_arguments is not None else op.arguments
    return [
        FunctionCall(call_id=call_id, name=op.tool, arguments=_dumps(arguments)),
        FunctionCallOutput(call_id=call_id, output=operation_output(op)),
    ]


def repeat_note(earlier: OperationRecord, seconds_ago: float) -> str:
    """What a question adds when its operation would do again what ``earlier`` did moments ago."""
    outcome = (earlier.verdict or {}).get("status") or earlier.status
    return (
        f"\n\n(This repeats operation {earlier.id}, confirmed {_ago(seconds_ago)} ago ({outcome}). "
        "Reply yes only if it must be done again.)"
    )


def decided_answer(op: OperationRecord, still_open: OperationRecord | None = None) -> str:
    """The gateway's answer to a reply whose question was decided already (a duplicate "yes": a
    double click, a client's retry, a second tab): what became of that operation, never a second
    execution; then the question of the conversation's open operation, if there is one."""
    lines = [_decided_line(op)]
    for item in (op.items or [])[:_MAX_LISTED]:
        if isinstance(item, dict):
            failed = "" if item.get("success") else f": failed ({item.get('error') or 'no reason given'})"
            lines.append(f"- {describe_item(item)}{': done' if item.get('success') else failed}")
    text = "\n".join(lines)
    if still_open is not None and still_open.id != op.id and still_open.confirmation_message:
        text += "\n\n" + still_open.confirmation_message
    return text


def _decided_line(op: OperationRecord) -> str:
    head = f"Operation {op.id} ({op.tool})"
    status = op.state
    if status is OperationStatus.EXECUTING:
        return (
            f"{head} was confirmed already and is still executing; it runs once. "
            f"Its outcome: GET /v1/operations/{op.id}."
        )
    if status is OperationStatus.AWAITING_APPROVAL:
        return f"{head} awaits approval and has not run; its outcome follows once it is decided."
    if op.confirmed_at is None:
        return f"{head} was not executed: {op.status}{f' ({op.status_reason})' if op.status_reason else ''}."
    verdict = (op.verdict or {}).get("status")
    ended = f"{op.status}, {verdict}" if verdict else op.status
    reason = f" ({op.status_reason})" if op.status_reason and not verdict else ""
    return f"{head} was confirmed already and executed once: {ended}{reason}."


def _ago(seconds: float) -> str:
    seconds = max(int(seconds), 0)
    return f"{seconds} s" if seconds < 120 else f"{seconds // 60} min"
