"""``spawn_subagent`` as a gateway tool: each call runs one child response and returns a compact result
(the shapes of ``contract.py``)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from hatchway.config.settings import SubagentSettings
from hatchway.engine.context import Delegation, RunContext
from hatchway.engine.items import FunctionCall, ToolSpec
from hatchway.engine.run_log import Outcome
from hatchway.engine.tools.base import ToolResult, Toolset
from hatchway.engine.tools.subagents.contract import (
    ATTEMPTS,
    CHILD_FAILED,
    CHILD_INSTRUCTIONS,
    DESCRIPTION,
    INVALID_ARGUMENTS,
    MAX_CHILDREN,
    PARAMETERS,
    RUN_BUDGET_EXHAUSTED,
    TOOL_NAME,
    ChildRequest,
    ChildRunner,
    failure,
    parse_spawn_arguments,
    success,
)
from hatchway.errors import HatchwayError, ProviderError, ProviderStatusError

SPAWN_SUBAGENT_SPEC = ToolSpec(name=TOOL_NAME, description=DESCRIPTION, parameters=PARAMETERS)


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

    def _budget(self, ctx: RunContext) -> Delegation:
        """The tree's budget, which this agent's own settings may only lower."""
        return ctx.run.delegation_budget(
            ctx.depth + self.settings.max_depth, self.settings.max_children_per_run
        )

    async def list_tools(self, ctx: RunContext) -> list[ToolSpec]:
        # A child at the deepest allowed level gets no spawn_subagent: nesting stops there.
        return [SPAWN_SUBAGENT_SPEC] if ctx.depth < self._budget(ctx).max_depth else []

    def server_label(self, name: str) -> str | None:
        return "hatchway"

    async def call_tool(self, call: FunctionCall, ctx: RunContext) -> ToolResult:
        budget = self._budget(ctx)
        if ctx.depth >= budget.max_depth:
            return _failure(INVALID_ARGUMENTS, f"max_depth ({budget.max_depth}) reached")
        parsed = parse_spawn_arguments(call.arguments)
        if isinstance(parsed, str):
            return _failure(INVALID_ARGUMENTS, parsed)
        model = parsed.model or self.default_model
        allowed = [self.default_model, *self.settings.models]
        if model not in allowed:
            return _failure(
                INVALID_ARGUMENTS,
                f"{TOOL_NAME} 'model': {model!r} is not one this agent's children may use "
                f"({', '.join(allowed)}); leave it out to run the child as this agent",
            )
        request = ChildRequest(
            task=parsed.task,
            instructions=parsed.instructions or CHILD_INSTRUCTIONS,
            model=model,
            call_id=call.call_id,
            parent_response_id=ctx.response_id,
        )
        async with self._slots:
            return await self._run_with_retries(request, ctx, budget)

    async def _run_with_retries(
        self, request: ChildRequest, ctx: RunContext, budget: Delegation
    ) -> ToolResult:
        for attempt in range(ATTEMPTS):
            spent = ctx.run.budget_spent()
            if spent is not None:  # the tree's budget (agent.max_run_*): no child starts past it
                message = f"this run tree's {spent.budget} budget is spent ({spent.used} of {spent.limit})"
                return _failure(RUN_BUDGET_EXHAUSTED, message, retries=attempt)
            if budget.children >= budget.max_children:
                message = (
                    f"this run reached its limit of {budget.max_children} children (max_children_per_run)"
                )
                return _failure(MAX_CHILDREN, message, retries=attempt)
            # Its part of the tree's budget, held until it ends: children started together cannot
            # each spend the whole room left (docs/limits.md, "Run budgets").
            share = ctx.run.take_share()
            if share is not None and (share.tokens == 0 or share.cost_usd == 0):
                message = "this run tree's budget leaves nothing for another child"
                return _failure(RUN_BUDGET_EXHAUSTED, message, retries=attempt)
            budget.children += 1
            child_ctx = ctx.child()
            child_ctx.run.share = share
            try:
                child = await self.runner.run_child(request, child_ctx)
            except HatchwayError as exc:
                ran = child_ctx.run.tree_tool_calls()
                if ran:  # trying again would run the child's tools again: its side effects twice
                    message = f"{exc.message} (after the child had run {ran} tool call(s); not run again)"
                    return _failure(
                        CHILD_FAILED, message, retries=attempt, child_response_id=child_ctx.response_id
                    )
                if attempt == ATTEMPTS - 1 or not is_transient(exc) or ctx.remaining() < self.backoff_seconds:
                    return _failure(CHILD_FAILED, exc.message, retries=attempt)
                ctx.run.spawns_pending += 1  # the next try takes a part as this one did
                await asyncio.sleep(self.backoff_seconds * (attempt + 1))
                continue
            finally:
                child_ctx.run.ended = True
            payload = success(child.response_id, child.output_text)
            meta = {"server": "hatchway", "child_response_id": child.response_id, "retries": attempt}
            return ToolResult(orjson.dumps(payload).decode(), meta=meta)
        raise AssertionError("unreachable")


def is_transient(exc: HatchwayError) -> bool:
    """Upstream failures worth another try: unreachable, timed out, 5xx or 429."""
    if isinstance(exc, ProviderStatusError):
        return exc.upstream_status == 429 or exc.upstream_status >= 500
    return isinstance(exc, ProviderError)


def _failure(code: str, message: str, **meta: Any) -> ToolResult:
    return ToolResult(
        orjson.dumps(failure(code, message)).decode(),
        is_error=True,
        meta={"server": "hatchway", "outcome": Outcome.ERROR, "error_code": code, **meta},
    )
