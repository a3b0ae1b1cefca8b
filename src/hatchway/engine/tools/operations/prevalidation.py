"""Call a validator MCP tool and read its answer (seed ``000``'s contract).

The validator has no side effects. It answers ``eligible`` (global), optionally ``status``
(``ELIGIBLE`` | ``PARTIALLY_ELIGIBLE``), ``reason``, per-item entries ``{name, id, eligible, reason}``
and ``transaction_decision: {resolved_arguments, target_tool, confirmation_message}``. Anything
else — the server down, an error result, no boolean ``eligible``, ``resolved_arguments`` not an
object — is a validator failure, which the policy's ``fail_open`` decides.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hatchway.engine.context import RunContext
from hatchway.engine.tools.mcp.calls import McpToolCaller
from hatchway.errors import ToolError


@dataclass(slots=True)
class ValidatorAnswer:
    """What the validator decided, or why it could not be read."""

    tool: str
    failure: str | None = None
    """Set when the validator was down or malformed."""
    eligible: bool = False
    status: str | None = None
    reason: str | None = None
    resolved_arguments: dict[str, Any] | None = None
    target_tool: str | None = None
    confirmation_message: str | None = None
    items: list[dict[str, Any]] = field(default_factory=list)
    resolved_subjects: list[str] = field(default_factory=list)
    fail_open_used: bool = False

    @property
    def failed(self) -> bool:
        return self.failure is not None

    def to_record(self) -> dict[str, Any]:
        """What the operation record keeps of it (per-item eligibility included)."""
        out: dict[str, Any] = {"tool": self.tool}
        if self.failure is not None:
            out |= {"failure": self.failure, "fail_open_used": self.fail_open_used}
            return out
        out |= {"eligible": self.eligible, "status": self.status, "items": self.items}
        for key in ("reason", "target_tool"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.resolved_subjects:
            out["resolved_subjects"] = self.resolved_subjects
        return out


async def run_validator(
    caller: McpToolCaller, server: str, tool: str, arguments: dict[str, Any], ctx: RunContext
) -> ValidatorAnswer:
    """Call the validator with the call's arguments; never raises for the validator's own faults."""
    try:
        result = await caller.call_mcp_tool(server, tool, arguments, ctx)
    except ToolError as exc:
        return ValidatorAnswer(tool, failure=f"validator unavailable: {ctx.redact(exc.message)}")
    if result.is_error:
        return ValidatorAnswer(tool, failure=f"validator returned an error: {ctx.redact(result.text)[:300]}")
    # What it says is stored with the operation and shown to the user: scrubbed like any result.
    return read_validator_answer(tool, ctx.redact_value(result.structured))


def read_validator_answer(tool: str, body: Any) -> ValidatorAnswer:
    """Parse a validator's structured answer; malformed answers become a failure."""
    if not isinstance(body, dict):
        return ValidatorAnswer(tool, failure="validator answer is not a JSON object")
    eligible = body.get("eligible")
    if not isinstance(eligible, bool):
        return ValidatorAnswer(tool, failure="validator answer has no boolean 'eligible'")
    decision = body.get("transaction_decision")
    decision = {} if decision is None else decision
    if not isinstance(decision, dict):
        return ValidatorAnswer(tool, failure="'transaction_decision' is not an object")
    resolved = decision.get("resolved_arguments")
    if resolved is not None and not isinstance(resolved, dict):
        return ValidatorAnswer(tool, failure="'transaction_decision.resolved_arguments' is not an object")
    if eligible and resolved is not None and not resolved:
        return ValidatorAnswer(tool, failure="'transaction_decision.resolved_arguments' is empty")
    return ValidatorAnswer(
        tool,
        eligible=eligible,
        status=_text(body.get("status")),
        reason=_text(body.get("reason") or decision.get("reason") or body.get("message")),
        resolved_arguments=resolved,
        target_tool=_text(decision.get("target_tool") or body.get("target_tool")),
        confirmation_message=_text(decision.get("confirmation_message") or body.get("confirmation_message")),
        items=_items(body, decision, resolved),
        resolved_subjects=[str(s) for s in body.get("resolved_subjects") or [] if s is not None],
    )


def _items(
    body: dict[str, Any], decision: dict[str, Any], resolved: dict[str, Any] | None
) -> list[dict[str, Any]]:
    for source in (body.get("items"), decision.get("items"), (resolved or {}).get("items")):
        if isinstance(source, list) and source:
            return [_item(entry) for entry in source]
    return []


def _item(entry: Any) -> dict[str, Any]:
    if not isinstance(entry, dict):
        return {"name": str(entry)}
    out = {k: entry[k] for k in ("name", "id", "eligible", "reason") if entry.get(k) is not None}
    if "eligible" in out and not isinstance(out["eligible"], bool):
        out["eligible"] = False
        out.setdefault("reason", "eligibility was not a boolean")
    return out


def _text(value: Any) -> str | None:
    return None if value is None else str(value)
