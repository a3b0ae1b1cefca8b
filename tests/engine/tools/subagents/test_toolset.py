"""Hosted ``spawn_subagent``: children as stored, linked responses, with concurrency and depth limits."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from openai.types.responses import Response

from tests.support.responses_api import raw_events
from tests.support.scripted_llm import Reply, ScriptedLLM, max_overlap
from tests.support.servers import wait_until


def agent(max_concurrent: int = 4, max_depth: int = 1) -> dict[str, Any]:
    return {
        "name": "research",
        "model": "gpt-4o",
        "instructions": "You orchestrate research.",
        "subagents": {"enabled": True, "max_concurrent": max_concurrent, "max_depth": max_depth},
    }


class TreeScript:
    """The top-level request delegates ``fan_out`` tasks; a task named ``deeper`` delegates once more."""

    def __init__(self, fan_out: list[str], child_delay: float = 0.0, failures: dict[str, int] | None = None):
        self.fan_out = fan_out
        self.child_delay = child_delay
        self.failures = dict(failures or {})
        self.child_starts: list[float] = []
        self.requests_by_task: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        task = next(m["content"] for m in messages if m["role"] == "user")
        results = [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
        tools = [t["function"]["name"] for t in body.get("tools", [])]
        with self._lock:
            self.requests_by_task.setdefault(task, body)
        if results:
            return Reply(
                "; ".join(r.get("output_text") or r.get("message") or r["error"]["message"] for r in results)
            )
        if task == "top":
            return Reply(tool_calls=[("spawn_subagent", {"task": t}) for t in self.fan_out])
        if task == "deeper":
            if "spawn_subagent" in tools:
                return Reply(tool_calls=[("spawn_subagent", {"task": "deepest"})])
            return Reply(tool_calls=[("spawn_subagent", {"task": "not allowed"})])
        with self._lock:
            self.child_starts.append(time.monotonic())
            if self.failures.get(task, 0) > 0:
                self.failures[task] -= 1
                return Reply(status=502, error=f"{task} is down")
        return Reply(f"done: {task}", delay=self.child_delay)


def test_parent_shows_the_calls_and_children_are_linked(gateway_factory, llm: ScriptedLLM) -> None:
    script = TreeScript(["alpha", "beta", "gamma"], child_delay=0.3)
    llm.handler = script
    gw = gateway_factory(agents=[agent(max_concurrent=2)])
    client = gw.client()

    parent = client.responses.create(
        model="agent:research", input="top", extra_headers={"X-On-Behalf-Of": "u-9"}
    )

    assert parent.output_text == "done: alpha; done: beta; done: gamma"
    calls = [item for item in parent.output if item.type == "mcp_call"]
    assert [c.name for c in calls] == ["spawn_subagent"] * 3 and {c.server_label for c in calls} == {
        "hatchway"
    }
    assert not [item for item in parent.output if item.type == "function_call"]
    assert max_overlap(script.child_starts, 0.3) == 2  # max_concurrent at the upstream
    results = [json.loads(c.output) for c in calls]
    assert all(r["ok"] for r in results)
    for call, result in zip(calls, results, strict=True):
        child = client.get(f"/responses/{result['response_id']}", cast_to=object)
        assert child["parent_response_id"] == parent.id
        assert child["status"] == "completed" and child["output_text"] == result["output_text"]
        assert json.loads(call.arguments)["task"] in child["output_text"]
        Response.model_validate(child)
    stored = client.responses.retrieve(parent.id)
    assert [c.id for c in stored.output if c.type == "mcp_call"] == [c.id for c in calls]
    logs = wait_until(
        lambda: [r for r in client.get("/logs", cast_to=object)["data"] if r["parent_id"] == parent.id][2:],
        message="the three children's log records",
    )
    logs = [r for r in client.get("/logs", cast_to=object)["data"] if r["parent_id"] == parent.id]
    assert len(logs) == 3 and {r["on_behalf_of"] for r in logs} == {"u-9"}
    assert {r["response_id"] for r in logs} == {r["response_id"] for r in results}


def test_children_get_no_spawn_tool_at_max_depth(gateway_factory, llm: ScriptedLLM) -> None:
    script = TreeScript(["deeper"])
    llm.handler = script
    gw = gateway_factory(agents=[agent(max_depth=1)])

    parent = gw.client().responses.create(model="agent:research", input="top")

    child_tools = [t["function"]["name"] for t in script.requests_by_task["deeper"].get("tools", [])]
    assert "spawn_subagent" not in child_tools
    assert "deepest" not in script.requests_by_task
    # the child tried anyway: it got a structured error, not a grandchild
    assert parent.output_text == "No tool named 'spawn_subagent' is available."


def test_nesting_goes_as_deep_as_max_depth(gateway_factory, llm: ScriptedLLM) -> None:
    script = TreeScript(["deeper"])
    llm.handler = script
    gw = gateway_factory(agents=[agent(max_depth=2)])
    client = gw.client()

    parent = client.responses.create(model="agent:research", input="top")

    assert parent.output_text == "done: deepest"
    deepest_tools = [t["function"]["name"] for t in script.requests_by_task["deepest"].get("tools", [])]
    assert "spawn_subagent" not in deepest_tools
    child_id = json.loads(parent.output[0].output)["response_id"]
    child = client.responses.retrieve(child_id)
    grandchild_id = json.loads(child.output[0].output)["response_id"]
    grandchild = client.get(f"/responses/{grandchild_id}", cast_to=object)
    assert grandchild["parent_response_id"] == child_id and grandchild["output_text"] == "done: deepest"


def test_hosted_calls_stream_as_mcp_call_events(gateway_factory, llm: ScriptedLLM) -> None:
    llm.handler = TreeScript(["alpha"])
    gw = gateway_factory(agents=[agent()])

    events = raw_events(gw, {"model": "agent:research", "input": "top", "stream": True})

    types = [e["type"] for e in events]
    for expected in (
        "response.mcp_call_arguments.done",
        "response.mcp_call.in_progress",
        "response.mcp_call.completed",
    ):
        assert expected in types
    added = next(e for e in events if e["type"] == "response.output_item.added")
    assert added["item"]["type"] == "mcp_call" and added["item"]["status"] == "in_progress"
    final = events[-1]["response"]
    assert [i["type"] for i in final["output"]] == ["mcp_call", "message"]
    assert final["output"][0]["id"] == added["item"]["id"] and final["output_text"] == "done: alpha"
    assert "function_call" not in types and "response.function_call_arguments.done" not in types

    with gw.client().responses.stream(model="agent:research", input="top") as stream:
        assert stream.get_final_response().output_text == "done: alpha"


def test_chat_completions_does_not_bind_spawn_subagent(gateway_factory, llm: ScriptedLLM) -> None:
    llm.reply("plain")
    gw = gateway_factory(agents=[agent()])

    gw.client().chat.completions.create(model="agent:research", messages=[{"role": "user", "content": "x"}])

    assert "tools" not in llm.requests[0]


def test_max_tool_calls_caps_hosted_calls(gateway_factory, llm: ScriptedLLM) -> None:
    llm.handler = TreeScript(["alpha", "beta", "gamma"])
    gw = gateway_factory(agents=[agent()])

    events = raw_events(gw, {"model": "agent:research", "input": "top", "stream": True, "max_tool_calls": 2})

    final = events[-1]["response"]
    calls = [i for i in final["output"] if i["type"] == "mcp_call"]
    assert [c["status"] for c in calls] == ["completed", "completed", "failed"]
    assert calls[2]["error"]["content"]["error"]["code"] == "max_tool_calls_reached"
    done_ids = [e["item"]["id"] for e in events if e["type"] == "response.output_item.done"]
    assert sorted(done_ids) == sorted(i["id"] for i in final["output"])  # every item streamed and finished
    Response.model_validate(final)
    assert gw.client().responses.retrieve(final["id"]).output_text == final["output_text"]


def test_transient_child_failures_are_retried_and_permanent_ones_reported(
    gateway_factory, llm: ScriptedLLM
) -> None:
    llm.handler = TreeScript(["flaky", "doomed"], failures={"flaky": 2, "doomed": 99})
    gw = gateway_factory(agents=[agent()])

    parent = gw.client().responses.create(model="agent:research", input="top")

    flaky, doomed = (json.loads(item.output) for item in parent.output if item.type == "mcp_call")
    assert flaky["ok"] is True and flaky["output_text"] == "done: flaky"
    assert doomed == {"ok": False, "error_code": "child_request_failed", "message": "doomed is down"}
    assert parent.output_text == "done: flaky; doomed is down"  # the parent still answers
    statuses = [r.status for r in parent.output if r.type == "mcp_call"]
    assert statuses == ["completed", "failed"]
