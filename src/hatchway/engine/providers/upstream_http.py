"""The upstream model endpoint's HTTP/1.1 client: one keep-alive pool, responses parsed by httptools.

Hand-written because both well-kept clients cost more than the rest of a pass-through request.
Measured on this project's benchmark (2 cores, concurrency 1, a 20 ms upstream on loopback,
``python -m bench.http_clients``): a bare Python proxy adds ~0.19 ms to a request when it talks
to the upstream over its own protocol, ~0.53 ms when it does so through an aiohttp session (its
request/response machinery — URL and header objects, cookie jar, traces, the payload task —
runs on every call), and httpx's pool serialises under concurrency. The gateway needs one thing
from a client — POST a JSON body to a fixed URL and read a JSON body or an event stream back —
so this does exactly that on asyncio's transports, with httptools (already serving the gateway's
own requests under uvicorn) as the HTTP parser: framing, chunked encoding and keep-alive are its.

What it keeps of what a production client must do: a bounded pool (``max_connections``), connect
and per-read timeouts, TLS with the system's trust store, gzip/deflate bodies, back-pressure on
a stream nobody reads, and a pooled connection the upstream closed while idle never surfacing as
an error (the request is sent once more on a new connection when no byte of a response arrived:
it never reached the model).
"""

from __future__ import annotations

import asyncio
import ssl
import time
import zlib
from collections import deque
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlsplit

import httptools

from hatchway import __version__

# A connection kept in the pool longer than this is closed rather than reused: the upstream's own
# keep-alive timeout is often about this long (uvicorn's is 5 s, nginx's 75 s), and a connection
# it already dropped costs a retry.
IDLE_SECONDS = 15.0
# Stop reading from the socket when this much of a response waits unread (a stream nobody reads).
_HIGH_WATER = 256 * 1024


class UpstreamError(Exception):
    """The exchange with the upstream failed below HTTP (no status to report)."""


class UpstreamConnectError(UpstreamError):
    """No connection: refused, no route, unknown host or a failed TLS handshake."""


class UpstreamDisconnected(UpstreamError):
    """The connection closed before the response was complete."""


class UpstreamProtocolError(UpstreamError):
    """What the upstream sent is not an HTTP/1.1 response this client can read."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection; parser callbacks fill the current response's state."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.idle_since = 0.0
        self.idle = False
        self.closed = False
        self._waiter: asyncio.Future[None] | None = None
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.header_list: list[tuple[bytes, bytes]] = []
        self.head_done = False
        self.complete = False
        self.keep_alive = False
        self.bytes_seen = False
        self.error: UpstreamError | None = None
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.paused = False

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.idle:  # bytes nobody asked for (a 408 before an idle close): not reusable
            self.close()
            return
        self.bytes_seen = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamProtocolError(f"malformed HTTP response ({exc})"))

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost decides what the end means

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.complete and self.error is None:
            if self.head_done and self._delimited_by_close():
                self.complete = True
            else:
                self.error = UpstreamDisconnected("the upstream closed the connection")
        self._wake()

    # -- httptools callbacks --------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self.header_list.append((name, value))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.head_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > _HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        self.keep_alive = self.parser.should_keep_alive()  # only meaningful while the message is current
        self.complete = True
        self._wake()

    # -- used by the pool and the response ----------------------------------------------------

    def _delimited_by_close(self) -> bool:
        names = {name.lower() for name, _ in self.header_list}
        return b"content-length" not in names and b"transfer-encoding" not in names

    def _fail(self, error: UpstreamError) -> None:
        self.error = error
        self.close()
        self._wake()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, within: float) -> None:
        """Until the parser or the socket has news (head, body bytes, the end, an error); TimeoutError
        after ``within`` seconds without any."""
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        async with asyncio.timeout(within):
            await waiter

    def send(self, request: bytes) -> None:
        self._reset()
        self.idle = False
        assert self.transport is not None
        self.transport.write(request)

    def take(self) -> bytes:
        """The body bytes received so far (and reading resumed if it had been paused)."""
        data = b"".join(self.chunks) if len(self.chunks) != 1 else self.chunks[0]
        self.chunks.clear()
        self.buffered = 0
        if self.paused and self.transport is not None and not self.closed:
            self.paused = False
            self.transport.resume_reading()
        return data

    def reusable(self) -> bool:
        return self.complete and self.keep_alive and self.error is None and not self.closed

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        self.closed = True


class UpstreamResponse:
    """A response whose head has arrived; use as ``async with`` so its connection goes back."""

    def __init__(self, pool: UpstreamPool, conn: _Connection) -> None:
        self._pool = pool
        self._conn: _Connection | None = conn
        self.status = conn.status
        self._header_list = conn.header_list
        self.content_type = _header(conn.header_list, b"content-type").lower()
        """The ``content-type`` in lower case ("" when none was sent)."""
        self._decoder = _decoder(_header(conn.header_list, b"content-encoding"))

    @property
    def headers(self) -> dict[str, str]:
        """Header names in lower case (a repeated header: its last value)."""
        return {n.decode("latin-1").lower(): v.decode("latin-1") for n, v in self._header_list}

    async def __aenter__(self) -> UpstreamResponse:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives (decompressed)."""
        conn = self._conn
        assert conn is not None, "the response was released"
        while True:
            if conn.chunks:
                data = conn.take()
                yield self._decoder.decompress(data) if self._decoder else data
                continue
            if conn.error is not None:
                raise conn.error
            if conn.complete:
                if self._decoder:
                    yield self._decoder.flush()
                return
            await conn.wait(self._pool.read_timeout)

    async def read(self) -> bytes:
        """The whole body."""
        conn = self._conn
        assert conn is not None, "the response was released"
        if conn.complete and not self._decoder:  # all of it came with the head: no wait, no copy
            return conn.take()
        return b"".join([chunk async for chunk in self.chunks()])

    async def lines(self) -> AsyncIterator[bytes]:
        """The body line by line, without line endings (for a ``text/event-stream``)."""
        pending = b""
        async for chunk in self.chunks():
            pending += chunk
            *complete, pending = pending.split(b"\n")
            for line in complete:
                yield line.rstrip(b"\r")
        if pending:
            yield pending.rstrip(b"\r")

    def release(self) -> None:
        """Back to the pool when read to the end on a keep-alive connection; otherwise closed."""
        conn, self._conn = self._conn, None
        if conn is not None:
            self._pool._release(conn)


def _header(header_list: list[tuple[bytes, bytes]], name: bytes) -> str:
    """A header's value ("" when absent; a repeated header: its first value)."""
    return next((v for n, v in header_list if n.lower() == name), b"").decode("latin-1").strip()


class _Decoder:
    """A gzip or deflate body decompressed as it arrives; one that does not decompress, or stops
    before its compressed stream ends (a cut or truncated body), is a protocol error."""

    def __init__(self, encoding: str, wbits: int) -> None:
        self.encoding = encoding
        self._zlib = zlib.decompressobj(wbits)
        self._fed = False

    def decompress(self, data: bytes) -> bytes:
        self._fed = self._fed or bool(data)
        try:
            return self._zlib.decompress(data)
        except zlib.error as exc:
            raise UpstreamProtocolError(f"the {self.encoding} body does not decompress ({exc})") from None

    def flush(self) -> bytes:
        if self._fed and not self._zlib.eof:  # an empty body (a 204's) has nothing to end
            raise UpstreamProtocolError(f"the {self.encoding} body stops before its compressed data ends")
        return self._zlib.flush()


def _decoder(encoding: str) -> _Decoder | None:
    encoding = encoding.lower()
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip"):
        return _Decoder("gzip", 16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return _Decoder("deflate", zlib.MAX_WBITS)
    raise UpstreamProtocolError(f"unsupported content-encoding {encoding!r}")


class UpstreamPool:
    """POSTs to one URL over a bounded pool of keep-alive connections."""

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str],
        connect_timeout: float,
        read_timeout: float,
        max_connections: int,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self._tls = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._tls else 80)
        default_port = self._port == (443 if self._tls else 80)
        host = f"[{self._host}]" if ":" in self._host else self._host
        self._authority = host if default_port else f"{host}:{self._port}"
        self._target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._base_path = parts.path.rstrip("/")
        self._request_line = f"POST {self._target} HTTP/1.1".encode("latin-1")
        self._headers = {
            "user-agent": f"hatchway/{__version__}",
            "accept-encoding": "identity",
            **{name.lower(): value for name, value in headers.items()},
        }
        self._head = self._build_head()
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._slots = asyncio.Semaphore(max_connections)
        self._idle: list[_Connection] = []
        self._ssl: ssl.SSLContext | None = None

    def set_header(self, name: str, value: str) -> None:
        self._headers[name.lower()] = value
        self._head = self._build_head()

    def _build_head(self) -> bytes:
        """The request's head after its request line (``POST <target> HTTP/1.1``), up to the
        content length's value."""
        # A configured ``host`` header (an ingress reached by address) replaces the URL's authority.
        lines = [f"\r\nhost: {self._headers.get('host', self._authority)}"]
        for name, value in self._headers.items():
            if any(c in name or c in value for c in "\r\n\0"):
                # never echo the value: it may be the API key
                raise ValueError(f"the upstream header {name!r} contains a line break")
            if name not in ("host", "content-length", "transfer-encoding", "connection"):
                lines.append(f"{name}: {value}")
        return ("\r\n".join(lines) + "\r\ncontent-length: ").encode("latin-1")

    async def post(self, body: bytes, path: str | None = None) -> UpstreamResponse:
        """Send ``body`` and wait for the response's head (status and headers).

        ``path``: appended to the URL's path for this request (``/models/m:generateContent``)."""
        target = self._request_line
        if path is not None:
            if any(c in path for c in "\r\n\0 ") or not path.isascii():
                raise ValueError("the upstream path contains a space, a line break or a non-ASCII character")
            target = f"POST {self._base_path}{path} HTTP/1.1".encode()
        request = b"%s%s%d\r\n\r\n%s" % (target, self._head, len(body), body)
        await self._slots.acquire()
        try:
            conn = self._take_idle()
            if conn is not None:
                try:
                    return await self._exchange(conn, request)
                except UpstreamDisconnected:
                    if conn.bytes_seen:
                        raise
                    # A pooled connection the upstream had closed while idle: the request never
                    # reached the model, so it goes once more on a new connection.
            return await self._exchange(await self._connect(), request)
        except BaseException:
            self._slots.release()
            raise

    async def _exchange(self, conn: _Connection, request: bytes) -> UpstreamResponse:
        try:
            conn.send(request)
            while not conn.head_done:
                if conn.error is not None:
                    raise conn.error
                await conn.wait(self.read_timeout)
            if conn.status < 200:  # an interim 1xx response: not asked for (no Expect), not read
                raise UpstreamProtocolError(f"unexpected interim response {conn.status}")
            return UpstreamResponse(self, conn)
        except BaseException:
            conn.close()
            raise

    def _take_idle(self) -> _Connection | None:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and now - conn.idle_since < IDLE_SECONDS:
                return conn
            conn.close()
        return None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        tls: dict[str, Any] = {}
        if self._tls:
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            tls = {"ssl": self._ssl, "server_hostname": self._host}
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await loop.create_connection(_Connection, self._host, self._port, **tls)
        except TimeoutError:  # an OSError too, kept apart: the caller tells a timeout from a refusal
            raise
        except OSError as exc:  # refused, unreachable, DNS (socket.gaierror), TLS (ssl.SSLError)
            raise UpstreamConnectError(f"cannot connect to {self._authority}: {type(exc).__name__}") from exc
        return conn

    def _release(self, conn: _Connection) -> None:
        if conn.reusable():
            conn.idle_since = time.monotonic()
            conn.idle = True
            self._idle.append(conn)
        else:
            conn.close()
        self._slots.release()

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
