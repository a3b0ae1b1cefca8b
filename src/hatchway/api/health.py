"""``/healthz`` (process up) and ``/readyz`` (dependencies reachable)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse

from hatchway.api.auth import gateway_of

router = APIRouter()


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(request: Request) -> JSONResponse:
    gw = gateway_of(request)
    checks: dict[str, str] = {}
    try:
        await gw.db.ping()
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"unreachable ({type(exc).__name__})"
    if gw.settings.redis_url:
        try:
            await gw.cache.ping()
            checks["redis"] = "ok"
        except Exception as exc:
            checks["redis"] = f"unreachable ({type(exc).__name__})"
    body: dict[str, object] = {"checks": checks}
    if gw.jobs is not None and checks.get("redis") == "ok":
        # Informative, not a condition: this replica serves either way, but with no worker anywhere
        # background responses stay queued.
        try:
            body["queue_workers"] = await gw.jobs.workers()
        except Exception as exc:
            checks["queue"] = f"unreachable ({type(exc).__name__})"
    warnings = _endpoint_warnings(request)
    if warnings:  # informative too: a misspelt allowlist entry exposes nothing, but the rest serves
        body["warnings"] = warnings
    ready = all(v == "ok" for v in checks.values())
    body["status"] = "ok" if ready else "unavailable"
    return JSONResponse(body, status_code=200 if ready else 503)


def _endpoint_warnings(request: Request) -> list[str]:
    """What the MCP endpoints' listings found wrong in their configuration: ``mcp_endpoints[].tools``
    entries that matched none of the tools their servers offered (known once an endpoint has been
    listed: its servers, credentials and tools are per organisation, so none is listed at start-up).
    Counted, not named: ``/readyz`` answers anyone, and an endpoint's name is told only to a caller
    with a credential (``api/mcp_endpoints``); the log names each entry."""
    endpoints = getattr(request.app.state, "mcp_endpoints", None)
    if endpoints is None:
        return []
    unmatched = sum(len(endpoint.unmatched_tools) for endpoint in endpoints.endpoints.values())
    if not unmatched:
        return []
    return [
        f"{unmatched} mcp_endpoints[].tools entr{'y matches' if unmatched == 1 else 'ies match'} none of "
        "the tools its servers offer (names are <server>__<tool>); the log names them"
    ]
