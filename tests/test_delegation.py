"""``hatchway.delegation``: the seed's client-side delegation loop against a live gateway."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter
from typing import Any

import openai

from hatchway.delegation import CHILD_INSTRUCTIONS, DelegationSettings, adelegate, delegate
from tests.support.scripted_llm import Reply, ScriptedLLM, max_overlap
from tests.support.servers import wait_until


class DelegationScript:
    """Upstream behaviour: the parent delegates ``tasks``, children answer after ``child_delay``."""

    def __init__(self, tasks: list[Any], child_delay: float = 0.0, failures: dict[str, int] | None = None):
        self.tasks = tasks
        self.child_delay = child_delay
        self.failures = failures or {}
        self.child_starts: list[float] = []
        self.child_attempts: Counter[str] = Counter()
        self.parent_requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        if messages[0]["content"] == CHILD_INSTRUCTIONS:
            task = messages[-1]["content"]
            with self._lock:
                self.child_starts.append(time.monotonic())
                self.child_attempts[task] += 1
                attempt = self.child_attempts[task]
            if attempt <= self.failures.get(task, 0):
                return Reply(status=500, error=f"{task} failed (attempt {attempt})")
            return Reply(f"result of {task}", delay=self.child_delay)
        self.parent_requests.append(body)
        results = [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
        if not results:
            calls = [("spawn_subagent", t if isinstance(t, dict) else {"task": t}) for t in self.tasks]
            return Reply(tool_calls=calls)
        summary = "; ".join(
            r["output_text"] if r["ok"] else f"{r['error_code']}: {r['message']}" for r in results
        )
        return Reply(f"final: {summary}")


def test_three_children_fan_out_in_parallel_and_resume_the_parent_once(gateway, llm: ScriptedLLM) -> None:
    script = DelegationScript(["alpha", "beta", "gamma"], child_delay=1.0)
    llm.handler = script
    settings = DelegationSettings(model="gpt-4o", on_behalf_of="user-42")

    started = time.monotonic()
    result = delegate(gateway.client(), "research three things", settings)
    elapsed = time.monotonic() - started

    # The overlap proves the fan-out; the bound is generous (1.5 s under the sequential 3 s), as a
    # loaded two-core machine running the suite on two workers adds its own delays.
    assert max_overlap(script.child_starts, 1.0) == 3
    assert elapsed < 2.5, f"delegation took {elapsed:.2f}s; three 1 s children in sequence take ≥ 3 s"
    assert result.output_text == "final: result of alpha; result of beta; result of gamma"
    assert len(result.parent_response_ids) == 2 and len(script.parent_requests) == 2  # resumed once
    assert [r["ok"] for r in result.child_results] == [True, True, True]
    client = gateway.client()
    children = [client.responses.retrieve(r["response_id"]) for r in result.child_results]
    assert [c.output_text for c in children] == ["result of alpha", "result of beta", "result of gamma"]
    resumed = client.responses.retrieve(result.parent_response_ids[1])
    assert resumed.previous_response_id == result.parent_response_ids[0]
    wait_until(lambda: len(client.get("/logs", cast_to=object)["data"]) == 5, message="five log records")
    logs = client.get("/logs", cast_to=object)["data"]
    assert len(logs) == 5 and {r["on_behalf_of"] for r in logs} == {"user-42"}


def test_transient_child_failure_is_retried_and_a_permanent_one_is_reported(
    gateway, llm: ScriptedLLM
) -> None:
    script = DelegationScript(["flaky", "doomed", "fine"], failures={"flaky": 2, "doomed": 99})
    llm.handler = script
    settings = DelegationSettings(model="gpt-4o", backoff_seconds=0.05)

    result = delegate(gateway.client(), "go", settings)

    flaky, doomed, fine = result.child_results
    assert flaky["ok"] is True and flaky["output_text"] == "result of flaky"
    assert script.child_attempts["flaky"] == 3 and script.child_attempts["doomed"] == 3
    assert doomed["ok"] is False and doomed["error_code"] == "child_request_failed"
    assert "doomed failed" in doomed["message"]
    assert fine["ok"] is True
    assert result.output_text.startswith("final: result of flaky; child_request_failed:")


def test_invalid_arguments_are_answered_without_a_child(gateway, llm: ScriptedLLM) -> None:
    script = DelegationScript([{"task": 5}, {"nope": "x"}, "valid"])
    llm.handler = script

    result = delegate(gateway.client(), "go", DelegationSettings(model="gpt-4o"))

    codes = [r.get("error_code") for r in result.child_results]
    assert codes == ["invalid_arguments", "invalid_arguments", None]
    assert list(script.child_attempts) == ["valid"]
    assert result.output_text.startswith("final: invalid_arguments")


def test_delegation_stops_at_max_tool_calls(gateway, llm: ScriptedLLM) -> None:
    script = DelegationScript(["one", "two", "three"])
    llm.handler = script

    result = delegate(gateway.client(), "go", DelegationSettings(model="gpt-4o", max_tool_calls=2))

    assert result.stopped_at_max_tool_calls is True
    assert [r["ok"] for r in result.child_results] == [True, True, False]
    assert "max_tool_calls (2)" in result.child_results[2]["message"]
    assert sorted(script.child_attempts) == ["one", "two"]
    assert script.parent_requests[-1]["tool_choice"] == "none"
    assert result.output_text.startswith("final: result of one; result of two")


def test_async_client_fans_out_too(gateway, llm: ScriptedLLM) -> None:
    script = DelegationScript(["a", "b", "c"], child_delay=1.0)
    llm.handler = script

    async def main():
        client = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key=gateway.key, max_retries=0)
        try:
            return await adelegate(client, "go", DelegationSettings(model="gpt-4o"))
        finally:
            await client.close()

    result = asyncio.run(main())

    # The fan-out, shown by the children's overlap (all three in flight at once); a wall-clock bound
    # was flaky on a loaded two-core machine (2.9 s against 2.5) and proved nothing more.
    assert max_overlap(script.child_starts, 1.0) == 3
    assert result.output_text == "final: result of a; result of b; result of c"
