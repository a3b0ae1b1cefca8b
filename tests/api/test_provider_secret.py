"""A provider's ``api_key: secret.<name>`` comes from the ``system`` organisation's vault, on first use."""

from __future__ import annotations

import uuid

import httpx

from hatchway.store.orgs import OrgStore
from hatchway.vault import SYSTEM_ORG
from tests.support.leak_scanner import SecretScanner
from tests.support.scripted_llm import ScriptedLLM


def _chat(gateway) -> httpx.Response:  # type: ignore[no-untyped-def]
    return httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
        headers={"authorization": f"Bearer {gateway.key}"},
        timeout=30,
    )


def test_the_provider_key_is_read_from_the_vault_when_first_needed(
    secret_scanner: SecretScanner, gateway_factory, llm: ScriptedLLM
) -> None:
    provider = {"id": "upstream", "base_url": llm.base_url, "api_key": "secret.upstream_key"}
    gateway = gateway_factory(providers=[provider])
    secret_scanner.watch_database(gateway.settings.database_url)
    upstream_key = f"sk-upstream-{uuid.uuid4().hex}"
    secret_scanner.watch(upstream_key)

    missing = _chat(gateway)  # the gateway started without the secret: only this request fails
    secret_scanner.observe("chat response", missing.text)
    assert missing.status_code == 502
    message = missing.json()["error"]["message"]
    assert "secret.upstream_key" in message and f"hatchway orgs create {SYSTEM_ORG}" in message
    assert llm.requests == []

    gw = gateway.gateway
    system = gateway.server.call(OrgStore(gw.db).create_org(SYSTEM_ORG))
    gateway.server.call(gw.vault.put(system.id, "upstream_key", upstream_key))
    llm.reply("hello")
    ok = _chat(gateway)
    secret_scanner.observe("chat response", ok.text)

    assert ok.status_code == 200, ok.text
    assert llm.headers[-1]["authorization"] == f"Bearer {upstream_key}"
    logs = httpx.get(f"{gateway.url}/v1/logs", headers={"authorization": f"Bearer {gateway.key}"}).json()
    secret_scanner.observe("logs", str(logs))
    assert [r["http_status"] for r in logs["data"]] == [200, 502]


def test_another_organisation_cannot_stand_in_for_system(gateway_factory, llm: ScriptedLLM) -> None:
    provider = {"id": "upstream", "base_url": llm.base_url, "api_key": "secret.upstream_key"}
    gateway = gateway_factory(providers=[provider])
    gw = gateway.gateway
    # The caller's own organisation has a secret of that name: it is not used for the provider.
    gateway.server.call(gw.vault.put(gateway.org.org_id, "upstream_key", "callers-own-value"))
    gateway.server.call(OrgStore(gw.db).create_org(SYSTEM_ORG))

    response = _chat(gateway)

    assert response.status_code == 502
    assert (
        f"no secret 'upstream_key' in the organisation '{SYSTEM_ORG}'" in response.json()["error"]["message"]
    )
    assert llm.requests == []
