"""Shared pieces of the benchmarks: free ports, processes that must be up, percentiles, an API key."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=1.0)
            return
        except httpx.TransportError:
            time.sleep(0.05)
    raise TimeoutError(f"{url} did not come up in {timeout}s")


@contextlib.contextmanager
def process(
    args: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def summary(samples_ms: list[float]) -> dict[str, float]:
    return {
        "n": len(samples_ms),
        "p50": percentile(samples_ms, 50),
        "p90": percentile(samples_ms, 90),
        "p99": percentile(samples_ms, 99),
        "mean": statistics.fmean(samples_ms),
    }


async def sequential_latencies(
    url: str, body: bytes, headers: dict[str, str], n: int, warmup: int = 50
) -> list[float]:
    """Concurrency 1: one request after the other on a keep-alive connection; latency per request in ms."""
    async with httpx.AsyncClient(timeout=30.0) as client:
        for _ in range(warmup):
            (await client.post(url, content=body, headers=headers)).raise_for_status()
        out = []
        for _ in range(n):
            started = time.perf_counter()
            response = await client.post(url, content=body, headers=headers)
            out.append((time.perf_counter() - started) * 1000)
            response.raise_for_status()
        return out


def python() -> str:
    return sys.executable


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def passthrough_settings(database_url: str, upstream_base: str) -> dict[str, Any]:
    """hatchway.yaml of a gateway whose model ``bench`` passes through to ``{upstream_base}/v1``."""
    return {
        "database_url": database_url,
        "providers": [{"id": "up", "base_url": f"{upstream_base}/v1"}],
        "models": [{"name": "bench", "provider": "up", "upstream_model": "bench-model"}],
    }


AGENTIC_MODELS = ("plain", "tools-1", "tools-3", "fanout-8", "subagents-8")


def add_agentic(config: dict[str, Any], tmp: Path, rounds_base: str, mcp_rounds: str, mcp_fan: str) -> None:
    """Add make bench's agent-loop part to a pass-through ``config``: models ``tools-N``, ``fanout-8``
    (routing rules bind two MCP plugins, written to ``tmp``) and agent ``fan`` on the scripted
    upstream at ``rounds_base``. With plugins bound, the MCP SDK loads at start, as in make bench."""
    config["providers"].append({"id": "rounds", "base_url": f"{rounds_base}/v1"})
    config["models"] += [{"name": m, "provider": "rounds", "upstream_model": m} for m in AGENTIC_MODELS]
    for plugin, server in (("plugin-rounds.yaml", mcp_rounds), ("plugin-fan.yaml", mcp_fan)):
        body = {
            "version": "1",
            "mcp_servers": [{"id": "bench", "url": f"{server}/mcp", "tools": ["lookup"]}],
            "agent": {"max_rounds": 8},
        }
        (tmp / plugin).write_text(yaml.safe_dump(body))
    config["routing_rules"] = [  # absolute: the config may be written elsewhere (start_serve)
        {"name": "rounds", "match": {"model": "tools-*"}, "plugin": str(tmp / "plugin-rounds.yaml")},
        {"name": "fan", "match": {"model": "fanout-*"}, "plugin": str(tmp / "plugin-fan.yaml")},
    ]
    subagents = {"enabled": True, "max_concurrent": 8, "max_depth": 1}
    config["agents"] = [{"name": "fan", "model": "subagents-8", "subagents": subagents}]


async def bench_key(database_url: str) -> str:
    """Migrate the gateway's database and return an API key of a new organisation ``bench``."""
    from hatchway.principal import Role
    from hatchway.store.db import Database
    from hatchway.store.orgs import OrgStore

    db = Database(database_url)
    await db.migrate()
    store = OrgStore(db)
    org = await store.create_org("bench")
    _, key = await store.create_key(org.id, role=Role.ADMIN)
    await db.close()
    return key
