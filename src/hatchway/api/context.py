"""The engine's RunContext of an HTTP request or WebSocket (``RunContext.from_headers`` decides)."""

from __future__ import annotations

from collections.abc import Iterable

from starlette.requests import HTTPConnection

from hatchway.engine.context import Principal, RunContext


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
