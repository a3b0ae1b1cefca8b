"""How many run records a SIGKILL loses: ``hatchway serve`` under a fixed request rate, killed at a
random moment, its database then read for the records of every request it had answered 200.

    .venv/bin/python -m bench.run_record_loss [--rate 200] [--trials 5] [--linger 0.25 0.05]

The log writer holds records in memory while they linger for company (``run_records.linger_seconds``)
and while their insert is in flight: those are what a SIGKILL can lose. Per trial this prints the
requests answered 200, how many of their records are missing, and how many were answered in the last
``linger`` seconds before the kill (the bound the docs state); and the gateway's CPU per request
during the load, the cost a shorter linger trades against. SQLite in a temp directory, as
``make bench`` runs it; ``--postgres`` uses a fresh database on ``HATCHWAY_TEST_DATABASE_URL``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from bench.common import ROOT, bench_key, free_port, passthrough_settings, wait_http

BODY = b'{"model":"bench","messages":[{"role":"user","content":"hi"}]}'


@dataclass
class Trial:
    answered: int
    lost: int
    in_last_linger: int
    rate_at_kill: int
    """Requests answered 200 in the last second before the kill (the rate the gateway kept up)."""
    cpu_ms_per_request: float


async def load(
    port: int, key: str, rate: float, seconds: float, kill: Callable[[], None]
) -> tuple[dict[str, float], float]:
    """Requests at ``rate`` per second for ``seconds``, then ``kill()``: {request id: answered at}
    of the requests answered 200 before the kill, and when it came.

    A bare HTTP/1.1 client on keep-alive connections (httpx's async pool tops out near 60 req/s
    on a busy two-core machine): each request is due at its time on the schedule and goes on the
    first free connection.
    """
    answered: dict[str, float] = {}
    request = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {key}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(BODY)}\r\n\r\n"
    ).encode() + BODY
    due: asyncio.Queue[float] = asyncio.Queue()

    async def connection() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while True:
                at = await due.get()
                await asyncio.sleep(max(0.0, at - time.monotonic()))
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                headers = dict(line.lower().split(": ", 1) for line in lines[1:] if ": " in line)
                await reader.readexactly(int(headers.get("content-length", "0")))
                if lines[0].split()[1] == "200":
                    answered[headers["x-hatchway-request-id"]] = time.monotonic()
                due.task_done()
        except (OSError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    workers = [asyncio.create_task(connection()) for _ in range(64)]
    for _ in range(20):  # warm: connections, the key's cache, the first requests' imports
        due.put_nowait(time.monotonic())
    await due.join()
    warm = set(answered)
    start = time.monotonic() + 0.05
    for i in range(int(rate * seconds)):
        due.put_nowait(start + i / rate)
    await asyncio.sleep(max(0.0, start + seconds - time.monotonic()))
    killed_at = time.monotonic()
    kill()
    for worker in workers:
        worker.cancel()
    await asyncio.gather(*workers, return_exceptions=True)
    return {k: v for k, v in answered.items() if v <= killed_at and k not in warm}, killed_at


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stored_ids(database_url: str, path: Path | None) -> set[str]:
    if path is not None:
        with sqlite3.connect(path) as conn:
            return {row[0] for row in conn.execute("SELECT id FROM request_logs")}
    import asyncpg

    async def read() -> set[str]:
        conn = await asyncpg.connect(database_url.replace("postgresql+asyncpg://", "postgresql://"))
        try:
            return {r["id"] for r in await conn.fetch("SELECT id FROM request_logs")}
        finally:
            await conn.close()

    return asyncio.run(read())


def trial(tmp: Path, upstream: str, database_url: str, rate: float, linger: float) -> Trial:
    sqlite_path = None if database_url.startswith("postgresql") else tmp / "hatchway.db"
    config = passthrough_settings(database_url, upstream)
    config["master_key_file"] = str(tmp / "master.key")
    config["run_records"] = {"linger_seconds": linger, "spool_dir": str(tmp / "spool")}
    path = tmp / "hatchway.yaml"
    path.write_text(yaml.safe_dump(config))
    key = asyncio.run(bench_key(database_url))
    port = free_port()
    args = [sys.executable, "-m", "hatchway", "serve", "--config", str(path), "--port", str(port)]
    with (tmp / "hatchway.log").open("wb") as log:
        proc = subprocess.Popen([*args, "--log-level", "warning"], cwd=ROOT, stdout=log, stderr=log)
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", timeout=60)
        seconds = random.uniform(2.0, 4.0)
        cpu_before = cpu_seconds(proc.pid)
        cpu: list[float] = []

        def kill() -> None:
            cpu.append(cpu_seconds(proc.pid) - cpu_before)
            proc.send_signal(signal.SIGKILL)

        answered, killed_at = asyncio.run(load(port, key, rate, seconds, kill))
    finally:
        proc.kill()
        proc.wait()
    stored = stored_ids(database_url, sqlite_path)
    lost = len(set(answered) - stored)
    recent = sum(1 for at in answered.values() if at > killed_at - linger)
    last_second = sum(1 for at in answered.values() if at > killed_at - 1.0)
    return Trial(len(answered), lost, recent, last_second, cpu[0] * 1000 / max(len(answered), 1))


def main() -> None:
    parser = argparse.ArgumentParser(description="Run records lost to a SIGKILL under load.")
    parser.add_argument("--rate", type=float, default=200.0, help="requests per second")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--linger", type=float, nargs="+", default=[0.25])
    parser.add_argument("--postgres", action="store_true", help="HATCHWAY_TEST_DATABASE_URL, fresh db")
    args = parser.parse_args()
    upstream_port = free_port()
    upstream = subprocess.Popen(
        [sys.executable, "-m", "bench.upstream", "--port", str(upstream_port), "--latency-ms", "20"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_http(f"http://127.0.0.1:{upstream_port}/", timeout=30)
        for linger in args.linger:
            trials = []
            for _ in range(args.trials):
                with tempfile.TemporaryDirectory() as tmp:
                    url = database(args.postgres, Path(tmp))
                    try:
                        result = trial(Path(tmp), f"http://127.0.0.1:{upstream_port}", url, args.rate, linger)
                    finally:
                        if args.postgres:
                            admin(f'DROP DATABASE IF EXISTS "{url.rpartition("/")[2]}" WITH (FORCE)')
                trials.append(result)
                print(
                    f"linger {linger:.2f} s: answered {result.answered}, lost {result.lost}, "
                    f"answered in the last linger {result.in_last_linger}, "
                    f"in the last second {result.rate_at_kill}, "
                    f"{result.cpu_ms_per_request:.2f} ms CPU/request",
                    flush=True,
                )
            lost = [t.lost for t in trials]
            print(
                f"== linger {linger:.2f} s at {args.rate:.0f} req/s: lost per SIGKILL mean "
                f"{statistics.fmean(lost):.1f}, max {max(lost)} (bound rate × linger = "
                f"{args.rate * linger:.0f}); answered in the last second before the kill mean "
                f"{statistics.fmean(t.rate_at_kill for t in trials):.0f}; CPU/request mean "
                f"{statistics.fmean(t.cpu_ms_per_request for t in trials):.2f} ms",
                flush=True,
            )
    finally:
        upstream.terminate()
        upstream.wait()


def database(postgres: bool, tmp: Path) -> str:
    if not postgres:
        return f"sqlite+aiosqlite:///{tmp / 'hatchway.db'}"
    name = f"hatchway_loss_{uuid.uuid4().hex[:8]}"
    admin(f'CREATE DATABASE "{name}"')
    return f"{os.environ['HATCHWAY_TEST_DATABASE_URL'].rpartition('/')[0]}/{name}"


def admin(sql: str) -> None:
    import asyncpg

    async def run() -> None:
        url = os.environ["HATCHWAY_TEST_DATABASE_URL"].replace("postgresql+asyncpg://", "postgresql://")
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(run())


if __name__ == "__main__":
    main()
