"""Hatchway as an MCP server (`mcp_endpoints`): tool calls direct to an MCP server vs through Hatchway.

    python bench/mcp_endpoint.py [--clients 64] [--calls 50] [--protocol 2026-07-28|2025-11-25]
                                 [--warmup 2] [--tool-latency-ms 0]

Starts, as separate processes on loopback, an MCP server built with the official SDK (streamable
HTTP, one tool ``echo(text)``, answering at once unless --tool-latency-ms) and `hatchway serve`
(one worker, SQLite in a temp directory) with one MCP endpoint, ``/mcp/bench``, fronting it. Then
--clients concurrent clients (the official SDK's ``Client``, each with its own HTTP connection pool)
each connect, make --warmup unmeasured calls, wait for the others, and make --calls measured calls
of the tool one after the other: first all of them directly against the server, then all of them
through Hatchway's endpoint (with a Hatchway key as bearer). --protocol 2026-07-28 (the default)
pins the stateless revision; 2025-11-25 opens one session per client (``initialize``,
``Mcp-Session-Id``). Hatchway's own client to the server negotiates by itself (``auto``) whatever the
MCP clients speak, and shares one session per organisation and server among all of them.

Printed: per-call latency p50/p90/p99 and throughput for both, the latency Hatchway adds (p50 and
p99 differences), errors (any exception or ``isError`` result; any at all exits with status 1), the
CPU seconds each process used per phase (and what other processes and the hypervisor took: a note
says when that was enough to lower the figures), the gateway's CPU per call, and its RSS before and
after the load. The clients, the server and the gateway share this machine's cores, and the clients
are a closed loop: at 64 clients the latency is mostly queueing (clients ÷ calls/s); --clients 1
gives the latency one call adds. ``PYTHONPATH=/other/checkout/src`` measures that checkout's gateway.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import resource
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

if not __package__:  # run as a file (python bench/mcp_endpoint.py): make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml

from bench.common import ROOT, bench_key, free_port, summary
from bench.stack import Server, Stack, running

ENDPOINT = "bench"
SERVER_ID = "up"
TOOL = "echo"
PROTOCOLS = {"2026-07-28": "2026-07-28", "2025-11-25": "legacy"}
"""--protocol → the SDK client's ``mode`` (``legacy``: the initialize handshake, 2025-11-25)."""
CALL_TIMEOUT_SECONDS = 30.0


# -- the MCP server (its own process) -------------------------------------------------------------


def serve_upstream(port: int, latency_ms: float) -> None:
    import uvicorn
    from mcp.server import MCPServer

    server = MCPServer("bench-echo", log_level="WARNING")

    @server.tool(description="Echo the text back.")
    async def echo(text: str) -> str:
        if latency_ms > 0:
            await asyncio.sleep(latency_ms / 1000)
        return text

    uvicorn.run(
        server.streamable_http_app(),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=1,
    )


def _env() -> dict[str, str]:
    """The checkout's root on PYTHONPATH, then the caller's own PYTHONPATH (kept, so that
    ``PYTHONPATH=/other/checkout/src`` measures that checkout's gateway)."""
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def start_upstream(stack: Stack, latency_ms: float) -> Server:
    port = free_port()
    args = [sys.executable, "-m", "bench.mcp_endpoint", "--serve-upstream", str(port)]
    args += ["--tool-latency-ms", str(latency_ms)]
    return stack.start("upstream", args, port=port, health="/mcp", cwd=ROOT, env=_env())


def start_hatchway(stack: Stack, upstream: Server) -> Server:
    db_url = f"sqlite+aiosqlite:///{stack.tmp / 'hatchway.db'}"
    plugin = {
        "version": "1",
        "mcp_servers": [{"id": SERVER_ID, "url": f"{upstream.base}/mcp", "tools": [TOOL]}],
    }
    (stack.tmp / "plugin.yaml").write_text(yaml.safe_dump(plugin))
    config = {
        "database_url": db_url,
        "providers": [{"id": "none", "base_url": "http://127.0.0.1:9/v1"}],  # no model is called
        "allow_private_mcp_urls": True,  # the server is on loopback
        "mcp_endpoints": [{"name": ENDPOINT, "plugin": "plugin.yaml"}],
    }
    path = stack.tmp / "hatchway.yaml"
    path.write_text(yaml.safe_dump(config))
    stack.hatchway_key = asyncio.run(bench_key(db_url))
    port = free_port()
    args = [sys.executable, "-m", "hatchway", "serve", "--config", str(path), "--port", str(port)]
    args += ["--log-level", "warning"]
    return stack.start("hatchway", args, port=port, health="/healthz", env=_env())


# -- the clients (this process) -------------------------------------------------------------------


@dataclass
class Phase:
    target: str
    latencies_ms: list[float] = field(default_factory=list)
    errors: collections.Counter[str] = field(default_factory=collections.Counter)
    wall_seconds: float = 0.0
    connect_ms: list[float] = field(default_factory=list)
    cpu_seconds: dict[str, float] = field(default_factory=dict)


def _describe(exc: BaseException) -> str:
    """One line per failure; the leaves of an exception group (the SDK's task groups raise them)."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"[:300]


@dataclass(frozen=True)
class Target:
    name: str
    url: str
    tool: str
    headers: dict[str, str] = field(default_factory=dict)


async def _client(target: Target, args: argparse.Namespace, connected: asyncio.Barrier, phase: Phase) -> None:
    """One MCP client: connect, warm up, wait for every other client, then the measured calls."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def call(i: int, measured: bool) -> None:
        started = time.perf_counter()
        try:
            async with asyncio.timeout(CALL_TIMEOUT_SECONDS):
                result = await client.call_tool(target.tool, {"text": f"ping {i}"})
        except Exception as exc:
            phase.errors[_describe(exc)] += 1
            return
        elapsed = (time.perf_counter() - started) * 1000
        if result.is_error:
            text = " ".join(getattr(c, "text", "") for c in result.content)
            phase.errors[f"isError: {text}"[:300]] += 1
        elif measured:
            phase.latencies_ms.append(elapsed)

    joined = False
    try:
        http = httpx2.AsyncClient(headers=target.headers, timeout=CALL_TIMEOUT_SECONDS)
        transport = streamable_http_client(target.url, http_client=http)
        started = time.perf_counter()
        async with http, Client(transport, mode=PROTOCOLS[args.protocol]) as client:  # type: ignore[arg-type]
            phase.connect_ms.append((time.perf_counter() - started) * 1000)
            if client.protocol_version != args.protocol:
                phase.errors[f"negotiated {client.protocol_version}, not {args.protocol}"] += 1
            for i in range(args.warmup):
                await call(i, measured=False)
            joined = True
            await connected.wait()
            for i in range(args.calls):
                await call(i, measured=True)
    except Exception as exc:
        phase.errors[f"client: {_describe(exc)}"] += 1
    finally:
        if not joined:  # do not leave the others waiting for a client that never got there
            with contextlib.suppress(asyncio.BrokenBarrierError):
                await connected.wait()


async def _phase(target: Target, args: argparse.Namespace, servers: list[Server]) -> Phase:
    phase = Phase(target.name)
    connected = asyncio.Barrier(args.clients + 1)
    tasks = [asyncio.create_task(_client(target, args, connected, phase)) for _ in range(args.clients)]
    await connected.wait()  # every client connected and warmed up: the measured calls start now
    started = time.perf_counter()
    cpu_started = _cpu(servers)
    await asyncio.gather(*tasks)
    phase.wall_seconds = time.perf_counter() - started
    cpu_after = _cpu(servers)
    phase.cpu_seconds = {name: cpu_after[name] - cpu_started[name] for name in cpu_after}
    return phase


def _cpu(servers: list[Server]) -> dict[str, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    ours = {"clients": own.ru_utime + own.ru_stime, **{s.name: s.cpu_seconds() for s in servers}}
    busy, steal = _machine_cpu()
    # What else ran on the machine meanwhile (a test suite, another benchmark), and what the
    # hypervisor took: either makes every figure of the run slower.
    return {**ours, "other processes": busy - sum(ours.values()), "steal": steal}


def _machine_cpu() -> tuple[float, float]:
    """(busy, stolen) CPU seconds of the whole machine since boot, from /proc/stat."""
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0.0, 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    ticks = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq) / ticks, steal / ticks


def _rss_mib(server: Server) -> float:
    """Σ VmRSS (resident now) over the process and its children, in MiB."""
    total_kib = 0
    for pid in server.pids():
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kib += int(line.split()[1])
    return total_kib / 1024


def measure(args: argparse.Namespace) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp, running(Path(tmp)) as stack:
        upstream = start_upstream(stack, args.tool_latency_ms)
        hatchway = start_hatchway(stack, upstream)
        servers = [upstream, hatchway]
        rss_idle = _rss_mib(hatchway)
        direct = asyncio.run(_phase(Target("direct", f"{upstream.base}/mcp", TOOL), args, servers))
        auth = {"authorization": f"Bearer {stack.hatchway_key}"}
        url, tool = f"{hatchway.base}/mcp/{ENDPOINT}", f"{SERVER_ID}__{TOOL}"
        through = asyncio.run(_phase(Target("hatchway", url, tool, auth), args, servers))
        rss_after, rss_peak = _rss_mib(hatchway), hatchway.peak_rss_mib()
        if through.errors:  # what the gateway said about them
            log = hatchway.log.read_text(errors="replace").strip()
            if log:
                print(f"--- hatchway's log (last 3000 characters) ---\n{log[-3000:]}\n---", file=sys.stderr)
    return {"direct": direct, "hatchway": through, "rss": (rss_idle, rss_after, rss_peak)}


def print_table(args: argparse.Namespace, result: dict[str, object]) -> int:
    """Print the figures; 1 when any call failed (each distinct error printed with its count)."""
    direct, through = result["direct"], result["hatchway"]
    assert isinstance(direct, Phase) and isinstance(through, Phase)
    print(
        f"MCP tools/call of {TOOL}, protocol {args.protocol}, {args.clients} concurrent clients × "
        f"{args.calls} calls ({args.warmup} warm-up calls each not counted), "
        f"tool latency {args.tool_latency_ms:g} ms"
    )
    print(
        f"{'target':<10} {'calls':>6} {'calls/s':>8} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} "
        f"{'connect p50':>12} {'errors':>7}"
    )
    stats = {}
    for phase in (direct, through):
        errors = sum(phase.errors.values())
        if not phase.latencies_ms:
            print(f"{phase.target:<10} {0:>6} {'-':>8} {'-':>8} {'-':>8} {'-':>8} {'-':>12} {errors:>7}")
            continue
        s = stats[phase.target] = summary(phase.latencies_ms)
        rate = len(phase.latencies_ms) / phase.wall_seconds
        connect = summary(phase.connect_ms)["p50"] if phase.connect_ms else float("nan")
        print(
            f"{phase.target:<10} {s['n']:>6} {rate:>8.0f} {s['p50']:>8.2f} {s['p90']:>8.2f} "
            f"{s['p99']:>8.2f} {connect:>9.1f} ms {errors:>7}"
        )
    if len(stats) == 2:
        d, h = stats["direct"], stats["hatchway"]
        print(f"added latency: p50 {h['p50'] - d['p50']:.2f} ms, p99 {h['p99'] - d['p99']:.2f} ms")
    for phase in (direct, through):
        cpu = ", ".join(f"{name} {max(seconds, 0):.1f}" for name, seconds in phase.cpu_seconds.items())
        print(f"CPU seconds during the measured {phase.target} calls ({phase.wall_seconds:.1f} s): {cpu}")
        other = phase.cpu_seconds.get("other processes", 0) + phase.cpu_seconds.get("steal", 0)
        if other > 0.1 * phase.wall_seconds * (os.cpu_count() or 1):
            print(f"  note: other processes took {other:.1f} CPU s meanwhile: {phase.target} figures are low")
    if through.latencies_ms:  # what one call costs the gateway, whatever the load and the queueing
        per_call = through.cpu_seconds["hatchway"] * 1000 / len(through.latencies_ms)
        print(
            f"hatchway CPU per call: {per_call:.2f} ms (one worker: at most ~{1000 / per_call:.0f} calls/s)"
        )
    idle, after, peak = result["rss"]  # type: ignore[misc]
    print(f"hatchway RSS: {idle:.0f} MiB at start, {after:.0f} MiB after the load, peak {peak:.0f} MiB")
    failed = False
    for phase in (direct, through):
        for message, count in phase.errors.most_common(10):
            print(f"ERROR ({phase.target}, ×{count}): {message}", file=sys.stderr)
            failed = True
    return 1 if failed else 0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=64, help="concurrent MCP clients (default 64)")
    parser.add_argument("--calls", type=int, default=50, help="measured calls per client (default 50)")
    parser.add_argument("--warmup", type=int, default=2, help="unmeasured calls per client first (default 2)")
    parser.add_argument("--protocol", choices=list(PROTOCOLS), default="2026-07-28")
    parser.add_argument("--tool-latency-ms", type=float, default=0.0, help="the echo tool's own latency")
    parser.add_argument("--serve-upstream", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_upstream is not None:
        serve_upstream(args.serve_upstream, args.tool_latency_ms)
        return
    sys.exit(print_table(args, measure(args)))


if __name__ == "__main__":
    main()
