"""The upstream HTTP/1.1 client against scripted servers on real loopback sockets.

Each server here answers with exact bytes (chunked, gzip, close-delimited, malformed, silent,
TLS), which a framework server would not let a test choose; what is asserted is what a caller of
the pool sees, and what the server saw (its connections).
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import trustme

from hatchway.engine.providers.upstream_http import (
    UpstreamConnectError,
    UpstreamDisconnected,
    UpstreamPool,
    UpstreamProtocolError,
)

pytestmark = pytest.mark.anyio

SILENT_CLOSE = b""
OK = b'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{"ok":true}'


class Upstream:
    """A TCP server that reads whole requests and answers each with ``respond(n, k)``'s bytes, ``n``
    counting the requests it received in all and ``k`` those on this connection.

    ``respond`` returns the bytes to write, None to write nothing, or ``SILENT_CLOSE`` to close the
    connection without a word; ``after`` says what to do with the connection once it answered:
    "keep", "close" or "hang" (leave it open, say nothing more).
    """

    def __init__(self, respond: Callable[[int, int], bytes | None], after: str = "keep") -> None:
        self.respond = respond
        self.after = after
        self.connections = 0
        self.open_now = 0
        self.most_open = 0
        self.requests: list[bytes] = []
        self.release = asyncio.Event()
        self.release.set()
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self, ssl_context: ssl.SSLContext | None = None) -> Upstream:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=ssl_context)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def url(self, scheme: str = "http", host: str = "127.0.0.1") -> str:
        return f"{scheme}://{host}:{self.port}/v1/chat/completions"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)
        self._writers.append(writer)
        on_this = 0
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                on_this += 1
                await self.release.wait()
                answer = self.respond(len(self.requests), on_this)
                if answer is SILENT_CLOSE:
                    return
                if answer is not None:
                    writer.write(answer)
                    await writer.drain()
                if self.after == "hang":
                    await asyncio.Event().wait()
                if self.after == "close":
                    return
        finally:
            self.open_now -= 1
            writer.close()

    async def stop(self) -> None:
        for writer in self._writers:
            writer.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


def _pool(url: str, **overrides: object) -> UpstreamPool:
    options: dict[str, object] = {
        "headers": {"content-type": "application/json", "authorization": "Bearer sk-test"},
        "connect_timeout": 5.0,
        "read_timeout": 5.0,
        "max_connections": 10,
    }
    options.update(overrides)
    return UpstreamPool(url, **options)  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def serving(
    respond: Callable[[int, int], bytes | None], after: str = "keep", **pool_options: object
) -> AsyncIterator[tuple[Upstream, UpstreamPool]]:
    """An ``Upstream`` and a pool pointed at it, both closed on the way out."""
    upstream = await Upstream(respond, after).start()
    pool = _pool(upstream.url(), **pool_options)
    try:
        yield upstream, pool
    finally:
        await pool.aclose()
        await upstream.stop()


async def _post(pool: UpstreamPool, body: bytes = b"{}") -> tuple[int, bytes]:
    async with await pool.post(body) as response:
        return response.status, await response.read()


async def test_sequential_requests_share_one_keep_alive_connection() -> None:
    async with serving(lambda n, _: OK) as (upstream, pool):
        for _ in range(5):
            assert await _post(pool, b'{"model":"m"}') == (200, b'{"ok":true}')
    assert upstream.connections == 1
    first = upstream.requests[0]
    assert first.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert f"host: 127.0.0.1:{upstream.port}\r\n".encode() in first
    assert b"authorization: Bearer sk-test\r\n" in first
    assert first.endswith(b'content-length: 13\r\n\r\n{"model":"m"}')


async def test_the_pool_never_opens_more_than_max_connections() -> None:
    async with serving(lambda n, _: OK, max_connections=2) as (upstream, pool):
        upstream.release.clear()  # hold every answer until all requests are waiting
        calls = [asyncio.ensure_future(_post(pool)) for _ in range(6)]
        async with asyncio.timeout(5):
            while len(upstream.requests) < 2:
                await asyncio.sleep(0.01)
        assert upstream.open_now == 2  # the other four wait for a slot, not for a connection
        upstream.release.set()
        results = await asyncio.wait_for(asyncio.gather(*calls), 5)
    assert results == [(200, b'{"ok":true}')] * 6
    assert upstream.most_open == 2
    assert upstream.connections == 2


async def test_chunked_event_stream_comes_line_by_line_across_chunk_boundaries() -> None:
    events = [b"data: one\n\nda", b"ta: two\r\n\r\n", b"data: [DONE]\n\n"]
    body = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    async with serving(lambda n, _: head + body) as (upstream, pool):
        async with await pool.post(b"{}") as response:
            lines = [line async for line in response.lines()]
        assert await _post(pool) == (200, b"data: one\n\ndata: two\r\n\r\ndata: [DONE]\n\n")
    assert lines == [b"data: one", b"", b"data: two", b"", b"data: [DONE]", b""]
    assert upstream.connections == 1  # a chunked body read to its end leaves the connection reusable


async def test_gzip_body_is_decompressed() -> None:
    payload = b'{"choices": []}' * 50
    packed = gzip.compress(payload)
    head = b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: %d\r\n\r\n" % len(packed)
    async with serving(lambda n, _: head + packed) as (upstream, pool):
        status, body = await _post(pool)
    assert (status, body) == (200, payload)
    assert b"accept-encoding: identity\r\n" in upstream.requests[0]


@pytest.mark.parametrize(
    ("encoding", "packed", "says"),
    [
        ("gzip", b"this is not gzip", "the gzip body does not decompress"),
        ("deflate", b"this is not deflate", "the deflate body does not decompress"),
        (
            "gzip",
            gzip.compress(b'{"choices": []}')[:-12],
            "the gzip body stops before its compressed data ends",
        ),
    ],
    ids=["not_gzip", "not_deflate", "truncated_gzip"],
)
async def test_a_compressed_body_that_does_not_decompress_to_its_end_is_a_protocol_error(
    encoding: str, packed: bytes, says: str
) -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-encoding: %s\r\ncontent-length: %d\r\n\r\n" % (
        encoding.encode(),
        len(packed),
    )
    async with serving(lambda n, _: head + packed, max_connections=1) as (_upstream, pool):
        for _ in range(2):  # the one connection slot came back: the second request is served too
            with pytest.raises(UpstreamProtocolError, match=says):
                await asyncio.wait_for(_post(pool), 5)


async def test_body_delimited_by_close_is_read_and_the_connection_not_reused() -> None:
    answer = b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n" + b"x" * 5000
    async with serving(lambda n, _: answer, after="close") as (upstream, pool):
        assert await _post(pool) == (200, b"x" * 5000)
        assert await _post(pool) == (200, b"x" * 5000)
    assert upstream.connections == 2


async def test_connection_the_upstream_drops_when_reused_is_retried_once_on_a_new_one() -> None:
    # Keep-alive promised, then the second request on a connection meets its close (an idle timeout
    # firing as the request arrives): no byte comes back, so it goes once more on a new connection.
    async with serving(lambda n, k: OK if k == 1 else SILENT_CLOSE) as (upstream, pool):
        for _ in range(3):
            assert await _post(pool) == (200, b'{"ok":true}')
    assert upstream.connections == 3
    assert len(upstream.requests) == 5  # two were sent twice: once into a closing connection


async def test_connection_closed_after_an_answer_is_not_handed_out_again() -> None:
    async with serving(lambda n, k: OK, after="close") as (upstream, pool):
        for _ in range(3):
            assert await _post(pool) == (200, b'{"ok":true}')
    assert upstream.connections == 3
    assert len(upstream.requests) == 3


async def test_a_new_connection_closed_without_an_answer_fails_without_retrying() -> None:
    async with serving(lambda n, k: SILENT_CLOSE) as (upstream, pool):
        with pytest.raises(UpstreamDisconnected):
            await _post(pool)
    assert len(upstream.requests) == 1


async def test_connection_closed_mid_body_is_an_error_not_a_short_body() -> None:
    answer = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n" + b"y" * 10
    async with serving(lambda n, _: answer, after="close") as (_upstream, pool):
        with pytest.raises(UpstreamDisconnected):
            await _post(pool)


async def test_silent_upstream_times_out_at_the_read_timeout() -> None:
    async with serving(lambda n, _: None, after="hang", read_timeout=0.3) as (_upstream, pool):
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(_post(pool), 5)


async def test_refused_connection_is_a_connect_error() -> None:
    upstream = await Upstream(lambda n, _: OK).start()
    url = upstream.url()
    await upstream.stop()
    pool = _pool(url)
    with pytest.raises(UpstreamConnectError):
        await _post(pool)


async def test_malformed_response_is_a_protocol_error() -> None:
    async with serving(lambda n, _: b"SMTP ready\r\n\r\n") as (_upstream, pool):
        with pytest.raises(UpstreamProtocolError):
            await _post(pool)


async def test_a_stream_left_unread_closes_its_connection() -> None:
    head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
    async with serving(lambda n, _: head + b"5\r\nhello\r\n", after="hang") as (upstream, pool):
        for _ in range(2):
            async with await pool.post(b"{}") as response:
                assert await anext(response.chunks()) == b"hello"
    assert upstream.connections == 2  # the first, half read, was not handed out again


async def test_a_header_value_with_a_line_break_is_refused_without_showing_it() -> None:
    with pytest.raises(ValueError) as caught:
        _pool("http://127.0.0.1:9/v1", headers={"authorization": "Bearer sk-secret\r\nx-evil: 1"})
    assert "authorization" in str(caught.value)
    assert "sk-secret" not in str(caught.value)


async def test_https_verifies_the_upstream_certificate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca = trustme.CA()
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("localhost").configure_cert(server_tls)
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    upstream = await Upstream(lambda n, _: OK).start(server_tls)
    try:
        untrusted = _pool(upstream.url("https", "localhost"))
        with pytest.raises(UpstreamConnectError):  # issued by a CA the trust store does not hold
            await _post(untrusted)
        # OpenSSL's default trust store, pointed at this CA (as an operator would with a private CA).
        monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
        trusted = _pool(upstream.url("https", "localhost"))
        try:
            assert await _post(trusted) == (200, b'{"ok":true}')
        finally:
            await trusted.aclose()
    finally:
        await upstream.stop()
    assert f"host: localhost:{upstream.port}\r\n".encode() in upstream.requests[0]
