"""No tool runs twice: a call that may have reached its MCP server is not sent again unless the tool
is idempotent, and a subagent that ran a tool is not run again. Calls are counted at the server.

End to end: the official openai client → Hatchway → SDK-built MCP servers on loopback (through a
TCP proxy that breaks connections on cue where a transport fault is the point), with the scripted
upstream deciding the tool calls.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest

from tests.support.agent_loop import (
    USER,
    log_of,
    rounds,
    rule_for,
    summarise,
    tool_messages,
    tool_steps,
    write_plugin,
)
from tests.support.gateway import RunningGateway
from tests.support.mcp_servers import McpTestServer
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import wait_until
from tests.support.tcp_proxy import TcpProxy

SLOW_MS = 1500
"""How long the slow tools take: well past the 300 ms ``timeout_ms`` of these servers."""


@pytest.fixture
def proxy_factory() -> Iterator[Callable[[McpTestServer], TcpProxy]]:
    started: list[TcpProxy] = []

    def make(server: McpTestServer) -> TcpProxy:
        proxy = TcpProxy(server.server.port).start()
        started.append(proxy)
        return proxy

    yield make
    for proxy in started:
        proxy.stop()


def errors_read(llm: ScriptedLLM) -> list[dict[str, Any]]:
    """The structured errors the model read in place of tool results, in the last model call."""
    return [json.loads(output)["error"] for output in tool_messages(llm.requests[-1])]


def run_once(gateway: RunningGateway) -> dict[str, Any]:
    """One chat completion; its run record."""
    raw = gateway.client().chat.completions.with_raw_response.create(model="gpt-4o", messages=USER)
    assert raw.parse().choices[0].message.content.startswith("Answer from:")  # the run went on
    return log_of(gateway, raw.headers["x-hatchway-request-id"])


def test_a_tool_slower_than_its_timeout_runs_once_and_the_model_reads_its_outcome_is_unknown(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    server = mcp_server_factory("s")
    gateway = gateway_factory(
        **rule_for(tmp_path, {"mcp_servers": [{"id": "s", "url": server.url, "timeout_ms": 300}]})
    )  # max_retries: the default, 2
    llm.handler = rounds(Reply(tool_calls=[("s__slow", {"ms": SLOW_MS, "label": "charge"})]), summarise)

    record = run_once(gateway)

    assert server.tool_calls("slow") == 1 and server.executions["slow"] == 1
    [error] = errors_read(llm)
    assert error["code"] == "tool_outcome_unknown" and "no answer within 300 ms" in error["message"]
    assert "may or may not have acted" in error["message"]
    [step] = tool_steps(record)
    assert (step["outcome"], step["error_code"], step["retries"]) == ("timeout", "tool_outcome_unknown", 0)


@pytest.mark.parametrize("declared", [["slow"], ["sl*"]])
def test_a_tool_declared_in_idempotent_tools_is_retried(
    declared: list[str],
    mcp_server_factory: Callable[..., McpTestServer],
    gateway_factory,
    llm: ScriptedLLM,
    tmp_path: Path,
) -> None:
    server = mcp_server_factory("s")
    entry = {"id": "s", "url": server.url, "timeout_ms": 300, "max_retries": 2, "idempotent_tools": declared}
    gateway = gateway_factory(**rule_for(tmp_path, {"mcp_servers": [entry]}))
    llm.handler = rounds(Reply(tool_calls=[("s__slow", {"ms": SLOW_MS})]), summarise)

    record = run_once(gateway)

    assert server.tool_calls("slow") == 3  # max_retries + 1
    [error] = errors_read(llm)
    assert error["code"] == "tool_timeout"
    [step] = tool_steps(record)
    assert step["retries"] == 2


@pytest.mark.parametrize(
    "hints", [types.ToolAnnotations(idempotent_hint=True), types.ToolAnnotations(read_only_hint=True)]
)
def test_a_tool_the_server_annotates_idempotent_is_retried_and_its_neighbour_is_not(
    hints: types.ToolAnnotations,
    mcp_server_factory: Callable[..., McpTestServer],
    gateway_factory,
    llm: ScriptedLLM,
    tmp_path: Path,
) -> None:
    server = mcp_server_factory("s")

    @server.mcp.tool(description="Look a record up, slowly.", annotations=hints)
    async def lookup(ms: int) -> str:
        await anyio.sleep(ms / 1000)
        return "found"

    gateway = gateway_factory(
        **rule_for(tmp_path, {"mcp_servers": [{"id": "s", "url": server.url, "timeout_ms": 300}]})
    )
    llm.handler = rounds(
        Reply(tool_calls=[("s__lookup", {"ms": SLOW_MS}), ("s__slow", {"ms": SLOW_MS})]), summarise
    )

    record = run_once(gateway)

    assert server.tool_calls("lookup") == 3 and server.tool_calls("slow") == 1
    assert [e["code"] for e in errors_read(llm)] == ["tool_timeout", "tool_outcome_unknown"]
    assert [s["retries"] for s in tool_steps(record)] == [2, 0]


def test_a_connection_refused_before_the_call_was_sent_is_retried_and_the_tool_runs_once(
    mcp_server_factory: Callable[..., McpTestServer],
    proxy_factory: Callable[[McpTestServer], TcpProxy],
    gateway_factory,
    llm: ScriptedLLM,
    tmp_path: Path,
) -> None:
    server = mcp_server_factory("s")
    proxy = proxy_factory(server)
    gateway = gateway_factory(
        mcp_pool={"idle_seconds": 0.2},  # the session closes between the two requests
        **rule_for(tmp_path, {"mcp_servers": [{"id": "s", "url": proxy.url("/mcp"), "timeout_ms": 3000}]}),
    )
    llm.handler = rounds(Reply(text="Answer from: nothing yet"))
    run_once(gateway)  # lists the tools (kept for 300 s), through a session that then closes idle
    wait_until(lambda: proxy.open == 0, message="the idle session to close")
    proxy.refuse_next(1)  # the call's new session: reset before a byte reaches the server
    llm.handler = rounds(Reply(tool_calls=[("s__echo", {"text": "pay"})]), summarise)

    record = run_once(gateway)

    assert proxy.refused == 1 and server.tool_calls("echo") == 1 and server.executions["echo"] == 1
    assert tool_messages(llm.requests[-1]) == ["echo:pay"]
    [step] = tool_steps(record)
    assert step["outcome"] == "ok" and step["retries"] == 1


def test_a_connection_cut_after_the_request_reached_the_server_runs_once_and_the_outcome_is_unknown(
    mcp_server_factory: Callable[..., McpTestServer],
    proxy_factory: Callable[[McpTestServer], TcpProxy],
    gateway_factory,
    llm: ScriptedLLM,
    tmp_path: Path,
) -> None:
    server = mcp_server_factory("s")
    proxy = proxy_factory(server)
    gateway = gateway_factory(
        **rule_for(tmp_path, {"mcp_servers": [{"id": "s", "url": proxy.url("/mcp"), "timeout_ms": 3000}]})
    )  # max_retries: the default, 2
    proxy.cut_after(b'"tools/call"')
    llm.handler = rounds(Reply(tool_calls=[("s__echo", {"text": "pay"})]), summarise)

    record = run_once(gateway)

    assert proxy.cut == 1
    wait_until(lambda: server.executions.get("echo"), message="the server to run the cut call")
    assert server.tool_calls("echo") == 1 and server.executions["echo"] == 1
    [error] = errors_read(llm)
    assert error["code"] == "tool_outcome_unknown" and "may or may not have acted" in error["message"]
    [step] = tool_steps(record)
    assert (step["outcome"], step["retries"]) == ("error", 0)


def test_a_subagent_that_ran_a_tool_and_then_failed_is_not_run_again(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    server = mcp_server_factory("s")
    agent = {
        "name": "payer",
        "model": "gpt-4o",
        "plugin": write_plugin(tmp_path, "payer", {"mcp_servers": [{"id": "s", "url": server.url}]}),
        "subagents": {"enabled": True, "max_depth": 1},
    }

    def script(body: dict[str, Any]) -> Reply:
        task = next(m["content"] for m in body["messages"] if m["role"] == "user")
        results = tool_messages(body)
        if task == "top":  # the parent delegates, then answers with what it was told
            return summarise(body) if results else Reply(tool_calls=[("spawn_subagent", {"task": "pay"})])
        if not results:  # the child runs its side-effecting tool…
            return Reply(tool_calls=[("s__echo", {"text": "paid"})])
        return Reply(status=502, error="the upstream is down")  # …and then its model call fails

    llm.handler = script
    gateway = gateway_factory(agents=[agent])

    parent = gateway.client().responses.create(model="agent:payer", input="top")

    [call] = [item for item in parent.output if item.type == "mcp_call"]
    result = json.loads(call.output)
    assert server.tool_calls("echo") == 1 and server.executions["echo"] == 1, result
    assert result["ok"] is False and result["error_code"] == "child_request_failed"
    assert "not run again" in result["message"]
    assert parent.output_text.startswith("Answer from:")


def test_a_subagent_whose_only_tool_call_reached_no_tool_is_run_again_when_it_fails(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    """A call of a tool no toolset has (the model made the name up, or its server was not listed)
    reaches nothing: a child that failed after one has no side effect to repeat, and is run again."""
    server = mcp_server_factory("s")
    agent = {
        "name": "payer",
        "model": "gpt-4o",
        "plugin": write_plugin(tmp_path, "payer", {"mcp_servers": [{"id": "s", "url": server.url}]}),
        "subagents": {"enabled": True, "max_depth": 1},
    }
    failed: list[int] = []

    def script(body: dict[str, Any]) -> Reply:
        task = next(m["content"] for m in body["messages"] if m["role"] == "user")
        results = tool_messages(body)
        if task == "top":
            return summarise(body) if results else Reply(tool_calls=[("spawn_subagent", {"task": "pay"})])
        if not results:
            return Reply(tool_calls=[("ghost__pay", {"text": "paid"})])
        if not failed:  # the first child's second model call fails; the second child answers
            failed.append(1)
            return Reply(status=502, error="the upstream is down")
        return Reply(text="the child's answer")

    llm.handler = script
    gateway = gateway_factory(agents=[agent])

    parent = gateway.client().responses.create(model="agent:payer", input="top")

    [call] = [item for item in parent.output if item.type == "mcp_call"]
    result = json.loads(call.output)
    assert result["ok"] is True and "the child's answer" in json.dumps(result), result
    assert failed == [1] and server.tool_calls() == 0
