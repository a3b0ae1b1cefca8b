"""Profile and measure the chat-completions hot path (a developer tool, not part of `make bench`).

    python -m bench.profile_hot [--requests 2000] [--wrk-seconds 10] [--profile out.svg|out.speedscope]
                                [--agentic]

Starts the fixed-latency upstream and `hatchway serve` (one worker, optionally under `py-spy record`),
then measures: c=1 added latency (httpx client, sequential, direct vs through), c=64 throughput and
latency with wrk (if installed), and the serving process's RSS (after start, after c=1, after the
load; peak as VmHWM) and start-up time. ``--agentic`` serves make bench's configuration (two MCP
plugins bound by routing rules, so the MCP SDK loads at start; none of them is called here).
With ``PYTHONPATH=<another checkout>/src`` the gateway measured is that checkout's (the upstream
stays this one's), to compare two versions of the hot path on one machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import yaml

from bench.common import (
    ROOT,
    add_agentic,
    bench_key,
    free_port,
    passthrough_settings,
    process,
    python,
    summary,
    wait_http,
)
from bench.passthrough import BODY

WRK_SCRIPT = """
wrk.method = "POST"
wrk.body = '{body}'
wrk.headers["content-type"] = "application/json"
wrk.headers["authorization"] = "Bearer {key}"
"""


CPROFILE = """
import cProfile, contextlib, signal, sys
from hatchway.cli import main
# uvicorn re-raises the SIGTERM it stopped on once it is done; exit normally instead, to write the profile
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
sys.argv[0] = "hatchway"
profile = cProfile.Profile()
profile.enable()
with contextlib.suppress(SystemExit):  # the CLI exits through sys.exit
    main()
profile.disable()
profile.dump_stats("{out}")
"""


def _vm(pid: int, field: str) -> float:
    text = Path(f"/proc/{pid}/status").read_text()
    match = re.search(rf"^{field}:\s+(\d+) kB", text, re.M)
    return int(match.group(1)) / 1024 if match else float("nan")


async def _interleaved(
    direct: str, through: str, headers: dict[str, str], n: int, warmup: int = 50
) -> tuple[list[float], list[float]]:
    """Concurrency 1, alternating one request direct and one through the gateway, so both series see
    the same machine (other processes come and go on a shared box); latencies in ms."""
    out: tuple[list[float], list[float]] = ([], [])
    async with httpx.AsyncClient(timeout=30.0) as a, httpx.AsyncClient(timeout=30.0) as b:
        for i in range(warmup + n):
            for series, client, url, hdrs in ((0, a, direct, {}), (1, b, through, headers)):
                started = time.perf_counter()
                response = await client.post(url, content=BODY, headers=hdrs)
                elapsed = (time.perf_counter() - started) * 1000
                response.raise_for_status()
                if i >= warmup:
                    out[series].append(elapsed)
    return out


def _pcts(s: dict[str, float]) -> str:
    return f"p50 {s['p50']:.2f} p90 {s['p90']:.2f} p99 {s['p99']:.2f}"


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _spy(pid: int, output: str) -> subprocess.Popen[bytes]:
    """py-spy attached to the serving process until SIGINT; ``.txt`` gives collapsed stacks."""
    fmt = {".speedscope": "speedscope", ".txt": "raw"}.get(Path(output).suffix, "flamegraph")
    spy = str(Path(python()).parent / "py-spy")
    native = ["--native"] if os.environ.get("SPY_NATIVE") else []  # C frames: syscalls, uvloop
    # SPY_NONBLOCKING: sample without stopping the process (at concurrency 1, stopping it at a high
    # SPY_RATE made each request several times slower than what was being measured)
    nonblocking = ["--nonblocking"] if os.environ.get("SPY_NONBLOCKING") else []
    args = [spy, "record", *nonblocking, "-r", os.environ.get("SPY_RATE", "250"), *native, "-f", fmt]
    args += ["-o", str(Path(output).resolve())]
    args += ["--pid", str(pid)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # let it attach before the load starts
    return proc


def _wrk(url: str, key: str, connections: int, seconds: int, tmp: Path) -> tuple[str, int]:
    script = tmp / "post.lua"
    script.write_text(WRK_SCRIPT.format(body=BODY.decode(), key=key))
    threads = f"-t{min(2, connections)}"  # wrk refuses more threads than connections (c=1)
    out = subprocess.run(
        ["wrk", threads, f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(script), url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    pcts = dict(re.findall(r"^\s+(50|90|99)%\s+(\S+)", out, re.M))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    total = re.search(r"(\d+) requests in", out)
    return (
        f"c={connections}: {rps.group(1) if rps else '?'} req/s, p50 {pcts.get('50')}, p90 {pcts.get('90')}, "
        f"p99 {pcts.get('99')}, non-2xx {non2xx.group(1) if non2xx else 0}"
        + (f", socket errors {errors.group(1)}" if errors else ""),
        int(total.group(1)) if total else 1,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--wrk-seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--profile", help="py-spy output file (.svg flame graph or .speedscope)")
    parser.add_argument("--wrap", help="a script that starts the gateway's CLI (e.g. with instrumentation)")
    parser.add_argument("--cprofile", help="run the gateway under cProfile, writing this .prof file")
    parser.add_argument("--floor", action="store_true", help="measure bench/profile_floor.py instead")
    parser.add_argument("--floor-client", choices=("aiohttp", "httpx", "hatchway"), default="aiohttp")
    parser.add_argument("--agentic", action="store_true", help="make bench's configuration, plugins bound")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        up_port, gw_port = free_port(), free_port()
        db_url = f"sqlite+aiosqlite:///{tmp / 'bench.db'}"
        config = tmp / "hatchway.yaml"
        settings = passthrough_settings(db_url, f"http://127.0.0.1:{up_port}")
        if args.agentic:  # nothing listens there: no request of this script reaches them
            add_agentic(settings, tmp, "http://127.0.0.1:9", "http://127.0.0.1:9", "http://127.0.0.1:9")
        config.write_text(yaml.safe_dump(settings))
        key = asyncio.run(bench_key(db_url))
        paths = [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([*paths, str(ROOT)])}  # another checkout first
        # The upstream is this checkout's whatever gateway is measured (it imports hatchway.demo.upstream).
        own = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "src")])}
        upstream = [python(), "-m", "bench.upstream", "--port", str(up_port)]
        upstream += ["--latency-ms", str(args.latency_ms)]
        gateway = [python(), "-m", "hatchway", "serve", "--config", str(config), "--port", str(gw_port)]
        gateway += ["--log-level", "warning"]
        if args.cprofile:
            gateway = [python(), "-c", CPROFILE.format(out=Path(args.cprofile).resolve()), *gateway[3:]]
        if args.wrap:
            gateway = [python(), str(Path(args.wrap).resolve()), *gateway[3:]]
        if args.floor:
            floor = [str(Path(args.wrap).resolve())] if args.wrap else ["-m", "bench.profile_floor"]
            gateway = [python(), *floor, "--port", str(gw_port), "--client", args.floor_client]
            gateway += ["--upstream", f"http://127.0.0.1:{up_port}/v1"]
        with process(upstream, cwd=ROOT, env=own):
            wait_http(f"http://127.0.0.1:{up_port}/")
            started = time.monotonic()
            with process(gateway, cwd=tmp, env=env) as gw:
                wait_http(f"http://127.0.0.1:{gw_port}/healthz")
                print(f"start-up to /healthz: {time.monotonic() - started:.2f} s")
                pid = gw.pid
                print(f"RSS after start: {_vm(pid, 'VmRSS'):.1f} MiB")
                spy = _spy(pid, args.profile) if args.profile else None
                cpu = _cpu_seconds(pid)
                time.sleep(2.0)
                print(f"idle CPU: {(_cpu_seconds(pid) - cpu) / 2 * 100:.1f} %")
                url = f"http://127.0.0.1:{gw_port}/v1/chat/completions"
                headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
                if args.requests:
                    cpu = _cpu_seconds(pid)
                    direct_ms, through_ms = asyncio.run(
                        _interleaved(
                            f"http://127.0.0.1:{up_port}/v1/chat/completions", url, headers, args.requests
                        )
                    )
                    cpu_ms = (_cpu_seconds(pid) - cpu) * 1000 / (args.requests + 50)
                    print(f"c=1 gateway CPU per request: {cpu_ms:.3f} ms")
                    direct, through = summary(direct_ms), summary(through_ms)
                    print("c=1 through: " + _pcts(through))
                    print("c=1 direct:  " + _pcts(direct))
                    added = " ".join(f"{q} {through[q] - direct[q]:.2f}" for q in ("p50", "p90", "p99"))
                    print("c=1 added:   " + added)
                    print(f"RSS after c=1: {_vm(pid, 'VmRSS'):.1f} MiB")
                if args.wrk_seconds and shutil.which("wrk"):
                    cpu = _cpu_seconds(pid)
                    line, total = _wrk(url, key, args.connections, args.wrk_seconds, tmp)
                    print(
                        line + f", gateway CPU per request {(_cpu_seconds(pid) - cpu) * 1000 / total:.3f} ms"
                    )
                rss, peak = _vm(pid, "VmRSS"), _vm(pid, "VmHWM")
                print(f"RSS after load: {rss:.1f} MiB, peak RSS (VmHWM): {peak:.1f} MiB")
                if spy is not None:
                    spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
                    spy.wait(timeout=60)


if __name__ == "__main__":
    main()
