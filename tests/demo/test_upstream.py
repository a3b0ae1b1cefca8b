"""The scripted upstream shared by the demo, the tests' ScriptedLLM and bench/: its wire format, read
back with the official ``openai`` client and plain HTTP."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from hatchway.demo.upstream import Reply, ScriptedUpstream
from tests.support.servers import ServerThread


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[ServerThread] = []

    def start(app: Any) -> str:
        servers.append(ServerThread(app).start())
        return servers[-1].url

    yield start
    for server in servers:
        server.stop()


def test_a_streamed_reply_reassembles_to_the_same_text_tool_calls_and_usage(serve) -> None:
    reply = Reply("Olá, mundo!", tool_calls=[("lookup", {"q": "Évora"}, "call_1")], chunk_size=3)
    url = serve(ScriptedUpstream(lambda body: reply, model="scripted-model"))
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-test")

    stream = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "x"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)

    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    deltas = [d for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or []]
    assert text == "Olá, mundo!"
    assert [d.id for d in deltas if d.id] == ["call_1"] and deltas[0].function.name == "lookup"
    assert json.loads("".join(d.function.arguments or "" for d in deltas)) == {"q": "Évora"}
    assert max(len(d.function.arguments or "") for d in deltas) == 3
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 18
    assert {c.model for c in chunks} == {"scripted-model"}


def test_errors_and_raw_bodies_are_sent_as_scripted(serve) -> None:
    replies = iter(
        [Reply(status=429, error="slow down"), Reply(status=200, raw_body=b'{"not": "a completion"}')]
    )
    url = serve(ScriptedUpstream(lambda body: next(replies)))
    chat = f"{url}/v1/chat/completions"

    limited = httpx.post(chat, json={"model": "m", "messages": []})
    raw = httpx.post(chat, json={"model": "m", "messages": [], "stream": True})

    assert limited.status_code == 429 and limited.json()["error"]["message"] == "slow down"
    assert raw.status_code == 200 and raw.content == b'{"not": "a completion"}'


def test_the_responses_api_and_the_model_list_are_served_only_when_asked_for(serve) -> None:
    reply = Reply("ok", tool_calls=[("lookup", {"q": "x"}, "call_9")], prompt_tokens=10, completion_tokens=1)
    plain = serve(ScriptedUpstream(lambda body: reply))
    full = serve(
        ScriptedUpstream(lambda body: reply, model="bench-model", models=["bench-model"], responses=True)
    )

    response = httpx.post(f"{full}/v1/responses", json={"model": "m", "input": "x"}).json()
    listed = httpx.get(f"{full}/v1/models").json()
    missing = httpx.post(f"{plain}/v1/responses", json={"model": "m", "input": "x"})

    assert [item["type"] for item in response["output"]] == ["message", "function_call"]
    assert response["output"][0]["content"][0]["text"] == "ok"
    assert response["output"][1]["call_id"] == "call_9"
    assert response["model"] == "bench-model" and response["usage"]["total_tokens"] == 11
    assert listed["data"] == [{"id": "bench-model", "object": "model"}]
    assert missing.status_code == 404 and "no route POST /v1/responses" in missing.json()["error"]["message"]
    assert httpx.get(f"{plain}/v1/models").status_code == 404


def test_a_delay_ends_when_the_caller_hangs_up(serve) -> None:
    asked, finished = threading.Event(), threading.Event()

    def decide(body: dict[str, Any]) -> Reply:
        asked.set()
        return Reply("too late", delay=30)

    app = ScriptedUpstream(decide)

    async def watched(scope, receive, send):  # type: ignore[no-untyped-def]
        await app(scope, receive, send)
        if scope["type"] == "http":
            finished.set()

    url = serve(watched)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{url}/v1/chat/completions", json={"model": "m", "messages": []}, timeout=0.5)

    assert asked.is_set()
    assert finished.wait(5), "the scripted upstream still waited after the caller hung up"
