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
    ready = all(v == "ok" for v in checks.values())
    body["status"] = "ok" if ready else "unavailable"
    return JSONResponse(body, status_code=200 if ready else 503)
