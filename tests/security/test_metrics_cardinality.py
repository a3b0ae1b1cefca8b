"""``/metrics`` carries only names the operator chose: one organisation's junk model names cannot push
another's real model into ``other``, inline plugins' server and tool names never appear, and
``metrics_token`` / ``metrics_allowed_networks`` protect the endpoint when set."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support.agent_loop import USER, inline, rounds, summarise
from tests.support.gateway import RunningGateway
from tests.support.mcp_endpoints import UPSTREAM_TOKEN, calc_endpoint
from tests.support.mcp_servers import McpTestServer
from tests.support.metrics import scrape, value
from tests.support.scripted_llm import Reply, ScriptedLLM

MAX_LABELS = 200
"""The label budget of a tool or server name (``observability/metrics.py``)."""


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


def test_tool_names_made_up_by_endpoint_callers_or_models_are_not_labels(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory, tmp_path, llm: ScriptedLLM
) -> None:
    """Red team round two: 400 made-up names became series on the unauthenticated ``/metrics``, and
    then another organisation's real tool was counted as ``other``. Only a tool resolved to a
    configured server is labelled by its name."""
    _, gateway = calc_endpoint(mcp_server_factory, gateway_factory, tmp_path)
    mallory = gateway.new_org()
    assert gateway.put_secret("calc_token", UPSTREAM_TOKEN, key=mallory.key).status_code == 201

    async def made_up(count: int) -> None:
        http = httpx2.AsyncClient(headers={"authorization": f"Bearer {mallory.key}"}, timeout=30)
        async with Client(streamable_http_client(f"{gateway.url}/mcp/tools", http_client=http)) as client:  # type: ignore[arg-type]
            for n in range(count):
                assert (await client.call_tool(f"calc__junk_{n}_secret", {})).is_error

    asyncio.run(made_up(MAX_LABELS + 10))
    # …and a model of hers calling made-up tools in the loop.
    llm.handler = rounds(Reply(tool_calls=[(f"loop_junk_{n}", {}) for n in range(5)]), summarise)
    answered = chat(gateway, mallory.key, "agent:calc")
    assert answered.status_code == 200, answered.text

    async def real() -> None:
        http = httpx2.AsyncClient(headers={"authorization": f"Bearer {gateway.key}"}, timeout=30)
        async with Client(streamable_http_client(f"{gateway.url}/mcp/tools", http_client=http)) as client:  # type: ignore[arg-type]
            assert (await client.call_tool("calc__add", {"a": 1, "b": 2})).content[0].text == "3"

    asyncio.run(real())

    text = httpx.get(f"{gateway.url}/metrics").text
    assert "junk" not in text
    samples = scrape(gateway)
    assert value(samples, "hatchway_tool_calls_total", server="calc", tool="add", outcome="ok") == 1
