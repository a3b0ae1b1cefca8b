"""The engine's RunContext of an HTTP request or WebSocket (``RunContext.from_headers`` decides)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from starlette.requests import HTTPConnection

from hatchway.engine.context import RunContext
from hatchway.engine.run import RunScope
from hatchway.limits.limiter import Admission
from hatchway.limits.scopes import CostEstimate, Requester, reserved_tokens
from hatchway.principal import Principal


def header_dict(raw: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """An ASGI scope's headers as ``{lower-case name: value}`` (the last of repeated ones wins)."""
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw}


def run_context(connection: HTTPConnection, principal: Principal, deadline_seconds: float) -> RunContext:
    """The run's context; it redacts the gateway's provider keys as well as the secrets it resolves."""
    headers = header_dict(connection.scope["headers"])
    known = connection.app.state.gateway.models.secrets
    return RunContext.from_headers(principal, headers, deadline_seconds=deadline_seconds, known_secrets=known)


def budget_header(ctx: RunContext) -> dict[str, str]:
    """``x-hatchway-budget-exhausted: tokens|cost_usd|tool_calls`` when the run tree's budget
    (``agent.max_run_*``) was spent and its last round ran without tools; nothing otherwise."""
    spent = ctx.run.budget_exhausted
    return {"x-hatchway-budget-exhausted": spent.budget} if spent is not None else {}


async def admit_run(run: RunScope, model: str, max_tokens: Any, body_bytes: int) -> Admission:
    """The run's hold on the limits, by who asks and for which model (an ``agent:`` one counts for
    the agent too), reserving the tokens its answer may use: settled when its scope closes, or
    before its answer leaves (``run.settle()``)."""
    ctx = run.ctx
    who = Requester.of(ctx.principal, ctx.on_behalf_of, model)
    return await run.admit(
        who,
        reserve_tokens=reserved_tokens(max_tokens, body_bytes),
        estimate=CostEstimate.of(model, max_tokens, body_bytes),
    )
