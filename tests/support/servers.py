"""Run an ASGI app under a real uvicorn server on a loopback port, in a background thread."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

import httpx
import uvicorn


class ServerThread:
    """``with ServerThread(app) as srv: srv.url`` — a real HTTP server for the duration of a test."""

    def __init__(self, app: Any, *, host: str = "127.0.0.1", port: int = 0, **config: Any) -> None:
        self.host = host
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self.port = self._sock.getsockname()[1]
        config.setdefault("log_level", "warning")
        config.setdefault("lifespan", "on")
        self.server = uvicorn.Server(uvicorn.Config(app, **config))
        self.server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"uvicorn:{self.port}")
        self.loop: asyncio.AbstractEventLoop | None = None
        self.error: BaseException | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # surfaced by start()
            self.error = exc

    async def _serve(self) -> None:
        self.loop = asyncio.get_running_loop()
        await self.server.serve(sockets=[self._sock])

    def start(self, timeout: float = 120.0) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if self.error is not None or not self._thread.is_alive():
                raise RuntimeError(f"server on port {self.port} failed to start") from self.error
            if time.monotonic() > deadline:
                raise TimeoutError(f"server on port {self.port} did not start in {timeout}s")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 20.0) -> None:
        self.server.should_exit = True
        self._thread.join(timeout)
        self._sock.close()

    def call(self, coro: Any, timeout: float = 30.0) -> Any:
        """Run a coroutine on the server's own event loop (to reach its objects) and return the result."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_until(
    predicate: Any, timeout: float = 10.0, interval: float = 0.01, message: str = "condition"
) -> Any:
    """Poll ``predicate`` until it returns a truthy value, or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def free_port() -> int:
    """A loopback port nobody listens on: free to bind, or to dial and be refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def accepts_connections(port: int) -> bool:
    """Whether something accepts TCP connections on the loopback ``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def answers_healthz(base_url: str) -> bool:
    """Whether ``GET {base_url}/healthz`` answers 200 (False while nothing answers yet)."""
    try:
        return httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def connections(sock: socket.socket) -> int:
    """How many connections a non-blocking listening ``sock`` has waiting (each accepted and closed)."""
    count = 0
    while True:
        try:
            sock.accept()[0].close()
        except BlockingIOError:
            return count
        count += 1
