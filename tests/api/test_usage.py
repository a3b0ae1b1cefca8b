"""Spend end to end: each model call priced on its run-log step and summed on the run record (from
genai-prices' own figure for a known model, from hatchway.yaml for a self-hosted one, null for an
unknown one), and ``GET /v1/usage`` summing exactly those records per key, end user, agent and
model, for the caller's organisation only; the Prometheus counter moves with them."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import genai_prices
import httpx
import pytest

from hatchway.principal import Role
from hatchway.store.db import Database
from hatchway.store.orgs import OrgStore
from tests.support.agent_loop import USER, log_of, rounds, write_plugin
from tests.support.gateway import RunningGateway
from tests.support.mcp_servers import McpTestServer
from tests.support.metrics import scrape, value
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import wait_until

LOCAL_PRICE = {"input_per_mtok": 0.4, "output_per_mtok": 1.6}
MODELS = [
    {"name": "mini", "provider": "upstream", "upstream_model": "gpt-4o-mini"},
    {"name": "local", "provider": "upstream", "upstream_model": "llama-local", "price": LOCAL_PRICE},
    {"name": "mystery", "provider": "upstream", "upstream_model": "llama-unknown"},
]
AGENT_ROUNDS = ((120, 30), (200, 50))
"""Prompt and completion tokens of the agent's two model rounds."""


def table_usd(prompt_tokens: int, completion_tokens: int, model: str = "gpt-4o-mini") -> float:
    """What genai-prices itself says the call costs."""
    usage = genai_prices.Usage(input_tokens=prompt_tokens, output_tokens=completion_tokens)
    return float(genai_prices.calc_price(usage, model, provider_id="openai").total_price)


def local_usd(prompt_tokens: int, completion_tokens: int) -> float:
    price = LOCAL_PRICE
    return (prompt_tokens * price["input_per_mtok"] + completion_tokens * price["output_per_mtok"]) / 1e6


def script(body: dict[str, Any]) -> Reply:
    """The agent (offered the echo tool) takes two rounds; every other call answers at once."""
    if body.get("tools"):
        (p1, c1), (p2, c2) = AGENT_ROUNDS
        return rounds(
            Reply(tool_calls=[("search__echo", {"text": "x"})], prompt_tokens=p1, completion_tokens=c1),
            Reply("found it", prompt_tokens=p2, completion_tokens=c2),
        )(body)
    return Reply("ok", prompt_tokens=11, completion_tokens=7)


@pytest.fixture
def spend_gateway(
    mcp_server_factory: Callable[..., McpTestServer],
    gateway_factory,
    llm: ScriptedLLM,
    tmp_path: Path,
    database_url: str,
) -> RunningGateway:
    """On SQLite and, when configured, PostgreSQL (a fresh organisation in the shared database)."""
    search = mcp_server_factory("search")
    plugin = write_plugin(tmp_path, "research", {"mcp_servers": [{"id": "search", "url": search.url}]})
    llm.handler = script
    agent = {"name": "researcher", "model": "mini", "plugin": plugin}
    return gateway_factory(database_url, models=MODELS, agents=[agent])


def chat(gateway: RunningGateway, model: str, *, key: str | None = None, user: str | None = None) -> str:
    """One chat completion; the id of its run record."""
    headers = {"X-On-Behalf-Of": user} if user else {}
    raw = gateway.client(key, default_headers=headers).chat.completions.with_raw_response.create(
        model=model, messages=USER
    )
    return raw.headers["x-hatchway-request-id"]


def model_steps(record: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in record["steps"] if s["type"] == "model_call"]


def test_each_model_call_is_priced_on_its_step_and_summed_on_the_record(
    spend_gateway: RunningGateway,
) -> None:
    gateway = spend_gateway
    known = log_of(gateway, chat(gateway, "mini"))
    [step] = model_steps(known)
    assert step["cost_usd"] == pytest.approx(table_usd(11, 7), abs=1e-12) and step["cost_usd"] > 0
    assert step["upstream_model"] == "gpt-4o-mini"
    assert step["priced_as"] == "genai-prices:openai/gpt-4o-mini"
    assert known["cost_usd"] == step["cost_usd"]

    stream = gateway.client().chat.completions.with_raw_response.create(
        model="mini", messages=USER, stream=True, stream_options={"include_usage": True}
    )
    list(stream.parse())
    streamed = log_of(gateway, stream.headers["x-hatchway-request-id"])
    assert streamed["cost_usd"] == pytest.approx(table_usd(11, 7), abs=1e-12)

    agent = log_of(gateway, chat(gateway, "agent:researcher"))
    steps = model_steps(agent)
    assert [s["cost_usd"] for s in steps] == pytest.approx([table_usd(*r) for r in AGENT_ROUNDS], abs=1e-12)
    assert agent["rounds"] == 2 and agent["agent"] == "researcher"
    assert agent["cost_usd"] == pytest.approx(sum(table_usd(*r) for r in AGENT_ROUNDS), abs=1e-12)

    local = log_of(gateway, chat(gateway, "local"))
    assert local["cost_usd"] == pytest.approx(local_usd(11, 7), abs=1e-12)
    assert model_steps(local)[0]["priced_as"] == "hatchway.yaml:models[1]"

    unknown = log_of(gateway, chat(gateway, "mystery"))
    [step] = model_steps(unknown)
    assert (
        step["cost_usd"] is None and step["priced_as"] is None and step["upstream_model"] == "llama-unknown"
    )
    assert unknown["cost_usd"] is None and unknown["usage"]["total_tokens"] == 18  # counted, not priced


def usage(gateway: RunningGateway, key: str | None = None, **params: str) -> httpx.Response:
    return httpx.get(
        f"{gateway.url}/v1/usage", params=params, headers={"authorization": f"Bearer {key or gateway.key}"}
    )


def expected_groups(records: list[dict[str, Any]], field: str) -> dict[Any, dict[str, Any]]:
    """``/v1/usage``'s groups, summed here from the run records themselves."""
    groups: dict[Any, dict[str, Any]] = defaultdict(
        lambda: (
            dict.fromkeys(("requests", "prompt_tokens", "completion_tokens", "total_tokens"), 0)
            | {"cost_usd": 0.0, "unpriced_requests": 0}
        )
    )
    for record in records:
        group = groups[record[field]]
        group["requests"] += 1
        for name in ("prompt_tokens", "completion_tokens", "total_tokens"):
            group[name] += record["usage"][name]
        if record["cost_usd"] is None:
            group["unpriced_requests"] += 1
        else:
            group["cost_usd"] += record["cost_usd"]
    return dict(groups)


def as_groups(answer: dict[str, Any], field: str) -> dict[Any, dict[str, Any]]:
    return {
        group[field]: {k: v for k, v in group.items() if k not in ("object", field, "key_name")}
        for group in answer["data"]
    }


def assert_same(actual: dict[Any, dict[str, Any]], expected: dict[Any, dict[str, Any]]) -> None:
    assert actual.keys() == expected.keys()
    for group, sums in expected.items():
        assert actual[group] == {**sums, "cost_usd": pytest.approx(sums["cost_usd"], abs=1e-9)}, group


def second_key(gateway: RunningGateway, name: str) -> str:
    async def create() -> str:
        db = Database(gateway.settings.database_url)
        try:
            assert gateway.org is not None
            return (await OrgStore(db).create_key(gateway.org.org_id, name, role=Role.ADMIN))[1]
        finally:
            await db.close()

    return asyncio.run(create())


def test_usage_sums_the_run_records_by_key_user_agent_and_model(spend_gateway: RunningGateway) -> None:
    gateway = spend_gateway
    batch = second_key(gateway, "batch")
    before = scrape(gateway)
    chat(gateway, "mini", user="alice")
    chat(gateway, "mini", user="alice")
    chat(gateway, "local", user="bob")
    chat(gateway, "agent:researcher", key=batch)
    chat(gateway, "mystery", key=batch, user="bob")
    records = httpx.get(
        f"{gateway.url}/v1/logs", params={"limit": 200}, headers={"authorization": f"Bearer {gateway.key}"}
    ).json()["data"]
    assert len(records) == 5

    by_key = usage(gateway, group_by="key").json()
    assert {g["key_name"]: g["requests"] for g in by_key["data"]} == {"default": 3, "batch": 2}
    actual = {g["key_name"]: as_groups({"data": [g]}, "key")[g["key"]] for g in by_key["data"]}
    assert_same(actual, expected_groups(records, "key_name"))
    for group_by, field in (("user", "on_behalf_of"), ("agent", "agent"), ("model", "model")):
        answer = usage(gateway, group_by=group_by).json()
        assert answer["object"] == "list" and answer["group_by"] == group_by
        assert_same(as_groups(answer, group_by), expected_groups(records, field))
        costs = [g["cost_usd"] for g in answer["data"]]
        assert costs == sorted(costs, reverse=True)  # the costliest first

    totals = usage(gateway).json()["totals"]
    priced = [r["cost_usd"] for r in records if r["cost_usd"] is not None]
    assert totals["requests"] == 5 and totals["unpriced_requests"] == 1
    assert totals["cost_usd"] == pytest.approx(sum(priced), abs=1e-9)
    assert totals["total_tokens"] == sum(r["usage"]["total_tokens"] for r in records)
    model = as_groups(usage(gateway, group_by="model").json(), "model")
    assert model["mini"]["cost_usd"] == pytest.approx(2 * table_usd(11, 7), abs=1e-12)
    assert model["mystery"] == {**model["mystery"], "cost_usd": 0.0, "unpriced_requests": 1}

    after = scrape(gateway)
    moved = value(after, "hatchway_cost_usd_total", model="mini") - value(
        before, "hatchway_cost_usd_total", model="mini"
    )
    assert moved == pytest.approx(2 * table_usd(11, 7), abs=1e-12)
    assert value(after, "hatchway_cost_usd_total", model="agent:researcher") == pytest.approx(
        sum(table_usd(*r) for r in AGENT_ROUNDS), abs=1e-12
    )
    assert value(after, "hatchway_unpriced_runs_total", model="mystery") == 1


def test_another_organisation_sees_none_of_it_and_the_filters_are_checked(
    spend_gateway: RunningGateway,
) -> None:
    gateway = spend_gateway
    chat(gateway, "mini", user="alice")
    other = gateway.new_org()
    theirs = usage(gateway, other.key, group_by="user").json()
    assert theirs["data"] == [] and theirs["totals"]["requests"] == 0 and theirs["totals"]["cost_usd"] == 0
    chat(gateway, "local", key=other.key)
    assert [g["model"] for g in usage(gateway, other.key).json()["data"]] == ["local"]
    assert [g["model"] for g in usage(gateway).json()["data"]] == ["mini"]

    bad = usage(gateway, group_by="team")
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "group_by"
    assert "key, user, agent, model" in bad.json()["error"]["message"]
    backwards = usage(gateway, since="2026-02-01T00:00:00Z", until="2026-01-01T00:00:00Z")
    assert backwards.status_code == 400 and backwards.json()["error"]["param"] == "until"
    future = usage(gateway, since="2999-01-01T00:00:00Z").json()
    assert future["data"] == [] and future["since"] == 32472144000
    assert usage(gateway, key="hw-not-a-key").status_code == 401


def test_subagent_children_are_records_with_their_own_cost(
    gateway_factory, llm: ScriptedLLM, database_url: str
) -> None:
    def lead(body: dict[str, Any]) -> Reply:
        task = next(m["content"] for m in body["messages"] if m["role"] == "user")
        if any(m["role"] == "tool" for m in body["messages"]):
            return Reply("all done", prompt_tokens=300, completion_tokens=40)
        if task == "top":
            return Reply(tool_calls=[("spawn_subagent", {"task": "a"}), ("spawn_subagent", {"task": "b"})])
        return Reply(f"child {task}", prompt_tokens=50, completion_tokens=20)

    llm.handler = lead
    lead_agent = {"name": "lead", "model": "mini", "subagents": {"enabled": True}}
    gateway = gateway_factory(database_url, models=MODELS, agents=[lead_agent])
    parent = gateway.client().responses.create(model="agent:lead", input="top")

    def records() -> list[dict[str, Any]]:
        answer = httpx.get(f"{gateway.url}/v1/logs", headers={"authorization": f"Bearer {gateway.key}"})
        return answer.json()["data"]

    found = wait_until(lambda: (r := records())[2:] and r, message="three run records")
    [top] = [r for r in found if r["response_id"] == parent.id]
    children = [r for r in found if r["parent_id"] == parent.id]
    assert top["cost_usd"] == pytest.approx(table_usd(11, 7) + table_usd(300, 40), abs=1e-12)
    assert [c["cost_usd"] for c in children] == pytest.approx([table_usd(50, 20)] * 2, abs=1e-12)
    totals = usage(gateway).json()["totals"]
    assert totals["requests"] == 3
    assert totals["cost_usd"] == pytest.approx(top["cost_usd"] + 2 * table_usd(50, 20), abs=1e-9)
