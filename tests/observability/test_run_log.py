"""The run log: one record per request with ordered steps, over Chat (plain and streamed) and
Responses (streamed and background), with filters, links, and no secret in any record."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from hatchway.store.logs import run_links
from tests.support.agent_loop import USER, log_of, rounds, rule_for, summarise, tool_steps
from tests.support.gateway import RunningGateway
from tests.support.leak_scanner import SecretScanner
from tests.support.mcp_servers import McpTestServer
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import wait_until

TWO_ROUNDS = (
    Reply(
        tool_calls=[("search__echo", {"text": "lisboa"}), ("calc__add", {"a": 2, "b": 3})],
        prompt_tokens=10,
        completion_tokens=5,
    ),
    Reply(tool_calls=[("search__slow", {"ms": 30, "label": "deep"})], prompt_tokens=20, completion_tokens=9),
)


def two_round_gateway(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory, tmp_path: Path, **extra: Any
) -> RunningGateway:
    search = mcp_server_factory("search")
    calc = mcp_server_factory("calc")
    plugin = {
        "mcp_servers": [
            {"id": "search", "url": search.url, "tools": ["echo", "slow"]},
            {"id": "calc", "url": calc.url, "tools": ["add"]},
        ],
        "agent": {"max_rounds": 3},
    }
    return gateway_factory(**rule_for(tmp_path, plugin), **extra)


def logs(gateway: RunningGateway, **params: Any) -> httpx.Response:
    return httpx.get(
        f"{gateway.url}/v1/logs", params=params, headers={"authorization": f"Bearer {gateway.key}"}
    )


def assert_two_round_record(record: dict[str, Any], *, final_tokens: tuple[int, int]) -> None:
    """Three model calls around three tool calls, in order, with durations and summed tokens."""
    kinds = [(s["type"], s["round"]) for s in record["steps"]]
    assert kinds == [
        ("model_call", 1),
        ("tool_call", 1),
        ("tool_call", 1),
        ("model_call", 2),
        ("tool_call", 2),
        ("model_call", 3),
    ]
    models = [s for s in record["steps"] if s["type"] == "model_call"]
    assert [(s["prompt_tokens"], s["completion_tokens"]) for s in models] == [(10, 5), (20, 9), final_tokens]
    assert all(s["duration_ms"] > 0 for s in record["steps"])
    starts = [s["started_at_ms"] for s in record["steps"]]
    first_model_end = starts[0] + models[0]["duration_ms"]
    assert starts[1] >= first_model_end - 1 and starts[2] >= first_model_end - 1  # tools after the call
    round_one_end = max(s["started_at_ms"] + s["duration_ms"] for s in record["steps"][1:3])
    assert starts[3] >= round_one_end - 1 and starts[5] >= starts[4]  # the next round after the tools
    tools = tool_steps(record)
    assert [(s["server"], s["tool"], s["outcome"], s["cached"], s["retries"]) for s in tools] == [
        ("search", "echo", "ok", False, 0),
        ("calc", "add", "ok", False, 0),
        ("search", "slow", "ok", False, 0),
    ]
    assert json.loads(tools[1]["arguments"]) == {"a": 2, "b": 3}
    assert tools[0]["result_preview"] == "echo:lisboa" and tools[1]["result_preview"] == "5"
    assert tools[2]["duration_ms"] >= 30
    assert record["rounds"] == 3 and record["has_tool_calls"] and not record["max_rounds_hit"]
    usage = record["usage"]
    assert usage["prompt_tokens"] == sum(s["prompt_tokens"] for s in models)
    assert usage["completion_tokens"] == sum(s["completion_tokens"] for s in models)
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_two_round_three_tool_record_filters_and_max_rounds(
    mcp_server_factory, gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    gateway = two_round_gateway(mcp_server_factory, gateway_factory, tmp_path)

    def script(body: dict[str, Any]) -> Reply:
        user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        if user == "plain":
            return Reply("no tools needed")
        if user == "loop forever":
            return Reply("still working", tool_calls=[("search__echo", {"text": "again"})])
        return rounds(*TWO_ROUNDS, summarise)(body)

    llm.handler = script
    client = gateway.client(default_headers={"X-On-Behalf-Of": "ana"})
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=USER)
    client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "plain"}])
    looped = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "loop forever"}]
    )

    record = log_of(gateway, raw.headers["x-hatchway-request-id"])
    assert_two_round_record(record, final_tokens=(11, 7))
    assert record["key_name"] and record["on_behalf_of"] == "ana" and record["org_id"] == gateway.org.org_id
    assert record["plugin_source"] == "rule:research" and record["finish_reason"] == "stop"
    assert record["latency_ms"] >= sum(s["duration_ms"] for s in record["steps"] if s["type"] == "model_call")

    capped = log_of(gateway, looped.headers["x-hatchway-request-id"])
    assert capped["max_rounds_hit"] and capped["finish_reason"] == "max_rounds" and capped["rounds"] == 3
    assert looped.headers["x-hatchway-max-rounds-hit"] == "true"

    with_tools = logs(gateway, has_tool_calls="true").json()["data"]
    without = logs(gateway, has_tool_calls="false").json()["data"]
    assert {r["id"] for r in with_tools} == {record["id"], capped["id"]}
    assert [r["rounds"] for r in without] == [1] and not without[0]["steps"][0].get("tool_calls")


def test_a_streamed_chat_run_logs_every_round(
    mcp_server_factory, gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    gateway = two_round_gateway(mcp_server_factory, gateway_factory, tmp_path)
    llm.handler = rounds(*TWO_ROUNDS, summarise)

    with gateway.client().chat.completions.with_streaming_response.create(
        model="gpt-4o", messages=USER, stream=True, stream_options={"include_usage": True}
    ) as response:
        log_id = response.headers["x-hatchway-request-id"]
        text = "".join(c.choices[0].delta.content or "" for c in response.parse() if c.choices)

    assert "echo:lisboa" in text and "slept 30 deep" in text
    assert_two_round_record(log_of(gateway, log_id), final_tokens=(11, 7))


@pytest.mark.parametrize("mode", ["stream", "background"])
def test_streamed_and_background_responses_log_every_round(
    mode: str, mcp_server_factory, gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    gateway = two_round_gateway(mcp_server_factory, gateway_factory, tmp_path)
    llm.handler = rounds(*TWO_ROUNDS, summarise)
    client = gateway.client()

    if mode == "stream":
        events = list(client.responses.create(model="gpt-4o", input="go", stream=True))
        response_id = events[-1].response.id
        assert events[-1].type == "response.completed"
    else:
        response_id = client.responses.create(model="gpt-4o", input="go", background=True).id
        wait_until(
            lambda: client.responses.retrieve(response_id).status == "completed",
            timeout=30,
            message="the background response to complete",
        )

    [record] = wait_until(
        lambda: [r for r in logs(gateway).json()["data"] if r["response_id"] == response_id],
        timeout=10,
        message="the response's log record",
    )
    assert record["route"] == "responses"
    assert_two_round_record(record, final_tokens=(11, 7))


def test_compact_writes_a_record_like_the_other_endpoints(gateway, llm: ScriptedLLM) -> None:
    llm.reply("Noted.")
    llm.reply("The user asked to remember papaya.", prompt_tokens=30, completion_tokens=7)
    client = gateway.client()
    first = client.responses.create(model="gpt-4o", input="Remember papaya.")

    raw = client.responses.with_raw_response.compact(model="gpt-4o", previous_response_id=first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.compact(model="gpt-4o", previous_response_id="resp_nowhere")

    record = log_of(gateway, raw.headers["x-hatchway-request-id"])
    assert record["route"] == "responses.compact" and record["model"] == "gpt-4o"
    assert record["status"] == "ok" and record["http_status"] == 200
    assert record["usage"] == {"prompt_tokens": 30, "completion_tokens": 7, "total_tokens": 37}
    assert record["rounds"] == 1
    assert [(s["type"], s["outcome"]) for s in record["steps"]] == [("model_call", "ok")]
    [refused] = [r for r in logs(gateway, status="error").json()["data"] if r["route"] == "responses.compact"]
    assert refused["http_status"] == 404 and "resp_nowhere" in refused["error"]


def test_subagent_children_are_linked_both_ways(gateway_factory, llm: ScriptedLLM) -> None:
    def script(body: dict[str, Any]) -> Reply:
        task = next(m["content"] for m in body["messages"] if m["role"] == "user")
        if any(m["role"] == "tool" for m in body["messages"]):
            return Reply("all done")
        if task == "top":
            return Reply(tool_calls=[("spawn_subagent", {"task": "a"}), ("spawn_subagent", {"task": "b"})])
        return Reply(f"child {task}")

    llm.handler = script
    gateway = gateway_factory(agents=[{"name": "lead", "model": "gpt-4o", "subagents": {"enabled": True}}])
    parent = gateway.client().responses.create(model="agent:lead", input="top")

    records = wait_until(
        lambda: (found := logs(gateway).json()["data"])[2:] and found, message="three log records"
    )
    [top] = [r for r in records if r["response_id"] == parent.id]
    children = [r for r in records if r["parent_id"] == parent.id]
    assert top["agent"] == "lead" and top["plugin_source"] is None
    assert sorted(top["links"]["children"]) == sorted(r["response_id"] for r in children)
    assert len(children) == 2 and all(c["links"] == {"operations": [], "children": []} for c in children)
    spawn_steps = tool_steps(top)
    assert [s["server"] for s in spawn_steps] == ["hatchway", "hatchway"]


def test_no_secret_reaches_a_record(
    secret_scanner: SecretScanner,
    caplog: pytest.LogCaptureFixture,
    mcp_server_factory,
    gateway_factory,
    llm: ScriptedLLM,
    tmp_path: Path,
) -> None:
    # The MCP SDK (the gateway's client and the in-process test server alike) logs raw JSON-RPC
    # messages at DEBUG, arguments included; that is the SDK's output, not a record of ours.
    caplog.set_level(logging.INFO, logger="mcp")
    token = "tok-5f1d9c2e8a7b4c3d"
    server = mcp_server_factory("s", required_bearer=token)
    plugin = {
        "mcp_servers": [
            {"id": "s", "url": server.url, "auth": {"type": "bearer", "secret_ref": "secret.tok"}}
        ]
    }
    gateway = gateway_factory(**rule_for(tmp_path, plugin))
    secret_scanner.watch(token)
    secret_scanner.watch_database(gateway.settings.database_url)
    put = httpx.put(
        f"{gateway.url}/v1/secrets/tok",
        json={"value": token},
        headers={"authorization": f"Bearer {gateway.key}"},
    )
    assert put.status_code == 201
    # The model (or a user who pasted it) puts the secret in the arguments; the tool echoes it back.
    llm.handler = rounds(Reply(tool_calls=[("s__echo", {"text": f"key={token}"})]), summarise)

    raw = gateway.client().chat.completions.with_raw_response.create(model="gpt-4o", messages=USER)

    secret_scanner.observe("chat response", raw.http_response.text)
    record = log_of(gateway, raw.headers["x-hatchway-request-id"])
    secret_scanner.observe("log record", json.dumps(record))
    [step] = tool_steps(record)
    assert step["outcome"] == "ok" and "[REDACTED]" in step["arguments"]
    assert step["result_preview"] == "echo:key=[REDACTED]"
    cli_json = json.dumps(logs(gateway).json())
    secret_scanner.observe("GET /v1/logs", cli_json)
    assert token not in cli_json


def test_bad_log_filters_are_400s_naming_the_parameter(gateway) -> None:
    cases = {
        "status": {"status": "done"},
        "has_tool_calls": {"has_tool_calls": "maybe"},
        "since": {"since": "yesterday"},
        "until": {"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"},
        "after": {"after": "resp_123"},
        "limit": {"limit": "0"},
        "route": {"route": "r" * 257},
    }
    for param, params in cases.items():
        response = logs(gateway, **params)
        assert response.status_code == 400, (param, response.text)
        assert response.json()["error"]["param"] == param


def test_time_range_and_cursor_pagination(gateway_factory, database_url: str, llm: ScriptedLLM) -> None:
    gateway = gateway_factory(database_url=database_url)
    for i in range(5):
        llm.reply(f"answer {i}")
        gateway.client().chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])

    first = logs(gateway, limit=2).json()
    second = logs(gateway, limit=2, after=first["last_id"]).json()
    third = logs(gateway, limit=2, after=second["last_id"]).json()
    ids = [r["id"] for page in (first, second, third) for r in page["data"]]
    assert len(ids) == 5 and len(set(ids)) == 5 and ids == sorted(ids, reverse=True)
    assert first["has_more"] and second["has_more"] and not third["has_more"]

    newest = first["data"][0]["created_at"]
    assert logs(gateway, since="2000-01-01T00:00:00").json()["data"][0]["id"] == ids[0]  # naive = UTC
    assert logs(gateway, until="2000-01-01T00:00:00Z").json()["data"] == []
    assert len(logs(gateway, since=newest - 3600, until=newest + 3600).json()["data"]) == 5


def test_links_collect_operations_and_children_from_the_steps_in_order() -> None:
    steps = [
        {"type": "model_call", "round": 1},
        {"type": "tool_call", "operation_id": "op_2", "operation_status": "AWAITING_CONFIRMATION"},
        {"type": "tool_call", "child_response_id": "resp_b"},
        {"type": "tool_call", "operation_id": "op_2"},
        {"type": "tool_call", "operation_id": "op_1", "child_response_id": None},
        {"type": "tool_call", "child_response_id": "resp_a"},
    ]
    assert run_links(steps) == {"operations": ["op_2", "op_1"], "children": ["resp_b", "resp_a"]}
