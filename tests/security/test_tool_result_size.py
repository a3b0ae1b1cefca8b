"""An MCP server that answers with whatever it likes cannot bloat the gateway: an answer is read no further
than ``max_tool_result_bytes``, and the result cache keeps only what the model saw, within a byte bound.
Measured on ``hatchway serve`` as its own process: its RSS, read from /proc."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.agent_loop import USER, rounds, summarise, tool_messages, write_plugin
from tests.support.gateway import create_org_key
from tests.support.mcp_servers import McpTestServer
from tests.support.replicas import Replicas, ServeProcess
from tests.support.scripted_llm import Reply, ScriptedLLM

MiB = 1024 * 1024


def rss_mib(process: ServeProcess) -> float:
    status = Path(f"/proc/{process.proc.pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))) / 1024


def big_server(factory: Callable[..., McpTestServer]) -> McpTestServer:
    server = factory("s")

    @server.mcp.tool(description="Answer with this many MiB of text.")
    def big(mib: int) -> str:
        return "x" * (mib * MiB)

    return server


@pytest.fixture
def serve(tmp_path: Path, llm: ScriptedLLM) -> Iterator[Callable[..., tuple[ServeProcess, str]]]:
    started: list[Replicas] = []

    def start(plugin: dict[str, Any], **config: Any) -> tuple[ServeProcess, str]:
        database = f"sqlite+aiosqlite:///{tmp_path / 'serve.db'}"
        replicas = Replicas(
            tmp_path,
            {
                "database_url": database,
                "master_key_file": str(tmp_path / "master.key"),
                "providers": [{"id": "upstream", "base_url": llm.base_url, "timeout_seconds": 60}],
                "models": [{"name": "gpt-4o", "provider": "upstream", "upstream_model": "gpt-4o"}],
                "routing_rules": [
                    {"name": "r", "match": {"model": "gpt-4o"}, "plugin": write_plugin(tmp_path, "p", plugin)}
                ],
                **config,
            },
            # glibc keeps freed large blocks for reuse once its mmap threshold has grown: a fixed
            # threshold makes RSS fall back when memory is freed, so growth means memory still held.
            env={"MALLOC_MMAP_THRESHOLD_": str(128 * 1024)},
        )
        started.append(replicas)
        process = replicas.serve("gateway")
        return process, create_org_key_sync(database)

    yield start
    for replicas in started:
        replicas.stop()


def create_org_key_sync(database_url: str) -> str:
    import asyncio

    return asyncio.run(create_org_key(database_url)).key


def test_a_100_mib_answer_is_not_read_whole(
    mcp_server_factory: Callable[..., McpTestServer], serve, llm: ScriptedLLM
) -> None:
    server = big_server(mcp_server_factory)
    gateway, key = serve({"mcp_servers": [{"id": "s", "url": server.url, "timeout_ms": 60_000}]})
    client = gateway.client(key)
    llm.handler = rounds(Reply(tool_calls=[("s__big", {"mib": 0})]), summarise)
    client.chat.completions.create(model="gpt-4o", messages=USER)  # the MCP SDK loaded, a session open
    before = rss_mib(gateway)

    llm.handler = rounds(Reply(tool_calls=[("s__big", {"mib": 100})]), summarise)
    answer = client.chat.completions.create(model="gpt-4o", messages=USER)

    growth = rss_mib(gateway) - before
    [seen] = tool_messages(llm.requests[-1])
    assert json.loads(seen)["error"]["code"] == "tool_result_too_large"
    assert answer.choices[0].message.content.startswith("Answer from:")
    assert growth < 40, f"the gateway grew by {growth:.0f} MiB reading a 100 MiB answer"


def test_the_result_cache_keeps_what_the_model_saw_not_the_whole_answer(
    mcp_server_factory: Callable[..., McpTestServer], serve, llm: ScriptedLLM
) -> None:
    server = big_server(mcp_server_factory)
    gateway, key = serve(
        {
            "mcp_servers": [{"id": "s", "url": server.url, "timeout_ms": 60_000}],
            "agent": {"tool_cache_ttl_seconds": 600},
        },
        max_tool_result_bytes=256 * MiB,  # let 30 MiB answers in (sent twice: text, structured)
    )
    client = gateway.client(key)

    def call_big(mib: int) -> None:
        llm.handler = rounds(Reply(tool_calls=[("s__big", {"mib": mib})]), summarise)
        client.chat.completions.create(model="gpt-4o", messages=USER)

    call_big(30)  # the first large answer sets the process's working high-water mark
    before = rss_mib(gateway)
    for mib in (31, 32, 33, 34, 35):  # five more distinct calls: five more cache entries
        call_big(mib)

    growth = rss_mib(gateway) - before
    [seen] = tool_messages(llm.requests[-1])
    assert seen.startswith("x" * 20_000) and "truncated" in seen  # what the model read: 20,000 chars
    assert growth < 30, f"five more 30 MiB results kept {growth:.0f} MiB (each kept whole is 30+)"
