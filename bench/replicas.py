"""Pass-through chat throughput at concurrency 64: one `hatchway serve` replica vs two.

    python -m bench.replicas [--requests 4000] [--concurrency 64] [--latency-ms 20] [--rounds 2]
                             [--database-url postgresql+asyncpg://…] [--redis-url redis://…]

Starts a fixed-latency upstream and two `hatchway serve` processes sharing one PostgreSQL database
(a fresh one, dropped afterwards) and one Redis (its own key prefix), as deploy/ runs them. The
load generator keeps `concurrency` requests in flight, all to replica A ("one"), or alternating
A, B, A, B… ("two": a client-side round-robin — the balancer's part, without a balancer's cost).
Same upstream, same request, same number of requests; the two kinds of round are interleaved
`--rounds` times and the best of each is printed (requests per second, latency percentiles).
Everything shares this machine's cores, so two replicas only go faster while the first one is
what limits (see the README's figures for this 2-core machine).

The database defaults to HATCHWAY_TEST_DATABASE_URL (Redis to HATCHWAY_TEST_REDIS_URL); without
one the benchmark says so and measures nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp
import yaml

from bench.common import ROOT, bench_key, free_port, passthrough_settings, process, python, summary, wait_http

BODY = json.dumps({"model": "bench", "messages": [{"role": "user", "content": "ping"}]}).encode()


async def _admin(database_url: str, sql: str) -> None:
    import asyncpg

    base, _, _ = database_url.rpartition("/")
    conn = await asyncpg.connect(base.replace("postgresql+asyncpg://", "postgresql://") + "/postgres")
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def throughput(urls: list[str], key: str, total: int, concurrency: int) -> dict[str, float]:
    """``total`` requests, ``concurrency`` in flight, the n-th to ``urls[n % len(urls)]``."""
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def send(url: str) -> float:
            started = time.perf_counter()
            async with session.post(url, data=BODY, headers=headers) as response:
                await response.read()
                if response.status != 200:
                    raise RuntimeError(f"{url} answered {response.status}")
            return (time.perf_counter() - started) * 1000

        await asyncio.gather(*(send(urls[i % len(urls)]) for i in range(concurrency * 2)))  # warm-up
        counter = itertools.count()
        latencies: list[float] = []

        async def client() -> None:
            while (n := next(counter)) < total:
                latencies.append(await send(urls[n % len(urls)]))

        started = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    return {"rps": total / elapsed, "seconds": elapsed, **summary(latencies)}


def measure(
    requests: int,
    concurrency: int,
    latency_ms: float,
    database_url: str,
    redis_url: str | None,
    rounds: int = 2,
) -> dict[str, object]:
    name = f"hatchway_bench_{uuid.uuid4().hex[:8]}"
    bench_db = f"{database_url.rpartition('/')[0]}/{name}"
    asyncio.run(_admin(database_url, f'CREATE DATABASE "{name}"'))
    try:
        return _measure(requests, concurrency, latency_ms, bench_db, redis_url, rounds)
    finally:
        asyncio.run(_admin(database_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def _measure(
    requests: int, concurrency: int, latency_ms: float, database_url: str, redis_url: str | None, rounds: int
) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        up, port_a, port_b = free_port(), free_port(), free_port()
        config = Path(tmp) / "hatchway.yaml"
        settings = passthrough_settings(database_url, f"http://127.0.0.1:{up}")
        settings["master_key_file"] = str(Path(tmp) / "master.key")
        if redis_url:
            settings |= {"redis_url": redis_url, "redis_prefix": f"hatchway-bench-{uuid.uuid4().hex[:8]}:"}
        config.write_text(yaml.safe_dump(settings))
        key = asyncio.run(bench_key(database_url))
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        upstream = [
            python(),
            "-m",
            "bench.upstream",
            "--port",
            str(up),
            "--latency-ms",
            str(latency_ms),
        ]

        def serve(port: int) -> list[str]:
            args = ["serve", "--config", str(config), "--port", str(port), "--log-level", "warning"]
            return [python(), "-m", "hatchway", *args]

        with process(upstream, cwd=ROOT, env=env):
            wait_http(f"http://127.0.0.1:{up}/")
            with process(serve(port_a), cwd=Path(tmp), env=env):
                wait_http(f"http://127.0.0.1:{port_a}/healthz")  # A first: it creates the master key
                with process(serve(port_b), cwd=Path(tmp), env=env):
                    wait_http(f"http://127.0.0.1:{port_b}/healthz")
                    a, b = (f"http://127.0.0.1:{p}/v1/chat/completions" for p in (port_a, port_b))
                    ones, twos = [], []
                    for _ in range(rounds):  # interleaved, so neither gets the quieter moment
                        ones.append(asyncio.run(throughput([a], key, requests, concurrency)))
                        twos.append(asyncio.run(throughput([a, b], key, requests, concurrency)))
    one, two = (max(runs, key=lambda r: r["rps"]) for runs in (ones, twos))
    return {
        "requests": requests,
        "rounds": rounds,
        "concurrency": concurrency,
        "upstream_latency_ms": latency_ms,
        "one": one,
        "two": two,
        "speedup": two["rps"] / one["rps"],
    }


def print_table(result: dict[str, object]) -> None:
    print(
        f"pass-through chat completion throughput, concurrency {result['concurrency']}, "
        f"{result['requests']} requests, upstream latency {result['upstream_latency_ms']} ms, "
        f"best of {result['rounds']} interleaved rounds"
    )
    print(f"{'replicas':<10} {'req/s':>8} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8}")
    for name, s in (("one", result["one"]), ("two", result["two"])):
        print(f"{name:<10} {s['rps']:>8.0f} {s['p50']:>8.1f} {s['p90']:>8.1f} {s['p99']:>8.1f}")  # type: ignore[index]
    print(f"two replicas / one: {result['speedup']:.2f}x")


def run_if_configured(requests: int = 4000, concurrency: int = 64, latency_ms: float = 20.0) -> None:
    """For `make bench`: measure when a PostgreSQL database is configured, else say why not."""
    database_url = os.environ.get("HATCHWAY_BENCH_DATABASE_URL") or os.environ.get(
        "HATCHWAY_TEST_DATABASE_URL"
    )
    if not database_url:
        print("replicas: skipped (replicas share PostgreSQL: set HATCHWAY_TEST_DATABASE_URL)")
        return
    redis_url = os.environ.get("HATCHWAY_BENCH_REDIS_URL") or os.environ.get("HATCHWAY_TEST_REDIS_URL")
    print_table(measure(requests, concurrency, latency_ms, database_url, redis_url))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=2, help="interleaved one/two rounds; the best of each")
    parser.add_argument("--database-url", default=os.environ.get("HATCHWAY_TEST_DATABASE_URL"))
    parser.add_argument("--redis-url", default=os.environ.get("HATCHWAY_TEST_REDIS_URL"))
    args = parser.parse_args()
    if not args.database_url:
        parser.error("--database-url (or HATCHWAY_TEST_DATABASE_URL): replicas share a PostgreSQL database")
    print_table(
        measure(
            args.requests, args.concurrency, args.latency_ms, args.database_url, args.redis_url, args.rounds
        )
    )


if __name__ == "__main__":
    main()
