"""httpx vs aiohttp vs the gateway's own pool (``upstream_http``) as the pooled upstream client.

    python -m bench.http_clients [--requests 4000] [--concurrency 64] [--latency-ms 20]

Each client keeps `concurrency` requests in flight on one event loop (uvloop), one pooled client,
as a gateway does towards its upstream, then sends requests one at a time (concurrency 1);
printed: req/s and latency percentiles at `concurrency`, and p50 and CPU per request at
concurrency 1 (the client process's own CPU time). This is why the gateway has its own pool:
httpx's serialises under contention, and aiohttp's per-request machinery costs more CPU than the
rest of a pass-through request.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

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


Forward = Callable[[bytes], Awaitable[tuple[int, bytes]]]
Client = tuple[Forward, Callable[[], Awaitable[None]]]
"""POST a body, get (status, body) back; and close the client."""


def httpx_client(url: str, limit: int) -> Client:
    import httpx

    limits = httpx.Limits(max_connections=limit, max_keepalive_connections=limit)
    client = httpx.AsyncClient(limits=limits, timeout=120.0)

    async def forward(body: bytes) -> tuple[int, bytes]:
        response = await client.post(url, content=body, headers=HEADERS)
        return response.status_code, response.content

    return forward, client.aclose


def aiohttp_client(url: str, limit: int) -> Client:
    import aiohttp

    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=limit))

    async def forward(body: bytes) -> tuple[int, bytes]:
        async with session.post(url, data=body, headers=HEADERS) as response:
            return response.status, await response.read()

    return forward, session.close


def pool_client(url: str, limit: int) -> Client:
    """The gateway's own upstream pool (``engine/providers/upstream_http.py``)."""
    from hatchway.engine.providers.upstream_http import UpstreamPool

    pool = UpstreamPool(url, headers=HEADERS, connect_timeout=5, read_timeout=120, max_connections=limit)

    async def forward(body: bytes) -> tuple[int, bytes]:
        async with await pool.post(body) as response:
            return response.status, await response.read()

    return forward, pool.aclose


CLIENTS: dict[str, Callable[[str, int], Client]] = {
    "httpx": httpx_client,
    "aiohttp": aiohttp_client,
    "hatchway": pool_client,
}


async def _measure(
    open_client: Callable[[str, int], Client], url: str, requests: int, concurrency: int
) -> dict[str, float]:
    forward, aclose = open_client(url, concurrency)
    try:

        async def send() -> None:
            status, _ = await forward(BODY)
            if status >= 400:
                raise RuntimeError(f"HTTP {status}")

        await _drive(send, concurrency * 4, concurrency)  # warm the pool
        return await _drive(send, requests, concurrency)
    finally:
        await aclose()


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _both(
    open_client: Callable[[str, int], Client], url: str, requests: int, concurrency: int
) -> dict[str, float]:
    out = await _measure(open_client, url, requests, concurrency)
    sequential = max(100, requests // 20)
    cpu = _cpu()
    one = await _measure(open_client, url, sequential, 1)
    out["c1_p50"] = one["p50"]
    out["c1_cpu_ms"] = (_cpu() - cpu) * 1000 / (sequential + 4)  # + the warm-up requests
    return out


def compare(url: str, requests: int = 4000, concurrency: int = 64) -> dict[str, dict[str, float]]:
    import uvloop

    out = {}
    for name, open_client in CLIENTS.items():
        out[name] = uvloop.run(_both(open_client, url, requests, concurrency))
    return out


def print_table(result: dict[str, dict[str, float]]) -> None:
    print(f"{'client':<9} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'c=1 p50':>8} {'c=1 CPU ms':>10}")
    for name, r in result.items():
        print(
            f"{name:<9} {r['rps']:>8.0f} {r['p50']:>8.2f} {r['p99']:>8.2f} {r.get('c1_p50', 0):>8.2f} "
            f"{r.get('c1_cpu_ms', 0):>10.3f}"
        )


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
