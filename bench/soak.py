"""A soak: N clients running two-round agent loops against ``hatchway serve`` on PostgreSQL for M
minutes, then the books are checked.

    .venv/bin/python -m bench.soak [--clients 48] [--minutes 5] [--database-url postgresql+asyncpg://…]

Started as separate processes on loopback: a scripted upstream (round 1 asks for one MCP tool call
whose argument is the request's own token, round 2 answers; 20 ms per round), an MCP server built
with the official SDK that appends every token it executes to a file (20 ms per call), and the
gateway on a fresh database of ``--database-url`` (default ``HATCHWAY_TEST_DATABASE_URL``), dropped
at the end. Each client sends one request after the other, alternately streamed and not, each with
a unique token. Printed at the end:

- requests answered, by status, and the rate;
- lost run records: requests answered 200 whose ``x-hatchway-request-id`` has no row in the
  database once the gateway has stopped (it flushes its log writer on the way out);
- tools run twice: tokens the MCP server executed more than once (and answered requests whose tool
  never ran);
- the gateway's RSS and open file descriptors, sampled every 10 s: after the first minute (warm),
  at the end, and the drift between the two; the highest fd count seen.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench.common import ROOT, bench_key, free_port, percentile, wait_http

SAMPLE_SECONDS = 10.0


# -- the two servers the gateway calls (run as ``python -m bench.soak upstream|mcp``) ------------


def serve_upstream(port: int, latency_s: float) -> None:
    """Round 1 asks ``soak__run(token=<the user's message>)``, round 2 answers."""
    from bench.asgi import serve
    from hatchway.demo.upstream import Reply, ScriptedUpstream

    def decide(body: dict[str, Any]) -> Reply:
        messages = body.get("messages", [])
        if any(m.get("role") == "tool" for m in messages):
            return Reply("done", delay=latency_s, prompt_tokens=10, completion_tokens=1)
        token = next((m["content"] for m in reversed(messages) if m.get("role") == "user"), "")
        call = ("soak__run", {"token": token}, f"call_{uuid.uuid4().hex[:12]}")
        return Reply(tool_calls=[call], delay=latency_s, prompt_tokens=10, completion_tokens=1)

    serve(ScriptedUpstream(decide, model="soak-model"), port)


def serve_mcp(port: int, latency_s: float, ledger: Path) -> None:
    """One tool, ``run(token)``: waits, appends the token to ``ledger``, answers."""
    import uvicorn
    from mcp.server import MCPServer

    server = MCPServer("soak", log_level="WARNING")
    out = ledger.open("a", buffering=1)

    @server.tool(description="Run something once (the soak counts how often).")
    async def run(token: str) -> str:
        await asyncio.sleep(latency_s)
        out.write(token + "\n")
        return f"ran {token}"

    uvicorn.run(server.streamable_http_app(), host="127.0.0.1", port=port, log_level="warning")


# -- the soak ------------------------------------------------------------------------------------


def _admin(database_url: str, sql: str) -> None:
    import asyncpg

    async def go() -> None:
        conn = await asyncpg.connect(database_url.replace("postgresql+asyncpg://", "postgresql://"))
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(go())


def _stored_ids(database_url: str) -> set[str]:
    import asyncpg

    async def go() -> set[str]:
        conn = await asyncpg.connect(database_url.replace("postgresql+asyncpg://", "postgresql://"))
        try:
            return {r["id"] for r in await conn.fetch("SELECT id FROM request_logs")}
        finally:
            await conn.close()

    return asyncio.run(go())


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class Tally:
    def __init__(self) -> None:
        self.statuses: collections.Counter[str] = collections.Counter()
        self.answered: dict[str, str] = {}  # request id -> token
        self.latencies_ms: list[float] = []
        self.samples: list[tuple[float, float, int]] = []  # (t, rss MiB, fds)
        self.failures: list[str] = []


async def _client(client: httpx.AsyncClient, url: str, key: str, n: int, until: float, tally: Tally) -> None:
    headers = {"authorization": f"Bearer {key}"}
    i = 0
    while time.monotonic() < until:
        token = f"soak-{n}-{i}-{uuid.uuid4().hex[:8]}"
        stream = i % 2 == 1
        body = {"model": "soak-agent", "messages": [{"role": "user", "content": token}], "stream": stream}
        started = time.perf_counter()
        try:
            async with client.stream("POST", url, json=body, headers=headers) as response:
                text = (await response.aread()).decode("utf-8", "replace")
            ok = response.status_code == 200 and (not stream or "data: [DONE]" in text)
            if ok and stream and '"error"' in text:
                ok = False
            label = str(response.status_code) if ok or response.status_code != 200 else "200 cut"
            tally.statuses[label] += 1
            if ok:
                tally.answered[response.headers["x-hatchway-request-id"]] = token
                tally.latencies_ms.append((time.perf_counter() - started) * 1000)
        except httpx.HTTPError as exc:
            tally.statuses[type(exc).__name__] += 1
            elapsed = time.perf_counter() - started
            tally.failures.append(f"{type(exc).__name__} stream={stream} after {elapsed:.2f} s: {exc!r}")
        i += 1


async def _sampler(pid: int, start: float, until: float, tally: Tally) -> None:
    while True:
        tally.samples.append((time.monotonic() - start, _rss_mib(pid), _fds(pid)))
        if time.monotonic() >= until:
            return
        await asyncio.sleep(min(SAMPLE_SECONDS, max(0.0, until - time.monotonic())))


async def _load(port: int, pid: int, key: str, clients: int, seconds: float) -> Tally:
    tally = Tally()
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    start = time.monotonic()
    until = start + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=60.0, limits=limits) as client:
        tasks = [_client(client, url, key, n, until, tally) for n in range(clients)]
        await asyncio.gather(_sampler(pid, start, until, tally), *tasks)
    return tally


def _spawn(args: list[str], log: Path, cwd: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        return subprocess.Popen(args, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)


def soak(clients: int, minutes: float, database_url: str) -> None:
    name = f"hatchway_soak_{uuid.uuid4().hex[:8]}"
    _admin(database_url, f'CREATE DATABASE "{name}"')
    db_url = f"{database_url.rpartition('/')[0]}/{name}"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp_name:
            tmp = Path(tmp_name)
            up_port, mcp_port, gw_port = free_port(), free_port(), free_port()
            ledger = tmp / "ledger.txt"
            me = [sys.executable, "-m", "bench.soak"]
            procs.append(_spawn([*me, "upstream", str(up_port)], tmp / "upstream.log", ROOT))
            procs.append(_spawn([*me, "mcp", str(mcp_port), str(ledger)], tmp / "mcp.log", ROOT))
            plugin = {
                "version": "1",
                "mcp_servers": [{"id": "soak", "url": f"http://127.0.0.1:{mcp_port}/mcp", "tools": ["run"]}],
                "agent": {"max_rounds": 4},
            }
            (tmp / "plugin.yaml").write_text(yaml.safe_dump(plugin))
            config = {
                "database_url": db_url,
                "master_key_file": str(tmp / "master.key"),
                "providers": [{"id": "up", "base_url": f"http://127.0.0.1:{up_port}/v1"}],
                "models": [{"name": "soak-agent", "provider": "up", "upstream_model": "soak-model"}],
                "routing_rules": [
                    {"name": "soak", "match": {"model": "soak-agent"}, "plugin": "plugin.yaml"}
                ],
            }
            (tmp / "hatchway.yaml").write_text(yaml.safe_dump(config))
            key = asyncio.run(bench_key(db_url))
            serve = ["hatchway", "serve", "--config", "hatchway.yaml", "--port", str(gw_port)]
            gateway = _spawn([sys.executable, "-m", *serve, "--log-level", "warning"], tmp / "gw.log", tmp)
            procs.append(gateway)
            wait_http(f"http://127.0.0.1:{up_port}/", 30)
            wait_http(f"http://127.0.0.1:{mcp_port}/mcp", 30)
            wait_http(f"http://127.0.0.1:{gw_port}/healthz", 60)
            print(f"soak: {clients} clients × {minutes:g} min on PostgreSQL ({name})", flush=True)
            tally = asyncio.run(_load(gw_port, gateway.pid, key, clients, minutes * 60))
            gateway.send_signal(signal.SIGTERM)  # a graceful stop flushes the log writer
            gateway.wait(timeout=60)
            stored = _stored_ids(db_url)
            executed = collections.Counter(ledger.read_text().split())
            report(tally, stored, executed, minutes)
            errors = (tmp / "gw.log").read_text(errors="replace")
            tracebacks = errors.count("Traceback")
            print(f"gateway log: {len(errors.splitlines())} lines, {tracebacks} tracebacks")
            for line in [*errors.splitlines()[:10], *tally.failures[:10]]:
                print("  " + line[:300])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
        _admin(database_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def report(tally: Tally, stored: set[str], executed: collections.Counter[str], minutes: float) -> None:
    total = sum(tally.statuses.values())
    ok = len(tally.answered)
    lost = [rid for rid in tally.answered if rid not in stored]
    twice = [t for t, n in executed.items() if n > 1]
    never = [t for t in tally.answered.values() if t not in executed]
    warm = [s for s in tally.samples if s[0] >= 60] or tally.samples
    first, last = warm[0], tally.samples[-1]
    lat = tally.latencies_ms or [0.0]
    figures = {
        "requests": total,
        "answered_200": ok,
        "statuses": dict(tally.statuses),
        "rate_per_s": round(total / (minutes * 60), 1),
        "latency_ms_p50_p99": [round(percentile(lat, 50), 1), round(percentile(lat, 99), 1)],
        "lost_records": len(lost),
        "tools_run_twice": len(twice),
        "answered_tool_never_ran": len(never),
        "rss_mib_warm_end_drift": [round(first[1], 1), round(last[1], 1), round(last[1] - first[1], 1)],
        "fds_warm_end_max": [first[2], last[2], max(s[2] for s in tally.samples)],
    }
    for name, value in figures.items():
        print(f"{name:<26} {json.dumps(value)}")


def main() -> None:
    if sys.argv[1:2] == ["upstream"]:
        return serve_upstream(int(sys.argv[2]), 0.020)
    if sys.argv[1:2] == ["mcp"]:
        return serve_mcp(int(sys.argv[2]), 0.020, Path(sys.argv[3]))
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--clients", type=int, default=48)
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--database-url", default=os.environ.get("HATCHWAY_TEST_DATABASE_URL", ""))
    args = parser.parse_args()
    if not args.database_url.startswith("postgresql"):
        parser.error("a PostgreSQL --database-url (or HATCHWAY_TEST_DATABASE_URL) is required")
    soak(args.clients, args.minutes, args.database_url)


if __name__ == "__main__":
    main()
