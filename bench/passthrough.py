"""Added latency of a pass-through chat completion: direct to the upstream vs through Hatchway.

    python -m bench.passthrough [--requests 2000] [--latency-ms 20]

Starts a fixed-latency upstream and `hatchway serve` (one worker) as separate processes on
loopback, then sends the same request sequentially (concurrency 1) to each and prints p50/p90/p99
and the difference. Measured from outside the gateway: nothing it reports about itself is used.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
from pathlib import Path

import yaml

from bench.common import (
    ROOT,
    bench_key,
    free_port,
    passthrough_settings,
    process,
    python,
    sequential_latencies,
    summary,
    wait_http,
)

BODY = json.dumps({"model": "bench", "messages": [{"role": "user", "content": "ping"}]}).encode()


def measure(requests: int, latency_ms: float) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        up_port, gw_port = free_port(), free_port()
        db_url = f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}"
        config = Path(tmp) / "hatchway.yaml"
        config.write_text(yaml.safe_dump(passthrough_settings(db_url, f"http://127.0.0.1:{up_port}")))
        key = asyncio.run(bench_key(db_url))
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        upstream = [
            python(),
            "-m",
            "bench.upstream",
            "--port",
            str(up_port),
            "--latency-ms",
            str(latency_ms),
        ]
        gateway = [
            python(),
            "-m",
            "hatchway",
            "serve",
            "--config",
            str(config),
            "--port",
            str(gw_port),
            "--log-level",
            "warning",
        ]
        with process(upstream, cwd=ROOT, env=env), process(gateway, cwd=Path(tmp), env=env):
            wait_http(f"http://127.0.0.1:{up_port}/")
            wait_http(f"http://127.0.0.1:{gw_port}/healthz")
            direct = asyncio.run(
                sequential_latencies(f"http://127.0.0.1:{up_port}/v1/chat/completions", BODY, {}, requests)
            )
            through = asyncio.run(
                sequential_latencies(
                    f"http://127.0.0.1:{gw_port}/v1/chat/completions",
                    BODY,
                    {"authorization": f"Bearer {key}", "content-type": "application/json"},
                    requests,
                )
            )
    d, h = summary(direct), summary(through)
    return {
        "requests": requests,
        "upstream_latency_ms": latency_ms,
        "direct": d,
        "hatchway": h,
        "added_p50_ms": h["p50"] - d["p50"],
        "added_p99_ms": h["p99"] - d["p99"],
    }


def print_table(result: dict[str, object]) -> None:
    d, h = result["direct"], result["hatchway"]
    print(
        f"pass-through chat completion, concurrency 1, {result['requests']} requests, "
        f"upstream latency {result['upstream_latency_ms']} ms"
    )
    print(f"{'target':<10} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8}")
    for name, s in (("direct", d), ("hatchway", h)):
        print(f"{name:<10} {s['p50']:>8.2f} {s['p90']:>8.2f} {s['p99']:>8.2f}")  # type: ignore[index]
    print(f"added latency: p50 {result['added_p50_ms']:.2f} ms, p99 {result['added_p99_ms']:.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    args = parser.parse_args()
    print_table(measure(args.requests, args.latency_ms))


if __name__ == "__main__":
    main()
