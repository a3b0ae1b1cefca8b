"""``hatchway serve`` as its own process on loopback, on a fresh SQLite database, with the scripted
upstream behind ``gpt-4o`` — the gateway an attacker reaches, measured from /proc.

``serve(plugin=None, **config)`` starts one per test (a plugin dict is bound to ``gpt-4o`` by a
routing rule, ``config`` adds hatchway.yaml keys); ``default_gateway`` is one on the defaults shared
by a module's tests that only send requests it refuses, each test as its own organisation
(``gateway.new_key()``).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hatchway.principal import Role
from tests.support.agent_loop import write_plugin
from tests.support.gateway import create_org_key
from tests.support.replicas import Replicas, ServeProcess
from tests.support.scripted_llm import ScriptedLLM

Serve = Callable[..., tuple[ServeProcess, str]]


def start_serve(
    directory: Path,
    llm: ScriptedLLM,
    plugin: dict[str, Any] | None = None,
    role: Role = Role.ADMIN,
    **config: Any,
) -> tuple[Replicas, ServeProcess, str]:
    database = f"sqlite+aiosqlite:///{directory / 'serve.db'}"
    replicas = Replicas(
        directory,
        {
            "database_url": database,
            "master_key_file": str(directory / "master.key"),
            "providers": [{"id": "upstream", "base_url": llm.base_url, "timeout_seconds": 60}],
            "models": [{"name": "gpt-4o", "provider": "upstream", "upstream_model": "gpt-4o"}],
            **({"routing_rules": [_rule(directory, plugin)]} if plugin is not None else {}),
            **config,
        },
        # glibc keeps freed large blocks for reuse once its mmap threshold has grown: a fixed
        # threshold makes RSS fall back when memory is freed, so growth means memory still held.
        env={"MALLOC_MMAP_THRESHOLD_": str(128 * 1024)},
    )
    try:
        process = replicas.serve("gateway")
    except BaseException:
        replicas.stop()
        raise
    return replicas, process, asyncio.run(create_org_key(database, role=role)).key


@pytest.fixture
def serve(tmp_path: Path, llm: ScriptedLLM) -> Iterator[Serve]:
    started: list[Replicas] = []

    def start(plugin: dict[str, Any] | None = None, **config: Any) -> tuple[ServeProcess, str]:
        replicas, process, key = start_serve(tmp_path, llm, plugin, **config)
        started.append(replicas)
        return process, key

    yield start
    for replicas in started:
        replicas.stop()


class SharedGateway:
    def __init__(self, process: ServeProcess, database_url: str) -> None:
        self.process = process
        self.database_url = database_url

    def new_key(self) -> str:
        """An API key of a new organisation: its logs hold only what this test did."""
        return asyncio.run(create_org_key(self.database_url)).key


@pytest.fixture(scope="module")
def default_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedGateway]:
    llm = ScriptedLLM().start()
    directory = tmp_path_factory.mktemp("gateway")
    replicas, process, _ = start_serve(directory, llm)
    yield SharedGateway(process, f"sqlite+aiosqlite:///{directory / 'serve.db'}")
    replicas.stop()
    llm.stop()


def _rule(directory: Path, plugin: dict[str, Any]) -> dict[str, Any]:
    return {"name": "r", "match": {"model": "gpt-4o"}, "plugin": write_plugin(directory, "p", plugin)}


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A loopback TCP listener that nobody should ever connect to (``servers.connections`` counts)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        sock.setblocking(False)
        yield sock
