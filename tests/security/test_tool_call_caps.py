"""A model cannot make the gateway run unbounded work: tool calls per round and per run are capped in both
APIs; the calls past a cap get a structured error and the run goes on to an answer."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.agent_loop import USER, rule_for, tool_messages
from tests.support.mcp_servers import McpTestServer
from tests.support.scripted_llm import Reply, ScriptedLLM


def _echoes(n: int, start: int = 0) -> Reply:
    return Reply(tool_calls=[("s__echo", {"text": f"n{i}"}) for i in range(start, start + n)])


def _answer_after(rounds: int, calls_per_round: int) -> Callable[[dict[str, Any]], Reply]:
    """Ask for ``calls_per_round`` calls in each of ``rounds`` rounds, then answer with what came back."""

    def handler(body: dict[str, Any]) -> Reply:
        done = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if done < rounds:
            return _echoes(calls_per_round, start=done * calls_per_round)
        return Reply(text=f"{len(tool_messages(body))} results")

    return handler


def test_a_thousand_calls_in_one_round_run_at_most_the_rounds_cap(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    server = mcp_server_factory("s")
    gateway = gateway_factory(**rule_for(tmp_path, {"mcp_servers": [{"id": "s", "url": server.url}]}))
    llm.handler = _answer_after(rounds=1, calls_per_round=1000)

    completion = gateway.client().chat.completions.create(model="gpt-4o", messages=USER)

    assert completion.choices[0].message.content == "1000 results"  # every call answered
    assert server.tool_calls("echo") == 32  # the default max_tool_calls_per_round ran
    refused = [json.loads(m) for m in tool_messages(llm.requests[-1]) if m.startswith("{")]
    assert len(refused) == 1000 - 32 and {r["error"]["code"] for r in refused} == {"too_many_tool_calls"}


def test_the_run_cap_refuses_calls_past_it_and_stops_offering_tools(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    server = mcp_server_factory("s")
    gateway = gateway_factory(
        max_tool_calls_per_run=5,
        **rule_for(tmp_path, {"mcp_servers": [{"id": "s", "url": server.url}], "agent": {"max_rounds": 10}}),
    )
    llm.handler = _answer_after(rounds=3, calls_per_round=3)

    response = gateway.client().responses.create(model="gpt-4o", input="go")

    assert server.tool_calls("echo") == 5
    assert response.output_text == "9 results"
    outputs = [json.loads(item.output) for item in response.output if item.type == "mcp_call" and item.error]
    assert [o["error"]["code"] for o in outputs] == ["max_tool_calls_reached"] * 4
    assert llm.requests[-1].get("tools") in (None, [])  # no gateway tool offered once the cap is reached
