"""What real Responses clients send, on the wire (no SDK): Codex CLI's first request (namespaced
function tools, a hosted ``web_search`` tool, ``client_metadata``, ``include``, ``reasoning``,
``store: false``), every request field OpenAI documents, OpenAI's ``mcp_call`` event sequence, and
a stream that fails before any output answering with its HTTP status."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai.types.responses.response_create_params import ResponseCreateParamsBase

from hatchway.responses.wire import HOSTED_TOOL_TYPES
from tests.support.agent_loop import rounds, rule_for
from tests.support.gateway import create_org_key
from tests.support.mcp_servers import McpTestServer
from tests.support.responses_api import raw_events
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import wait_until

SHELL = {
    "type": "function",
    "name": "shell",
    "description": "Runs a shell command and returns its output.",
    "strict": False,
    "parameters": {
        "type": "object",
        "properties": {"command": {"type": "array", "items": {"type": "string"}}},
    },
}
NAMESPACE = {
    "type": "namespace",
    "name": "mcp__docs",
    "description": "Tools of the docs MCP server.",
    "tools": [{"type": "function", "name": "search", "parameters": {"type": "object", "properties": {}}}],
}
CODEX_FIRST = {
    "model": "gpt-4o",
    "instructions": "You are Codex.",
    "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list files"}]}],
    "tools": [SHELL, NAMESPACE, {"type": "web_search", "external_web_access": False}],
    "tool_choice": "auto",
    "parallel_tool_calls": False,
    "reasoning": {"effort": "medium", "summary": "auto"},
    "store": False,
    "stream": True,
    "include": ["reasoning.encrypted_content"],
    "prompt_cache_key": "0198-session",
    "client_metadata": {"originator": "codex_exec", "session_id": "0198"},
}


def post(gateway, body: dict[str, Any]) -> httpx.Response:
    headers = {"authorization": f"Bearer {gateway.key}"}
    return httpx.post(f"{gateway.url}/v1/responses", json=body, headers=headers, timeout=30)


def stream(gateway, body: dict[str, Any]) -> tuple[httpx.Response, list[dict[str, Any]]]:
    headers = {"authorization": f"Bearer {gateway.key}"}
    with httpx.stream("POST", f"{gateway.url}/v1/responses", json=body, headers=headers, timeout=30) as r:
        frames = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    return r, frames


def test_codexs_first_request_is_answered_and_says_what_it_ignored(gateway, llm: ScriptedLLM) -> None:
    llm.reply(tool_calls=[("shell", {"command": ["ls"]})])

    answer, events = stream(gateway, CODEX_FIRST)

    assert answer.status_code == 200, events
    ignored = answer.headers["x-hatchway-ignored-params"].split(", ")
    assert ignored == ["client_metadata", "include", "prompt_cache_key", "reasoning", "tools[2]:web_search"]
    sent = [t["function"]["name"] for t in llm.requests[0]["tools"]]
    assert sent == ["shell", "mcp__docs__search"]  # the hosted tool is not offered to the model
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert [(i["type"], i["name"]) for i in done] == [("function_call", "shell")]
    assert events[-1]["type"] == "response.completed"


def test_a_namespaced_tools_call_comes_back_with_its_namespace_and_replays(gateway, llm: ScriptedLLM) -> None:
    llm.reply(tool_calls=[("mcp__docs__search", {"q": "hatch"}, "call_1")])
    first = post(gateway, {**CODEX_FIRST, "stream": False})
    assert first.status_code == 200, first.text
    [call] = first.json()["output"]
    assert (call["type"], call["name"], call["namespace"]) == ("function_call", "search", "mcp__docs")

    llm.reply(text="found it")
    turn = [
        *CODEX_FIRST["input"],
        call,
        {"type": "function_call_output", "call_id": "call_1", "output": "3 hits"},
    ]
    second = post(gateway, {**CODEX_FIRST, "stream": False, "input": turn})

    assert second.status_code == 200, second.text
    assert second.json()["output_text"] == "found it"
    replayed = [m for m in llm.requests[1]["messages"] if m.get("tool_calls")]
    assert replayed[0]["tool_calls"][0]["function"]["name"] == "mcp__docs__search"


def test_every_request_field_openai_documents_is_accepted(gateway, llm: ScriptedLLM) -> None:
    llm.reply(text="ok")
    fields = set(ResponseCreateParamsBase.__annotations__)
    body: dict[str, Any] = dict.fromkeys(fields)
    body.update(model="gpt-4o", input="hi", client_metadata={"originator": "codex_exec"})

    answer = post(gateway, body)

    assert answer.status_code == 200, answer.text
    assert answer.json()["output_text"] == "ok"


@pytest.mark.parametrize("field", ["conversation", "prompt"])
def test_a_field_the_gateway_cannot_honour_is_refused_by_name(gateway, field: str) -> None:
    answer = post(gateway, {"model": "gpt-4o", "input": "hi", field: {"id": "x"}})
    assert answer.status_code == 400 and answer.json()["error"]["message"].startswith(
        f"{field}: not supported"
    )


def test_hosted_tools_refuse_names_the_tool(gateway_factory) -> None:
    gateway = gateway_factory(hosted_tools="refuse")
    answer = post(gateway, {**CODEX_FIRST, "stream": False})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert (error["param"], error["code"]) == ("tools[2].type", "unsupported_tool")


def test_every_hosted_tool_type_of_the_sdk_is_known() -> None:
    from typing import get_args

    from openai.types.responses.tool_param import ToolParam

    kinds = set()
    for option in get_args(ToolParam):
        annotation = getattr(option, "__annotations__", {}).get("type")
        kinds.update(get_args(get_args(annotation)[0]) if get_args(annotation) else ())
    assert kinds - {"function", "namespace"} <= HOSTED_TOOL_TYPES


def mcp_call_sequence(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(event type, arguments as the event has them) of every event about the mcp_call item."""
    item_id = next(e["item"]["id"] for e in events if e.get("item", {}).get("type") == "mcp_call")
    out = []
    for e in events:
        if e.get("item_id") == item_id or e.get("item", {}).get("id") == item_id:
            args = e.get("item", {}).get("arguments", e.get("delta", e.get("arguments", "")))
            out.append((e["type"], args))
    return out


def test_a_streamed_mcp_call_follows_openais_event_sequence_live_and_replayed(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    server = mcp_server_factory("docs")
    gateway = gateway_factory(**rule_for(tmp_path, {"mcp_servers": [{"id": "docs", "url": server.url}]}))
    llm.handler = rounds(Reply(tool_calls=[("docs__echo", {"text": "x"})]), Reply(text="done"))
    arguments = json.dumps({"text": "x"})
    expected = [
        ("response.output_item.added", ""),
        ("response.mcp_call.in_progress", ""),
        ("response.mcp_call_arguments.delta", arguments),
        ("response.mcp_call_arguments.done", arguments),
        ("response.mcp_call.completed", ""),
        ("response.output_item.done", arguments),
    ]

    live = raw_events(gateway, {"model": "gpt-4o", "input": "go", "stream": True})
    assert mcp_call_sequence(live) == expected
    response_id = live[0]["response"]["id"]
    replayed = raw_events(gateway, {}, method="GET", path=f"/v1/responses/{response_id}?stream=true")
    assert mcp_call_sequence(replayed) == expected

    stored = httpx.get(
        f"{gateway.url}/v1/responses/{response_id}", headers={"authorization": f"Bearer {gateway.key}"}
    ).json()
    [stored_call] = [i for i in stored["output"] if i["type"] == "mcp_call"]
    added = next(
        e["item"]
        for e in live
        if e["type"] == "response.output_item.added" and e["item"]["type"] == "mcp_call"
    )
    assert added["server_label"] == stored_call["server_label"] == "docs"


@pytest.mark.parametrize(
    ("upstream_status", "status", "error_type"),
    [(429, 429, "rate_limit_error"), (500, 502, "upstream_error"), (503, 502, "upstream_error")],
)
def test_a_stream_that_fails_before_any_output_answers_its_http_status(
    gateway, llm: ScriptedLLM, upstream_status: int, status: int, error_type: str
) -> None:
    llm.reply(status=upstream_status, error="slow down")

    answer, _ = stream(gateway, {"model": "gpt-4o", "input": "x", "stream": True})

    assert answer.status_code == status
    assert answer.headers["content-type"].startswith("application/json")
    stored = httpx.get(
        f"{gateway.url}/v1/responses?limit=1", headers={"authorization": f"Bearer {gateway.key}"}
    ).json()["data"][0]
    assert stored["status"] == "failed"


def test_a_failure_after_output_began_ends_the_stream_with_a_typed_error_event(
    gateway, llm: ScriptedLLM
) -> None:
    llm.handler = rounds(
        Reply(text="Looking.", tool_calls=[("nope__x", {})]), Reply(status=429, error="slow down")
    )

    answer, events = stream(gateway, {"model": "gpt-4o", "input": "x", "stream": True})

    assert answer.status_code == 200
    error = next(e for e in events if e["type"] == "error")
    assert error["error"]["type"] == "rate_limit_error"
    assert events[-1]["type"] == "response.failed"


def test_item_references_replay_the_organisations_stored_items(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    """The Vercel AI SDK's second turn: earlier output replayed as ``item_reference`` items; an
    ``mcp_…`` id stands for the call and its output."""
    server = mcp_server_factory("docs")
    gateway = gateway_factory(**rule_for(tmp_path, {"mcp_servers": [{"id": "docs", "url": server.url}]}))
    llm.handler = rounds(Reply(tool_calls=[("docs__echo", {"text": "x"})]), Reply(text="done"))
    first = post(gateway, {"model": "gpt-4o", "input": "look it up"})
    assert first.status_code == 200, first.text
    call, answer = first.json()["output"]
    assert (call["type"], answer["type"]) == ("mcp_call", "message")

    llm.handler = lambda _: Reply(text="again")
    refs = [{"type": "item_reference", "id": call["id"]}, {"type": "item_reference", "id": answer["id"]}]
    turn = [{"role": "user", "content": "look it up"}, *refs, {"role": "user", "content": "and now?"}]
    second = post(gateway, {"model": "gpt-4o", "input": turn})

    assert second.status_code == 200, second.text
    sent = llm.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "assistant", "user"]
    assert sent[1]["tool_calls"][0]["function"]["name"] == "docs__echo"
    assert sent[2]["tool_call_id"] == sent[1]["tool_calls"][0]["id"] and "x" in sent[2]["content"]
    assert (sent[3]["content"], sent[4]["content"]) == ("done", "and now?")


def test_an_unknown_or_foreign_item_reference_is_a_400_with_its_path(gateway, llm: ScriptedLLM) -> None:
    llm.reply(text="mine")
    mine = post(gateway, {"model": "gpt-4o", "input": "hi"}).json()["output"][0]["id"]
    other = asyncio.run(create_org_key(gateway.settings.database_url)).key

    for key, item_id in ((gateway.key, "msg_nope"), (other, mine)):
        answer = httpx.post(
            f"{gateway.url}/v1/responses",
            json={
                "model": "gpt-4o",
                "input": [{"role": "user", "content": "x"}, {"type": "item_reference", "id": item_id}],
            },
            headers={"authorization": f"Bearer {key}"},
        )
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert (error["param"], error["code"]) == ("input[1].id", "item_not_found")


def test_cache_token_counts_are_reported_as_the_upstream_reported_them(gateway, llm: ScriptedLLM) -> None:
    completion = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": 20,
            "completion_tokens": 2,
            "total_tokens": 22,
            "prompt_tokens_details": {"cached_tokens": 8, "cache_write_tokens": 12},
        },
    }
    llm.reply(raw_body=json.dumps(completion).encode())
    answer = post(gateway, {"model": "gpt-4o", "input": "hi"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["input_tokens_details"] == {"cached_tokens": 8, "cache_write_tokens": 12}

    llm.reply(raw_body=json.dumps(completion).encode())
    chat = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
        headers={"authorization": f"Bearer {gateway.key}"},
    )
    assert chat.json()["usage"]["prompt_tokens_details"] == {"cached_tokens": 8, "cache_write_tokens": 12}


def test_a_stored_error_is_in_openais_shape_with_what_the_upstream_reported(
    gateway, llm: ScriptedLLM
) -> None:
    refusal = {
        "error": {
            "message": "bad image",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_image",
        }
    }
    llm.reply(status=400, raw_body=json.dumps(refusal).encode())
    created = post(gateway, {"model": "gpt-4o", "input": "hi", "background": True})
    assert created.status_code == 200, created.text
    auth = {"authorization": f"Bearer {gateway.key}"}

    def ended() -> dict[str, Any] | None:
        current = httpx.get(f"{gateway.url}/v1/responses/{created.json()['id']}", headers=auth).json()
        return current if current["status"] not in ("queued", "in_progress") else None

    stored = wait_until(ended, timeout=30, interval=0.05, message="the background response to end")
    error = stored["error"]
    assert (error["code"], error["type"], error["hatchway_code"]) == (
        "invalid_image",
        "invalid_request_error",
        "upstream_400",
    )
    assert error["message"] == "bad image"


def test_a_hosted_tools_credentials_are_neither_echoed_nor_stored(gateway, llm: ScriptedLLM) -> None:
    llm.reply(text="ok")
    hosted = {
        "type": "mcp",
        "server_label": "crm",
        "server_url": "https://crm.example.com/mcp",
        "headers": {"Authorization": "Bearer sk-client-secret"},
        "authorization": "sk-client-secret",
    }
    answer = post(gateway, {"model": "gpt-4o", "input": "hi", "tools": [hosted]})

    assert answer.status_code == 200, answer.text
    assert answer.headers["x-hatchway-ignored-params"] == "tools[0]:mcp"
    stored = httpx.get(
        f"{gateway.url}/v1/responses/{answer.json()['id']}",
        headers={"authorization": f"Bearer {gateway.key}"},
    )
    for body in (answer.text, stored.text):
        assert "sk-client-secret" not in body
    assert stored.json()["tools"] == [
        {"type": "mcp", "server_label": "crm", "server_url": "https://crm.example.com/mcp"}
    ]
