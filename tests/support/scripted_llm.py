"""The only fake in the suite: a scripted upstream served over real HTTP, speaking OpenAI's Chat
Completions, Anthropic's Messages (``/v1/messages``) and Gemini's ``generateContent``.

Queue replies with ``reply()`` (or set ``handler`` to decide from each request); every request
body received is kept in ``requests``. Streaming requests get the same reply as SSE chunks. The
wire format is ``hatchway.demo.upstream``'s (the demo and the benchmarks use the same upstream);
this layer adds the script, the recording and the gate.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hatchway.demo import upstream
from tests.support.servers import ServerThread


@dataclass
class Reply(upstream.Reply):
    """``hatchway.demo.upstream.Reply`` (text, tool_calls, delay, status, error, prompt_tokens,
    completion_tokens, finish_reason, chunk_size, raw_body), plus a gate."""

    gate: threading.Event | None = None
    """When set, the reply waits until the test sets it (a request held in flight)."""


class ScriptedLLM:
    """``/v1/chat/completions``, ``/v1/messages`` and ``/v1beta/models/…`` answering from one script."""

    def __init__(self, **server_config: Any) -> None:
        """``server_config`` goes to uvicorn (e.g. ``timeout_keep_alive``)."""
        self._script: deque[Reply] = deque()
        self._lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.handler: Callable[[dict[str, Any]], Reply] | None = None
        """When set, decides every reply from the request body (used when requests run in parallel)."""
        self.default: Reply | None = None
        self.paths: list[str] = []
        """Each request's path (a Gemini request names its model and method there)."""
        app = self._recording_headers(upstream.ScriptedUpstream(self._decide, anthropic=True, gemini=True))
        self.server = ServerThread(app, **server_config)

    @property
    def base_url(self) -> str:
        return f"{self.server.url}/v1"

    def reply(self, text: str | None = None, **kwargs: Any) -> ScriptedLLM:
        with self._lock:
            self._script.append(Reply(text=text, **kwargs))
        return self

    def _next(self, body: dict[str, Any]) -> upstream.Reply:
        with self._lock:
            self.requests.append(body)
            if self.handler is not None:
                return self.handler(body)
            if self._script:
                return self._script.popleft()
        if self.default is not None:
            return self.default
        return Reply(status=500, error="scripted LLM: no reply queued for this request")

    async def _decide(self, body: dict[str, Any]) -> upstream.Reply:
        reply = self._next(body)
        gate = getattr(reply, "gate", None)
        if gate is not None:
            await asyncio.to_thread(gate.wait, 60)
        return reply

    def _recording_headers(self, app: upstream.ScriptedUpstream) -> Any:
        async def recording(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] == "http" and scope["method"] == "POST":
                headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
                with self._lock:
                    self.headers.append(headers)
                    self.paths.append(scope["path"])
            await app(scope, receive, send)

        return recording

    def start(self) -> ScriptedLLM:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()


def max_overlap(starts: list[float], duration: float) -> int:
    """The most calls in flight at once, from when each started and how long each took (its delay)."""
    return max(sum(1 for s in starts if s <= t < s + duration) for t in starts)
