"""While the database cannot be reached, a request that needs it is answered 503
``database_unavailable`` with ``retry-after`` — the caller can tell an outage from a bug — and the
same request succeeds once the database is back."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.support.gateway import RunningGateway
from tests.support.outage_proxy import OutageProxy
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import wait_until

pytestmark = pytest.mark.postgres


def test_a_request_needing_the_database_during_an_outage_is_a_503(
    gateway_factory: Callable[..., RunningGateway],
    llm: ScriptedLLM,
    pg_database_url: str,
    proxy: OutageProxy,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # the default spool directory is relative: keep it out of the tree
    gateway = gateway_factory(database_url=proxy.url(pg_database_url))
    llm.default = Reply("ok")
    auth = {"authorization": f"Bearer {gateway.key}"}
    create = {"model": "gpt-4o", "input": "hi"}
    assert httpx.post(f"{gateway.url}/v1/responses", json=create, headers=auth).status_code == 200

    proxy.cut()
    for method, path, body in [("POST", "/v1/responses", create), ("GET", "/v1/logs", None)]:
        answer = httpx.request(method, f"{gateway.url}{path}", json=body, headers=auth, timeout=30)
        assert answer.status_code == 503, answer.text
        assert answer.json()["error"]["code"] == "database_unavailable"
        assert answer.headers["retry-after"] == "5"

    proxy.restore()

    def served() -> httpx.Response | None:
        answer = httpx.post(f"{gateway.url}/v1/responses", json=create, headers=auth)
        return answer if answer.status_code == 200 else None

    again = wait_until(served, timeout=30, message="the gateway to serve again once the database is back")
    assert again.json()["status"] == "completed"
