"""The at-most-once rule on its own: what proves a failed call never reached its tool, and which
tools may be called again anyway."""

from __future__ import annotations

import json

import httpx2
import mcp_types as types
import pytest

from hatchway.config.plugin import McpServerConfig, parse_plugin
from hatchway.engine.tools.mcp.delivery import is_idempotent, may_have_reached, outcome_unknown
from hatchway.engine.tools.mcp.http import AnswerTooLarge, RequestScope
from hatchway.errors import McpServerError, ToolTimeout

REQUEST = httpx2.Request("POST", "http://127.0.0.1:1/mcp")
LOST = McpServerError("s: the request failed", code="mcp_connection_lost", transient=True)


def server(**fields: object) -> McpServerConfig:
    plugin = {"version": "1", "mcp_servers": [{"id": "s", "url": "http://127.0.0.1:1/mcp", **fields}]}
    return parse_plugin(json.dumps(plugin), "test plugin").mcp_servers[0]


def scope_after(*events: Exception | int) -> RequestScope:
    scope = RequestScope()
    for event in events:
        if isinstance(event, int):
            scope.record(event)
        else:
            scope.fail(event)
    return scope


@pytest.mark.parametrize(
    "error",
    [
        httpx2.ConnectError("refused", request=REQUEST),
        httpx2.ConnectTimeout("no SYN-ACK", request=REQUEST),
        httpx2.PoolTimeout("no free connection", request=REQUEST),
    ],
)
def test_a_request_that_never_connected_did_not_reach_the_tool(error: Exception) -> None:
    assert not may_have_reached(LOST, scope_after(error), sent=True)


@pytest.mark.parametrize(
    "events",
    [
        (httpx2.ReadError("reset", request=REQUEST),),
        (httpx2.RemoteProtocolError("closed without answering", request=REQUEST),),
        (httpx2.WriteError("broken pipe", request=REQUEST),),  # httpcore reads on after one
        (503,),
        (200, httpx2.ConnectError("refused", request=REQUEST)),  # one request of the call was answered
        (),  # no answer yet (a timeout)
    ],
)
def test_a_request_that_may_have_been_written_may_have_reached_the_tool(events: tuple[object, ...]) -> None:
    assert may_have_reached(LOST, scope_after(*events), sent=True)  # type: ignore[arg-type]


def test_a_call_never_handed_to_a_session_did_not_reach_the_tool() -> None:
    timeout = ToolTimeout("s: no answer within 300 ms", transient=True)
    assert not may_have_reached(timeout, RequestScope(), sent=False)


def test_an_answer_too_large_to_read_came_from_a_tool_that_ran() -> None:
    too_large = McpServerError("s: the answer is too large", code="tool_result_too_large")
    assert may_have_reached(too_large, scope_after(200, AnswerTooLarge(10, REQUEST)), sent=True)
    unknown = outcome_unknown(too_large)
    assert unknown.code == "tool_result_too_large" and not unknown.transient


def test_an_unknown_outcome_keeps_what_was_seen() -> None:
    timeout = ToolTimeout("s: no answer within 300 ms", transient=True)
    unknown = outcome_unknown(timeout)
    assert unknown.code == "tool_outcome_unknown" and unknown.timed_out and unknown.cause is timeout
    assert not unknown.transient and "may or may not have acted" in unknown.message


def test_idempotent_tools_are_named_or_matched_by_glob_or_annotated_by_the_server() -> None:
    declared = server(idempotent_tools=["get_balance", "search_*"])
    assert declared.declares_idempotent("get_balance") and declared.declares_idempotent("search_web")
    assert not declared.declares_idempotent("Search_web") and not declared.declares_idempotent("pay")

    def tool(name: str, **hints: bool) -> types.Tool:
        annotations = types.ToolAnnotations(**hints) if hints else None
        return types.Tool(name=name, input_schema={"type": "object"}, annotations=annotations)

    listed = [
        tool("pay"),
        tool("refund", idempotent_hint=True),
        tool("balance", read_only_hint=True),
        tool("transfer", idempotent_hint=False, read_only_hint=False),
    ]
    assert [is_idempotent(server(), t.name, listed) for t in listed] == [False, True, True, False]
    assert not is_idempotent(server(), "refund", None)  # no listing seen: at most once
    assert is_idempotent(declared, "search_web", None)
