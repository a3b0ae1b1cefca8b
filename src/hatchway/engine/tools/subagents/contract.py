"""The ``spawn_subagent`` contract, one for both sides: the gateway's hosted tool and the client-side
helper (``hatchway.delegation``). The tool's definition, how its arguments are read, what a child is
asked, and the result the parent reads::

    {"ok": true, "response_id": "resp_…", "output_text": "…"}
    {"ok": false, "error_code": "invalid_arguments" | "child_request_failed" | "max_children_reached",
     "message": "…"}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from hatchway.engine.tools.payloads import parse_arguments

if TYPE_CHECKING:
    from hatchway.engine.context import RunContext

TOOL_NAME = "spawn_subagent"
DESCRIPTION = "Delegate a focused task to a child response and return its result."
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "task": {"type": "string", "description": "The task for the child response."},
        "instructions": {"type": "string", "description": "Optional instructions for the child response."},
        "model": {"type": "string", "description": "Optional model override for the child response."},
    },
    "required": ["task"],
    "additionalProperties": False,
}
CHILD_INSTRUCTIONS = "You are an expert assistant. Complete the task and return only the result."
"""What a child is told when the call gives no ``instructions``."""
ATTEMPTS = 3
"""Tries of one child: a transient failure before the child ran any tool is retried with backoff;
once it has run one, a retry would run its tools again, so the failure is reported instead."""
INVALID_ARGUMENTS = "invalid_arguments"
CHILD_FAILED = "child_request_failed"
MAX_CHILDREN = "max_children_reached"
RUN_BUDGET_EXHAUSTED = "run_budget_exhausted"


def function_tool() -> dict[str, Any]:
    """The tool as a Responses API function tool (what the client-side helper declares)."""
    return {
        "type": "function",
        "name": TOOL_NAME,
        "description": DESCRIPTION,
        "strict": True,
        "parameters": PARAMETERS,
    }


@dataclass(frozen=True, slots=True)
class SpawnArguments:
    task: str
    instructions: str | None = None
    model: str | None = None


def parse_spawn_arguments(raw: str) -> SpawnArguments | str:
    """The call's arguments, or a message saying why they are unusable."""
    args = parse_arguments(raw)
    if args is None:
        return f"{TOOL_NAME} arguments must be a JSON object"
    task = args.get("task")
    if not isinstance(task, str) or not task.strip():
        return f"{TOOL_NAME} requires a non-empty string 'task'"
    for key in ("instructions", "model"):
        if args.get(key) is not None and not isinstance(args[key], str):
            return f"{TOOL_NAME} '{key}' must be a string"
    return SpawnArguments(task, args.get("instructions") or None, args.get("model") or None)


def success(response_id: str, output_text: str) -> dict[str, Any]:
    return {"ok": True, "response_id": response_id, "output_text": output_text}


def failure(error_code: str, message: str) -> dict[str, Any]:
    return {"ok": False, "error_code": error_code, "message": message}


@dataclass(slots=True)
class ChildRequest:
    """One child response a hosted ``spawn_subagent`` call asks for."""

    task: str
    instructions: str
    model: str
    call_id: str
    parent_response_id: str | None


@dataclass(slots=True)
class ChildResult:
    response_id: str
    output_text: str


class ChildRunner(Protocol):
    """Runs child responses: what an adapter that stores responses gives the run plan."""

    async def run_child(self, request: ChildRequest, ctx: RunContext) -> ChildResult:
        """Run one stored child response of ``request.parent_response_id`` in ``ctx``, the child's own
        context (``parent.child()``: its ``run`` state shows what it did); raise HatchwayError on failure."""
