"""Every answer of a request that has a run record names it in ``x-hatchway-request-id``, errors
included: a client holding a 502 (an upstream body of the wrong shape), a 4xx met after the run
began, or a stream refused before its first byte finds the record with ``GET /v1/logs/{id}``. The
official ``openai`` and ``anthropic`` SDKs are the callers; a request refused before any run began
(no key, a body the Responses API refuses at once) has neither record nor header."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support.agent_loop import log_of
from tests.support.gateway import RunningGateway
from tests.support.mcp_endpoints import calc_endpoint
from tests.support.mcp_servers import McpTestServer
from tests.support.scripted_llm import Reply, ScriptedLLM

HI = [{"role": "user", "content": "hi"}]
WRONG_SHAPE = b'{"object": "chat.completion", "choices": "none"}'
"""A 200 from the upstream that is no completion: the gateway answers 502."""

Call = Callable[[openai.OpenAI], Any]
CHAT_ERRORS: dict[str, tuple[Call, int]] = {
    "wrong shape": (lambda c: c.chat.completions.create(model="gpt-4o", messages=HI), 502),
    "streamed": (lambda c: c.chat.completions.create(model="gpt-4o", messages=HI, stream=True), 502),
    "unknown model": (lambda c: c.chat.completions.create(model="nope", messages=HI), 404),
    "bad body": (lambda c: c.chat.completions.create(model="gpt-4o", messages=[]), 400),
}
RESPONSES_ERRORS: dict[str, tuple[Call, int]] = {
    "wrong shape": (lambda c: c.responses.create(model="gpt-4o", input="hi"), 502),
    "streamed": (lambda c: c.responses.create(model="gpt-4o", input="hi", stream=True), 502),
    "unknown model": (lambda c: c.responses.create(model="nope", input="hi"), 404),
    "compact": (lambda c: c.responses.compact(model="gpt-4o", previous_response_id="resp_gone"), 404),
}


def _record_of(
    gateway: RunningGateway, error: openai.APIStatusError | anthropic.APIStatusError
) -> dict[str, Any]:
    """The run record the error's ``x-hatchway-request-id`` names."""
    log_id = error.response.headers.get("x-hatchway-request-id")
    assert log_id, f"no x-hatchway-request-id on the {error.status_code}: {dict(error.response.headers)}"
    return log_of(gateway, log_id)


@pytest.mark.parametrize("case", CHAT_ERRORS)
def test_a_chat_completions_error_names_its_run_record(
    case: str, gateway: RunningGateway, llm: ScriptedLLM
) -> None:
    call, status = CHAT_ERRORS[case]
    llm.default = Reply(raw_body=WRONG_SHAPE)
    with pytest.raises(openai.APIStatusError) as info:
        call(gateway.client())
    assert info.value.status_code == status
    record = _record_of(gateway, info.value)
    assert (record["route"], record["http_status"], record["status"]) == ("chat.completions", status, "error")


@pytest.mark.parametrize("case", RESPONSES_ERRORS)
def test_a_responses_error_names_its_run_record(case: str, gateway: RunningGateway, llm: ScriptedLLM) -> None:
    call, status = RESPONSES_ERRORS[case]
    llm.default = Reply(raw_body=WRONG_SHAPE)
    with pytest.raises(openai.APIStatusError) as info:
        call(gateway.client())
    assert info.value.status_code == status
    record = _record_of(gateway, info.value)
    route = "responses.compact" if case == "compact" else "responses"
    assert (record["route"], record["http_status"], record["status"]) == (route, status, "error")


@pytest.mark.parametrize("stream", [False, True])
def test_a_messages_error_names_its_run_record(
    stream: bool, gateway: RunningGateway, llm: ScriptedLLM
) -> None:
    llm.default = Reply(raw_body=WRONG_SHAPE)
    sdk = anthropic.Anthropic(base_url=gateway.url, api_key=gateway.key, max_retries=0, timeout=30)
    with pytest.raises(anthropic.APIStatusError) as info:
        sdk.messages.create(model="gpt-4o", max_tokens=10, messages=HI, stream=stream)
    assert info.value.status_code == 502
    record = _record_of(gateway, info.value)
    assert (record["route"], record["http_status"], record["status"]) == ("messages", 502, "error")


def test_an_mcp_endpoint_call_names_its_run_record(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory: Any, tmp_path: Path
) -> None:
    """A stateless ``tools/call`` answered with a tool error (a name the endpoint does not serve)."""
    _, gateway = calc_endpoint(mcp_server_factory, gateway_factory, tmp_path)
    seen: list[httpx2.Response] = []

    async def note(response: httpx2.Response) -> None:
        if response.request.headers.get("mcp-method") == "tools/call":
            seen.append(response)

    async def call() -> bool:
        http = httpx2.AsyncClient(
            headers={"authorization": f"Bearer {gateway.key}"}, timeout=30, event_hooks={"response": [note]}
        )
        async with Client(streamable_http_client(f"{gateway.url}/mcp/tools", http_client=http)) as client:  # type: ignore[arg-type]
            return bool((await client.call_tool("calc__nope", {"x": 1})).is_error)

    assert asyncio.run(call())
    [answer] = seen
    record = log_of(gateway, answer.headers["x-hatchway-request-id"])
    assert record["route"] == "mcp:tools" and record["steps"][0]["outcome"] == "error"


def test_a_request_refused_before_its_run_has_no_record_to_name(gateway: RunningGateway) -> None:
    with pytest.raises(openai.AuthenticationError) as no_key:
        gateway.client(key="hw-wrong").chat.completions.create(model="gpt-4o", messages=HI)
    with pytest.raises(openai.BadRequestError) as bad_body:
        gateway.client().responses.create(model="gpt-4o", input="hi", temperature=7)
    for refused in (no_key.value, bad_body.value):
        assert "x-hatchway-request-id" not in refused.response.headers
    listed = httpx.get(f"{gateway.url}/v1/logs", headers={"authorization": f"Bearer {gateway.key}"})
    assert listed.json()["data"] == []
