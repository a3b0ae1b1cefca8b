"""Subagents stay inside their parent's limits: a child runs only on what the parent agent's ``subagents``
allows (by default the parent itself), the tree's depth counts from its root whatever agents it passes
through, and a run tree creates at most ``max_children_per_run`` children."""

from __future__ import annotations

import json
import threading
from typing import Any

from tests.support.scripted_llm import Reply, ScriptedLLM


def delegating_agent(name: str, **subagents: Any) -> dict[str, Any]:
    return {
        "name": name,
        "model": "gpt-4o",
        "instructions": f"You are {name}.",
        "subagents": {"enabled": True, **subagents},
    }


def spawn_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(m["content"]) for m in body["messages"] if m["role"] == "tool"]


def test_a_child_cannot_run_on_a_model_or_agent_the_parent_does_not_allow(
    gateway_factory, llm: ScriptedLLM
) -> None:
    gateway = gateway_factory(
        agents=[
            delegating_agent("orchestrator"),
            {"name": "contas", "model": "gpt-4o", "instructions": "transactional"},
        ]
    )

    def script(body: dict[str, Any]) -> Reply:
        if results := spawn_results(body):
            return Reply(json.dumps([r["ok"] for r in results]))
        if body["messages"][-1]["content"] == "go":  # the parent; children get their task
            return Reply(
                tool_calls=[
                    ("spawn_subagent", {"task": "a", "model": "agent:contas"}),
                    ("spawn_subagent", {"task": "b", "model": "upstream/gpt-4o-mini"}),
                    ("spawn_subagent", {"task": "c"}),  # the parent itself: allowed
                ]
            )
        return Reply("child answer")

    llm.handler = script

    parent = gateway.client().responses.create(model="agent:orchestrator", input="go")

    assert json.loads(parent.output_text) == [False, False, True]
    children = gateway.client().get(f"/responses?parent_response_id={parent.id}", cast_to=object)["data"]
    assert [c["model"] for c in children] == ["agent:orchestrator"]  # nothing ran on contas or elsewhere
    refused = [json.loads(i.output) for i in parent.output if i.type == "mcp_call"][:2]
    assert {r["error_code"] for r in refused} == {"invalid_arguments"}
    assert "agent:contas" in refused[0]["message"]


def test_the_depth_counts_from_the_root_whatever_agents_the_tree_passes_through(
    gateway_factory, llm: ScriptedLLM
) -> None:
    gateway = gateway_factory(
        agents=[
            delegating_agent("orchestrator", max_depth=2, models=["agent:deep"]),
            delegating_agent("deep", max_depth=8, models=["agent:deep"]),
        ]
    )

    def script(body: dict[str, Any]) -> Reply:
        if results := spawn_results(body):
            return Reply("; ".join(r.get("output_text") or r["message"] for r in results))
        tools = [t["function"]["name"] for t in body.get("tools", [])]
        if "spawn_subagent" in tools:  # every level that may delegate does, to agent:deep
            return Reply(tool_calls=[("spawn_subagent", {"task": "go deeper", "model": "agent:deep"})])
        return Reply("the bottom")

    llm.handler = script

    root = gateway.client().responses.create(model="agent:orchestrator", input="go")

    depths = []
    pending = [root.id]
    while pending:
        parent = pending.pop()
        page = gateway.client().get(f"/responses?parent_response_id={parent}", cast_to=object)["data"]
        depths.extend(c["depth"] for c in page)
        pending.extend(c["id"] for c in page)
    assert sorted(depths) == [1, 2]  # the orchestrator's max_depth: 2, although deep allows 8
    assert root.output_text == "the bottom"


def test_a_run_tree_creates_at_most_max_children_per_run(gateway_factory, llm: ScriptedLLM) -> None:
    gateway = gateway_factory(agents=[delegating_agent("orchestrator", max_concurrent=8)])
    lock = threading.Lock()
    children = []

    def script(body: dict[str, Any]) -> Reply:
        if results := spawn_results(body):
            return Reply(json.dumps(sorted({r.get("error_code", "ok") for r in results})))
        if body["messages"][-1]["content"] == "fan out":
            return Reply(tool_calls=[("spawn_subagent", {"task": f"t{i}"}) for i in range(30)])
        with lock:
            children.append(body["messages"][-1]["content"])
        return Reply("done")

    llm.handler = script

    parent = gateway.client().responses.create(model="agent:orchestrator", input="fan out")

    assert len(children) == 16  # the default max_children_per_run, not 30
    assert json.loads(parent.output_text) == ["max_children_reached", "ok"]
