"""Load generators: wrk (closed loop, fixed concurrency) and a small open-loop generator (fixed rate).

wrk has no fixed-rate mode (that is wrk2, not packaged here), so the fixed-rate case is driven by
``open_loop`` below: aiohttp, one task per request started on a fixed schedule whatever the
previous ones are doing, latency measured from the scheduled start (no coordinated omission).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass

import aiohttp

from bench.common import ROOT, summary

LUA = ROOT / "bench" / "post.lua"


def ensure_wrk() -> str:
    """wrk's version line; installs it with apt-get when missing and running as root."""
    if shutil.which("wrk") is None:
        if os.geteuid() != 0:
            raise SystemExit(
                "wrk is not installed: run `sudo apt-get install -y wrk` (Debian/Ubuntu), then again"
            )
        print("installing wrk (apt-get install -y wrk)…", flush=True)
        subprocess.run(["apt-get", "install", "-y", "wrk"], check=False)
        if shutil.which("wrk") is None:
            subprocess.run(["apt-get", "update"], check=True)
            subprocess.run(["apt-get", "install", "-y", "wrk"], check=True)
    out = subprocess.run(["wrk", "--version"], capture_output=True, text=True, check=False)
    return (out.stdout or out.stderr).splitlines()[0].split(" Copyright")[0].strip()


@dataclass
class Target:
    name: str
    url: str
    authorization: str = ""

    def headers(self) -> dict[str, str]:
        out = {"content-type": "application/json"}
        if self.authorization:
            out["authorization"] = self.authorization
        return out


def wrk(target: Target, body: bytes, *, connections: int, seconds: float) -> dict[str, float]:
    """One wrk run (one thread, ``connections`` keep-alive connections); figures in ms and req/s."""
    env = {**os.environ, "BENCH_BODY": body.decode(), "BENCH_AUTH": target.authorization}
    args = [
        "wrk",
        "-t1",
        f"-c{connections}",
        f"-d{seconds:g}s",
        "--timeout",
        "10s",
        "-s",
        str(LUA),
        target.url,
    ]
    out = subprocess.run(args, env=env, capture_output=True, text=True, check=True)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("BENCH_JSON ")), None)
    if line is None:
        raise RuntimeError(f"wrk printed no figures: {out.stdout}\n{out.stderr}")
    raw = json.loads(line.removeprefix("BENCH_JSON "))
    seconds_run = raw["duration_us"] / 1e6
    socket_errors = raw["connect_errors"] + raw["read_errors"] + raw["write_errors"] + raw["timeouts"]
    return {
        "requests": raw["requests"],
        "rps": raw["requests"] / seconds_run,
        "p50": raw["p50_us"] / 1000,
        "p90": raw["p90_us"] / 1000,
        "p99": raw["p99_us"] / 1000,
        "mean": raw["mean_us"] / 1000,
        "max": raw["max_us"] / 1000,
        "non_2xx": raw["non_2xx"],
        "socket_errors": socket_errors,
    }


async def _open_loop(target: Target, body: bytes, rate: float, seconds: float) -> dict[str, float]:
    n = int(rate * seconds)
    latencies: list[float] = []
    errors = {"non_2xx": 0, "socket_errors": 0}
    connector = aiohttp.TCPConnector(limit=512)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one(at: float) -> None:
            await asyncio.sleep(max(0.0, at - time.perf_counter()))
            try:
                async with session.post(target.url, data=body, headers=target.headers()) as response:
                    await response.read()
                    if not 200 <= response.status < 300:
                        errors["non_2xx"] += 1
            except (aiohttp.ClientError, TimeoutError):
                errors["socket_errors"] += 1
                return
            latencies.append((time.perf_counter() - at) * 1000)  # from the scheduled start

        start = time.perf_counter() + 0.05
        await asyncio.gather(*(one(start + i / rate) for i in range(n)))
        elapsed = time.perf_counter() - start
    s = summary(latencies) if latencies else {"p50": 0.0, "p90": 0.0, "p99": 0.0, "mean": 0.0}
    return {
        "requests": n,
        "rps": len(latencies) / elapsed,
        "p50": s["p50"],
        "p90": s["p90"],
        "p99": s["p99"],
        "mean": s["mean"],
        "max": max(latencies, default=0.0),
        **errors,
    }


def open_loop(target: Target, body: bytes, *, rate: float, seconds: float) -> dict[str, float]:
    return asyncio.run(_open_loop(target, body, rate, seconds))
