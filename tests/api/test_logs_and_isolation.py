"""Request logs are recorded per request and scoped to the key's organisation."""

from __future__ import annotations

import httpx

from tests.support.scripted_llm import ScriptedLLM


def _logs(gateway, key: str, **params) -> dict:
    response = httpx.get(f"{gateway.url}/v1/logs", params=params, headers={"authorization": f"Bearer {key}"})
    assert response.status_code == 200, response.text
    return response.json()


def test_requests_are_logged_with_on_behalf_of_and_orgs_are_isolated(
    gateway_factory, database_url: str, llm: ScriptedLLM
) -> None:
    gateway = gateway_factory(database_url=database_url)
    other = gateway.new_org()
    llm.reply("for org A", prompt_tokens=3, completion_tokens=2)
    llm.reply("for org B")
    gateway.client(default_headers={"X-On-Behalf-Of": "alice@example.com"}).chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "a"}]
    )
    gateway.client(key=other.key).chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "b"}]
    )

    mine = _logs(gateway, gateway.key)["data"]
    theirs = _logs(gateway, other.key)["data"]

    assert len(mine) == 1 and len(theirs) == 1
    record = mine[0]
    assert record["on_behalf_of"] == "alice@example.com"
    assert record["model"] == "gpt-4o" and record["status"] == "ok" and record["http_status"] == 200
    assert record["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    assert record["rounds"] == 1 and record["latency_ms"] > 0
    assert theirs[0]["id"] != record["id"] and theirs[0]["on_behalf_of"] is None
    cross = httpx.get(
        f"{gateway.url}/v1/logs/{record['id']}", headers={"authorization": f"Bearer {other.key}"}
    )
    assert cross.status_code == 404
    own = httpx.get(
        f"{gateway.url}/v1/logs/{record['id']}", headers={"authorization": f"Bearer {gateway.key}"}
    )
    assert own.json()["id"] == record["id"]


def test_failed_requests_are_logged_too(gateway, llm: ScriptedLLM) -> None:
    llm.reply(status=429, error="slow down")
    response = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]},
        headers={"authorization": f"Bearer {gateway.key}"},
    )
    assert response.status_code == 429
    [record] = _logs(gateway, gateway.key, status="error")["data"]
    assert record["http_status"] == 429 and "slow down" in record["error"]


def test_health_and_ready(gateway) -> None:
    assert httpx.get(f"{gateway.url}/healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{gateway.url}/readyz")
    assert ready.status_code == 200 and ready.json()["checks"]["database"] == "ok"
