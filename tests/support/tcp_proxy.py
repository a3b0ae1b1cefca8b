"""A loopback TCP proxy in front of one port that breaks connections on cue, for fault injection.

    proxy = TcpProxy(server.server.port).start()
    proxy.url("/mcp")                      # http://127.0.0.1:PROXY_PORT/mcp
    proxy.refuse_next(1)                   # the next connection is reset before a byte is forwarded
    proxy.cut_after(b'"tools/call"')       # forward the next request holding this, then cut its client

``cut_after`` frames the client's bytes into HTTP/1.1 requests (by ``Content-Length``): the request
that holds the marker reaches the server whole, then the client's connection is reset and nothing
of the answer comes back, while the server's side stays open until it has answered, so what the
request asked for happens. ``refused`` and ``cut`` count what was done; ``open`` is the number of
connections being forwarded now.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from typing import Any

_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close() sends RST instead of FIN


class TcpProxy:
    """Forwards ``127.0.0.1:<port>`` to ``127.0.0.1:<target_port>`` from a thread of its own."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        self._lock = threading.Lock()
        self._refuse = 0
        self._cuts: list[list[Any]] = []  # [marker, remaining]
        self.refused = 0
        """Connections reset on arrival."""
        self.cut = 0
        """Requests forwarded whose client connection was then reset."""
        self._open = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"tcp-proxy:{self.port}")

    def url(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    @property
    def open(self) -> int:
        """Client connections being forwarded now."""
        with self._lock:
            return self._open

    def _count(self, change: int) -> None:
        with self._lock:
            self._open += change

    # -- cues --------------------------------------------------------------------------------------

    def refuse_next(self, count: int = 1) -> None:
        """Reset the next ``count`` connections as they arrive, before anything is read or forwarded."""
        with self._lock:
            self._refuse += count

    def cut_after(self, marker: bytes, times: int = 1) -> None:
        """Forward the next ``times`` requests whose bytes hold ``marker``, then reset their client."""
        with self._lock:
            self._cuts.append([marker, times])

    def _take_refusal(self) -> bool:
        with self._lock:
            if self._refuse <= 0:
                return False
            self._refuse -= 1
            self.refused += 1
            return True

    def _take_cut(self, request: bytes) -> bool:
        with self._lock:
            for cue in self._cuts:
                if cue[1] > 0 and cue[0] in request:
                    cue[1] -= 1
                    self.cut += 1
                    return True
            return False

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> TcpProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise TimeoutError("the TCP proxy did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stopped is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
        self._thread.join(10)

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        tasks: set[asyncio.Task[None]] = set()

        def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.ensure_future(self._handle(reader, writer))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        server = await asyncio.start_server(accept, sock=self._sock)
        self._ready.set()
        async with server:
            await self._stopped.wait()
            server.close()
            for task in list(tasks):
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    # -- one connection ----------------------------------------------------------------------------

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        if self._take_refusal():
            _reset(client_w)
            return
        try:
            upstream_r, upstream_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            _reset(client_w)
            return
        self._count(+1)
        cut = asyncio.Event()
        forth = asyncio.ensure_future(self._requests(client_r, upstream_w, client_w, cut))
        back = asyncio.ensure_future(self._answers(upstream_r, client_w, cut))
        try:
            await asyncio.wait({forth, back}, return_when=asyncio.FIRST_COMPLETED)
            if cut.is_set():
                await back  # the server answers the request it was given, to nobody
        finally:
            for task in (forth, back):
                task.cancel()
            await asyncio.gather(forth, back, return_exceptions=True)
            upstream_w.close()
            if not cut.is_set():
                client_w.close()
            self._count(-1)

    async def _requests(
        self,
        client_r: asyncio.StreamReader,
        upstream_w: asyncio.StreamWriter,
        client_w: asyncio.StreamWriter,
        cut: asyncio.Event,
    ) -> None:
        """Client → server, one whole request at a time; after a cut, nothing more."""
        buffer = b""
        while True:
            chunk = await client_r.read(65536)
            if not chunk:
                return
            buffer += chunk
            while (request := _whole_request(buffer)) is not None:
                buffer = buffer[len(request) :]
                upstream_w.write(request)
                await upstream_w.drain()
                if self._take_cut(request):
                    cut.set()
                    _reset(client_w)
                    return

    async def _answers(
        self, upstream_r: asyncio.StreamReader, client_w: asyncio.StreamWriter, cut: asyncio.Event
    ) -> None:
        """Server → client, until the server closes; after a cut the answer goes nowhere."""
        while chunk := await upstream_r.read(65536):
            if cut.is_set():
                continue
            client_w.write(chunk)
            with contextlib.suppress(ConnectionError):
                await client_w.drain()


def _whole_request(buffer: bytes) -> bytes | None:
    """The first complete HTTP/1.1 request in ``buffer`` (head and ``Content-Length`` body), or None."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = buffer[:end].decode("latin-1").lower()
    length = 0
    for line in head.split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip() == "content-length":
            length = int(value.strip())
    total = end + 4 + length
    return buffer[:total] if len(buffer) >= total else None


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
    writer.close()
