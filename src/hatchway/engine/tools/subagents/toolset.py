"""``spawn_subagent`` as a gateway tool: each call runs one child response and returns a compact result.

The result has the shape of the client-side helper's (``hatchway.delegation``):
``{"ok": true, "response_id", "output_text"}`` or
``{"ok": false, "error_code": "invalid_arguments" | "child_request_failed", "message"}``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from hatchway.config.settings import SubagentSettings
from hatchway.engine.context import RunContext
from hatchway.engine.items import FunctionCall, ToolSpec
from hatchway.engine.tools.base import ToolResult, Toolset
from hatchway.errors import HatchwayError, ProviderError, ProviderStatusError

CHILD_RUNNER_KEY = "subagent_runner"
TOOL_NAME = "spawn_subagent"
DEFAULT_CHILD_INSTRUCTIONS = "You are an expert assistant. Complete the task and return only the result."
ATTEMPTS = 3

SPAWN_SUBAGENT_SPEC = ToolSpec(
    name=TOOL_NAME,
    description="Delegate a focused task to a child response and return its result.",
    parameters={
        "type": "object",
        "properties": {
            "task": {"type": "string", "description": "The task for the child response."},
            "instructions": {"type": "string", "description": "Optional instructions for the child."},
            "model": {"type": "string", "description": "Optional model override for the child."},
        },
        "required": ["task"],
        "additionalProperties": False,
    },
)


@dataclass(slots=True)
class ChildRequest:
    task: str
    instructions: str
    model: str
    call_id: str


@dataclass(slots=True)
class ChildOutcome:
    response_id: str
    output_text: str


class ChildRunner(Protocol):
    async def run_child(self, request: ChildRequest, parent: RunContext) -> ChildOutcome:
        """Run one stored child response of ``parent.response_id``; raise HatchwayError on failure."""


class SubagentToolset(Toolset):
    """One per run: children of this run share its ``max_concurrent`` slots."""

    def __init__(
        self,
        runner: ChildRunner,
        settings: SubagentSettings,
        *,
        default_model: str,
        backoff_seconds: float = 0.5,
    ) -> None:
        self.runner = runner
        self.settings = settings
        self.default_model = default_model
        self.backoff_seconds = backoff_seconds
        self._slots = asyncio.Semaphore(settings.max_concurrent)

    async def list_tools(self, ctx: RunContext) -> list[ToolSpec]:
        # A child at the deepest allowed level gets no spawn_subagent: nesting stops there.
        return [SPAWN_SUBAGENT_SPEC] if ctx.depth < self.settings.max_depth else []

    async def call_tool(self, call: FunctionCall, ctx: RunContext) -> ToolResult:
        if ctx.depth >= self.settings.max_depth:
            return _failure("invalid_arguments", f"max_depth ({self.settings.max_depth}) reached", call)
        parsed = parse_spawn_arguments(call.arguments)
        if isinstance(parsed, str):
            return _failure("invalid_arguments", parsed, call)
        request = ChildRequest(
            task=parsed["task"],
            instructions=parsed.get("instructions") or DEFAULT_CHILD_INSTRUCTIONS,
            model=parsed.get("model") or self.default_model,
            call_id=call.call_id,
        )
        async with self._slots:
            return await self._run_with_retries(request, ctx, call)

    async def _run_with_retries(
        self, request: ChildRequest, ctx: RunContext, call: FunctionCall
    ) -> ToolResult:
        for attempt in range(ATTEMPTS):
            try:
                child = await self.runner.run_child(request, ctx)
            except HatchwayError as exc:
                if attempt == ATTEMPTS - 1 or not is_transient(exc) or ctx.remaining() < self.backoff_seconds:
                    return _failure("child_request_failed", exc.message, call, retries=attempt)
                await asyncio.sleep(self.backoff_seconds * (attempt + 1))
                continue
            payload = {"ok": True, "response_id": child.response_id, "output_text": child.output_text}
            meta = {"server": "hatchway", "child_response_id": child.response_id, "retries": attempt}
            return ToolResult(orjson.dumps(payload).decode(), meta=meta)
        raise AssertionError("unreachable")


def parse_spawn_arguments(raw: str) -> dict[str, Any] | str:
    """The call's arguments, or a message saying why they are unusable."""
    try:
        args = orjson.loads(raw or "{}")
    except orjson.JSONDecodeError:
        return "spawn_subagent arguments are not valid JSON"
    if not isinstance(args, dict):
        return "spawn_subagent arguments must be a JSON object"
    if not isinstance(args.get("task"), str) or not args["task"].strip():
        return "spawn_subagent requires a non-empty string 'task'"
    for key in ("instructions", "model"):
        if args.get(key) is not None and not isinstance(args[key], str):
            return f"spawn_subagent '{key}' must be a string"
    return args


def is_transient(exc: HatchwayError) -> bool:
    """Upstream failures worth another try: unreachable, timed out, 5xx or 429."""
    if isinstance(exc, ProviderStatusError):
        return exc.upstream_status == 429 or exc.upstream_status >= 500
    return isinstance(exc, ProviderError)


def _failure(code: str, message: str, call: FunctionCall, **meta: Any) -> ToolResult:
    payload = {"ok": False, "error_code": code, "message": message}
    return ToolResult(
        orjson.dumps(payload).decode(),
        is_error=True,
        meta={"server": "hatchway", "outcome": "error", "error_code": code, **meta},
    )
