"""A byte-level loopback TCP proxy that can cut all its connections: a database outage on demand
(``tcp_proxy.TcpProxy`` breaks single HTTP requests instead).

    with OutageProxy("127.0.0.1", 5432) as proxy:      # proxy.port forwards to PostgreSQL
        proxy.cut()                                 # open connections reset, new ones refused
        proxy.restore()                             # connections forwarded again
        restored = proxy.cut_for(6.0)               # a timed outage; the event is set when it ends

While cut, the proxy still accepts connections and resets them at once (as a database host that is
up but whose database is not), counting them in ``refused``. It runs its own asyncio loop in a
thread, so a test (or a gateway in another thread) can use it from anywhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

from tests.support.servers import free_port


class OutageProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target``, until told to cut."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self.refused = 0
        """Connections accepted and reset while cut (a client trying to reconnect)."""
        self.accepted = 0
        self._cut = False
        self._conns: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name=f"proxy:{self.port}")

    def start(self) -> OutageProxy:
        self._thread.start()
        self._call(self._listen())
        return self

    def stop(self) -> None:
        self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> OutageProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def cut(self) -> None:
        """Reset every open connection and every new one, until ``restore()``."""
        self._call(self._set_cut(True))

    def restore(self) -> None:
        self._call(self._set_cut(False))

    def cut_for(self, seconds: float) -> threading.Event:
        """Cut now and restore after ``seconds`` (timed on the proxy's loop); the event marks the end."""
        restored = threading.Event()
        self.cut()

        def end() -> None:
            self._cut = False
            restored.set()

        self._loop.call_soon_threadsafe(self._loop.call_later, seconds, end)
        return restored

    def url(self, database_url: str) -> str:
        """``database_url`` (``…@host:port/db``) pointed at this proxy."""
        head, _, tail = database_url.partition("@")
        database = tail.partition("/")[2]
        return f"{head}@127.0.0.1:{self.port}/{database}"

    # -- on the proxy's loop ------------------------------------------------------------------------

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._set_cut(True)

    async def _set_cut(self, cut: bool) -> None:
        self._cut = cut
        if cut:
            for writer in list(self._conns):
                _reset(writer)
            self._conns.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._cut:
            self.refused += 1
            _reset(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _reset(writer)
            return
        self.accepted += 1
        self._conns.update((writer, up_writer))
        try:
            await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))
        finally:
            for end in (writer, up_writer):
                self._conns.discard(end)
                _reset(end)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, asyncio.IncompleteReadError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    _reset(writer)


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close at once, unsent bytes discarded (a reset, as a dead peer's host answers)."""
    if not writer.transport.is_closing():
        writer.transport.abort()
