"""The serving protocol writes a response of known length in one write, and streams as before."""

from __future__ import annotations

import asyncio
import select
import socket
import threading
from typing import Any

import pytest

from hatchway.api.http_protocol import HatchwayHttpProtocol
from tests.support.servers import ServerThread

BODY = b'{"answer": "held until the body is ready"}'


class _Gated:
    """An ASGI app that sends its response head, then waits for the test before sending the body."""

    def __init__(self, *, length: bool) -> None:
        self.length = length
        self.head_sent = threading.Event()
        self.gate = threading.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        headers = [(b"content-type", b"application/json")]
        if self.length:
            headers.append((b"content-length", str(len(BODY)).encode()))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        self.head_sent.set()
        await asyncio.to_thread(self.gate.wait, 30)
        await send({"type": "http.response.body", "body": BODY})


def _request(port: int) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", port), timeout=30)
    conn.sendall(b"GET / HTTP/1.1\r\nhost: test\r\n\r\n")
    return conn


def _read_response(conn: socket.socket, end: bytes = BODY) -> bytes:
    data = b""
    while not data.endswith(end):
        chunk = conn.recv(65536)
        assert chunk, f"connection closed after {data!r}"
        data += chunk
    return data


@pytest.fixture
def serve():
    servers: list[ServerThread] = []

    def start(app: Any) -> int:
        server = ServerThread(app, http=HatchwayHttpProtocol, lifespan="off").start()
        servers.append(server)
        return server.port

    yield start
    for server in servers:
        server.stop()


def test_a_response_with_content_length_goes_out_in_one_write(serve) -> None:
    app = _Gated(length=True)
    with _request(serve(app)) as conn:
        assert app.head_sent.wait(30)
        readable, _, _ = select.select([conn], [], [], 0)
        assert not readable, "the head is held until the body: nothing is on the socket yet"
        app.gate.set()
        response = _read_response(conn)
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK")
    assert f"content-length: {len(BODY)}".encode() in head
    assert body == BODY


def test_a_stream_sends_its_head_before_the_first_chunk(serve) -> None:
    app = _Gated(length=False)
    with _request(serve(app)) as conn:
        assert app.head_sent.wait(30)
        readable, _, _ = select.select([conn], [], [], 30)
        assert readable, "the head of a stream must not wait for its body"
        head = conn.recv(65536)
        assert head.startswith(b"HTTP/1.1 200 OK") and head.endswith(b"\r\n\r\n")
        assert b"transfer-encoding: chunked" in head
        app.gate.set()
        assert _read_response(conn, end=b"0\r\n\r\n") == b"%x\r\n%s\r\n0\r\n\r\n" % (len(BODY), BODY)
