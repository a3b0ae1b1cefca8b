"""Attacks: role denials filling the audit trail. docs/access.md: "every role denial (at most one per
key and route per minute, so a client looping on a forbidden route cannot flood it)". The MCP endpoint
hands the request's own method to ``check_route``, and the denial is remembered per (key, "METHOD
route"): every HTTP method uvicorn's parser knows (PROPFIND, MKCOL, LOCK, PURGE…) is a new entry.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from tests.support.mcp_endpoints import calc_endpoint

METHODS = [
    "GET",
    "DELETE",
    "PUT",
    "PATCH",
    "OPTIONS",
    "HEAD",
    "PROPFIND",
    "PURGE",
    "MKCOL",
    "LOCK",
    "UNLOCK",
    "COPY",
    "MOVE",
    "SEARCH",
    "REPORT",
    "TRACE",
    "LINK",
    "UNLINK",
    "ACL",
    "QUERY",
]


def test_a_viewer_key_looping_over_http_methods_on_an_mcp_endpoint_adds_few_denials(
    mcp_server_factory: Any, gateway_factory: Any, tmp_path: Path
) -> None:
    _, gateway = calc_endpoint(mcp_server_factory, gateway_factory, tmp_path)
    assert gateway.org is not None
    admin = {"authorization": f"Bearer {gateway.key}"}
    made = httpx.post(
        f"{gateway.url}/v1/admin/orgs/{gateway.org.org_name}/keys",
        json={"name": "reader", "role": "viewer"},
        headers=admin,
        timeout=30,
    )
    viewer = {"authorization": f"Bearer {made.json()['key']}"}
    for _ in range(3):  # a loop: the same forbidden route, again and again
        for method in METHODS:
            status = httpx.request(method, f"{gateway.url}/mcp/tools", headers=viewer, timeout=30).status_code
            assert status == (403 if method in ("GET", "DELETE") else 405), (method, status)
    trail = httpx.get(
        f"{gateway.url}/v1/admin/orgs/{gateway.org.org_name}/audit",
        params={"limit": 500},
        headers=admin,
        timeout=30,
    ).json()["data"]
    denials = [e["target"] for e in trail if e["action"] == "access.denied"]
    assert len(denials) <= 3, f"one key, one route, one minute: {len(denials)} denial entries: {denials}"
