"""``/metrics`` carries only names the operator chose: one organisation's junk model names cannot push
another's real model into ``other``, inline plugins' server and tool names never appear, and
``metrics_token`` / ``metrics_allowed_networks`` protect the endpoint when set."""

from __future__ import annotations

from collections.abc import Callable

import httpx

from tests.support.agent_loop import USER, inline, rounds, summarise
from tests.support.gateway import RunningGateway
from tests.support.mcp_servers import McpTestServer
from tests.support.metrics import scrape, value
from tests.support.scripted_llm import Reply, ScriptedLLM


def chat(gateway: RunningGateway, key: str, model: str, **headers: str) -> httpx.Response:
    return httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": model, "messages": USER},
        headers={"authorization": f"Bearer {key}", **headers},
        timeout=30,
    )


def model_labels(gateway: RunningGateway) -> set[str]:
    return {
        dict(labels).get("model", "") for (name, labels) in scrape(gateway) if name == "hatchway_runs_total"
    }


def test_junk_model_names_cannot_evict_another_organisations_real_model(
    gateway: RunningGateway, llm: ScriptedLLM
) -> None:
    mallory = gateway.new_org()
    for n in range(250):  # more distinct names than the label budget (200)
        assert chat(gateway, mallory.key, f"junk-{n}-secret-customer").status_code == 404

    llm.reply("hi")
    assert chat(gateway, gateway.key, "gpt-4o").status_code == 200

    labels = model_labels(gateway)
    assert "gpt-4o" in labels
    assert not any(label.startswith("junk-") for label in labels)
    samples = scrape(gateway)
    assert value(samples, "hatchway_runs_total", route="chat.completions", model="gpt-4o", status="ok") == 1


def test_inline_plugin_servers_and_tools_are_not_named_in_metrics(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory, llm: ScriptedLLM
) -> None:
    server = mcp_server_factory("acme-private-crm")
    gateway = gateway_factory(allow_private_mcp_urls=True)
    plugin = inline({"mcp_servers": [{"id": "acme_private_crm", "url": server.url}]})
    llm.handler = rounds(Reply(tool_calls=[("acme_private_crm__echo", {"text": "x"})]), summarise)

    assert chat(gateway, gateway.key, "gpt-4o", **{"hatchway-mcp-plugin": plugin}).status_code == 200

    text = httpx.get(f"{gateway.url}/metrics").text
    assert "acme_private_crm" not in text
    assert (
        value(scrape(gateway), "hatchway_tool_calls_total", server="inline", tool="inline", outcome="ok") == 1
    )


def test_metrics_token_and_networks_protect_the_endpoint(gateway_factory) -> None:
    protected = gateway_factory(metrics_token="scrape-me", metrics_allowed_networks=["127.0.0.0/8"])
    assert httpx.get(f"{protected.url}/metrics").status_code == 401
    assert httpx.get(f"{protected.url}/metrics", headers={"authorization": "Bearer nope"}).status_code == 401
    assert (
        httpx.get(f"{protected.url}/metrics", headers={"authorization": "Bearer scrape-me"}).status_code
        == 200
    )

    elsewhere = gateway_factory(metrics_allowed_networks=["10.0.0.0/8"])
    assert httpx.get(f"{elsewhere.url}/metrics").status_code == 403
