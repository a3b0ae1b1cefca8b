"""``GET /metrics``: Prometheus exposition of this gateway's registry (unauthenticated, like /healthz)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from hatchway.api.auth import gateway_of
from hatchway.observability.metrics import CONTENT_TYPE

router = APIRouter()


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    return Response(gateway_of(request).telemetry.metrics.exposition(), media_type=CONTENT_TYPE)
