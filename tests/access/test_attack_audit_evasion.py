"""Attacks: an organisation's admin changes something without it reaching the audit trail.

``PUT /v1/secrets/{name}`` writes the secret first and records it afterwards, with the request's raw
``allowed_hosts`` in the entry's detail. ``check_detail`` refuses a detail over 8 KiB by raising, so a
request whose raw ``allowed_hosts`` are long (padding that ``normalise_entry`` strips) has its secret
written and no entry recorded: the admin gets a 500, the vault holds the new value, the trail says
nothing.
"""

from __future__ import annotations

from typing import Any

import httpx

from tests.support.gateway import RunningGateway


def _http(gateway: RunningGateway, key: str, method: str, path: str, **kw: Any) -> httpx.Response:
    return httpx.request(
        method, f"{gateway.url}{path}", headers={"authorization": f"Bearer {key}"}, timeout=60, **kw
    )


def test_a_secret_written_with_padded_allowed_hosts_is_recorded_or_refused(gateway: RunningGateway) -> None:
    assert gateway.org is not None
    padded = " " * 9000 + "api.example.com"  # strip()ped by normalise_entry: a valid entry
    put = _http(
        gateway,
        gateway.key,
        "PUT",
        "/v1/secrets/stripe",
        json={"value": "sk_live_x", "allowed_hosts": [padded]},
    )
    written = "stripe" in {
        s["name"] for s in _http(gateway, gateway.key, "GET", "/v1/secrets").json()["data"]
    }
    trail = _http(gateway, gateway.key, "GET", f"/v1/admin/orgs/{gateway.org.org_name}/audit").json()["data"]
    recorded = any(e["action"] == "secret.put" and e["target"] == "secret:stripe" for e in trail)
    assert recorded or not written, (
        f"the secret was written ({put.status_code}) and the audit trail has no secret.put: "
        f"{[e['action'] for e in trail]}"
    )
