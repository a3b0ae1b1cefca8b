"""An upstream MCP server with tasks (SEP-2663): every fixture the suite's ``tasks-*`` scenarios call.

Written with the official SDK (``MCPServer``), which has no tasks yet: the extension is built on
its extension hooks in ``mcp_tasks_extension.py`` (tasks held in memory, ``mcp_task_registry.py``).
Served the way the SDK serves, streamable HTTP at ``/mcp`` (the 2026-07-28 wire; tasks exist only
there). Passed to the suite directly (``conformance server --scenario tasks-lifecycle --url
http://127.0.0.1:PORT/mcp``) it is the baseline Hatchway's task relay is measured against.

    .venv/bin/python -m tests.conformance.mcp_tasks_upstream --port 3002 [--host 127.0.0.1]

(from the repository root). ``build_app()`` gives the same server as an ASGI app, for running it
in-process (``tests.support.servers.ServerThread(build_app())``).

The fixtures, by their task support (``execution.taskSupport`` on ``tools/list``):

* sync only: ``greet(name)`` → ``Hello, {name}!``.
* ``optional`` (a task when the request declares the extension, else run synchronously):
  ``slow_compute(seconds, label)``, ``protocol_error_job()`` (fails with a JSON-RPC error: the
  task is ``failed``), ``confirm_delete(filename)`` and ``multi_input()`` (ask one and two
  elicitations), and for Hatchway's own tests ``long_job(seconds, label)`` → ``done {label}`` and
  ``ask_in_task(label)`` → ``answered {label} true|false`` after one form asking for a boolean
  ``confirm``. Those that ask do it through the task (``input_required``, answered by
  ``tasks/update``) when they run as one, else with an ``InputRequiredResult``.
* ``required`` (``-32021`` without the extension): ``failing_job()`` (a tool error after ~1 s:
  the task is ``completed`` with ``isError``) and ``test_tool_with_task()``, which asks for
  ``user_name`` the SEP-2322 way on the call itself, then answers the retry with a task whose
  result greets that name.

``GET /stats`` answers ``{"calls": {tool: n}, "cancelled": [taskId], "tasks": {taskId: status}}``:
per tool, the ``tools/call`` requests whose tool body started, synchronously or as a task (not one
refused with ``-32021``, nor ``test_tool_with_task``'s SEP-2322 round, which runs before the body;
each SEP-2322 round of a synchronous ``ask_in_task`` does count); the tasks that ``tasks/cancel``
moved to ``cancelled``; every task held (until its TTL).
``POST /stats/reset`` stops and forgets every task and zeroes the counters.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INTERNAL_ERROR,
    CallToolRequestParams,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
)
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tests.conformance.mcp_everything_upstream import LOOPBACK_SECURITY
from tests.conformance.mcp_task_registry import TaskRegistry
from tests.conformance.mcp_tasks_extension import TasksExtension, TaskSupport, gather_input

SERVER_NAME = "hatchway-tasks-upstream"


def _form(message: str, **properties: str) -> ElicitRequest:
    """A form elicitation: every property required, of the JSON type given."""
    schema = {
        "type": "object",
        "properties": {name: {"type": kind} for name, kind in properties.items()},
        "required": list(properties),
    }
    return ElicitRequest(params=ElicitRequestFormParams(message=message, requested_schema=schema))


def _accepted(answer: BaseModel | None, field: str) -> object | None:
    """``content[field]`` of an accepted elicitation answer, if there is one."""
    if isinstance(answer, ElicitResult) and answer.action == "accept" and answer.content:
        return answer.content.get(field)
    return None


def _ask_user_name(params: CallToolRequestParams) -> InputRequiredResult | None:
    """test_tool_with_task's SEP-2322 round: the user's name, before any task exists."""
    if _accepted((params.input_responses or {}).get("user_name"), "name") is not None:
        return None
    return InputRequiredResult(input_requests={"user_name": _form("What is your name?", name="string")})


TASK_SUPPORT: Mapping[str, TaskSupport] = {
    "slow_compute": TaskSupport("optional"),
    "protocol_error_job": TaskSupport("optional"),
    "confirm_delete": TaskSupport("optional"),
    "multi_input": TaskSupport("optional"),
    "long_job": TaskSupport("optional"),
    "ask_in_task": TaskSupport("optional"),
    "failing_job": TaskSupport("required"),
    "test_tool_with_task": TaskSupport("required", before_task=_ask_user_name),
}


def _add_lifecycle_fixtures(mcp: MCPServer) -> None:
    """tasks-lifecycle and the scenarios that reuse its fixtures."""

    @mcp.tool(description="Greets by name, synchronously (no task support).")
    def greet(name: str) -> str:
        return f"Hello, {name}!"

    @mcp.tool(description="Sleeps `seconds`, then reports the label (a task when the client can take one).")
    async def slow_compute(seconds: float, label: str = "") -> str:
        await anyio.sleep(seconds)
        return f"Computed {label} in {seconds:g}s."

    @mcp.tool(description="Always ends in a tool error (isError) after about a second. Needs tasks.")
    async def failing_job() -> str:
        await anyio.sleep(1)
        raise ToolError("failing_job always fails")

    @mcp.tool(description="Always ends in a JSON-RPC error (a protocol error, not a tool error).")
    async def protocol_error_job() -> str:
        raise MCPError(code=INTERNAL_ERROR, message="protocol_error_job failed at the protocol level")


def _add_input_fixtures(mcp: MCPServer) -> None:
    """tasks-mrtr-input, tasks-dispatch-and-envelope and tasks-mrtr-composition."""

    @mcp.tool(description="Asks to confirm the deletion (key `confirm`), then reports what it did.")
    async def confirm_delete(filename: str, ctx: Context) -> str | InputRequiredResult:
        answers = await gather_input(ctx, {"confirm": _form(f"Delete {filename}?", confirm="boolean")})
        if isinstance(answers, InputRequiredResult):
            return answers
        deleted = _accepted(answers["confirm"], "confirm") is True
        return f"Deleted {filename}." if deleted else f"Kept {filename}."

    @mcp.tool(description="Asks two questions at once (keys `name` and `confirm`), then reports both.")
    async def multi_input(ctx: Context) -> str | InputRequiredResult:
        answers = await gather_input(
            ctx, {"name": _form("Your name?", name="string"), "confirm": _form("Go on?", confirm="boolean")}
        )
        if isinstance(answers, InputRequiredResult):
            return answers
        name, confirm = _accepted(answers["name"], "name"), _accepted(answers["confirm"], "confirm")
        return f"{name} answered, confirm={confirm}."

    @mcp.tool(description="Asks for `user_name` on the call (SEP-2322), then greets it from a task.")
    async def test_tool_with_task(ctx: Context) -> str:
        await anyio.sleep(0.2)
        return f"Hello, {_accepted((ctx.input_responses or {}).get('user_name'), 'name')}! (from a task)"


def _add_relay_fixtures(mcp: MCPServer) -> None:
    """For Hatchway's own tests of its task client and relay."""

    @mcp.tool(description="Sleeps `seconds`, then answers `done <label>`. Cancellable as a task.")
    async def long_job(seconds: float, label: str) -> str:
        await anyio.sleep(seconds)
        return f"done {label}"

    @mcp.tool(description="Asks for a boolean `confirm`, then answers `answered <label> <confirm>`.")
    async def ask_in_task(label: str, ctx: Context) -> str | InputRequiredResult:
        answers = await gather_input(ctx, {"confirm": _form(f"Confirm {label}?", confirm="boolean")})
        if isinstance(answers, InputRequiredResult):
            return answers
        confirmed = _accepted(answers["confirm"], "confirm") is True
        return f"answered {label} {'true' if confirmed else 'false'}"


def _add_stats_routes(mcp: MCPServer, registry: TaskRegistry) -> None:
    @mcp.custom_route("/stats", methods=["GET"])
    async def stats(_request: Request) -> Response:
        return JSONResponse(registry.stats())

    @mcp.custom_route("/stats/reset", methods=["POST"])
    async def reset(_request: Request) -> Response:
        registry.reset()
        return JSONResponse(registry.stats())


def build_server(registry: TaskRegistry | None = None) -> MCPServer:
    """The SDK server with the tasks extension and every fixture; tasks kept in ``registry``."""
    registry = registry or TaskRegistry()
    tasks = TasksExtension(TASK_SUPPORT, registry)
    mcp = MCPServer(
        SERVER_NAME,
        version="1.0.0",
        log_level="WARNING",
        extensions=[tasks],
        middleware=[tasks.advertise_task_support],
        lifespan=tasks.lifespan,
    )
    _add_lifecycle_fixtures(mcp)
    _add_input_fixtures(mcp)
    _add_relay_fixtures(mcp)
    _add_stats_routes(mcp, registry)
    return mcp


def build_app(server: MCPServer | None = None) -> Starlette:
    """The streamable-HTTP ASGI app (``/mcp``, ``/stats``) of ``server`` (default: ``build_server()``)."""
    mcp = server or build_server()
    return mcp.streamable_http_app(streamable_http_path="/mcp", transport_security=LOOPBACK_SECURITY)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    options = parser.parse_args(argv)
    uvicorn.run(
        build_app(), host=options.host, port=options.port, log_level="warning", timeout_graceful_shutdown=1
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
