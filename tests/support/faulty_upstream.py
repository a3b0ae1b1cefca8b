"""An OpenAI-compatible upstream that answers 200 with exactly the bytes a test chose: a body of the
wrong shape, a stream of the wrong kind, a bad encoding, a connection cut mid-body.

Which answer a request gets is named by the request itself: the text of its last user message
(``fault:<name>``) is looked up in the ``answers`` the upstream was built with, so one upstream serves
every case of a module, requests in parallel included. Raw ASGI (no framework), so the headers and
bytes are the test's, not a framework's.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hatchway.demo.upstream import answer_lifespan
from tests.support.servers import ServerThread

JSON = "application/json"
SSE = "text/event-stream"


@dataclass(frozen=True)
class Answer:
    """What the upstream sends back: ``body`` as it is, under these headers, whatever was asked."""

    body: bytes
    content_type: str = JSON
    content_encoding: str | None = None
    cut: bool = False
    """Close the connection after ``body``, before the response ends (a truncated body)."""


def sse(*payloads: Any, done: bool = True) -> bytes:
    """``data:`` frames of ``payloads`` (bytes as they are, anything else as JSON), then ``[DONE]``."""
    frames = [p if isinstance(p, bytes) else json.dumps(p).encode() for p in payloads]
    if done:
        frames.append(b"[DONE]")
    return b"".join(b"data: " + frame + b"\n\n" for frame in frames)


def gzipped(body: bytes) -> bytes:
    return gzip.compress(body)


def deflated(body: bytes) -> bytes:
    return zlib.compress(body)


def fault_of(body: dict[str, Any]) -> str:
    """The answer a request names: its last user message's text, after ``fault:``."""
    users = [m for m in body.get("messages") or [] if m.get("role") == "user"]
    text = users[-1].get("content") if users else ""
    if isinstance(text, list):
        text = "".join(p.get("text", "") for p in text if isinstance(p, dict))
    return str(text).removeprefix("fault:")


class FaultyUpstream:
    """``POST /v1/chat/completions`` answered with ``answers[fault_of(request)]``."""

    def __init__(self, answers: Mapping[str, Answer]) -> None:
        self.answers = answers
        self.server = ServerThread(self)

    @property
    def base_url(self) -> str:
        return f"{self.server.url}/v1"

    def start(self) -> FaultyUpstream:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await answer_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        chunks, more = [], True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        name = fault_of(json.loads(b"".join(chunks) or b"{}"))
        answer = self.answers.get(name)
        if answer is None:
            answer = Answer(json.dumps({"error": {"message": f"no answer named {name!r}"}}).encode())
            await _send(send, 404, answer)
            return
        await _send(send, 200, answer)


async def _send(send: Any, status: int, answer: Answer) -> None:
    headers = [(b"content-type", answer.content_type.encode())]
    if answer.content_encoding:
        headers.append((b"content-encoding", answer.content_encoding.encode()))
    if not answer.cut:
        headers.append((b"content-length", str(len(answer.body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    if answer.cut:  # chunked, and never ended: uvicorn closes the connection mid-body
        await send({"type": "http.response.body", "body": answer.body, "more_body": True})
        raise ConnectionAbortedError("faulty upstream: the body is cut here")
    await send({"type": "http.response.body", "body": answer.body})
