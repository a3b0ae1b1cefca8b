"""``GET /v1/mcp/servers``: the MCP servers of hatchway.yaml's plugins, probed for the caller's org."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request

from hatchway.api.auth import authenticate, gateway_of
from hatchway.engine.context import Principal
from hatchway.observability.mcp_status import McpServerReport

router = APIRouter()


def _report(request: Request) -> McpServerReport:
    report = getattr(request.app.state, "mcp_server_report", None)
    if report is None:
        gw = gateway_of(request)
        report = McpServerReport(gw.settings, gw.mcp_pool, gw.mcp_credentials, gw.db)
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
