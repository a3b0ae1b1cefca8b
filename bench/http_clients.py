"""httpx vs aiohttp as the pooled upstream client, at concurrency 64 against the fixed-latency upstream.

    python -m bench.http_clients [--requests 4000] [--concurrency 64] [--latency-ms 20]

Each client keeps `concurrency` requests in flight on one event loop (uvloop), one pooled client,
as a gateway does towards its upstream; printed: req/s and latency percentiles. The gateway's
upstream client is aiohttp; this is why (httpx's pool serialises under contention).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

BODY = b'{"model": "bench", "messages": [{"role": "user", "content": "ping"}]}'
HEADERS = {"content-type": "application/json"}


async def _drive(send, requests: int, concurrency: int) -> dict[str, float]:  # type: ignore[no-untyped-def]
    from bench.common import summary

    latencies: list[float] = []
    left = iter(range(requests))

    async def worker() -> None:
        for _ in left:
            started = time.perf_counter()
            await send()
            latencies.append((time.perf_counter() - started) * 1000)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    return {"rps": requests / elapsed, **summary(latencies)}


async def _httpx(url: str, requests: int, concurrency: int) -> dict[str, float]:
    import httpx

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:

        async def send() -> None:
            (await client.post(url, content=BODY, headers=HEADERS)).raise_for_status()

        await _drive(send, concurrency * 4, concurrency)  # warm the pool
        return await _drive(send, requests, concurrency)


async def _aiohttp(url: str, requests: int, concurrency: int) -> dict[str, float]:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as session:

        async def send() -> None:
            async with session.post(url, data=BODY, headers=HEADERS) as response:
                await response.read()
                response.raise_for_status()

        await _drive(send, concurrency * 4, concurrency)
        return await _drive(send, requests, concurrency)


def compare(url: str, requests: int = 4000, concurrency: int = 64) -> dict[str, dict[str, float]]:
    import uvloop

    out = {}
    for name, fn in (("httpx", _httpx), ("aiohttp", _aiohttp)):
        out[name] = uvloop.run(fn(url, requests, concurrency))
    return out


def print_table(result: dict[str, dict[str, float]]) -> None:
    print(f"{'client':<8} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8}")
    for name, r in result.items():
        print(f"{name:<8} {r['rps']:>8.0f} {r['p50']:>8.2f} {r['p99']:>8.2f}")


def main() -> None:
    from bench.stack import running, start_upstream

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, running(Path(tmp)) as stack:
        upstream = start_upstream(stack, "upstream", args.latency_ms)
        print_table(compare(f"{upstream.base}/v1/chat/completions", args.requests, args.concurrency))


if __name__ == "__main__":
    main()
