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
    ready = all(v == "ok" for v in checks.values())
    return JSONResponse(
        {"status": "ok" if ready else "unavailable", "checks": checks}, status_code=200 if ready else 503
    )
