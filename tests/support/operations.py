"""Helpers for transactional-operations tests: a run context with a session and an end user, and an
operation read back over HTTP."""

from __future__ import annotations

from typing import Any

import httpx

from hatchway.engine.context import RunContext
from hatchway.principal import Principal
from tests.support.gateway import RunningGateway


def make_ctx(
    org_id: str = "org_a", session: str | None = "sess-1", user: str | None = "user-7"
) -> RunContext:
    """A run for ``org_id`` in ``session`` on behalf of ``user`` (what an operation is keyed on)."""
    return RunContext(principal=Principal(org_id, org_id), session_key=session, on_behalf_of=user)


def operation(gw: RunningGateway, op_id: str) -> dict[str, Any]:
    """``GET /v1/operations/{op_id}`` as the gateway's organisation (asserting it answers 200)."""
    response = httpx.get(
        f"{gw.url}/v1/operations/{op_id}", headers={"authorization": f"Bearer {gw.key}"}, timeout=10
    )
    assert response.status_code == 200, response.text
    return response.json()
