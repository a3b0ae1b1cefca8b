"""Hatchway as real processes: ``hatchway serve`` replicas and ``hatchway worker``s on one config.

    replicas = Replicas(tmp_path, config)          # config: a hatchway.yaml dict (shared database/Redis)
    a, b = replicas.serve("a"), replicas.serve("b")   # started, /readyz answered 200
    w = replicas.worker("w1")                      # started, its "ready" line logged
    a.client(key).responses.create(...)            # the official openai client
    w.kill()                                       # SIGKILL: no clean-up runs
    replicas.stop()                                # SIGTERM to whatever still runs

Each process logs to its own file (``.log()`` reads it; failures quote it). Redis keys are kept
apart per test run by a unique ``redis_prefix`` (``unique_redis_prefix``) and removed by
``purge_redis`` — never a FLUSHALL, other engineers' runs share the server.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import openai
import yaml

from tests.support.paths import ROOT
from tests.support.servers import free_port, wait_until


def unique_redis_prefix() -> str:
    return f"hatchway-test-{uuid.uuid4().hex[:10]}:"


async def _purge(redis_url: str, prefix: str) -> None:
    import redis.asyncio as redis

    client = redis.Redis.from_url(redis_url)
    try:
        # Our cache keys, and the job queue's (SAQ names them after the queue, which carries the prefix).
        for pattern in (f"{prefix}*", f"saq:{prefix}*", f"saq:job:{prefix}*"):
            keys = [key async for key in client.scan_iter(match=pattern, count=500)]
            if keys:
                await client.delete(*keys)
    finally:
        await client.aclose()


def purge_redis(redis_url: str, prefix: str) -> None:
    """Delete this test run's Redis keys (and only them)."""
    asyncio.run(_purge(redis_url, prefix))


class HatchwayProcess:
    """One ``python -m hatchway …`` child process with its log file."""

    def __init__(self, name: str, args: list[str], log_path: Path, env: dict[str, str]) -> None:
        self.name = name
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hatchway", *args],
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def rss_mib(self) -> float:
        """The process's resident memory now, from /proc."""
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))) / 1024

    def cpu_seconds(self) -> float:
        """User + system CPU time the process has used so far, from /proc."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def check_alive(self) -> None:
        if not self.alive():
            raise AssertionError(
                f"{self.name} exited with code {self.proc.returncode}; its log:\n{self.log()[-4000:]}"
            )

    def kill(self) -> None:
        """SIGKILL: the process gets no chance to record anything."""
        self.proc.kill()
        self.proc.wait(10)

    def terminate(self, timeout: float = 120.0) -> int:
        """SIGTERM, then wait; returns the exit code (SIGKILL after ``timeout``)."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
        return int(self.proc.returncode)


class ServeProcess(HatchwayProcess):
    """``hatchway serve`` on a free loopback port."""

    def __init__(self, name: str, config: Path, log_path: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        args = ["serve", "--config", str(config), "--port", str(self.port), "--log-level", "info"]
        super().__init__(name, args, log_path, env)
        self._clients: list[openai.OpenAI] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def ready(self) -> dict[str, Any] | None:
        """The ``/readyz`` body when it answers 200, else None."""
        self.check_alive()
        try:
            response = httpx.get(f"{self.url}/readyz", timeout=2.0)
        except httpx.TransportError:
            return None
        return response.json() if response.status_code == 200 else None

    def client(self, key: str) -> openai.OpenAI:
        client = openai.OpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0, timeout=60.0)
        self._clients.append(client)
        return client

    def http(self, method: str, path: str, key: str, **kwargs: Any) -> httpx.Response:
        headers = {"authorization": f"Bearer {key}", **kwargs.pop("headers", {})}
        return httpx.request(method, f"{self.url}{path}", headers=headers, timeout=60.0, **kwargs)

    def terminate(self, timeout: float = 120.0) -> int:
        for client in self._clients:
            client.close()
        return super().terminate(timeout)


class Replicas:
    """Processes sharing one hatchway.yaml; ``stop()`` ends every one still running."""

    def __init__(self, tmp_path: Path, config: dict[str, Any], env: dict[str, str] | None = None) -> None:
        self.tmp_path = tmp_path
        self.config_path = tmp_path / "hatchway-replicas.yaml"
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        self.env = {**os.environ, **(env or {})}
        self.processes: list[HatchwayProcess] = []

    def serve(self, name: str, timeout: float = 60.0) -> ServeProcess:
        process = ServeProcess(name, self.config_path, self.tmp_path / f"{name}.log", self.env)
        self.processes.append(process)
        wait_until(process.ready, timeout=timeout, interval=0.1, message=f"{name} to be ready")
        return process

    def worker(self, name: str, *extra: str, timeout: float = 60.0) -> HatchwayProcess:
        args = ["worker", "--config", str(self.config_path), *extra]
        process = HatchwayProcess(name, args, self.tmp_path / f"{name}.log", self.env)
        self.processes.append(process)

        def ready() -> bool:
            process.check_alive()
            return " ready: queue " in process.log()

        wait_until(ready, timeout=timeout, interval=0.1, message=f"{name} to log that it is ready")
        return process

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()

    def logs(self) -> str:
        """Every process's log, for failure messages."""
        return "\n".join(f"--- {p.name}\n{p.log()[-3000:]}" for p in self.processes)


def eventually(predicate: Any, timeout: float, message: str, replicas: Replicas | None = None) -> Any:
    """``wait_until`` whose failure message carries the processes' logs."""
    try:
        return wait_until(predicate, timeout=timeout, interval=0.1, message=message)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{replicas.logs() if replicas else ''}") from None


def replica_config(
    tmp_path: Path, database_url: str, redis_url: str, prefix: str, upstream_url: str, **extra: Any
) -> dict[str, Any]:
    """A hatchway.yaml for replicas on one PostgreSQL and one Redis; quick leases and sweeps.

    The master key file is created here, before any process starts, as a deployment provisions it.
    """
    from hatchway.vault import load_master_key

    key_file = tmp_path / "master.key"
    load_master_key(key_file)
    return {
        "database_url": database_url,
        "redis_url": redis_url,
        "redis_prefix": prefix,
        "master_key_file": str(key_file),
        "providers": [{"id": "upstream", "base_url": upstream_url, "timeout_seconds": 60}],
        "models": [{"name": "gpt-4o", "provider": "upstream", "upstream_model": "gpt-4o-2024"}],
        "response_lease_seconds": 3,
        "background": {
            "serve_concurrency": 0,  # only `hatchway worker` processes run background responses
            "heartbeat_seconds": 3,
            "sweep_seconds": 1,
            "max_attempts": 3,
            "shutdown_grace_seconds": 10,
        },
        **extra,
    }
