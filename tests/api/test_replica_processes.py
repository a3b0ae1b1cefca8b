"""Two ``hatchway serve`` processes (A and B) on one PostgreSQL and one Redis, as a load balancer
would spread a client's requests: chains, operations, OAuth tokens, tool results and tool listings
are shared state, so it does not matter which replica a request lands on.

The upstream model is the scripted one; the MCP servers are real (the example ``contas`` server, SDK
servers that count their calls, one of them behind an OAuth token endpoint over TLS). The replicas
trust that endpoint's test CA through ``SSL_CERT_FILE``, as a deployment with a private CA would.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from hatchway.config.agent_files import agent_files_in, load_agent_tools
from hatchway.config.agents import OperationSettings
from hatchway.engine.context import RunContext
from hatchway.engine.tools.operations.service import OperationService
from hatchway.engine.tools.operations.store import OperationStore
from hatchway.principal import Principal
from hatchway.store.db import Database
from tests.support.agent_loop import USER, rounds, summarise, tool_steps
from tests.support.backends import NEEDS_PG_AND_REDIS, REDIS_URL
from tests.support.contas import ABC, RunningContas
from tests.support.gateway import OrgKey
from tests.support.mcp_servers import McpTestServer
from tests.support.paths import EXAMPLE_AGENT
from tests.support.replicas import (
    Replicas,
    ServeProcess,
    eventually,
    purge_redis,
    replica_config,
    unique_redis_prefix,
)
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.token_endpoint import IssuedTokens, TokenEndpoint

CLIENT_SECRET = "cs:replicas/+=9f86d081884c7d659a2feaa0c55ad015"
pytestmark = NEEDS_PG_AND_REDIS


@dataclass
class World:
    replicas: Replicas
    a: ServeProcess
    b: ServeProcess
    upstream: ScriptedLLM
    contas: RunningContas
    idp: TokenEndpoint
    billing: McpTestServer
    tools: McpTestServer
    database_url: str


def _plugin(directory: Path, name: str, servers: list[dict[str, Any]], **agent: Any) -> str:
    path = directory / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump({"version": "1", "mcp_servers": servers, "agent": agent}), encoding="utf-8"
    )
    return str(path)


def _config(tmp: Path, database_url: str, prefix: str, world: dict[str, Any]) -> dict[str, Any]:
    idp: TokenEndpoint = world["idp"]
    billing = {
        "id": "billing",
        "url": world["billing"].url,
        "auth": {
            "type": "oauth",
            "token_url": idp.url,
            "client_id": "replicas",
            "secret_ref": "secret.billing_client",
            "scopes": ["billing.read"],
        },
        "tools": ["echo"],
    }
    models = [{"name": n, "provider": "upstream", "upstream_model": n} for n in ("billing", "cached")]
    config = replica_config(tmp, database_url, REDIS_URL, prefix, world["upstream"].base_url)
    config["models"] += models
    config["routing_rules"] = [
        {"name": "billing", "match": {"model": "billing"}, "plugin": _plugin(tmp, "billing", [billing])},
        {
            "name": "cached",
            "match": {"model": "cached"},
            "plugin": _plugin(
                tmp, "cached", [{"id": "cache", "url": world["tools"].url}], tool_cache_ttl_seconds=600
            ),
        },
    ]
    config["agents"] = [
        {
            "name": "contas",
            "model": "gpt-4o",
            "plugin": _plugin(tmp, "contas", [{"id": "contas", "url": world["contas"].url}]),
            "tools": str(EXAMPLE_AGENT / "tools.yaml"),
            "tool_policies": str(EXAMPLE_AGENT / "tool_policies.yaml"),
        }
    ]
    return config


@pytest.fixture(scope="module")
def world(pg_database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("replicas")
    upstream = ScriptedLLM().start()
    contas = RunningContas().start()
    idp = TokenEndpoint(tmp).start()
    ca = tmp / "idp-ca.pem"
    idp.ca.cert_pem.write_to_path(str(ca))
    billing = McpTestServer("billing", token_verifier=IssuedTokens(idp), required_scopes=["billing.read"])
    billing.with_standard_tools().start()
    tools = McpTestServer("cache").with_standard_tools().start()
    parts = {"upstream": upstream, "idp": idp, "billing": billing, "tools": tools, "contas": contas}
    prefix = unique_redis_prefix()
    replicas = Replicas(tmp, _config(tmp, pg_database_url, prefix, parts), env={"SSL_CERT_FILE": str(ca)})
    try:
        a, b = replicas.serve("a"), replicas.serve("b")
        yield World(replicas, a, b, upstream, contas, idp, billing, tools, pg_database_url)
    finally:
        replicas.stop()
        purge_redis(REDIS_URL, prefix)
        for server in (tools, billing, idp, contas, upstream):
            server.stop()


def test_a_response_created_on_a_is_continued_on_b(world: World, pg_org: OrgKey) -> None:
    world.upstream.handler = rounds(Reply(text="Lisbon."), Reply(text="You asked about Portugal."))

    first = world.a.client(pg_org.key).responses.create(model="gpt-4o", input="Capital of Portugal?")
    second = world.b.client(pg_org.key).responses.create(
        model="gpt-4o", previous_response_id=first.id, input="What did I ask about?"
    )

    assert second.output_text == "You asked about Portugal." and second.previous_response_id == first.id
    sent = world.upstream.requests[-1]["messages"]
    assert [(m["role"], m["content"]) for m in sent] == [
        ("user", "Capital of Portugal?"),
        ("assistant", "Lisbon."),
        ("user", "What did I ask about?"),
    ]


def _pending_operation(world: World, org: OrgKey) -> str:
    """An operation asked through A's agent flow, stopped at AWAITING_CONFIRMATION (in the shared DB)."""

    async def ask() -> str:
        db = Database(world.database_url)
        try:
            service = OperationService(
                "contas",
                load_agent_tools(agent_files_in(EXAMPLE_AGENT)),
                OperationStore(db),
                OperationSettings(),
            )
            ctx = RunContext(
                principal=Principal(org.org_id, org.org_name), session_key="s1", on_behalf_of="ana"
            )
            step = await service.call("cancelar_vas_avulso", ABC, ctx, world.contas.caller(), call_id="c1")
            assert step.operation is not None
            return step.operation.id
        finally:
            await db.close()

    return asyncio.run(ask())


def test_an_operation_confirmed_on_both_replicas_at_once_executes_once(world: World, pg_org: OrgKey) -> None:
    op_id = _pending_operation(world, pg_org)
    assert (
        world.a.http("GET", f"/v1/operations/{op_id}", pg_org.key).json()["status"] == "AWAITING_CONFIRMATION"
    )
    together = threading.Barrier(4)

    def confirm(replica: ServeProcess) -> int:
        together.wait(10)
        headers = {"x-on-behalf-of": "ana"}  # the operation's own end user
        return replica.http(
            "POST", f"/v1/operations/{op_id}/confirm", pg_org.key, headers=headers
        ).status_code

    with ThreadPoolExecutor(4) as pool:
        codes = sorted(pool.map(confirm, [world.a, world.b, world.a, world.b]))

    assert codes == [200, 409, 409, 409], world.replicas.logs()
    assert world.contas.backend.executions == {op_id: 1}
    done = world.b.http("GET", f"/v1/operations/{op_id}", pg_org.key).json()
    assert done["status"] == "COMPLETED" and done["verdict"]["status"] == "PARTIAL_SUCCESS"


def test_an_oauth_token_is_fetched_once_for_calls_spread_over_both_replicas(
    world: World, pg_org: OrgKey
) -> None:
    stored = world.a.http("PUT", "/v1/secrets/billing_client", pg_org.key, json={"value": CLIENT_SECRET})
    assert stored.status_code in (200, 201), stored.text
    world.upstream.handler = rounds(Reply(tool_calls=[("billing__echo", {"text": "t"})]), summarise)
    world.idp.gate.clear()  # hold the token endpoint's answer until both replicas want a token
    fetches = len(world.idp.requests)

    def ask(replica: ServeProcess) -> str:
        reply = replica.client(pg_org.key).chat.completions.create(model="billing", messages=USER)
        return reply.choices[0].message.content or ""

    try:
        with ThreadPoolExecutor(6) as pool:
            answers = pool.map(ask, [world.a, world.b] * 3)
            # One replica fetches; the other logs that it waits for that fetch (the shared lock).
            eventually(lambda: len(world.idp.requests) > fetches, 30, "a token request", world.replicas)
            eventually(
                lambda: any("another replica is fetching it" in r.log() for r in (world.a, world.b)),
                30,
                "the other replica to wait for the fetch in flight",
                world.replicas,
            )
            world.idp.gate.set()
            answers = list(answers)
    finally:
        world.idp.gate.set()

    assert all("echo:t" in answer for answer in answers), answers
    assert len(world.idp.requests) == fetches + 1
    token = world.idp.issued[-1]
    assert set(world.billing.bearers()[-6:]) == {token}
    assert CLIENT_SECRET not in world.a.log() + world.b.log()


def test_a_tool_result_cached_by_a_is_a_hit_on_b_and_the_listing_is_shared(
    world: World, pg_org: OrgKey
) -> None:
    world.upstream.handler = rounds(Reply(tool_calls=[("cache__echo", {"text": "once"})]), summarise)
    calls, listings = world.tools.tool_calls("echo"), len(world.tools.calls_of("tools/list"))

    on_a = world.a.client(pg_org.key).chat.completions.with_raw_response.create(model="cached", messages=USER)
    on_b = world.b.client(pg_org.key).chat.completions.with_raw_response.create(model="cached", messages=USER)

    assert "echo:once" in (on_a.parse().choices[0].message.content or "")
    assert "echo:once" in (on_b.parse().choices[0].message.content or "")
    assert world.tools.tool_calls("echo") == calls + 1  # B answered from A's cached result…
    assert len(world.tools.calls_of("tools/list")) == listings + 1  # …with A's tool listing

    def step_on_b() -> dict[str, Any] | None:
        log_id = on_b.headers["x-hatchway-request-id"]
        record = world.b.http("GET", f"/v1/logs/{log_id}", pg_org.key)
        return record.json() if record.status_code == 200 else None

    [step] = tool_steps(eventually(step_on_b, 10, "B's run record", world.replicas))
    assert step["cached"] is True, json.dumps(step)
