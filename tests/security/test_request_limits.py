"""What one connection can make ``hatchway serve`` hold before any route runs: a request body is read
no further than ``max_request_body_bytes`` (413, nothing forwarded or stored), a request head no
further than ``max_request_header_bytes`` (431, before authentication), and a head that does not
finish within ``request_header_timeout_seconds`` loses its connection (slowloris). Memory is
asserted as RSS growth of the serving process, read from /proc."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import orjson

from tests.security.conftest import Serve
from tests.support.agent_loop import USER
from tests.support.replicas import ServeProcess
from tests.support.scripted_llm import Reply, ScriptedLLM

MiB = 1024 * 1024


def chat_body(size: int) -> bytes:
    """A valid chat request of about ``size`` bytes."""
    return orjson.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "x" * size}]})


def answer_ok(_: dict) -> Reply:
    return Reply(text="ok")


def records(gateway: ServeProcess, key: str) -> list[dict]:
    return gateway.http("GET", "/v1/logs", key).json()["data"]


def raw_request(gateway: ServeProcess, head: bytes, body: Iterator[bytes] | None = None) -> bytes:
    """Send ``head`` then ``body`` chunks on one connection, stopping when the server stops reading;
    what the server answered."""
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=30) as sock:
        try:
            sock.sendall(head)
            for chunk in body or ():
                sock.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused mid-way: the answer was sent before the connection closed
        answer = b""
        try:
            while data := sock.recv(65536):
                answer += data
        except ConnectionResetError:
            pass
    return answer


def at_once(send: Callable[[], int], times: int) -> list[int]:
    """``send()`` from ``times`` threads at once; the statuses they got."""
    with ThreadPoolExecutor(times) as pool:
        return list(pool.map(lambda _: send(), range(times), timeout=90))


def status_and_body(answer: bytes) -> tuple[int, dict]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), orjson.loads(body)


def test_a_body_past_the_default_limit_is_refused_and_neither_forwarded_nor_stored(
    serve: Serve, llm: ScriptedLLM
) -> None:
    gateway, key = serve()
    llm.handler = answer_ok
    answer = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        content=chat_body(17 * MiB),  # past the 16 MiB default
        headers={"authorization": f"Bearer {key}", "content-type": "application/json"},
        timeout=30,
    )
    assert answer.status_code == 413
    assert answer.json()["error"]["code"] == "request_too_large"
    assert "max_request_body_bytes" in answer.json()["error"]["message"]
    assert answer.headers["connection"] == "close"

    ok = gateway.client(key).chat.completions.create(model="gpt-4o", messages=USER)
    assert ok.choices[0].message.content  # the gateway serves on; only that one request was refused
    assert len(llm.requests) == 1  # the refused body never went upstream
    assert len(records(gateway, key)) == 1  # and was never stored


def test_a_chunked_body_is_counted_while_it_is_read(serve: Serve, llm: ScriptedLLM) -> None:
    gateway, key = serve(max_request_body_bytes=MiB)
    head = (
        b"POST /v1/responses HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n"
        b"authorization: Bearer " + key.encode() + b"\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    body = chat_body(3 * MiB)

    def chunks() -> Iterator[bytes]:  # no content-length: only counting can stop it
        for start in range(0, len(body), 64 * 1024):
            piece = body[start : start + 64 * 1024]
            yield b"%x\r\n%s\r\n" % (len(piece), piece)
        yield b"0\r\n\r\n"

    status, error = status_and_body(raw_request(gateway, head, chunks()))
    assert (status, error["error"]["code"]) == (413, "request_too_large")
    assert llm.requests == [] and records(gateway, key) == []


def test_four_concurrent_50_mib_bodies_do_not_grow_the_gateway(serve: Serve, llm: ScriptedLLM) -> None:
    gateway, key = serve()
    llm.handler = answer_ok
    gateway.client(key).chat.completions.create(model="gpt-4o", messages=USER)  # warm
    before = gateway.rss_mib()
    body = chat_body(50 * MiB)

    def post() -> int:
        headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
        return httpx.post(
            f"{gateway.url}/v1/chat/completions", content=body, headers=headers, timeout=60
        ).status_code

    answers = at_once(post, 4)
    growth = gateway.rss_mib() - before
    assert answers == [413] * 4
    assert growth < 40, f"four refused 50 MiB bodies grew the gateway by {growth:.0f} MiB"
    assert len(llm.requests) == 1 and len(records(gateway, key)) == 1


def test_a_header_past_the_limit_is_refused_before_authentication(serve: Serve) -> None:
    gateway, _ = serve()
    head = b"GET /v1/models HTTP/1.1\r\nhost: gw\r\nx-pad: " + b"a" * (128 * 1024) + b"\r\n\r\n"
    status, error = status_and_body(raw_request(gateway, head))
    assert (status, error["error"]["code"]) == (431, "request_headers_too_large")
    assert httpx.get(f"{gateway.url}/healthz").status_code == 200


def test_three_128_mib_headers_do_not_grow_the_gateway(serve: Serve) -> None:
    gateway, _ = serve()
    httpx.get(f"{gateway.url}/healthz")
    before = gateway.rss_mib()

    def huge_header() -> int:
        filler = (b"a" * MiB for _ in range(128))  # sent as the value of one header, never ended
        answer = raw_request(gateway, b"GET /healthz HTTP/1.1\r\nhost: gw\r\nx-pad: ", filler)
        return status_and_body(answer)[0]

    statuses = at_once(huge_header, 3)
    growth = gateway.rss_mib() - before
    assert statuses == [431] * 3
    assert growth < 30, f"three 128 MiB headers grew the gateway by {growth:.0f} MiB"


def test_slow_heads_lose_their_connections_and_the_gateway_serves_on(serve: Serve) -> None:
    gateway, _ = serve(request_header_timeout_seconds=1)
    slow = []
    for i in range(300):
        sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=30)
        if i % 3:  # two in three send part of a head; the others send nothing at all
            sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: gw\r\nx-slow: ")
        slow.append(sock)
    kept_alive = socket.create_connection(("127.0.0.1", gateway.port), timeout=30)
    kept_alive.sendall(b"GET /healthz HTTP/1.1\r\nhost: gw\r\n\r\n")
    assert kept_alive.recv(65536).startswith(b"HTTP/1.1 200")
    kept_alive.sendall(b"GET /healthz HTTP/1.1\r\nhost: gw\r\n")  # its next head, never finished
    slow.append(kept_alive)
    try:
        assert httpx.get(f"{gateway.url}/healthz", timeout=5).status_code == 200
        started = time.monotonic()
        for sock in slow:  # each one closed by the server: recv sees the end of the stream
            sock.settimeout(max(0.1, started + 15 - time.monotonic()))
            assert sock.recv(1024) == b""
    finally:
        for sock in slow:
            sock.close()
    assert httpx.get(f"{gateway.url}/healthz", timeout=5).status_code == 200


def test_a_request_within_the_limits_is_served_whole(serve: Serve, llm: ScriptedLLM) -> None:
    gateway, key = serve(max_request_body_bytes=2 * MiB)
    llm.handler = answer_ok
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json", "x-pad": "a" * 60_000}
    answer = httpx.post(
        f"{gateway.url}/v1/chat/completions", content=chat_body(MiB), headers=headers, timeout=30
    )
    assert answer.status_code == 200
    assert len(llm.requests[0]["messages"][0]["content"]) == MiB
