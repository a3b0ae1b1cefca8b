"""The agent loop over MCP tools, end to end: the official openai client → Hatchway → SDK-built MCP
servers on loopback, with the scripted upstream deciding the tool calls."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from pathlib import Path

import openai
import pytest

from tests.support.agent_loop import (
    USER,
    inline,
    log_of,
    rounds,
    rule_for,
    summarise,
    tool_messages,
    tool_steps,
    write_plugin,
)
from tests.support.mcp_servers import BearerCredentials, McpTestServer
from tests.support.scripted_llm import Reply, ScriptedLLM


def test_two_rounds_three_tools_answer_usage_and_run_record(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    search = mcp_server_factory("search")
    calc = mcp_server_factory("calc")
    gateway = gateway_factory(
        **rule_for(
            tmp_path,
            {
                "mcp_servers": [
                    {"id": "search", "url": search.url, "tools": ["echo", "slow"]},
                    {"id": "calc", "url": calc.url, "tools": "*"},
                ]
            },
        )
    )
    llm.handler = rounds(
        Reply(tool_calls=[("search__echo", {"text": "lisboa"}), ("calc__add", {"a": 2, "b": 3})]),
        Reply(
            tool_calls=[("search__slow", {"ms": 20, "label": "deep"})], prompt_tokens=20, completion_tokens=9
        ),
        summarise,
    )

    raw = gateway.client().chat.completions.with_raw_response.create(model="gpt-4o", messages=USER)
    completion = raw.parse()

    answer = completion.choices[0].message.content
    assert "echo:lisboa" in answer and "5" in answer and "slept 20 deep" in answer
    assert completion.choices[0].finish_reason == "stop"
    usage = completion.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (11 + 20 + 11, 7 + 9 + 7, 65)
    offered = {t["function"]["name"] for t in llm.requests[0]["tools"]}
    assert offered == {
        "search__echo",
        "search__slow",
        "calc__echo",
        "calc__slow",
        "calc__fail",
        "calc__add",
        "calc__grow",
    }

    record = log_of(gateway, raw.headers["x-hatchway-request-id"])
    assert record["rounds"] == 3 and record["has_tool_calls"] and not record["max_rounds_hit"]
    assert record["plugin_source"] == "rule:research" and record["usage"]["total_tokens"] == 65
    steps = tool_steps(record)
    assert [(s["round"], s["server"], s["tool"]) for s in steps] == [
        (1, "search", "echo"),
        (1, "calc", "add"),
        (2, "search", "slow"),
    ]
    assert json.loads(steps[1]["arguments"]) == {"a": 2, "b": 3}
    assert all(s["outcome"] == "ok" and not s["cached"] and s["retries"] == 0 for s in steps)
    assert all(s["duration_ms"] > 0 for s in steps) and steps[2]["duration_ms"] >= 20
    assert steps[0]["result_preview"] == "echo:lisboa"


def test_three_300ms_tools_run_in_parallel(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    server = mcp_server_factory("s")
    gateway = gateway_factory(**rule_for(tmp_path, {"mcp_servers": [{"id": "s", "url": server.url}]}))
    three = Reply(tool_calls=[("s__slow", {"ms": 300, "label": str(i)}) for i in range(3)])
    llm.handler = rounds(three, summarise)
    client = gateway.client()
    client.chat.completions.create(model="gpt-4o", messages=USER)  # warm: session and tool listing

    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=USER)

    spans = server.spans[-3:]
    assert max(start for start, _ in spans) < min(end for _, end in spans), "the calls did not overlap"
    record = log_of(gateway, raw.headers["x-hatchway-request-id"])
    model_ms = sum(s["duration_ms"] for s in record["steps"] if s["type"] == "model_call")
    tools_round_ms = record["latency_ms"] - model_ms
    assert tools_round_ms < 700, f"the tool round took {tools_round_ms:.0f} ms; sequential would be ≥ 900"
    assert "slept 300 0" in raw.parse().choices[0].message.content


def test_tool_call_parallel_false_runs_the_calls_one_after_the_other(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    server = mcp_server_factory("s")
    gateway = gateway_factory(
        **rule_for(
            tmp_path,
            {"mcp_servers": [{"id": "s", "url": server.url}], "agent": {"tool_call_parallel": False}},
        )
    )
    llm.handler = rounds(
        Reply(tool_calls=[("s__slow", {"ms": 100, "label": str(i)}) for i in range(3)]), summarise
    )

    gateway.client().chat.completions.create(model="gpt-4o", messages=USER)

    spans = sorted(server.spans)
    assert len(spans) == 3
    assert all(later[0] >= earlier[1] for earlier, later in itertools.pairwise(spans))


def test_max_rounds_runs_the_last_rounds_tools_then_returns_that_response_flagged(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    server = mcp_server_factory("s")
    gateway = gateway_factory(
        **rule_for(tmp_path, {"mcp_servers": [{"id": "s", "url": server.url}], "agent": {"max_rounds": 2}})
    )
    llm.handler = lambda body: Reply(
        text=f"still digging ({len(tool_messages(body))} results so far)",
        tool_calls=[("s__echo", {"text": f"more {len(tool_messages(body))}"})],
    )

    raw = gateway.client().chat.completions.with_raw_response.create(model="gpt-4o", messages=USER)
    completion = raw.parse()

    # Seed 004: execute the tools, then "Round < max_rounds?" — no: return the last model response.
    assert completion.choices[0].message.content == "still digging (1 results so far)"
    assert completion.choices[0].message.tool_calls is None
    assert completion.choices[0].finish_reason == "max_rounds"
    assert raw.headers["x-hatchway-max-rounds-hit"] == "true" and raw.headers["x-hatchway-rounds"] == "2"
    assert len(llm.requests) == 2 and server.tool_calls("echo") == 2
    record = log_of(gateway, raw.headers["x-hatchway-request-id"])
    assert record["max_rounds_hit"] and record["rounds"] == 2
    assert [(s["round"], s["outcome"]) for s in tool_steps(record)] == [(1, "ok"), (2, "ok")]


def test_max_rounds_in_a_response_leaves_no_call_unrun(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    server = mcp_server_factory("s")
    gateway = gateway_factory(
        **rule_for(tmp_path, {"mcp_servers": [{"id": "s", "url": server.url}], "agent": {"max_rounds": 2}})
    )
    llm.handler = lambda body: Reply(tool_calls=[("s__echo", {"text": f"n{len(tool_messages(body))}"})])

    response = gateway.client().responses.create(model="gpt-4o", input="go")

    assert response.status == "incomplete" and response.incomplete_details.reason == "max_messages"
    calls = [item for item in response.output if item.type == "mcp_call"]
    assert [(json.loads(c.arguments), c.output, c.error) for c in calls] == [
        ({"text": "n0"}, "echo:n0", None),
        ({"text": "n1"}, "echo:n1", None),
    ]
    assert len(llm.requests) == 2 and server.tool_calls("echo") == 2


def test_the_loop_deadline_ends_the_run_with_finish_reason_timeout(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    # The adapter's side of it; the loop's own rules at the deadline are tests/engine/test_loop.py's,
    # which control time exactly. Here the tool would take 60 s: only the deadline can end the run.
    server = mcp_server_factory("s")
    gateway = gateway_factory(
        loop_deadline_seconds=3,
        **rule_for(tmp_path, {"mcp_servers": [{"id": "s", "url": server.url, "timeout_ms": 90_000}]}),
    )
    llm.handler = rounds(Reply(text="Looking it up…", tool_calls=[("s__slow", {"ms": 60_000})]), summarise)

    started = time.monotonic()
    completion = gateway.client(timeout=60).chat.completions.create(model="gpt-4o", messages=USER)

    assert completion.choices[0].finish_reason == "timeout"
    assert completion.choices[0].message.content == "Looking it up…"
    assert time.monotonic() - started < 30  # the deadline, not the tool's 60 s
    assert len(llm.requests) == 1


def test_a_server_that_is_down_gives_the_model_a_structured_error_and_it_answers(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    server = mcp_server_factory("s")
    healthy = mcp_server_factory("ok")
    gateway = gateway_factory(
        **rule_for(
            tmp_path,
            {
                "mcp_servers": [
                    {"id": "s", "url": server.url, "max_retries": 1, "timeout_ms": 2000},
                    {"id": "ok", "url": healthy.url},
                ]
            },
        )
    )
    llm.handler = rounds(
        Reply(tool_calls=[("s__echo", {"text": "a"}), ("ok__echo", {"text": "b"})]), summarise
    )
    client = gateway.client()
    client.chat.completions.create(model="gpt-4o", messages=USER)  # both up; tools listed
    server.stop()

    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=USER)

    answer = raw.parse().choices[0].message.content
    [error_output, fine] = tool_messages(llm.requests[-1])
    error = json.loads(error_output)["error"]
    assert error["code"] in {"mcp_unreachable", "mcp_connection_lost"} and "s:" in error["message"]
    assert fine == "echo:b" and "echo:b" in answer and error_output in answer
    s_step, ok_step = tool_steps(log_of(gateway, raw.headers["x-hatchway-request-id"]))
    assert s_step["outcome"] == "error" and s_step["retries"] == 1 and ok_step["outcome"] == "ok"


def test_a_503_is_retried_for_an_idempotent_tool_and_a_tool_error_is_not(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    server = mcp_server_factory("s")
    entry = {"id": "s", "url": server.url, "idempotent_tools": ["echo", "fail"]}
    gateway = gateway_factory(**rule_for(tmp_path, {"mcp_servers": [entry]}))
    llm.handler = rounds(
        Reply(tool_calls=[("s__echo", {"text": "x"})]),
        Reply(tool_calls=[("s__fail", {"message": "card declined"})]),
        summarise,
    )
    server.fail_next(2, status=503)

    raw = gateway.client().chat.completions.with_raw_response.create(model="gpt-4o", messages=USER)

    echo, fail = tool_steps(log_of(gateway, raw.headers["x-hatchway-request-id"]))
    assert echo["outcome"] == "ok" and echo["retries"] == 2 and server.tool_calls("echo") == 3
    assert fail["outcome"] == "tool_error" and fail["retries"] == 0 and server.tool_calls("fail") == 1
    assert json.loads(tool_messages(llm.requests[-1])[1])["error"]["code"] == "tool_error"
    assert "card declined" in raw.parse().choices[0].message.content


@pytest.mark.parametrize("header", ["hatchway-mcp-plugin", "floopy-mcp-plugin"])
def test_an_inline_plugin_header_binds_its_servers(
    header: str, mcp_server_factory: Callable[..., McpTestServer], gateway_factory, llm: ScriptedLLM
) -> None:
    server = mcp_server_factory("s")
    gateway = gateway_factory(allow_private_mcp_urls=True)
    llm.handler = rounds(Reply(tool_calls=[("inl__echo", {"text": "inline"})]), summarise)
    plugin = inline(
        {"mcp_servers": [{"id": "inl", "url": server.url, "tools": ["echo"]}], "agent": {"max_rounds": 3}}
    )

    raw = gateway.client(default_headers={header: plugin}).chat.completions.with_raw_response.create(
        model="gpt-4o", messages=USER
    )

    assert "echo:inline" in raw.parse().choices[0].message.content
    assert [t["function"]["name"] for t in llm.requests[0]["tools"]] == ["inl__echo"]
    assert log_of(gateway, raw.headers["x-hatchway-request-id"])["plugin_source"] == "inline"


@pytest.mark.parametrize(
    ("value", "fragments"),
    [
        ("%%% not base64 %%%", ["hatchway-mcp-plugin", "base64"]),
        (
            inline(
                {
                    "mcp_servers": [
                        {
                            "id": "a",
                            "url": "https://x",
                            "auth": {
                                "type": "oauth",
                                "token_url": "http://idp.local/token",
                                "client_id": "c",
                                "secret_ref": "secret.s",
                            },
                        }
                    ]
                }
            ),
            [
                "hatchway-mcp-plugin",
                "mcp_servers[0].auth.token_url: must be https (got http://idp.local/token)",
            ],
        ),
        (
            inline({"mcp_servers": [{"id": "a", "url": "https://x", "colour": "red"}]}),
            ["hatchway-mcp-plugin", "mcp_servers[0].colour"],
        ),
        (
            inline({"mcp_servers": [{"id": "a", "url": "https://x", "forward_headers": ["x bad"]}]}),
            ["mcp_servers[0].forward_headers[0]", "not a valid header name"],
        ),
        (
            __import__("base64").b64encode(b"version: '1'\nmcp_servers: [{id: a\n").decode(),
            ["hatchway-mcp-plugin", "not valid YAML"],
        ),
        (
            __import__("base64").b64encode(b"a: &x [1, 2]\nb: *x\n").decode(),
            ["hatchway-mcp-plugin", "aliases"],
        ),
    ],
)
def test_a_bad_inline_plugin_is_a_400_naming_the_header_and_field(
    value: str, fragments: list[str], gateway, llm: ScriptedLLM
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        gateway.client(default_headers={"hatchway-mcp-plugin": value}).chat.completions.create(
            model="gpt-4o", messages=USER
        )
    error = caught.value.body
    assert error["param"] == "hatchway-mcp-plugin" and error["code"] == "invalid_plugin"
    for fragment in fragments:
        assert fragment in error["message"]
    assert llm.requests == []


def test_an_inline_plugin_aimed_at_loopback_is_refused_unless_allowed(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory, llm: ScriptedLLM
) -> None:
    server = mcp_server_factory("s")
    strict = gateway_factory()
    plugin = inline({"mcp_servers": [{"id": "s", "url": server.url}]})

    with pytest.raises(openai.PermissionDeniedError) as caught:
        strict.client(default_headers={"hatchway-mcp-plugin": plugin}).chat.completions.create(
            model="gpt-4o", messages=USER
        )
    assert "mcp_servers[0].url" in caught.value.body["message"] and "loopback" in caught.value.body["message"]
    assert "allow_private_mcp_urls" in caught.value.body["message"]
    assert server.requests == [] and llm.requests == []

    stdio = inline({"mcp_servers": [{"id": "x", "command": "python", "args": ["-c", "print(1)"]}]})
    with pytest.raises(openai.PermissionDeniedError) as caught:
        strict.client(default_headers={"hatchway-mcp-plugin": stdio}).chat.completions.create(
            model="gpt-4o", messages=USER
        )
    assert "stdio" in caught.value.body["message"]

    llm.reply("fine")
    relaxed = gateway_factory(allow_private_mcp_urls=True)
    relaxed.client(default_headers={"hatchway-mcp-plugin": plugin}).chat.completions.create(
        model="gpt-4o", messages=USER
    )
    assert server.calls_of("tools/list")


def test_forwarded_headers_reach_only_their_server_and_credentials_never(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    tenant = mcp_server_factory("tenant")
    other = mcp_server_factory("other")
    gateway = gateway_factory(
        **rule_for(
            tmp_path,
            {
                "mcp_servers": [
                    {"id": "t", "url": tenant.url, "forward_headers": ["x-tenant-id", "x-trace-id"]},
                    {"id": "o", "url": other.url},
                ]
            },
        )
    )
    llm.handler = rounds(
        Reply(tool_calls=[("t__echo", {"text": "1"}), ("o__echo", {"text": "2"})]), summarise
    )
    client = gateway.client(default_headers={"x-tenant-id": "acme", "cookie": "session=abc", "x-other": "no"})

    client.chat.completions.create(model="gpt-4o", messages=USER)

    for server in (tenant, other):
        for request in server.requests:
            assert not request.headers.get("authorization", "").startswith("Bearer hw-")
            assert "cookie" not in request.headers and "x-other" not in request.headers
    [sent] = tenant.tool_call_headers("echo")
    assert sent["x-tenant-id"] == "acme" and "x-trace-id" not in sent
    assert all("x-tenant-id" not in r.headers for r in other.requests)


def test_a_plugin_listing_credentials_in_forward_headers_works_and_they_are_dropped(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    """A Floopy plugin lists ``authorization`` and ``cookie``: accepted, never forwarded, and said so in
    the response header and the run record."""
    tenant = mcp_server_factory("tenant")
    forward = ["x-tenant-id", "Authorization", "cookie"]
    plugin = {"mcp_servers": [{"id": "t", "url": tenant.url, "forward_headers": forward}]}
    gateway = gateway_factory(**rule_for(tmp_path, plugin))
    llm.handler = rounds(Reply(tool_calls=[("t__echo", {"text": "1"})]), summarise)
    client = gateway.client(default_headers={"x-tenant-id": "acme", "cookie": "session=abc"})

    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=USER)

    assert raw.headers["x-hatchway-dropped-headers"] == "t: authorization, cookie"
    [sent] = tenant.tool_call_headers("echo")
    assert sent["x-tenant-id"] == "acme" and "cookie" not in sent
    assert not sent.get("authorization", "").startswith("Bearer hw-")
    record = log_of(gateway, raw.headers["x-hatchway-request-id"])
    dropped = [s for s in record["steps"] if s.get("dropped_headers")]
    step = {"type": "list_tools", "round": 1, "server": "t", "outcome": "ok"}
    assert dropped == [{**step, "dropped_headers": ["authorization", "cookie"]}]


@pytest.mark.parametrize(("ttl", "expected_calls"), [(60, 1), (0, 2)])
def test_the_tool_result_cache(
    ttl: int,
    expected_calls: int,
    mcp_server_factory: Callable[..., McpTestServer],
    gateway_factory,
    llm: ScriptedLLM,
    tmp_path: Path,
) -> None:
    server = mcp_server_factory("s")
    gateway = gateway_factory(
        **rule_for(
            tmp_path,
            {"mcp_servers": [{"id": "s", "url": server.url}], "agent": {"tool_cache_ttl_seconds": ttl}},
        )
    )
    llm.handler = rounds(Reply(tool_calls=[("s__add", {"b": 2, "a": 40})]), summarise)
    client = gateway.client()

    client.chat.completions.create(model="gpt-4o", messages=USER)
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=USER)

    assert server.tool_calls("add") == expected_calls
    assert "42" in raw.parse().choices[0].message.content
    [step] = tool_steps(log_of(gateway, raw.headers["x-hatchway-request-id"]))
    assert step["cached"] is (ttl > 0)


def test_the_cache_is_per_organisation(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    server = mcp_server_factory("s")
    gateway = gateway_factory(
        **rule_for(
            tmp_path,
            {"mcp_servers": [{"id": "s", "url": server.url}], "agent": {"tool_cache_ttl_seconds": 60}},
        )
    )
    llm.handler = rounds(Reply(tool_calls=[("s__add", {"a": 1, "b": 1})]), summarise)
    other = gateway.new_org()

    gateway.client().chat.completions.create(model="gpt-4o", messages=USER)
    gateway.client(key=other.key).chat.completions.create(model="gpt-4o", messages=USER)

    assert server.tool_calls("add") == 2


def test_streaming_final_only_sends_only_the_final_answer(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    server = mcp_server_factory("s")
    gateway = gateway_factory(**rule_for(tmp_path, {"mcp_servers": [{"id": "s", "url": server.url}]}))
    final = "The final answer, streamed in several small chunks."
    llm.handler = rounds(
        Reply(tool_calls=[("s__echo", {"text": "one"})]),
        Reply(tool_calls=[("s__echo", {"text": "two"})]),
        Reply(text=final, chunk_size=5),
    )

    chunks = list(
        gateway.client().chat.completions.create(
            model="gpt-4o", messages=USER, stream=True, stream_options={"include_usage": True}
        )
    )

    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert "".join(texts) == final and len(texts) > 3
    assert all(not (c.choices and c.choices[0].delta.tool_calls) for c in chunks)
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == [
        "stop"
    ]
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 3 * 18
    assert server.tool_calls("echo") == 2 and all(r.get("stream") for r in llm.requests)


def test_streaming_final_only_holds_text_written_before_a_tool_call(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    server = mcp_server_factory("s")
    gateway = gateway_factory(**rule_for(tmp_path, {"mcp_servers": [{"id": "s", "url": server.url}]}))
    final = "Lisbon has about 545,000 people."
    llm.handler = rounds(
        Reply(
            text="thinking… let me look that up.", tool_calls=[("s__echo", {"text": "lisbon"})], chunk_size=4
        ),
        Reply(text=final, chunk_size=4),
    )

    with gateway.client().chat.completions.with_streaming_response.create(
        model="gpt-4o", messages=USER, stream=True
    ) as response:
        log_id = response.headers["x-hatchway-request-id"]
        chunks = list(response.parse())

    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert "".join(texts) == final and len(texts) > 3  # still streamed in the upstream's pieces
    assert [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason] == ["stop"]
    # The intermediate step stays visible in the run log.
    record = log_of(gateway, log_id)
    assert [(s["type"], s["round"]) for s in record["steps"]] == [
        ("model_call", 1),
        ("tool_call", 1),
        ("model_call", 2),
    ]
    assert record["steps"][0]["tool_calls"] == ["s__echo"] and server.tool_calls("echo") == 1


def test_a_streamed_response_keeps_the_text_of_its_tool_rounds_in_order(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    server = mcp_server_factory("s")
    gateway = gateway_factory(**rule_for(tmp_path, {"mcp_servers": [{"id": "s", "url": server.url}]}))
    llm.handler = rounds(
        Reply(text="Looking it up.", tool_calls=[("s__echo", {"text": "x"})], chunk_size=4),
        Reply(text="Found it.", chunk_size=4),
    )

    with gateway.client().responses.stream(model="gpt-4o", input="go") as stream:
        events = list(stream)
        final = stream.get_final_response()

    # A response's output holds the message of its tool round, so its stream carries it too.
    added = [e.item.type for e in events if e.type == "response.output_item.added"]
    assert added == ["message", "mcp_call", "message"]
    done = [e.text for e in events if e.type == "response.output_text.done"]
    assert done == ["Looking it up.", "Found it."]
    assert [i.type for i in final.output] == ["message", "mcp_call", "message"]
    assert final.output[0].content[0].text == "Looking it up."


def test_stream_mode_disabled_sends_the_answer_at_once_and_says_so(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    server = mcp_server_factory("s")
    gateway = gateway_factory(
        **rule_for(
            tmp_path, {"mcp_servers": [{"id": "s", "url": server.url}], "agent": {"stream_mode": "disabled"}}
        )
    )
    llm.handler = rounds(Reply(tool_calls=[("s__echo", {"text": "one"})]), summarise)

    with gateway.client().chat.completions.with_streaming_response.create(
        model="gpt-4o", messages=USER, stream=True
    ) as response:
        assert response.headers["x-hatchway-stream-mode"] == "disabled"
        chunks = list(response.parse())

    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert texts == ["Answer from: echo:one"]
    assert not any(r.get("stream") for r in llm.requests)


def test_an_agent_binds_its_own_plugin(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    server = mcp_server_factory("s")
    plugin = write_plugin(
        tmp_path, "contas", {"mcp_servers": [{"id": "contas", "url": server.url, "tools": ["add"]}]}
    )
    gateway = gateway_factory(
        allow_private_mcp_urls=True,
        agents=[{"name": "contas", "model": "gpt-4o", "instructions": "Be exact.", "plugin": plugin}],
    )
    llm.handler = rounds(Reply(tool_calls=[("contas__add", {"a": 1, "b": 2})]), summarise)

    raw = gateway.client().chat.completions.with_raw_response.create(model="agent:contas", messages=USER)

    assert "3" in raw.parse().choices[0].message.content
    assert log_of(gateway, raw.headers["x-hatchway-request-id"])["plugin_source"] == "agent:contas"
    with pytest.raises(openai.BadRequestError) as caught:
        gateway.client(default_headers={"hatchway-mcp-plugin": inline({})}).chat.completions.create(
            model="agent:contas", messages=USER
        )
    assert "own plugin" in caught.value.body["message"]


def test_client_declared_tools_still_go_back_to_the_client(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    server = mcp_server_factory("s")
    gateway = gateway_factory(**rule_for(tmp_path, {"mcp_servers": [{"id": "s", "url": server.url}]}))
    llm.reply(
        tool_calls=[
            ("s__echo", {"text": "mine"}, "call_mcp"),
            ("get_weather", {"city": "Porto"}, "call_client"),
        ]
    )
    weather = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }

    completion = gateway.client().chat.completions.create(model="gpt-4o", messages=USER, tools=[weather])

    assert completion.choices[0].finish_reason == "tool_calls"
    assert [c.function.name for c in completion.choices[0].message.tool_calls] == ["get_weather"]
    assert server.tool_calls("echo") == 1
    assert {t["function"]["name"] for t in llm.requests[0]["tools"]} >= {"get_weather", "s__echo"}


def test_credentials_seam_bearer_401_refresh_and_redaction(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    server = mcp_server_factory("s", required_bearer="fresh-token-123")
    vault = BearerCredentials("stale-token-000", "fresh-token-123")  # the vault's seam, injected
    gateway = gateway_factory(
        gateway_options={"mcp_credentials": vault},
        **rule_for(
            tmp_path,
            {
                "mcp_servers": [
                    {"id": "s", "url": server.url, "auth": {"type": "bearer", "secret_ref": "secret.tok"}}
                ]
            },
        ),
    )
    llm.handler = rounds(Reply(tool_calls=[("s__echo", {"text": "fresh-token-123"})]), summarise)

    raw = gateway.client().chat.completions.with_raw_response.create(model="gpt-4o", messages=USER)

    assert vault.authorized == [("s", True)] and vault.invalidated == ["s"]
    assert tool_messages(llm.requests[-1]) == ["echo:[REDACTED]"]
    record = log_of(gateway, raw.headers["x-hatchway-request-id"])
    assert "fresh-token-123" not in json.dumps(record)
    assert any(r.status == 401 for r in server.requests)


def test_gateway_shutdown_closes_the_mcp_sessions(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    server = mcp_server_factory("s")
    gateway = gateway_factory(**rule_for(tmp_path, {"mcp_servers": [{"id": "s", "url": server.url}]}))
    llm.handler = rounds(Reply(tool_calls=[("s__echo", {"text": "x"})]), summarise)
    gateway.client().chat.completions.create(model="gpt-4o", messages=USER)
    assert len(gateway.gateway.mcp_pool) == 1

    gateway.stop()

    assert len(gateway.gateway.mcp_pool) == 0
