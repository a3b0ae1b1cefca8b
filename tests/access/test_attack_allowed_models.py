"""Attacks: a key restricted to some models (``allowed_models``) reaching another model.

``POST /v1/responses/compact`` calls a model (the summariser, the one the body names) but never asks
``check_model``: the planner is not involved (``api/responses_compact.py`` resolves the target
itself).
"""

from __future__ import annotations

from typing import Any

import httpx

from tests.support.gateway import RunningGateway
from tests.support.scripted_llm import Reply, ScriptedLLM

MODELS = [
    {"name": "gpt-4o", "provider": "upstream", "upstream_model": "gpt-4o"},
    {"name": "gpt-4o-mini", "provider": "upstream", "upstream_model": "gpt-4o-mini"},
]


def _http(gateway: RunningGateway, key: str, method: str, path: str, **kw: Any) -> httpx.Response:
    return httpx.request(
        method, f"{gateway.url}{path}", headers={"authorization": f"Bearer {key}"}, timeout=60, **kw
    )


def test_a_key_restricted_to_one_model_cannot_compact_with_another(
    gateway_factory: Any, llm: ScriptedLLM
) -> None:
    llm.handler = lambda body: Reply(text="a summary")
    gateway: RunningGateway = gateway_factory(models=MODELS)
    assert gateway.org is not None
    made = _http(
        gateway,
        gateway.key,
        "POST",
        f"/v1/admin/orgs/{gateway.org.org_name}/keys",
        json={"name": "mini-only", "allowed_models": ["gpt-4o-mini"]},
    )
    key = made.json()["key"]
    chat = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    assert _http(gateway, key, "POST", "/v1/chat/completions", json=chat).status_code == 403  # as documented
    before = len(llm.requests)
    compacted = _http(
        gateway,
        key,
        "POST",
        "/v1/responses/compact",
        json={
            "model": "gpt-4o",
            "input": [
                {"type": "message", "role": "user", "content": "write me an essay on anything"},
                {"type": "message", "role": "assistant", "content": "Sure: ..."},
            ],
        },
    )
    called = [r.get("model") for r in llm.requests[before:]]
    assert compacted.status_code == 403 and not called, (
        f"a key allowed only gpt-4o-mini had gpt-4o called through /v1/responses/compact: "
        f"{compacted.status_code}, upstream models {called}"
    )
