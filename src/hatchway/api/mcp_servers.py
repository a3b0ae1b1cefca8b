"""The dashboard's MCP page: ``GET /v1/mcp/servers``, the MCP servers of hatchway.yaml's plugins
probed for the caller's org, and ``GET /v1/mcp/endpoints``, the ``mcp_endpoints`` it may use."""

from __future__ import annotations

import asyncio
import logging
from pathlib import PurePath
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, Request

from hatchway.api.auth import authenticate, gateway_of
from hatchway.api.context import run_context
from hatchway.engine.context import RunContext
from hatchway.errors import HatchwayError
from hatchway.observability.mcp_status import McpServerReport
from hatchway.principal import Principal
from hatchway.store.logs import LogQuery
from hatchway.store.tables import RequestLog

if TYPE_CHECKING:  # the MCP SDK's server loads only when an endpoint is configured (api/app.py)
    from hatchway.api.mcp_endpoints import McpEndpoints
    from hatchway.mcp_server.endpoint import Endpoint

logger = logging.getLogger(__name__)
router = APIRouter()
RECENT_CALLS = 20
"""Calls of one endpoint ``GET /v1/mcp/endpoints`` shows, newest first."""
_STEP_EXTRAS = ("operation_id", "operation_status", "verdict")
"""What a call's step adds when it was (or asked for) a transactional operation."""


def _report(request: Request) -> McpServerReport:
    report = getattr(request.app.state, "mcp_server_report", None)
    if report is None:
        gw = gateway_of(request)
        report = McpServerReport(gw.plugins, gw.mcp_pool, gw.mcp_credentials, gw.db)
        request.app.state.mcp_server_report = report
    return report


@router.get("/v1/mcp/servers")
async def list_mcp_servers(
    request: Request, principal: Annotated[Principal, Depends(authenticate)], probe: bool = True
) -> dict[str, Any]:
    """Each configured server: where it is bound, reachable?, its tools and the last failed call."""
    await gateway_of(request).log_writer.flush()
    data = await _report(request).report(principal, probe=probe)
    return {"object": "list", "data": data}


@router.get("/v1/mcp/endpoints")
async def list_mcp_endpoints(
    request: Request, principal: Annotated[Principal, Depends(authenticate)]
) -> dict[str, Any]:
    """Each endpoint this organisation may use: its config, its tools now (as ``tools/list`` gives
    them to this caller, operations marked) and its most recent calls from the run log."""
    endpoints: McpEndpoints | None = getattr(request.app.state, "mcp_endpoints", None)
    allowed = [e for e in endpoints.endpoints.values() if e.allows(principal)] if endpoints else []
    gw = gateway_of(request)
    await gw.log_writer.flush()  # read-your-writes on this replica
    deadline = gw.settings.loop_deadline_seconds
    data = await asyncio.gather(
        *(_describe(request, e, principal, run_context(request, principal, deadline)) for e in allowed)
    )
    return {"object": "list", "data": list(data)}


async def _describe(
    request: Request, endpoint: Endpoint, principal: Principal, ctx: RunContext
) -> dict[str, Any]:
    config = endpoint.config
    source = (
        f"agent:{config.agent}"
        if config.agent is not None
        else f"plugin:{PurePath(config.plugin or '').name}"
    )
    tools, error = await _tools(endpoint, ctx)
    rows = await gateway_of(request).logs.list(
        principal.org_id, LogQuery(route=f"mcp:{config.name}", limit=RECENT_CALLS)
    )
    return {
        "name": config.name,
        "path": f"/mcp/{config.name}",
        "source": source,
        "allowed_tools": config.tools,
        "namespace": config.namespace,
        "resources": config.resources,
        "prompts": config.prompts,
        "tools": tools,
        "tools_error": error,
        "recent_calls": [_call(row) for row in rows],
    }


async def _tools(endpoint: Endpoint, ctx: RunContext) -> tuple[list[dict[str, Any]] | None, str | None]:
    """The endpoint's tools for this caller, or why they could not be listed (never the route's 500)."""
    try:
        async with asyncio.timeout(max(ctx.remaining(), 0.001)):
            listed = await endpoint.listed_tools(ctx)
    except TimeoutError:
        return None, "the tools were not listed in time"
    except HatchwayError as exc:
        return None, ctx.redact(exc.message)
    except Exception as exc:  # one endpoint's bug must not hide the others
        logger.exception("MCP endpoint %s: listing its tools failed", endpoint.config.name)
        return None, f"listing the tools failed ({type(exc).__name__})"
    service = endpoint.operations.service if endpoint.operations is not None else None
    return [
        {
            "name": tool.name,
            "description": ctx.redact(tool.description or ""),
            "operation": service is not None and service.is_operation(tool.name),
        }
        for tool in listed
    ], None


def _call(row: RequestLog) -> dict[str, Any]:
    """One ``tools/call`` through the endpoint, from its run record (one ``tool_call`` step)."""
    step = next((s for s in row.steps or [] if s.get("type") == "tool_call"), {})
    return {
        "log_id": row.id,
        "at": int(row.created_at.timestamp()),
        "on_behalf_of": row.on_behalf_of,
        "tool": step.get("name"),
        "server": step.get("server"),
        "outcome": step.get("outcome"),
        "duration_ms": step.get("duration_ms", row.latency_ms),
        "status": row.status,
        **{key: step[key] for key in _STEP_EXTRAS if step.get(key) is not None},
    }
