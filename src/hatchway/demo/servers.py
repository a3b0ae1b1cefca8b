"""An ASGI app under uvicorn on a free loopback port, in a thread of this process."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import uvicorn

T = TypeVar("T")


class LoopbackServer:
    """``LoopbackServer(app, name).start()``; ``stop()`` shuts it down and joins its thread."""

    def __init__(self, app: Any, name: str, *, port: int = 0) -> None:
        self.name = name
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", port))
        self.port: int = self._sock.getsockname()[1]
        config = uvicorn.Config(
            app, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=3
        )
        self.server = uvicorn.Server(config)
        # The main thread owns Ctrl-C: it stops every server in order.
        self.server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"demo:{name}")
        self.loop: asyncio.AbstractEventLoop | None = None
        self.error: BaseException | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported by start()
            self.error = exc

    async def _serve(self) -> None:
        self.loop = asyncio.get_running_loop()
        await self.server.serve(sockets=[self._sock])

    def start(self, timeout: float = 30.0) -> LoopbackServer:
        """Start and wait until it accepts connections (or raise with the reason)."""
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if self.error is not None or not self._thread.is_alive():
                reason = f": {self.error}" if self.error else ""
                raise RuntimeError(f"{self.name} failed to start{reason}") from self.error
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name} did not start within {timeout:g}s")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Ask uvicorn to exit (its lifespan shutdown runs) and wait for the thread."""
        self.server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout)
        self._sock.close()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        """Run ``coro`` on the server's event loop (where its resources live) and return the result."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)
