"""uvicorn's httptools protocol with the gateway's request limits, writing a response of known
length to the socket in one write.

**Limits.** Stock uvicorn buffers a request head of any size (httptools collects each header whole
before handing it over), keeps a connection whose head never finishes open for good, and reads a
body of any size. Checked here, where the bytes arrive, before the app or authentication sees the
request: a head past ``max_header_bytes`` is answered 431, a head not complete within
``header_timeout_seconds`` has its connection closed (slowloris), and a body past
``max_body_bytes`` is answered 413 — at once when its ``content-length`` says so, else as soon as
the counted chunks pass it; the app then sees the client gone, so nothing is forwarded or stored.
Every refusal closes the connection (the rest of its body is never read). The checks are integer
sums over what the parser already hands over, so the hot path pays nothing measurable.

**One write.** Stock uvicorn writes the status line and headers on ``http.response.start`` and the
body on ``http.response.body``: two ``send()`` syscalls, two TCP segments, and a client woken twice
per response. Measured on the pass-through benchmark (2 cores, concurrency 1), the write of the head
alone took ~0.4 ms of the server's time (the woken client runs before the server gets its core
back); holding the head of a response that declares its ``content-length`` until its body comes
(a JSON answer sends both back to back) and writing them together took ~0.2 ms off the added
latency. Streams (no ``content-length``) are written as before: their head must not wait for a
first chunk.

Hand-written because uvicorn has neither option (h11's ``h11_max_incomplete_event_size`` bounds
only h11's buffer, not httptools', and there is no head timeout or body limit at all); it changes
only which bytes are accepted and which ``transport.write`` calls happen, while uvicorn still
frames, validates and completes the response.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, ClassVar

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from hatchway.config.settings import Settings
from hatchway.errors import HeadTooLarge, TooLarge

MiB = 1024 * 1024
LINGER_SECONDS = 2.0
"""How long a refused connection is read and drained before it is closed."""


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """What one request may make the server hold (hatchway.yaml ``max_request_*`` settings)."""

    max_header_bytes: int = 64 * 1024
    max_body_bytes: int = 16 * MiB
    header_timeout_seconds: float = 10.0

    @classmethod
    def of(cls, settings: Settings) -> HttpLimits:
        return cls(
            max_header_bytes=settings.max_request_header_bytes,
            max_body_bytes=settings.max_request_body_bytes,
            header_timeout_seconds=settings.request_header_timeout_seconds,
        )


class HatchwayHttpProtocol(HttpToolsProtocol):
    """``uvicorn.run(..., http=HatchwayHttpProtocol.with_limits(limits))``."""

    limits: ClassVar[HttpLimits] = HttpLimits()

    @classmethod
    def with_limits(cls, limits: HttpLimits) -> type[HatchwayHttpProtocol]:
        """The protocol class uvicorn instantiates per connection, bound to ``limits``."""
        return type(cls.__name__, (cls,), {"limits": limits})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = False
        self._head_bytes = 0
        """Bytes of the head being read, counted by whole chunks (httptools hands a header over only
        once it is complete, so a huge one is otherwise invisible until it has been buffered)."""
        self._head_ended = False
        """A head or a message ended during the chunk being fed: the chunk is not all head."""
        self._body_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()  # a connection that never sends a byte is a slow head too

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        self._head_ended = False
        super().data_received(data)
        if not self._in_head or self._refused:  # the usual case: the whole head came in this chunk
            return
        if self._head_timer is None:  # a head that spans chunks, on a kept-alive connection
            self._arm_head_timer()
        if not self._head_ended:
            self._head_bytes += len(data)
            if self._head_bytes > self.limits.max_header_bytes:
                self._refuse(self._head_too_large())

    def on_message_begin(self) -> None:
        if self._refused:
            return
        super().on_message_begin()
        self._in_head = True
        self._head_bytes = 0
        self._body_bytes = 0

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        self._in_head = False
        self._head_ended = True
        self._disarm_head_timer()
        size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
        if size > self.limits.max_header_bytes:
            self._refuse(self._head_too_large())
            return
        if (declared := _content_length(self.headers)) is not None and declared > self.limits.max_body_bytes:
            self._refuse(self._body_too_large())
            return
        super().on_headers_complete()
        # The request's cycle was just made and its ASGI task only scheduled, not started.
        if type(self.cycle) is RequestResponseCycle:
            self.cycle.__class__ = _OneWriteCycle

    def on_body(self, body: bytes) -> None:
        upgrading = self.parser.should_upgrade() and self._should_upgrade()
        if self._refused or upgrading or self.cycle.response_complete:  # answered unread (a 401, say)
            return
        self._body_bytes += len(body)
        if self._body_bytes > self.limits.max_body_bytes:
            self._refuse_body()
            return
        super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        self._head_ended = True
        super().on_message_complete()

    def _head_too_large(self) -> HeadTooLarge:
        limit = self.limits.max_header_bytes
        return HeadTooLarge(
            f"The request line and headers are larger than {limit} bytes (max_request_header_bytes)."
        )

    def _body_too_large(self) -> TooLarge:
        limit = self.limits.max_body_bytes
        return TooLarge(f"The request body is larger than {limit} bytes (max_request_body_bytes).")

    def _refuse(self, error: TooLarge) -> None:
        """Answer ``error`` before the app sees the request, and close the connection — lingering: a
        client still sending its body would otherwise be reset before it reads the answer (closing
        a socket with unread bytes sends RST). What it sends meanwhile is read and dropped until it
        is done (its end of the stream closes the transport) or LINGER_SECONDS have passed."""
        self._refused = True
        self._disarm_head_timer()
        self.transport.write(_error_response(error))
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self.loop.call_later(LINGER_SECONDS, self.transport.close)
        else:
            self.transport.close()

    def _refuse_body(self) -> None:
        """The body being read passed the limit: the app sees its client gone (nothing of the request
        is forwarded or stored); the client gets the 413 unless its answer has begun (then the
        connection just closes)."""
        cycle = self.cycle
        if cycle.response_started:
            self._refused = True
            self.transport.close()
        else:
            self._refuse(self._body_too_large())
        cycle.disconnected = True
        cycle.message_event.set()

    def _arm_head_timer(self) -> None:
        self._head_timer = self.loop.call_later(self.limits.header_timeout_seconds, self._head_timed_out)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            self.transport.close()


def _content_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name == b"content-length":
            return int(value) if value.isdigit() else None  # httptools refuses a malformed one
    return None


def _error_response(error: TooLarge) -> bytes:
    status = HTTPStatus(error.status_code)
    body = orjson.dumps(error.to_body())
    return b"".join(
        [
            f"HTTP/1.1 {status.value} {status.phrase}\r\n".encode(),
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"connection: close\r\n\r\n",
            body,
        ]
    )


class _OneWriteCycle(RequestResponseCycle):
    _held_start: Any = None

    async def send(self, message: Any) -> None:
        if message["type"] == "http.response.start" and not self.response_started and _has_length(message):
            self._held_start = message
            return
        held, self._held_start = self._held_start, None
        if held is None:
            await super().send(message)
            return
        socket = self.transport
        buffered = _BufferedTransport(socket)
        self.transport = buffered  # type: ignore[assignment]
        try:
            await super().send(held)
            await super().send(message)
        finally:
            self.transport = socket
        buffered.write_through()


def _has_length(message: Any) -> bool:
    return any(name.lower() == b"content-length" for name, _ in message.get("headers", ()))


class _BufferedTransport:
    """Collects what uvicorn writes for one response; ``write_through()`` sends it in one write."""

    def __init__(self, transport: Any) -> None:
        self._transport = transport
        self._chunks: list[bytes] = []
        self._close = False

    def write(self, data: bytes) -> None:
        self._chunks.append(data)

    def close(self) -> None:  # a `connection: close` response: close once the bytes are out
        self._close = True

    def write_through(self) -> None:
        if self._chunks:
            self._transport.write(b"".join(self._chunks))
        if self._close:
            self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
