"""Run budgets (``max_run_tokens``, ``max_run_tool_calls``; issue 22): over the whole run tree, and
when the next round would pass one, the model gets a last round with no tools and an instruction to
answer with what it has — an answer, not an error. Through a real gateway, the scripted model
behind it, an MCP server written with the SDK, and the official ``openai`` client."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hatchway.engine.loop import BUDGET_NOTE
from tests.support.agent_loop import log_of, rule_for, tool_steps
from tests.support.mcp_servers import McpTestServer
from tests.support.scripted_llm import Reply, ScriptedLLM


def _final_round(body: dict[str, Any]) -> bool:
    return not body.get("tools") and any(m.get("content") == BUDGET_NOTE for m in body["messages"])


def _keeps_calling(body: dict[str, Any]) -> Reply:
    """A model that never stops calling tools on its own, until it is given none."""
    if _final_round(body):
        return Reply(text="partial: what I found so far", prompt_tokens=100, completion_tokens=20)
    return Reply(tool_calls=[("calc__add", {"a": 1, "b": 2})], prompt_tokens=100, completion_tokens=20)


def test_a_token_budget_ends_in_a_last_round_without_tools_and_an_answer(
    gateway_factory: Any, llm: ScriptedLLM, mcp_server_factory: Callable[..., McpTestServer], tmp_path: Path
) -> None:
    upstream = mcp_server_factory("calc")
    plugin = {"mcp_servers": [{"id": "calc", "url": upstream.url}], "agent": {"max_run_tokens": 250}}
    gateway = gateway_factory(allow_private_mcp_urls=True, **rule_for(tmp_path, plugin))
    llm.handler = _keeps_calling

    raw = gateway.client().chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "add forever"}]
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == "partial: what I found so far"
    assert completion.choices[0].finish_reason == "stop"
    assert raw.headers["x-hatchway-budget-exhausted"] == "tokens"
    # 120 tokens a round: after two rounds (240), a third would pass 250, so it is the last, toolless
    assert [_final_round(body) for body in llm.requests] == [False, False, True]
    assert completion.usage is not None and completion.usage.total_tokens == 360
    record = log_of(gateway, raw.headers["x-hatchway-request-id"])
    [spent] = [s for s in record["steps"] if s["type"] == "budget_exhausted"]
    assert spent == {"type": "budget_exhausted", "budget": "tokens", "used": 240, "limit": 250}
    assert len(tool_steps(record)) == 2 and upstream.tool_calls("add") == 2


def test_a_tool_call_budget_refuses_the_calls_past_it(
    gateway_factory: Any, llm: ScriptedLLM, mcp_server_factory: Callable[..., McpTestServer], tmp_path: Path
) -> None:
    upstream = mcp_server_factory("calc")
    plugin = {"mcp_servers": [{"id": "calc", "url": upstream.url}], "agent": {"max_run_tool_calls": 2}}
    gateway = gateway_factory(allow_private_mcp_urls=True, **rule_for(tmp_path, plugin))

    def script(body: dict[str, Any]) -> Reply:
        if _final_round(body):
            results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
            return Reply(text=" | ".join(results))
        return Reply(tool_calls=[("calc__add", {"a": i, "b": 1}) for i in range(3)])

    llm.handler = script
    raw = gateway.client().chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "three sums"}]
    )
    answer = raw.parse().choices[0].message.content or ""
    assert upstream.tool_calls("add") == 2  # the third never reached the server
    assert answer.count("run_budget_exhausted") == 1
    assert raw.headers["x-hatchway-budget-exhausted"] == "tool_calls"


def test_a_run_trees_budget_stops_its_subagents_and_the_parent_answers(
    gateway_factory: Any, llm: ScriptedLLM
) -> None:
    """The parent's rounds and its children's count against one budget: once the tree has spent it,
    a further spawn_subagent is an ``ok: false`` result and the parent's last round has no tools."""
    gateway = gateway_factory(
        agents=[
            {
                "name": "orchestrator",
                "model": "gpt-4o",
                "instructions": "You delegate.",
                "subagents": {"enabled": True},
                "max_run_tokens": 1000,
            }
        ]
    )

    def script(body: dict[str, Any]) -> Reply:
        if _final_round(body):
            outcomes = [json.loads(m["content"]) for m in body["messages"] if m["role"] == "tool"]
            return Reply(
                text=json.dumps([o.get("ok") for o in outcomes]), prompt_tokens=50, completion_tokens=10
            )
        if body["messages"][-1].get("content") == "research":  # the parent's first round
            return Reply(
                tool_calls=[("spawn_subagent", {"task": "dig"})], prompt_tokens=100, completion_tokens=20
            )
        if body["messages"][-1]["role"] == "tool":  # the parent again (a longer prompt): one more child
            return Reply(
                tool_calls=[("spawn_subagent", {"task": "dig more"})], prompt_tokens=180, completion_tokens=20
            )
        return Reply(text="the child's finding", prompt_tokens=600, completion_tokens=100)  # a child

    llm.handler = script
    client = gateway.client()
    parent = client.responses.create(model="agent:orchestrator", input="research")

    # parent 120, child 700, then the parent's second round (expected 120 more: 940 < 1000) costs 200:
    # the tree is at 1020, so the second child is refused and the parent's next round is its last
    assert parent.output_text == json.dumps([True, False])
    children = client.get(f"/responses?parent_response_id={parent.id}", cast_to=object)["data"]
    assert len(children) == 1
    refused = [json.loads(i.output) for i in parent.output if i.type == "mcp_call"][-1]
    assert refused["ok"] is False and refused["error_code"] == "run_budget_exhausted"
    assert _final_round(llm.requests[-1])


def test_a_cost_budget_counts_the_priced_calls(
    gateway_factory: Any, llm: ScriptedLLM, mcp_server_factory: Callable[..., McpTestServer], tmp_path: Path
) -> None:
    """A self-hosted model priced in hatchway.yaml at $1 per million tokens each way: 120 tokens a
    round is $0.00012, so a budget of $0.0003 lets two rounds run and makes the third the last."""
    upstream = mcp_server_factory("calc")
    plugin = {"mcp_servers": [{"id": "calc", "url": upstream.url}], "agent": {"max_run_cost_usd": 0.0003}}
    gateway = gateway_factory(
        allow_private_mcp_urls=True,
        models=[
            {
                "name": "gpt-4o",
                "provider": "upstream",
                "upstream_model": "gpt-4o-2024",
                "price": {"input_per_mtok": 1.0, "output_per_mtok": 1.0},
            }
        ],
        **rule_for(tmp_path, plugin),
    )
    llm.handler = _keeps_calling
    raw = gateway.client().chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "add forever"}]
    )
    assert raw.headers["x-hatchway-budget-exhausted"] == "cost_usd"
    assert [_final_round(body) for body in llm.requests] == [False, False, True]
    record = log_of(gateway, raw.headers["x-hatchway-request-id"])
    [spent] = [s for s in record["steps"] if s["type"] == "budget_exhausted"]
    assert spent["budget"] == "cost_usd" and spent["used"] == 0.00024


def test_children_started_in_one_round_share_the_trees_token_budget(
    gateway_factory: Any, llm: ScriptedLLM
) -> None:
    """Eight children started by one round each take a part of the room the tree's budget leaves,
    held until they end, and each child's model call asks for no more output than its part leaves:
    together they cannot spend more than the room (without the shares, each would spend it whole)."""
    gateway = gateway_factory(
        agents=[
            {
                "name": "orchestrator",
                "model": "gpt-4o",
                "instructions": "You delegate.",
                "subagents": {"enabled": True, "max_depth": 1, "max_children_per_run": 8},
                "max_run_tokens": 1000,
            }
        ]
    )
    children: list[tuple[int, int]] = []  # (output limit asked for, tokens the child's call used)

    def script(body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]
        if _final_round(body) or last["role"] == "tool":
            return Reply(text="summary", prompt_tokens=150, completion_tokens=10)
        if last.get("content") == "research":  # the parent's first round: eight children at once
            calls = [("spawn_subagent", {"task": f"dig {n}"}) for n in range(8)]
            return Reply(tool_calls=calls, prompt_tokens=100, completion_tokens=20)
        # A child: a short prompt (less than the gateway's estimate of it) and a long answer, cut
        # at the output limit it is sent, as a real model does.
        limit = body.get("max_completion_tokens") or body.get("max_tokens") or 10_000
        output = min(limit, 400)
        children.append((limit, 20 + output))
        return Reply(text="x" * output, prompt_tokens=20, completion_tokens=output)

    llm.handler = script
    parent = gateway.client().responses.create(model="agent:orchestrator", input="research")

    room = 1000 - 120  # what the parent's first round left
    assert sum(used for _, used in children) <= room, children  # 4 x 420 and 4 refused without shares
    assert all(limit < room for limit, _ in children), children  # each was sent its part's limit
    calls = [json.loads(item.output) for item in parent.output if item.type == "mcp_call"]
    assert len(calls) == 8 and all(call["ok"] for call in calls), calls
    assert len(children) == 8
