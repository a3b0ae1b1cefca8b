"""Held: every ``/v1`` route and the ``/v1/responses`` WebSocket authenticate.

The attack: call each route without a key, with a malformed ``Authorization``, with another scheme,
with the key somewhere other than ``Authorization``, with an unknown key and with a revoked one.
Each must answer 401 in OpenAI's error shape before doing anything else (a POST's empty body is not
even validated), and the WebSocket handshake must be refused. The routes are read from the app
(``create_app(...)`` plus its raw ``direct_routes``), so a route added later without authentication
fails here. The public routes outside ``/v1`` (``/healthz``, ``/readyz``, ``/metrics``, the
dashboard's static ``/ui``) are out of this class. Known single cases: ``tests/api/test_chat.py``
``test_missing_or_wrong_key_is_401``, ``tests/api/test_responses_socket.py`` (wrong key, socket).
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import secrets
from datetime import UTC, datetime

import httpx
import pytest
from fastapi.routing import iter_route_contexts
from sqlalchemy import update
from starlette.routing import Mount, WebSocketRoute
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from hatchway.api.app import create_app
from hatchway.store.db import Database
from hatchway.store.orgs import OrgStore
from hatchway.store.tables import ApiKey
from tests.support.gateway import RunningGateway

UNAUTHENTICATED = {"type": "authentication_error", "param": None, "code": "invalid_api_key"}


def routes(gw: RunningGateway) -> tuple[list[tuple[str, str]], list[str]]:
    """``(method, path)`` of every HTTP route under ``/v1``, and the paths of its WebSocket routes."""
    app = create_app(gw.settings, gateway=gw.gateway)
    http = [("POST", path) for path in app.direct_routes if path.startswith("/v1")]
    sockets = []
    for route in iter_route_contexts(app.routes):
        original = route.original_route
        if not route.path.startswith("/v1"):
            continue
        if isinstance(original, Mount):  # whatever it serves must authenticate too
            http.append(("GET", route.path.rstrip("/") + "/probe"))
        elif isinstance(original, WebSocketRoute):
            sockets.append(route.path)
        else:
            http += [(m, route.path) for m in sorted(route.methods or ()) if m != "HEAD"]
    return http, sockets


def revoked_key(gw: RunningGateway) -> str:
    """A key of the gateway's organisation, revoked before it was ever used (no auth cache entry)."""

    async def make() -> str:
        db = Database(gw.settings.database_url)
        try:
            row, plaintext = await OrgStore(db).create_key(gw.org.org_id, "revoked")
            async with db.session() as s:
                await s.execute(
                    update(ApiKey).where(ApiKey.id == row.id).values(revoked_at=datetime.now(UTC))
                )
            return plaintext
        finally:
            await db.close()

    return asyncio.run(make())


def bad_credentials(gw: RunningGateway) -> dict[str, dict[str, str]]:
    key = gw.key
    return {
        "no key": {},
        "empty header": {"authorization": ""},
        "scheme only": {"authorization": "Bearer"},
        "scheme twice": {"authorization": f"Bearer Bearer {key}"},
        "key with a suffix": {"authorization": f"Bearer {key}x"},
        "key without scheme": {"authorization": key},
        "basic scheme": {"authorization": "Basic " + base64.b64encode(f"{key}:".encode()).decode()},
        "token scheme": {"authorization": f"Token {key}"},
        "key outside Authorization": {"x-api-key": key, "api-key": key, "cookie": f"api_key={key}"},
        "unknown key": {"authorization": f"Bearer hw-{secrets.token_urlsafe(32)}"},
        "revoked key": {"authorization": f"Bearer {revoked_key(gw)}"},
    }


ANTHROPIC_ROUTES = {"/v1/messages", "/v1/messages/count_tokens"}
"""Anthropic's Messages API: the key as ``x-api-key`` too, errors in Anthropic's shape."""


def concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "x", path)


def test_every_v1_route_answers_401_without_a_valid_bearer_key(gateway: RunningGateway) -> None:
    http, _ = routes(gateway)
    known = {
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/responses"),
        ("DELETE", "/v1/responses/{response_id}"),
        ("POST", "/v1/operations/{operation_id}/confirm"),
        ("PUT", "/v1/secrets/{name}"),
        ("GET", "/v1/logs/{log_id}"),
    }
    assert known <= set(http), http  # the enumeration sees the routers and the raw chat route
    forms = bad_credentials(gateway)
    with httpx.Client(base_url=gateway.url, timeout=10) as client:
        for method, path in http:
            url, body = concrete(path), {} if method in ("POST", "PUT") else None
            # The route exists and the key works: whatever it answers, it is not a 401.
            own = client.request(method, url, json=body, headers={"authorization": f"Bearer {gateway.key}"})
            assert own.status_code != 401, (method, path, own.text)
            anthropic = path in ANTHROPIC_ROUTES
            for form, headers in forms.items():
                params = {"api_key": gateway.key} if form == "key outside Authorization" else None
                if anthropic and form == "key outside Authorization":  # x-api-key is its scheme
                    headers = {k: v for k, v in headers.items() if k != "x-api-key"}
                response = client.request(method, url, json=body, headers=headers, params=params)
                assert response.status_code == 401, (method, path, form, response.text)
                if anthropic:  # Anthropic's error shape, for its SDKs
                    answer = response.json()
                    assert answer["type"] == "error", (method, path, form)
                    assert answer["error"]["type"] == "authentication_error", (method, path, form)
                    assert isinstance(answer["error"]["message"], str) and answer["error"]["message"]
                    continue
                error = response.json()["error"]
                assert {k: error[k] for k in UNAUTHENTICATED} == UNAUTHENTICATED, (method, path, form)
                assert isinstance(error["message"], str) and error["message"]


def test_the_websocket_handshake_is_refused_without_a_valid_bearer_key(gateway: RunningGateway) -> None:
    _, sockets = routes(gateway)
    assert "/v1/responses" in sockets
    forms = bad_credentials(gateway)
    for path in sockets:
        url = gateway.url.replace("http://", "ws://") + path
        with connect(url, additional_headers={"authorization": f"Bearer {gateway.key}"}):
            pass  # the key opens it
        for form, headers in forms.items():
            query = f"?api_key={gateway.key}" if form == "key outside Authorization" else ""
            with pytest.raises(InvalidStatus) as denied:
                connect(url + query, additional_headers=headers).close()
            response = denied.value.response
            assert response.status_code == 401, form
            error = json.loads(response.body)["error"]
            assert {k: error[k] for k in UNAUTHENTICATED} == UNAUTHENTICATED, form
