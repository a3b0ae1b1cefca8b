"""Upstream replies that are not completions, through both APIs, streamed, plain and in the background.

A 200 whose body or stream chunk has the wrong shape, is not JSON, not UTF-8 or not decompressible,
a stream of no chunks, a connection cut mid-body: each is a provider error — a 502 with ``type`` and
``code`` (never a 500), a stream that ends with an error event, a stored response ``failed``, exactly
one run record with its status, nothing left in flight. A reply of the other kind than asked (a JSON
completion to a stream, an event stream to a plain request) that is a valid completion is the answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.support.faulty_upstream import SSE, Answer, FaultyUpstream, deflated, gzipped, sse
from tests.support.gateway import RunningGateway, base_config, write_config
from tests.support.metrics import scrape, value
from tests.support.responses_api import checked_events
from tests.support.servers import wait_until

TIMEOUT = 15.0
"""Longer than the provider's read timeout: a request that hangs fails the test instead."""

COMPLETION: dict[str, Any] = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4o-2024",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hi there"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
}


def completion(*, choice: Any = None, **fields: Any) -> bytes:
    """COMPLETION with top-level ``fields`` replaced (``choice``: its first choice's fields)."""
    body = {**COMPLETION, **fields}
    if choice is not None:
        body["choices"] = [{**COMPLETION["choices"][0], **choice}]
    return json.dumps(body).encode()


def message(**fields: Any) -> bytes:
    return completion(choice={"message": {"role": "assistant", **fields}})


def chunk(delta: Any = None, **fields: Any) -> dict[str, Any]:
    """A ``chat.completion.chunk`` whose one choice has ``delta`` (``fields`` replace top-level keys)."""
    choice = {"index": 0, "delta": {} if delta is None else delta, "finish_reason": None}
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "gpt-4o-2024"} | {
        "choices": [choice],
        **fields,
    }


GOOD_STREAM = sse(
    chunk({"role": "assistant", "content": ""}),
    chunk({"content": "hi"}),
    chunk({"content": " there"}),
    chunk(choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}]),
    chunk(choices=[], usage=COMPLETION["usage"]),
)


def streamed(*payloads: Any) -> Answer:
    """An event stream: a first good text chunk, then ``payloads``."""
    return Answer(sse(chunk({"role": "assistant", "content": "hi"}), *payloads), SSE)


@dataclass(frozen=True)
class Fault:
    answer: Answer
    says: str
    """What the error message names (a field path, or what was wrong)."""
    code: str = "upstream_malformed"


def tool_call(call: Any) -> bytes:
    return message(content=None, tool_calls=[call])


FAULTS: dict[str, Fault] = {
    # -- a body that is not a completion ---------------------------------------------------------
    "not_json": Fault(Answer(b"<html>oops</html>"), "not JSON"),
    "html_page": Fault(Answer(b"<html><body>Service paused</body></html>", "text/html"), "text/html"),
    "plain_text": Fault(Answer(b"hello there", "text/plain"), "text/plain"),
    "empty_body": Fault(Answer(b""), "not JSON"),
    "truncated_json": Fault(Answer(completion()[:40]), "not JSON"),
    "json_array": Fault(Answer(b"[1, 2]"), "(root)"),
    "json_string": Fault(Answer(b'"hi"'), "(root)"),
    "json_null": Fault(Answer(b"null"), "(root)"),
    "missing_choices": Fault(Answer(b'{"id": "chatcmpl-1", "object": "chat.completion"}'), "choices"),
    "empty_choices": Fault(Answer(completion(choices=[])), "choices"),
    "choices_object": Fault(Answer(completion(choices={"0": {}})), "choices"),
    "choice_number": Fault(Answer(completion(choices=[1])), "choices[0]"),
    "missing_message": Fault(Answer(completion(choices=[{"index": 0, "finish_reason": "stop"}])), "message"),
    "message_string": Fault(Answer(completion(choice={"message": "hi"})), "choices[0].message"),
    "content_number": Fault(Answer(message(content=5)), "choices[0].message.content"),
    "content_object": Fault(Answer(message(content={"text": "hi"})), "choices[0].message.content"),
    "tool_calls_object": Fault(Answer(message(tool_calls={"id": "c"})), "choices[0].message.tool_calls"),
    "tool_call_number": Fault(Answer(tool_call(1)), "choices[0].message.tool_calls[0]"),
    "tool_call_function_string": Fault(
        Answer(tool_call({"id": "c1", "type": "function", "function": "f"})),
        "choices[0].message.tool_calls[0].function",
    ),
    "tool_call_without_name": Fault(
        Answer(tool_call({"id": "c1", "type": "function", "function": {"arguments": "{}"}})),
        "choices[0].message.tool_calls[0].function.name",
    ),
    "tool_call_arguments_object": Fault(
        Answer(tool_call({"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}})),
        "choices[0].message.tool_calls[0].function.arguments",
    ),
    "finish_reason_number": Fault(
        Answer(completion(choice={"finish_reason": 3})), "choices[0].finish_reason"
    ),
    "usage_string": Fault(Answer(completion(usage="lots")), "usage"),
    "usage_tokens_word": Fault(Answer(completion(usage={"prompt_tokens": "many"})), "usage.prompt_tokens"),
    "model_number": Fault(Answer(completion(model=5)), "model"),
    "invalid_utf8": Fault(Answer(message(content="hi").replace(b"hi", b"h\xffi")), "UTF-8"),
    "error_body": Fault(
        Answer(b'{"error": {"message": "overloaded, try later", "type": "server_error"}}'),
        "overloaded, try later",
        "upstream_unavailable",
    ),
    # -- an encoding that does not decode ---------------------------------------------------------
    "bad_gzip": Fault(Answer(b"this is not gzip", content_encoding="gzip"), "gzip"),
    "bad_deflate": Fault(Answer(b"this is not deflate", content_encoding="deflate"), "deflate"),
    "truncated_gzip": Fault(Answer(gzipped(completion())[:-12], content_encoding="gzip"), "gzip"),
    "unsupported_encoding": Fault(Answer(completion(), content_encoding="br"), "content-encoding"),
    "gzip_sse_bad": Fault(Answer(b"not gzip either", SSE, content_encoding="gzip"), "gzip"),
    # -- a connection cut mid-body ------------------------------------------------------------------
    "cut_body": Fault(Answer(completion()[:30], cut=True), "closed the connection", "upstream_unavailable"),
    "cut_stream": Fault(
        Answer(sse(chunk({"content": "hi"}), done=False), SSE, cut=True),
        "closed the connection",
        "upstream_unavailable",
    ),
    # -- an event stream whose chunks are not chunks ---------------------------------------------
    "sse_not_json": Fault(streamed(b"oops"), "not JSON"),
    "sse_array": Fault(streamed(b"[1, 2]"), "(root)"),
    "sse_string": Fault(streamed(b'"hi"'), "(root)"),
    "sse_choices_string": Fault(streamed({"choices": "x"}), "choices"),
    "sse_choice_number": Fault(streamed({"choices": [1]}), "choices[0]"),
    "sse_delta_string": Fault(streamed(chunk("hi")), "choices[0].delta"),
    "sse_content_number": Fault(streamed(chunk({"content": 5})), "choices[0].delta.content"),
    "sse_tool_calls_object": Fault(streamed(chunk({"tool_calls": {"index": 0}})), "delta.tool_calls"),
    "sse_tool_call_number": Fault(streamed(chunk({"tool_calls": [1]})), "delta.tool_calls[0]"),
    "sse_tool_call_index_word": Fault(
        streamed(chunk({"tool_calls": [{"index": "first", "function": {"name": "f"}}]})),
        "delta.tool_calls[0].index",
    ),
    "sse_tool_call_function_string": Fault(
        streamed(chunk({"tool_calls": [{"index": 0, "id": "c1", "function": "f"}]})),
        "delta.tool_calls[0].function",
    ),
    "sse_usage_string": Fault(streamed(chunk(choices=[], usage="lots")), "usage"),
    "sse_invalid_utf8": Fault(
        streamed(json.dumps(chunk({"content": "hi"})).encode().replace(b"hi", b"h\xffi")), "UTF-8"
    ),
    "sse_no_chunks": Fault(Answer(b": keep-alive\n\n", SSE), "no chunk"),
    "sse_error_event": Fault(
        streamed({"error": {"message": "overloaded mid-stream"}}),
        "overloaded mid-stream",
        "upstream_unavailable",
    ),
}

THINKING = {"type": "thinking", "text": "the user wants a greeting"}
TEXT_THERE = {"type": "text", "text": "there"}

ANSWERS: dict[str, Answer] = {
    "json_completion": Answer(completion()),
    "sse_completion": Answer(GOOD_STREAM, SSE),
    "gzip_completion": Answer(gzipped(completion()), content_encoding="gzip"),
    "deflate_sse_completion": Answer(deflated(GOOD_STREAM), SSE, content_encoding="deflate"),
    # Content as parts (some reasoning upstreams): the text parts are the answer, the others are not.
    "content_parts": Answer(message(content=[THINKING, {"type": "text", "text": "hi "}, TEXT_THERE])),
    "sse_content_parts": Answer(
        sse(
            chunk({"role": "assistant", "content": [THINKING]}),
            chunk({"content": [{"type": "text", "text": "hi "}]}),
            chunk({"content": [TEXT_THERE]}),
            chunk(choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}]),
            chunk(choices=[], usage=COMPLETION["usage"]),
        ),
        SSE,
    ),
}

WEATHER_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"c":1}'},
}
TOOL_CALL_REPLY = Answer(
    completion(
        choice={
            "message": {"role": "assistant", "content": None, "tool_calls": [WEATHER_CALL]},
            "finish_reason": "tool_calls",
        }
    )
)

MODES = ("chat", "chat_stream", "responses", "responses_stream", "responses_background")


@dataclass
class Served:
    """The module's gateway on the faulty upstream, and one HTTP client for every request to it."""

    gateway: RunningGateway
    http: httpx.Client

    def headers(self, user: str = "") -> dict[str, str]:
        return {"authorization": f"Bearer {self.gateway.key}", "x-on-behalf-of": user}

    def url(self, path: str) -> str:
        return f"{self.gateway.url}{path}"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One faulty upstream and one gateway on it for the whole module."""
    upstream = FaultyUpstream(
        {**{k: f.answer for k, f in FAULTS.items()}, **ANSWERS, "json_tool_call": TOOL_CALL_REPLY}
    ).start()
    tmp = tmp_path_factory.mktemp("faults")
    gateway = RunningGateway(write_config(tmp, base_config(tmp, upstream.base_url))).start()
    with httpx.Client(timeout=TIMEOUT) as http:
        yield Served(gateway, http)
    gateway.stop()
    upstream.stop()


# -- asking, in each mode --------------------------------------------------------------------------


@dataclass
class Ending:
    """How a request ended, as its client saw it."""

    status: int
    """The HTTP status of the answer (200 for a stream that started)."""
    error: dict[str, Any] | None = None
    """The error as the client got it: the body's ``error``, a chunk's or an ``error`` event's."""
    text: str = ""
    response: dict[str, Any] | None = None
    """The Responses API object: as answered, or the stored one for a response that failed."""


def _chat(s: Served, name: str, user: str, *, stream: bool) -> Ending:
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": f"fault:{name}"}], "stream": stream}
    r = s.http.post(s.url("/v1/chat/completions"), json=body, headers=s.headers(user))
    if r.status_code != 200 or not stream:
        payload = r.json()
        if r.status_code != 200:
            return Ending(r.status_code, payload.get("error"))
        return Ending(200, text=payload["choices"][0]["message"]["content"] or "")
    assert r.headers["content-type"].startswith("text/event-stream")
    frames = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    assert frames and frames[-1] == "[DONE]", f"the stream did not end with [DONE]: {frames}"
    chunks = [json.loads(f) for f in frames[:-1]]
    errors = [c["error"] for c in chunks if "error" in c]
    assert errors in ([], [chunks[-1].get("error")]), f"an error frame is the last before [DONE]: {chunks}"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
    return Ending(200, errors[0] if errors else None, text)


def _stored(s: Served, response_id: str) -> dict[str, Any]:
    r = s.http.get(s.url(f"/v1/responses/{response_id}"), headers=s.headers())
    assert r.status_code == 200, r.text
    return r.json()


def _output_text(response: dict[str, Any]) -> str:
    return "".join(
        part.get("text", "")
        for item in response.get("output") or []
        if item.get("type") == "message"
        for part in item.get("content") or []
    )


def _responses(s: Served, name: str, user: str, *, stream: bool = False) -> Ending:
    body = {"model": "gpt-4o", "input": f"fault:{name}", "stream": stream}
    if stream:
        with s.http.stream("POST", s.url("/v1/responses"), json=body, headers=s.headers(user)) as r:
            if r.status_code != 200:  # failed before any output: the HTTP error, as unstreamed
                r.read()
                return Ending(r.status_code, r.json().get("error"))
            events = checked_events(r)
        last = events[-1]
        assert last["type"] in ("response.completed", "response.failed"), (
            f"the stream ended on {last['type']}"
        )
        errors = [e for e in events if e["type"] == "error"]
        if last["type"] == "response.failed":
            assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
        return Ending(200, errors[0] if errors else None, _output_text(last["response"]), last["response"])
    r = s.http.post(s.url("/v1/responses"), json=body, headers=s.headers(user))
    if r.status_code != 200:
        return Ending(r.status_code, r.json().get("error"))
    return Ending(200, text=_output_text(r.json()), response=r.json())


def _background(s: Served, name: str, user: str) -> Ending:
    body = {"model": "gpt-4o", "input": f"fault:{name}", "background": True}
    r = s.http.post(s.url("/v1/responses"), json=body, headers=s.headers(user))
    assert r.status_code == 200, r.text
    response_id = r.json()["id"]

    def ended() -> dict[str, Any] | None:
        current = _stored(s, response_id)
        return current if current["status"] not in ("queued", "in_progress") else None

    response = wait_until(ended, timeout=TIMEOUT, interval=0.01, message=f"{response_id} to end")
    return Ending(200, response.get("error"), _output_text(response), response)


ASK: dict[str, Callable[[Served, str, str], Ending]] = {
    "chat": lambda s, n, u: _chat(s, n, u, stream=False),
    "chat_stream": lambda s, n, u: _chat(s, n, u, stream=True),
    "responses": lambda s, n, u: _responses(s, n, u),
    "responses_stream": lambda s, n, u: _responses(s, n, u, stream=True),
    "responses_background": _background,
}


def the_record(s: Served, user: str) -> dict[str, Any]:
    """The run's one record (the run is ``user``'s only one), once written; nothing is left in flight."""

    def written() -> list[dict[str, Any]]:
        r = s.http.get(s.url("/v1/logs"), params={"on_behalf_of": user}, headers=s.headers(user))
        assert r.status_code == 200, r.text
        return r.json()["data"]

    records = wait_until(written, timeout=TIMEOUT, interval=0.01, message=f"the record of {user}'s run")
    assert len(records) == 1, records
    assert value(scrape(s.gateway, s.http), "hatchway_runs_in_flight") == 0
    return records[0]


# -- the tests ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(FAULTS))
def test_a_malformed_reply_is_a_provider_error(served: Served, name: str, mode: str) -> None:
    fault, user = FAULTS[name], f"{name}.{mode}"

    ending = ASK[mode](served, name, user)

    assert ending.status in (200, 502), ending
    error = ending.error
    assert error is not None, f"answered as a success: {ending}"
    # A stored response's error has OpenAI's ``code: server_error`` and the cause in ``hatchway_code``.
    assert error["hatchway_code" if mode == "responses_background" else "code"] == fault.code, error
    assert fault.says in error["message"], error
    if mode.startswith("chat"):
        assert error["type"] == "upstream_error"
    record = the_record(served, user)
    assert (record["status"], record["http_status"]) == ("error", 502), record
    assert fault.says in record["error"]
    if mode.startswith("responses"):
        stored = _stored(served, record["response_id"])
        assert stored["status"] == "failed", stored
        assert (stored["error"]["hatchway_code"], stored["output"]) == (fault.code, [])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(ANSWERS))
def test_a_completion_of_the_other_kind_is_the_answer(served: Served, name: str, mode: str) -> None:
    user = f"{name}.{mode}"

    ending = ASK[mode](served, name, user)

    assert (ending.status, ending.error, ending.text) == (200, None, "hi there"), ending
    if ending.response is not None:
        assert ending.response["status"] == "completed"
    record = the_record(served, user)
    assert (record["status"], record["http_status"]) == ("ok", 200), record
    assert record["usage"]["total_tokens"] == 5


def test_a_tool_call_in_a_json_reply_to_a_stream_reaches_the_client_as_deltas(served: Served) -> None:
    client = served.gateway.client()
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}

    stream = client.chat.completions.create(
        model="gpt-4o",
        messages=[{"role": "user", "content": "fault:json_tool_call"}],
        tools=[tool],
        stream=True,
        extra_headers={"x-on-behalf-of": "json_tool_call"},
    )
    chunks = list(stream)

    calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
    assert [(tc.id, tc.function.name, tc.function.arguments) for tc in calls] == [
        ("call_1", "get_weather", '{"c":1}')
    ]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert the_record(served, "json_tool_call")["finish_reason"] == "tool_calls"
