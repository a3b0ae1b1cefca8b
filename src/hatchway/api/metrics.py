"""``GET /metrics``: Prometheus exposition of this gateway's registry.

Open like ``/healthz`` unless hatchway.yaml protects it: ``metrics_token`` (a bearer the scraper
sends) and ``metrics_allowed_networks`` (the client addresses that may scrape). Its labels carry only
names the operator configured (``observability/metrics.py``).
"""

from __future__ import annotations

import hmac
import ipaddress

from fastapi import APIRouter, Request
from starlette.responses import Response

from hatchway.api.auth import bearer_token, gateway_of
from hatchway.engine.providers.routing import resolve_api_key
from hatchway.errors import AuthenticationError, PermissionDenied
from hatchway.observability.metrics import CONTENT_TYPE

router = APIRouter()


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    settings = gateway_of(request).settings
    if settings.metrics_allowed_networks:
        client = ipaddress.ip_address(request.client.host) if request.client else None
        networks = [ipaddress.ip_network(n, strict=False) for n in settings.metrics_allowed_networks]
        if client is None or not any(client in network for network in networks):
            raise PermissionDenied(
                "/metrics: this address may not scrape the metrics (metrics_allowed_networks)"
            )
    if settings.metrics_token:
        expected = resolve_api_key(settings.metrics_token) or ""
        given = bearer_token(request.headers.get("authorization", "")) or ""
        if not expected or not hmac.compare_digest(given.encode(), expected.encode()):
            raise AuthenticationError("/metrics: send Authorization: Bearer <metrics_token>")
    gw = gateway_of(request)
    gw.scopes.record_closed()  # the runs that closed in the last few ms count (engine/run.py)
    return Response(gw.telemetry.metrics.exposition(), media_type=CONTENT_TYPE)
