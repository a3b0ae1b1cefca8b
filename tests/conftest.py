"""Shared fixtures: the scripted upstream, a live gateway, and real databases."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hatchway.observability import log_redaction
from hatchway.redaction import Redactor
from hatchway.store.db import Database
from tests.support.backends import PG_URL, REDIS_URL, fresh_pg_database
from tests.support.contas import RunningContas, contas_model
from tests.support.gateway import OrgKey, RunningGateway, base_config, create_org_key, write_config
from tests.support.leak_scanner import secret_scanner  # noqa: F401  (fixture: scans for leaked secret values)
from tests.support.mcp_servers import McpTestServer
from tests.support.scripted_llm import ScriptedLLM


def pytest_report_header(config: pytest.Config) -> list[str]:
    pg = f"on ({PG_URL})" if PG_URL else "SKIPPED (set HATCHWAY_TEST_DATABASE_URL)"
    redis = f"on ({REDIS_URL})" if REDIS_URL else "SKIPPED (set HATCHWAY_TEST_REDIS_URL)"
    return [f"PostgreSQL tests: {pg}", f"Redis tests: {redis}"]


@pytest.fixture
def anyio_backend() -> str:
    """``@pytest.mark.anyio`` tests run on asyncio only (anyio's default would add trio when installed)."""
    return "asyncio"


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    server = ScriptedLLM().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def pg_database_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session (dropped at the end)."""
    with fresh_pg_database("hatchway_t") as url:
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each storage test runs on SQLite and, when configured, on PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'hatchway.db'}"
    return request.getfixturevalue("pg_database_url")


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    """A migrated ``Database`` on each backend of ``database_url`` (for ``@pytest.mark.anyio`` tests)."""
    database = Database(database_url)
    await database.migrate()
    await database.migrate()  # idempotent: a second start applies nothing
    yield database
    await database.close()


@pytest.fixture
async def sqlite_db(tmp_path: Path) -> AsyncIterator[Database]:
    """A migrated ``Database`` on SQLite only, for tests whose subject is not the storage."""
    database = Database(f"sqlite+aiosqlite:///{tmp_path / 'sqlite.db'}")
    await database.migrate()
    yield database
    await database.close()


@pytest.fixture
def pg_org(pg_database_url: str) -> OrgKey:
    """A fresh organisation and key in the session's PostgreSQL database: its caches start cold."""
    return asyncio.run(create_org_key(pg_database_url))


GatewayFactory = Callable[..., RunningGateway]


@pytest.fixture
def gateway_factory(tmp_path: Path, llm: ScriptedLLM) -> Iterator[GatewayFactory]:
    """``gateway_factory(**config_overrides)`` starts a gateway on the scripted upstream."""
    started: list[RunningGateway] = []

    def make(
        database_url: str | None = None, *, gateway_options: dict[str, Any] | None = None, **overrides: Any
    ) -> RunningGateway:
        """``gateway_options`` go to ``Gateway(...)`` (e.g. an injected ``tracer_provider``)."""
        config = base_config(tmp_path, llm.base_url, database_url, **overrides)
        path = write_config(tmp_path, config, f"hatchway-{len(started)}.yaml")
        gw = RunningGateway(path, **(gateway_options or {})).start()
        started.append(gw)
        return gw

    yield make
    for gw in started:
        gw.stop()


@pytest.fixture
def contas() -> Iterator[RunningContas]:
    """The example accounts MCP server (examples/contas_server.py) on a loopback port."""
    server = RunningContas().start()
    yield server
    server.stop()


@pytest.fixture
def gateway(gateway_factory: GatewayFactory) -> RunningGateway:
    return gateway_factory()


@pytest.fixture
def agent_gateway(
    contas: RunningContas, gateway_factory: GatewayFactory, llm: ScriptedLLM, tmp_path: Path
) -> RunningGateway:
    """The example ``contas`` agent (``agent:contas``) on SQLite, the scripted model driving it."""
    llm.handler = contas_model
    return gateway_factory(agents=[contas.agent(tmp_path / "contas")])


@pytest.fixture
def ops_gateway(
    request: pytest.FixtureRequest,
    contas: RunningContas,
    gateway_factory: GatewayFactory,
    database_url: str,
    llm: ScriptedLLM,
    tmp_path: Path,
) -> RunningGateway:
    """``agent_gateway`` on each backend of ``database_url``, for the operations tests whose races are
    the database's. An indirect parameter sets ``operations.confirmation_ttl_seconds`` (default 1800)."""
    llm.handler = contas_model
    return gateway_factory(
        database_url=database_url,
        operations={"confirmation_ttl_seconds": getattr(request, "param", 1800)},
        agents=[contas.agent(tmp_path / "contas")],
    )


@pytest.fixture
def mcp_server_factory() -> Iterator[Callable[..., McpTestServer]]:
    """``mcp_server_factory(name, transport=…, required_bearer=…)`` starts an SDK-built MCP server
    with the standard tools (see tests/support/mcp_servers.py). Request it before ``gateway_factory``
    so the gateway closes its sessions before the servers stop."""
    started: list[McpTestServer] = []

    def make(name: str = "test", **kwargs: Any) -> McpTestServer:
        server = McpTestServer(name, **kwargs).with_standard_tools().start()
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


@pytest.fixture
def log_secrets(monkeypatch: pytest.MonkeyPatch) -> Redactor:
    """The process-wide set of secret values log lines lose, empty for this test: other tests of the
    process register their own (a one-letter provider key, ``k``, redacts every ``k`` of a line)."""
    fresh = Redactor(limit=4096)
    monkeypatch.setattr(log_redaction, "SECRETS", fresh)
    return fresh
