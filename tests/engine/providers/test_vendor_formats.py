"""The Anthropic and Gemini wire mappings on their own: what is sent, what is read, what is refused."""

from __future__ import annotations

import pytest

from hatchway.engine.items import FunctionCall, FunctionCallOutput, Message, ToolSpec
from hatchway.engine.providers import anthropic_format, gemini_format
from hatchway.engine.providers.base import ModelRequest, TextDelta, ToolCallDelta
from hatchway.errors import ProviderMalformed, ProviderStatusError

PNG = "data:image/png;base64,iVBORw0KGgo="


def _conversation() -> list:
    return [
        Message("system", [{"type": "input_text", "text": "Rules.", "cache_control": {"type": "ephemeral"}}]),
        Message("user", [{"type": "input_text", "text": "Look"}, {"type": "input_image", "image_url": PNG}]),
        Message("assistant", [{"type": "thinking", "thinking": "hmm", "signature": "sig"}]),
        FunctionCall("c1", "lookup", '{"q": "a"}'),
        FunctionCall("c2", "lookup", "not json"),
        FunctionCallOutput("c1", "A"),
        FunctionCallOutput("c2", "B"),
    ]


def test_anthropic_request_merges_turns_and_keeps_cache_control_and_thinking() -> None:
    req = ModelRequest(
        "claude",
        _conversation(),
        tools=[ToolSpec("lookup")],
        tool_choice="required",
        parallel_tool_calls=False,
    )
    body = anthropic_format.messages_body(req, stream=False)
    assert body["system"] == [{"type": "text", "text": "Rules.", "cache_control": {"type": "ephemeral"}}]
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    image = body["messages"][0]["content"][1]
    assert image == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
    }
    assistant = body["messages"][1]["content"]
    assert assistant[0] == {"type": "thinking", "thinking": "hmm", "signature": "sig"}  # passed through
    assert [b["input"] for b in assistant[1:]] == [{"q": "a"}, {"_raw": "not json"}]
    assert [b["tool_use_id"] for b in body["messages"][2]["content"]] == ["c1", "c2"]
    assert body["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    assert body["max_tokens"] == anthropic_format.DEFAULT_MAX_TOKENS


def test_anthropic_reply_maps_usage_stop_reasons_and_thinking() -> None:
    raw = (
        b'{"id":"msg_1","model":"claude","stop_reason":"max_tokens","content":['
        b'{"type":"thinking","thinking":"t","signature":"s"},{"type":"text","text":"cut"}],'
        b'"usage":{"input_tokens":5,"output_tokens":9,"cache_read_input_tokens":100,"cache_creation_input_tokens":20}}'
    )
    response = anthropic_format.parse_message(raw, "up")
    assert (response.text, response.finish_reason) == ("cut", "length")
    usage = response.usage
    assert (usage.prompt_tokens, usage.cached_tokens, usage.cache_write_tokens) == (125, 100, 20)
    assert response.raw["thinking"] == [{"type": "thinking", "thinking": "t", "signature": "s"}]
    with pytest.raises(ProviderMalformed, match="content"):
        anthropic_format.parse_message(b'{"id": "msg_2"}', "up")


def test_anthropic_stream_events_become_deltas_and_an_error_event_fails() -> None:
    assembler = anthropic_format.EventAssembler("up")
    json_delta = b'data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta",'
    lines = [
        b'data: {"type":"message_start","message":{"content":[],"usage":{"input_tokens":3}}}',
        b'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}',
        b'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}',
        b'data: {"type":"content_block_start","index":1,'
        b'"content_block":{"type":"tool_use","id":"t1","name":"f"}}',
        json_delta + b'"partial_json":"{\\"a\\":"}}',
        json_delta + b'"partial_json":"1}"}}',
        b'data: {"type":"content_block_stop","index":1}',
        b'data: {"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":7}}',
    ]
    events = [e for line in [b"event: ping", *lines] for e in assembler.feed(line)]
    assert events[0] == TextDelta("Hi")
    assert events[1] == ToolCallDelta(0, "t1", "f", "")
    response = assembler.finish()
    assert (response.text, response.finish_reason) == ("Hi", "tool_calls")
    assert response.tool_calls[0].arguments == '{"a":1}'
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (3, 7)
    failing = anthropic_format.EventAssembler("up")
    with pytest.raises(ProviderStatusError) as failed:
        failing.feed(b'data: {"type":"error","error":{"type":"overloaded_error","message":"busy"}}')
    assert failed.value.upstream_status == 529
    with pytest.raises(ProviderMalformed):
        failing.feed(b'data: {"index": 0}')


def test_gemini_request_names_each_answer_after_its_call() -> None:
    req = ModelRequest(
        "gemini-2.5-pro",
        _conversation(),
        tools=[ToolSpec("lookup")],
        tool_choice={"type": "function", "function": {"name": "lookup"}},
        params={"response_format": {"type": "json_object"}, "stop": "END"},
    )
    body = gemini_format.generate_body(req)
    assert body["systemInstruction"] == {"parts": [{"text": "Rules."}]}
    assert [c["role"] for c in body["contents"]] == ["user", "model", "user"]
    assert body["contents"][0]["parts"][1] == {
        "inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}
    }
    answers = [p["functionResponse"] for p in body["contents"][2]["parts"]]
    assert [(a["id"], a["name"], a["response"]) for a in answers] == [
        ("c1", "lookup", {"result": "A"}),
        ("c2", "lookup", {"result": "B"}),
    ]
    assert body["toolConfig"] == {
        "functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["lookup"]}
    }
    assert body["generationConfig"] == {"stopSequences": ["END"], "responseMimeType": "application/json"}
    assert gemini_format.model_path("models/gemini 2", stream=True) == (
        "/models/gemini%202:streamGenerateContent?alt=sse"
    )


def test_gemini_reply_maps_thoughts_calls_and_filters() -> None:
    assembler = gemini_format.ResponseAssembler("up")
    assembler.feed_json(
        b'{"candidates":[{"content":{"parts":[{"text":"plan","thought":true},{"text":"Hi"},'
        b'{"functionCall":{"name":"f","args":{"x":1}}}]},"finishReason":"STOP"}],'
        b'"usageMetadata":{"promptTokenCount":8,"candidatesTokenCount":2,"thoughtsTokenCount":5}}'
    )
    response = assembler.finish()
    assert (response.text, response.finish_reason, response.tool_calls[0].arguments) == (
        "Hi",
        "tool_calls",
        '{"x":1}',
    )
    assert response.tool_calls[0].call_id.startswith("call_")  # made up: Gemini gave none
    assert (response.usage.completion_tokens, response.usage.reasoning_tokens) == (7, 5)
    assert response.raw["thinking"] == [{"type": "thinking", "thinking": "plan"}]
    blocked = gemini_format.ResponseAssembler("up")
    blocked.feed_json(b'{"candidates":[{"finishReason":"SAFETY"}]}')
    assert blocked.finish().finish_reason == "content_filter"
    with pytest.raises(ProviderMalformed, match="candidates"):
        blocked.feed_json(b'{"candidates": "none"}')
