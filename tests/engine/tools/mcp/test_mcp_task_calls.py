"""The loop's calls of tools a server runs as MCP tasks (SEP-2663), end to end through the gateway.

The upstream is ``tests/conformance/mcp_tasks_upstream.py`` (the official SDK with the tasks
extension on its hooks), whose ``/stats`` says how many calls each tool's body saw and which tasks
were cancelled; the official ``openai`` client talks to the gateway; a scripted model calls the tool
and reports what it read.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conformance.mcp_tasks_upstream import build_app
from tests.support.agent_loop import log_of, write_plugin
from tests.support.gateway import RunningGateway
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import ServerThread, wait_until


class Upstream:
    def __init__(self, server: ServerThread) -> None:
        self.server = server

    @property
    def url(self) -> str:
        return f"{self.server.url}/mcp"

    def stats(self) -> dict[str, Any]:
        return httpx.get(f"{self.server.url}/stats").json()  # type: ignore[no-any-return]

    def tasks(self, status: str | None = None) -> list[str]:
        return [t for t, s in self.stats()["tasks"].items() if status is None or s == status]


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with ServerThread(build_app(), host="127.0.0.1", timeout_graceful_shutdown=1) as server:
        yield Upstream(server)


def calling(tool: str, arguments: dict[str, Any]) -> Any:
    def model(body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return Reply(text=f"Done: {str(last['content']).strip(chr(34))}")
        return Reply(tool_calls=[(f"tasks__{tool}", arguments)])

    return model


def agent_gateway(
    gateway_factory: Any,
    tmp_path: Path,
    upstream: Upstream,
    server: dict[str, Any] | None = None,
    **extra: Any,
) -> RunningGateway:
    plugin = write_plugin(
        tmp_path,
        "tasks",
        {"mcp_servers": [{"id": "tasks", "url": upstream.url, "max_retries": 0, **(server or {})}]},
    )
    agent = {"name": "tasks", "model": "gpt-4o", "instructions": "Use the tools.", "plugin": plugin}
    return gateway_factory(allow_private_mcp_urls=True, agents=[agent], **extra)  # type: ignore[no-any-return]


def chat(gateway: RunningGateway, text: str, user: str = "alice") -> Any:
    return gateway.client().chat.completions.create(
        model="agent:tasks",
        messages=[{"role": "user", "content": text}],
        extra_headers={"hatchway-session": "conversation-1", "X-On-Behalf-Of": user},
    )


def test_a_call_the_server_makes_a_task_is_polled_to_its_result(
    gateway_factory: Any, llm: ScriptedLLM, tmp_path: Path, upstream: Upstream
) -> None:
    llm.handler = calling("long_job", {"seconds": 1.5, "label": "report"})
    gateway = agent_gateway(gateway_factory, tmp_path, upstream)
    raw = gateway.client().chat.completions.with_raw_response.create(
        model="agent:tasks",
        messages=[{"role": "user", "content": "run the report"}],
        extra_headers={"X-On-Behalf-Of": "alice"},
    )
    reply = raw.parse()
    assert reply.choices[0].message.content == "Done: done report"
    stats = upstream.stats()
    assert stats["calls"] == {"long_job": 1}  # one call: the task was polled, never called again
    assert list(stats["tasks"].values()) == ["completed"]  # it was a task, not a synchronous answer
    record = log_of(gateway, raw.headers["x-hatchway-request-id"])
    steps = [s for s in record["steps"] if s["type"] == "task"]
    assert steps and steps[0]["server"] == "tasks" and steps[0]["tool"] == "long_job"
    assert {s["status"] for s in steps} == {"working"}


def test_a_server_with_tasks_off_answers_at_once(
    gateway_factory: Any, llm: ScriptedLLM, tmp_path: Path, upstream: Upstream
) -> None:
    llm.handler = calling("long_job", {"seconds": 0.2, "label": "quick"})
    gateway = agent_gateway(gateway_factory, tmp_path, upstream, {"tasks": "off"})
    assert chat(gateway, "go").choices[0].message.content == "Done: done quick"
    assert upstream.stats()["calls"] == {"long_job": 1} and upstream.tasks() == []


def test_a_tasks_question_reaches_the_end_user_and_the_answer_resumes_the_same_task(
    gateway_factory: Any, llm: ScriptedLLM, tmp_path: Path, upstream: Upstream
) -> None:
    llm.handler = calling("ask_in_task", {"label": "wire"})
    gateway = agent_gateway(gateway_factory, tmp_path, upstream)
    question = chat(gateway, "send the wire").choices[0].message.content or ""
    assert question.startswith("The tasks tool asks:") and "Confirm wire?" in question, question
    [task] = upstream.tasks("input_required")  # the upstream's task waits for the answer
    done = chat(gateway, "yes").choices[0].message.content
    assert done == "Done: answered wire true"
    stats = upstream.stats()
    assert stats["calls"] == {"ask_in_task": 1} and stats["tasks"] == {task: "completed"}


def test_cancelling_a_background_response_cancels_its_upstream_task(
    gateway_factory: Any, llm: ScriptedLLM, tmp_path: Path, upstream: Upstream
) -> None:
    llm.handler = calling("long_job", {"seconds": 60, "label": "long"})
    gateway = agent_gateway(gateway_factory, tmp_path, upstream)
    client = gateway.client()
    queued = client.responses.create(model="agent:tasks", input="go", background=True)
    wait_until(lambda: upstream.tasks("working"), timeout=30, interval=0.1, message="the task to start")
    [task] = upstream.tasks()
    cancelled = client.responses.cancel(queued.id)
    assert cancelled.status == "cancelled"
    wait_until(
        lambda: task in upstream.stats()["cancelled"], timeout=30, interval=0.1, message="tasks/cancel"
    )
    assert upstream.stats()["calls"] == {"long_job": 1}


def test_a_chat_calls_wait_ends_with_the_run_and_cancels_the_task(
    gateway_factory: Any, llm: ScriptedLLM, tmp_path: Path, upstream: Upstream
) -> None:
    llm.handler = calling("long_job", {"seconds": 60, "label": "long"})
    gateway = agent_gateway(gateway_factory, tmp_path, upstream, loop_deadline_seconds=4)
    started = time.monotonic()
    reply = chat(gateway, "go")
    assert time.monotonic() - started < 30  # bounded by the run's deadline, not the task's 60 s
    assert reply.choices[0].finish_reason == "timeout"
    wait_until(lambda: upstream.stats()["cancelled"], timeout=30, interval=0.1, message="the task cancelled")
