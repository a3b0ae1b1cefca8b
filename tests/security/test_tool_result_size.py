"""An MCP server that answers with whatever it likes cannot bloat the gateway: an answer is read no further
than ``max_tool_result_bytes``, and the result cache keeps only what the model saw, within a byte bound.
Measured on ``hatchway serve`` as its own process: its RSS, read from /proc."""

from __future__ import annotations

import json
from collections.abc import Callable

from tests.support.agent_loop import USER, rounds, summarise, tool_messages
from tests.support.mcp_servers import McpTestServer
from tests.support.scripted_llm import Reply, ScriptedLLM

MiB = 1024 * 1024


def big_server(factory: Callable[..., McpTestServer]) -> McpTestServer:
    server = factory("s")

    @server.mcp.tool(description="Answer with this many MiB of text.")
    def big(mib: int) -> str:
        return "x" * (mib * MiB)

    return server


def test_a_100_mib_answer_is_not_read_whole(
    mcp_server_factory: Callable[..., McpTestServer], serve, llm: ScriptedLLM
) -> None:
    server = big_server(mcp_server_factory)
    gateway, key = serve({"mcp_servers": [{"id": "s", "url": server.url, "timeout_ms": 60_000}]})
    client = gateway.client(key)
    llm.handler = rounds(Reply(tool_calls=[("s__big", {"mib": 0})]), summarise)
    client.chat.completions.create(model="gpt-4o", messages=USER)  # the MCP SDK loaded, a session open
    before = gateway.rss_mib()

    llm.handler = rounds(Reply(tool_calls=[("s__big", {"mib": 100})]), summarise)
    answer = client.chat.completions.create(model="gpt-4o", messages=USER)

    growth = gateway.rss_mib() - before
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
    before = gateway.rss_mib()
    for mib in (31, 32, 33, 34, 35):  # five more distinct calls: five more cache entries
        call_big(mib)

    growth = gateway.rss_mib() - before
    [seen] = tool_messages(llm.requests[-1])
    assert seen.startswith("x" * 20_000) and "truncated" in seen  # what the model read: 20,000 chars
    # Five kept whole would be 150+ MiB. The margin is the allocator's: on a loaded machine the
    # high-water mark can take up to two answers' worth more than the first call left (seen: 63 MiB).
    assert growth < 75, f"five more 30 MiB results kept {growth:.0f} MiB (five kept whole is 150+)"
