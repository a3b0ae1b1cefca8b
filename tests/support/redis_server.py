"""A private ``redis-server`` a fault test can stop (a port that refuses), pause (SIGSTOP: a Redis
that accepts connections and never answers) and restart without its data (no persistence)."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from tests.support.servers import free_port, wait_until


class RedisServer:
    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.dir = directory
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        args = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1"]
        args += ["--save", "", "--appendonly", "no", "--dir", str(self.dir)]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(self._pings, timeout=120, interval=0.05, message="redis-server to answer")
        return self

    def stop(self) -> None:
        """Gone: its port refuses connections."""
        if self.process is not None:
            self.process.kill()  # SIGKILL: it keeps nothing, as no persistence would
            self.process.wait(timeout=20)
            self.process = None

    def restart(self) -> None:
        """Stopped and started again on the same port, empty."""
        self.stop()
        self.start()

    @contextmanager
    def refusing(self) -> Iterator[None]:
        """Stopped inside the block (its port refuses), started again (empty) after it."""
        self.stop()
        try:
            yield
        finally:
            self.start()

    @contextmanager
    def hung(self) -> Iterator[None]:
        """SIGSTOPped inside the block: connections are accepted (by the kernel) and never answered."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(self.process.pid, signal.SIGCONT)

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_timeout=5)

    def _pings(self) -> bool:
        try:
            with redis.Redis.from_url(self.url, socket_timeout=1) as client:
                return bool(client.ping())
        except redis.RedisError:
            return False
