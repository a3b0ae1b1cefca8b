"""``mcp_tasks_upstream.py``, the upstream with tasks (SEP-2663), against the suite and an SDK client.

The baseline: the conformance suite's ten ``tasks-*`` server scenarios run straight against the
fixture, each must pass (``checks.py``: no FAILURE or WARNING, at least one SUCCESS). They are
extension scenarios, off the spec timeline: ``--requirements 2026-07-28`` does not select them and
``--spec-version 2026-07-28`` alone skips them as "not applicable", so each runs by name with
``--spec-version 2026-07-28 --force`` (the 2026-07-28 stateless wire, which is also what the
suite falls back to for an extension scenario given no version).

Then the fixtures Hatchway's own task tests use, driven by the official SDK's ``Client`` (with a
small claim that polls the task) and by plain HTTP: ``long_job``, ``ask_in_task`` and ``/stats``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import anyio
import httpx
import pytest
from mcp import Client
from mcp.client import ClaimContext, ClientExtension, ResultClaim
from mcp.types import CallToolResult, Request, Result, TextContent

from tests.conformance.checks import REPORTS
from tests.conformance.mcp_task_registry import TASK_TTL_MS, TERMINAL
from tests.conformance.mcp_tasks_extension import TASKS_EXTENSION, TaskIdParams, UpdateTaskParams
from tests.conformance.mcp_tasks_upstream import build_app
from tests.conformance.server_suite import load_reports, run_suite
from tests.support.servers import ServerThread, wait_until

TASK_SCENARIOS = (
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-mrtr-input",
    "tasks-request-headers",
    "tasks-dispatch-and-envelope",
    "tasks-status-notifications",
    "tasks-required-task-error",
    "tasks-mrtr-composition",
)

# alpha.12 ships tasks-status-notifications as one SKIPPED check and no traffic: its harness read
# notifications/tasks off the tools/call response stream, SEP-2663 sends them on
# subscriptions/listen, and the rewrite is pending upstream. Nothing a server does can pass it, so
# the test pins the suite's own reason instead (and notices the day the scenario comes back).
SKIPPED_BY_THE_SUITE = {
    "tasks-status-notifications": (
        "Skipped: SEP-2663 delivers notifications/tasks via the SEP-2575 subscriptions/listen stream, "
        "not via the tools/call POST SSE response that the prior harness observed. The harness needs "
        "a rewrite against the new channel; tracked as a follow-up."
    )
}


@pytest.fixture(scope="module")
def tasks_upstream() -> Iterator[ServerThread]:
    with ServerThread(build_app()) as upstream:
        yield upstream


@pytest.mark.parametrize("scenario", TASK_SCENARIOS)
def test_the_tasks_upstream_passes_the_suites_tasks_scenario(
    scenario: str, tasks_upstream: ServerThread, tmp_path: Path
) -> None:
    options = ("--scenario", scenario, "--spec-version", "2026-07-28", "--force")
    log = run_suite(f"{tasks_upstream.url}/mcp", tmp_path, *options)
    report = load_reports(tmp_path).get(scenario)
    assert report is not None, f"the suite wrote no report for {scenario}\n{log[-3000:]}"
    if scenario in SKIPPED_BY_THE_SUITE:
        raw = json.loads(next(tmp_path.rglob("checks.json")).read_text(encoding="utf-8"))
        assert [(c["status"], c["errorMessage"]) for c in raw] == [
            ("SKIPPED", SKIPPED_BY_THE_SUITE[scenario])
        ]
        return
    REPORTS.append(report)
    assert not report.problems(), "\n".join(report.problems())


# --- the fixtures for Hatchway's task client and relay ----------------------------------------


class CreatedTask(Result):
    """The ``CreateTaskResult`` a ``tools/call`` may answer with."""

    result_type: Literal["task"] = "task"
    task_id: str
    status: str


class DetailedTask(Result):
    task_id: str
    status: str
    poll_interval_ms: int
    input_requests: dict[str, Any] | None = None
    result: dict[str, Any] | None = None


class GetTask(Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskIdParams
    name_param = "taskId"


class UpdateTask(Request[UpdateTaskParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    params: UpdateTaskParams
    name_param = "taskId"


class ConfirmingTasks(ClientExtension):
    """Just enough of a task client: polls a task to its end, answering every question "yes"."""

    identifier = TASKS_EXTENSION

    def __init__(self) -> None:
        self.statuses: list[str] = []

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self._finish)]

    async def _finish(self, created: CreatedTask, ctx: ClaimContext) -> CallToolResult:
        task_id = created.task_id
        with anyio.fail_after(10):
            while True:
                task = await ctx.session.send_request(
                    GetTask(params=TaskIdParams(task_id=task_id)), DetailedTask
                )
                self.statuses.append(task.status)
                if task.status in TERMINAL:
                    return CallToolResult.model_validate(task.result)
                if task.input_requests:
                    yes = {
                        key: {"action": "accept", "content": {"confirm": True}} for key in task.input_requests
                    }
                    update = UpdateTask(params=UpdateTaskParams(task_id=task_id, input_responses=yes))
                    await ctx.session.send_request(update, Result)
                await anyio.sleep(task.poll_interval_ms / 1000)


def _text(result: CallToolResult) -> str:
    assert isinstance(result.content[0], TextContent), result
    return result.content[0].text


@pytest.mark.anyio
async def test_long_job_and_ask_in_task_run_as_tasks_for_the_official_sdk_client() -> None:
    tasks = ConfirmingTasks()
    with ServerThread(build_app()) as upstream:
        async with Client(f"{upstream.url}/mcp", extensions=[tasks]) as client:
            done = await client.call_tool("long_job", {"seconds": 0.2, "label": "sdk"})
            answered = await client.call_tool("ask_in_task", {"label": "sdk"})
        stats = httpx.get(f"{upstream.url}/stats").json()
    assert (_text(done), _text(answered)) == ("done sdk", "answered sdk true")
    assert {"working", "input_required", "completed"} <= set(tasks.statuses)
    assert stats["calls"] == {"long_job": 1, "ask_in_task": 1}
    assert sorted(stats["tasks"].values()) == ["completed", "completed"]
    assert stats["cancelled"] == []


def _rpc(
    url: str, method: str, params: dict[str, Any], *, tasks: bool = True, name: str | None = None
) -> Any:
    """One 2026-07-28 request (the headers a conformant client sends); the JSON-RPC body answered."""
    capabilities = {"extensions": {TASKS_EXTENSION: {}}} if tasks else {}
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": method,
    }
    routed = name or params.get("taskId") or params.get("name")
    if routed is not None:
        headers["Mcp-Name"] = routed
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}}
    response = httpx.post(f"{url}/mcp", json=body, headers=headers, timeout=10)
    return {"http": response.status_code, **response.json()}


def _call(url: str, tool: str, arguments: dict[str, Any], *, tasks: bool = True, **params: Any) -> Any:
    return _rpc(url, "tools/call", {"name": tool, "arguments": arguments, **params}, tasks=tasks)


def _wait_for_status(url: str, task_id: str, status: str) -> dict[str, Any]:
    """``tasks/get``, polled until the task reaches ``status``: the ``DetailedTask`` then."""

    def reached() -> dict[str, Any] | None:
        task: dict[str, Any] = _rpc(url, "tasks/get", {"taskId": task_id})["result"]
        return task if task["status"] == status else None

    return wait_until(reached, message=f"task {task_id} {status}")


CREATE_TASK_RESULT_KEYS = {
    "resultType",
    "taskId",
    "status",
    "createdAt",
    "lastUpdatedAt",
    "ttlMs",
    "pollIntervalMs",
}


def test_a_cancelled_long_job_settles_cancelled_and_the_stats_say_so() -> None:
    with ServerThread(build_app()) as upstream:
        url = upstream.url
        task = _call(url, "long_job", {"seconds": 60, "label": "x"})["result"]
        assert set(task) - {"_meta"} == CREATE_TASK_RESULT_KEYS
        assert (task["resultType"], task["status"], task["ttlMs"]) == ("task", "working", TASK_TTL_MS)
        task_id = task["taskId"]

        assert _rpc(url, "tasks/get", {"taskId": task_id})["result"]["status"] == "working"
        misrouted = _rpc(url, "tasks/get", {"taskId": task_id}, name="another-task")
        assert (misrouted["http"], misrouted["error"]["code"]) == (400, -32020)
        undeclared = _rpc(url, "tasks/get", {"taskId": task_id}, tasks=False)
        assert undeclared["error"]["code"] == -32021
        unknown = _rpc(url, "tasks/get", {"taskId": "no-such-task"})
        assert unknown["error"]["code"] == -32602

        for _ in range(2):  # idempotent: the same empty ack twice
            ack = _rpc(url, "tasks/cancel", {"taskId": task_id})["result"]
            assert set(ack) - {"_meta"} == {"resultType"}
        assert _rpc(url, "tasks/get", {"taskId": task_id})["result"]["status"] == "cancelled"
        assert httpx.get(f"{url}/stats").json() == {
            "calls": {"long_job": 1},
            "cancelled": [task_id],
            "tasks": {task_id: "cancelled"},
        }
        reset = httpx.post(f"{url}/stats/reset").json()
    assert reset == {"calls": {}, "cancelled": [], "tasks": {}}


def test_ask_in_task_parks_on_one_form_until_tasks_update_answers_it() -> None:
    with ServerThread(build_app()) as upstream:
        url = upstream.url
        task_id = _call(url, "ask_in_task", {"label": "raw"})["result"]["taskId"]
        parked = _wait_for_status(url, task_id, "input_required")
        [(key, question)] = parked["inputRequests"].items()
        assert question["method"] == "elicitation/create"
        assert question["params"]["requestedSchema"]["properties"] == {"confirm": {"type": "boolean"}}
        answer = {key: {"action": "accept", "content": {"confirm": False}}}
        ack = _rpc(url, "tasks/update", {"taskId": task_id, "inputResponses": answer})["result"]
        assert set(ack) - {"_meta"} == {"resultType"}
        done = _wait_for_status(url, task_id, "completed")
    assert done["result"]["content"] == [{"type": "text", "text": "answered raw false"}]


def test_without_the_extension_optional_tools_run_synchronously_and_required_ones_are_refused() -> None:
    with ServerThread(build_app()) as upstream:
        url = upstream.url
        done = _call(url, "long_job", {"seconds": 0, "label": "s"}, tasks=False)["result"]
        assert (done["resultType"], done["content"][0]["text"]) == ("complete", "done s")
        refused = _call(url, "failing_job", {}, tasks=False)["error"]
        assert (refused["code"], refused["data"]) == (
            -32021,
            {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
        )
        asked = _call(url, "ask_in_task", {"label": "s"}, tasks=False)["result"]
        assert (asked["resultType"], list(asked["inputRequests"])) == ("input_required", ["confirm"])
        yes = {"confirm": {"action": "accept", "content": {"confirm": True}}}
        answered = _call(url, "ask_in_task", {"label": "s"}, tasks=False, inputResponses=yes)["result"]
        stats = httpx.get(f"{url}/stats").json()
    assert answered["content"][0]["text"] == "answered s true"
    assert stats == {"calls": {"long_job": 1, "ask_in_task": 2}, "cancelled": [], "tasks": {}}
