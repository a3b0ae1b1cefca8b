"""Attacks: verified end users (``access.end_users``) attacked through the request's headers.

The gatekeeper reads ``X-On-Behalf-Of`` with Starlette's ``Headers.get`` (the *first* of repeated
headers), while ``run_context`` builds the run's end user with ``header_dict`` (the *last* wins). An
admin key of an organisation that requires verified end users sends an empty ``X-On-Behalf-Of`` first
(the gatekeeper sees no end user asserted) and the victim's name second (the run acts for them).
"""

from __future__ import annotations

from typing import Any

import httpx

from tests.access.test_end_users import HEADER, Stack


def _call(
    stack: Stack, method: str, path: str, headers: list[tuple[str, str]], key: str, **kw: Any
) -> httpx.Response:
    return httpx.request(
        method,
        f"{stack.gateway.url}{path}",
        headers=[("authorization", f"Bearer {key}"), *headers],
        timeout=60,
        **kw,
    )


SMUGGLED = [("x-on-behalf-of", ""), ("x-on-behalf-of", "ana")]
"""First (what the gatekeeper checks): empty, so no end user is asserted; last (what the run uses): ana."""


def test_an_admin_key_cannot_act_for_a_verified_end_user_with_a_repeated_on_behalf_of(stack: Stack) -> None:
    asked = stack.chat({HEADER: stack.token("ana")})  # ana, proven, asks for an operation
    assert asked.status_code == 200, asked.text
    op_id = asked.headers["x-hatchway-operation-id"]

    # the plain attempt is refused (covered by tests/access/test_end_users.py) ...
    plain = _call(
        stack, "POST", f"/v1/operations/{op_id}/confirm", [("x-on-behalf-of", "ana")], stack.admin_key
    )
    assert plain.status_code == 403 and plain.json()["error"]["code"] == "end_user_not_verified"

    # ... and so must be the same claim sent as the second of two X-On-Behalf-Of headers
    smuggled = _call(stack, "POST", f"/v1/operations/{op_id}/confirm", SMUGGLED, stack.admin_key)
    assert smuggled.status_code in (400, 403), (
        f"an admin key without ana's token confirmed ana's operation: {smuggled.status_code} {smuggled.text}"
    )
    still = _call(stack, "GET", f"/v1/operations/{op_id}", [(HEADER, stack.token("ana"))], stack.app_key)
    assert still.json()["status"] == "AWAITING_CONFIRMATION", still.text


def test_an_admin_key_cannot_run_a_response_as_a_verified_end_user_with_a_repeated_on_behalf_of(
    stack: Stack,
) -> None:
    body = {"model": "agent:contas", "input": "cancele Produto A"}
    answer = _call(stack, "POST", "/v1/responses", SMUGGLED, stack.admin_key, json=body)
    logs = _call(stack, "GET", "/v1/logs", [], stack.admin_key).json()["data"]
    acted_for = [entry.get("on_behalf_of") for entry in logs]
    assert "ana" not in acted_for, (
        f"an admin key without ana's token ran a response as ana ({answer.status_code}); log: {acted_for}"
    )
