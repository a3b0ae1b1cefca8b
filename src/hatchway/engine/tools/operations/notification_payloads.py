"""What an approval notification says, in each webhook format: ``generic``, ``slack``, ``teams``.

The generic payload is built from a short list of the operation's fields and is the only source of
the other two, so neither can say more. Of the arguments it carries only those the policy lists in
``approval.notify`` (resolved values, each cut to about 1 KB); never the confirmation message, the
validator's answer, the items, a result or an error — text a tool returned, which may be steered by
whoever wrote it. Its one link opens the operation in the dashboard's inbox, where the approver signs
in: there is no link that approves.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from typing import Any

import orjson

from hatchway.config.agents import ApprovalSettings, ApprovalWebhook
from hatchway.engine.tools.operations.approvals import approvers_now, describe
from hatchway.engine.tools.operations.models import OperationRecord

MAX_VALUE_CHARS = 1000
"""An argument's value (a string, or the JSON of anything else) is cut to this many characters."""
SLACK_SECTION_CHARS = 3000
"""Slack refuses a section whose text is longer."""
BUTTON = "Open in Hatchway"
_TITLES = {
    "approval.requested": "Approval requested",
    "approval.escalated": "Approval escalated",
    "approval.decided": "Approval decided",
}
_APPROVER_KEYS = ("group", "role", "end_user")
_CARD_MARKUP = re.compile(r"([\\`*_~\[\]()<>#])")


def inbox_link(inbox_url: str | None, operation_id: str) -> str:
    """The inbox item of the operation: ``{inbox_url}/ui/#/approvals/{id}`` (relative without a base)."""
    return f"{inbox_url or ''}/ui/#/approvals/{operation_id}"


def approver_names(approvers: dict[str, Any]) -> set[str]:
    """The group or role an approval's ``approvers`` names (``{group: …}`` or ``{role: …}``)."""
    return {approvers[key] for key in ("group", "role") if isinstance(approvers.get(key), str)}


def wants(
    hook: ApprovalWebhook, event: str, org_id: str, org_name: str | None, approval: dict[str, Any]
) -> bool:
    """Whether ``hook`` is sent ``event`` about an operation of this organisation and approval."""
    if event not in hook.events:
        return False
    if hook.orgs and org_id not in hook.orgs and (org_name is None or org_name not in hook.orgs):
        return False
    return not hook.groups or bool(approver_names(approvers_now(approval)) & set(hook.groups))


def approval_payload(
    op: OperationRecord,
    event: str,
    delivery_id: str,
    org_name: str | None,
    settings: ApprovalSettings,
    now: datetime,
    collected: int = 0,
) -> dict[str, Any]:
    """The generic body of one notification; ``collected``: the approvals that count so far."""
    approval = getattr(op, "approval", None) or {}
    payload: dict[str, Any] = {
        "event": event,
        "delivery_id": delivery_id,
        "created_at": _iso(now),
        "organization": {"id": op.org_id, "name": org_name},
        "operation": {
            "id": op.id,
            "agent": op.agent,
            "tool": op.tool,
            "status": op.status,
            "requested_by": op.requested_by,
            "created_at": _iso(op.created_at),
            "expires_at": _iso(op.expires_at),
            "arguments_digest": op.arguments_digest,
        },
        "approval": {
            "rule": _scalar(approval.get("rule")),
            "approvers": _approvers(approvers_now(approval)),
            "required": _scalar(approval.get("required")),
            "stage": _scalar(approval.get("stage")),
            "approvals_collected": collected,
            "deadline": _iso(approval.get("deadline") or op.expires_at),
        },
        "arguments": named_arguments(op, approval.get("notify"), settings.max_payload_arguments),
        "inbox_url": inbox_link(settings.inbox_url, op.id),
    }
    if event == "approval.decided":
        payload["outcome"] = {"status": op.status, "verdict": (op.verdict or {}).get("status")}
    return payload


def named_arguments(op: OperationRecord, names: Any, limit: int) -> dict[str, Any]:
    """The resolved arguments ``names`` lists (at most ``limit``), each value cut to ~1 KB."""
    source = op.resolved_arguments if op.resolved_arguments is not None else op.arguments
    if not isinstance(names, list) or not isinstance(source, dict):
        return {}
    picked: dict[str, Any] = {}
    for name in names:
        if len(picked) >= limit:
            break
        if isinstance(name, str) and name in source:
            picked[name] = _capped(source[name])
    return picked


def _capped(value: Any) -> Any:
    if isinstance(value, str):
        return value if len(value) <= MAX_VALUE_CHARS else value[:MAX_VALUE_CHARS] + "…"
    text = _text(value)
    return value if len(text) <= MAX_VALUE_CHARS else text[:MAX_VALUE_CHARS] + "…"


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return str(value)


def _scalar(value: Any) -> Any:
    return value if isinstance(value, str | int | float | bool) or value is None else str(value)


def _approvers(value: dict[str, Any]) -> dict[str, Any]:
    """Only who approves (``group``, ``role`` or ``end_user``), whatever else the entry holds."""
    return {k: _scalar(value[k]) for k in _APPROVER_KEYS if k in value}


def _iso(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    return _scalar(value)


# -- Slack and Teams ---------------------------------------------------------------------------------


def _who(approval: dict[str, Any]) -> str:
    who = describe(approval.get("approvers") or {})
    return f"{who} ({approval.get('approvals_collected', 0)} of {approval.get('required') or 1} approvals)"


def _title(payload: dict[str, Any]) -> str:
    title = _TITLES[payload["event"]]
    outcome = payload.get("outcome")
    return f"{title}: {outcome['status']}" if outcome else title


def _summary(payload: dict[str, Any]) -> list[tuple[str, str]]:
    """``(label, plain text)`` lines both chat formats show, before the arguments."""
    op, org = payload["operation"], payload["organization"]
    return [
        ("Tool", f"{op['tool']} (agent {op['agent']})"),
        ("Organization", str(org["name"] or org["id"])),
        ("Requested by", str(op["requested_by"] or "unknown")),
        ("Approvers", _who(payload["approval"])),
        ("Operation", op["id"]),
    ]


def slack_message(payload: dict[str, Any]) -> dict[str, Any]:
    """A Slack incoming-webhook message: a summary in mrkdwn and one button that opens the inbox.
    Every value is escaped (``&``, ``<``, ``>``), so no argument can form a link of its own."""
    lines = [f"*{_slack(_title(payload))}*"]
    lines += [f"*{label}:* {_slack(text)}" for label, text in _summary(payload)]
    lines += [f"• `{_slack(name)}`: {_slack(_text(value))}" for name, value in payload["arguments"].items()]
    text = "\n".join(lines)
    if len(text) > SLACK_SECTION_CHARS:
        text = text[: SLACK_SECTION_CHARS - 1] + "…"
    op = payload["operation"]
    return {
        "text": _slack(f"{_title(payload)}: {op['tool']} ({op['id']})"),
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": text}},
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "text": {"type": "plain_text", "text": BUTTON},
                        "url": payload["inbox_url"],
                    }
                ],
            },
        ],
    }


def teams_message(payload: dict[str, Any]) -> dict[str, Any]:
    """A Teams message with one Adaptive Card: the summary, a FactSet of the named arguments and one
    ``Action.OpenUrl`` to the inbox. Markdown in values is escaped, so no argument can form a link."""
    body: list[dict[str, Any]] = [
        {
            "type": "TextBlock",
            "text": _card(_title(payload)),
            "weight": "Bolder",
            "size": "Medium",
            "wrap": True,
        },
        {
            "type": "FactSet",
            "facts": [{"title": label, "value": _card(text)} for label, text in _summary(payload)],
        },
    ]
    if payload["arguments"]:
        facts = [{"title": _card(k), "value": _card(_text(v))} for k, v in payload["arguments"].items()]
        body += [{"type": "TextBlock", "text": "Arguments", "weight": "Bolder", "wrap": True}]
        body += [{"type": "FactSet", "facts": facts}]
    card = {
        "type": "AdaptiveCard",
        "version": "1.4",
        "body": body,
        "actions": [{"type": "Action.OpenUrl", "title": BUTTON, "url": payload["inbox_url"]}],
    }
    return {
        "type": "message",
        "attachments": [{"contentType": "application/vnd.microsoft.card.adaptive", "content": card}],
    }


def _slack(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _card(text: str) -> str:
    return _CARD_MARKUP.sub(r"\\\1", text)


FORMATS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "generic": lambda payload: payload,
    "slack": slack_message,
    "teams": teams_message,
}
"""``webhooks[].format`` → the body it is sent, from the generic payload."""
