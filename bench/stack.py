"""The processes `make bench` measures, each on its own loopback port: upstreams, MCP tool servers,
Hatchway (`hatchway serve`, one worker, SQLite) and LiteLLM's proxy (its own venv, one worker).

Every process is started with its stdout/stderr in a log file of the run's temp directory, and its
peak resident memory (VmHWM of the process and its children, from /proc) can be read while it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from bench.common import ROOT, add_agentic, bench_key, free_port, passthrough_settings, wait_http

BENCH = ROOT / "bench"
LITELLM_VERSION = "1.108.7"
LITELLM_VENV = BENCH / ".litellm-venv"
LITELLM_KEY = "sk-bench-litellm"


@dataclass
class Server:
    name: str
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def pids(self) -> list[int]:
        """The process and all its descendants."""
        out, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            out.append(pid)
            for task in Path(f"/proc/{pid}/task").glob("*"):
                with contextlib.suppress(OSError):
                    todo.extend(int(c) for c in (task / "children").read_text().split())
        return out

    def peak_rss_mib(self) -> float:
        """Σ VmHWM (peak resident set) over the process and its children, in MiB."""
        total_kib = 0
        for pid in self.pids():
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        total_kib += int(line.split()[1])
        return total_kib / 1024

    def cpu_seconds(self) -> float:
        """user + system CPU time used so far by the process and its children."""
        ticks = os.sysconf("SC_CLK_TCK")
        total = 0
        for pid in self.pids():
            with contextlib.suppress(OSError):
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])  # utime, stime
        return total / ticks


@dataclass
class Stack:
    tmp: Path
    servers: dict[str, Server] = field(default_factory=dict)
    hatchway_key: str = ""
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def start(
        self,
        name: str,
        args: list[str],
        *,
        port: int,
        health: str,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 60.0,
    ) -> Server:
        log = self.tmp / f"{name}.log"
        handle = self._stack.enter_context(log.open("wb"))
        proc = subprocess.Popen(
            args, cwd=cwd or self.tmp, env=env or _env(), stdout=handle, stderr=subprocess.STDOUT
        )
        self._stack.callback(_stop, proc)
        server = Server(name, proc, port, log)
        try:
            _wait_up(server, health, timeout)
        except Exception:
            sys.stderr.write(log.read_text(errors="replace")[-3000:])
            raise
        self.servers[name] = server
        return server

    def close(self) -> None:
        self._stack.close()


def _env(src: Path | None = None) -> dict[str, str]:
    """This environment with the checkout's root importable, behind ``src`` or an inherited
    PYTHONPATH (another checkout's src, as ``profile_hot`` takes it): that is then the hatchway the
    process runs. Replacing PYTHONPATH made ``PYTHONPATH=<other>/src make bench`` measure this one."""
    first = str(src) if src is not None else os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (first, str(ROOT)) if p)}


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _wait_up(server: Server, health: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while server.proc.poll() is None:
        try:
            wait_http(f"{server.base}{health}", timeout=min(1.0, max(0.1, deadline - time.monotonic())))
            return
        except TimeoutError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{server.name} did not come up in {timeout:.0f}s") from None
    raise RuntimeError(f"{server.name} exited with {server.proc.returncode} (log: {server.log})")


# -- the fixed-latency upstreams and MCP tool servers ---------------------------------------------


def start_bench_module(stack: Stack, name: str, module: str, options: list[str], health: str) -> Server:
    """``python -m bench.<module> --port <free port> <options>``, from the checkout's root."""
    port = free_port()
    args = [sys.executable, "-m", f"bench.{module}", "--port", str(port), *options]
    return stack.start(name, args, port=port, health=health, cwd=ROOT)


def start_upstream(stack: Stack, name: str, latency_ms: float) -> Server:
    return start_bench_module(stack, name, "upstream", ["--latency-ms", str(latency_ms)], "/")


def start_rounds_upstream(stack: Stack, latency_ms: float, child_latency_ms: float) -> Server:
    options = ["--latency-ms", str(latency_ms), "--child-latency-ms", str(child_latency_ms)]
    return start_bench_module(stack, "rounds-upstream", "rounds_upstream", options, "/")


def start_mcp_tool(stack: Stack, name: str, latency_ms: float) -> Server:
    return start_bench_module(stack, name, "mcp_tool_server", ["--latency-ms", str(latency_ms)], "/mcp")


# -- Hatchway -------------------------------------------------------------------------------------


def start_hatchway(stack: Stack, upstream: Server, rounds: Server | None, mcp: dict[str, Server]) -> Server:
    """One `hatchway serve` for everything: model ``bench`` passes through to the fixed-latency
    upstream; ``tools-N`` and ``fanout-8`` run MCP tool rounds (routing rules bind the plugins);
    agent ``fan`` (model ``agent:fan``) gets the hosted ``spawn_subagent``."""
    db_url = f"sqlite+aiosqlite:///{stack.tmp / 'hatchway.db'}"
    config = passthrough_settings(db_url, upstream.base)
    if rounds is not None:
        add_agentic(config, stack.tmp, rounds.base, mcp["mcp-20ms"].base, mcp["mcp-200ms"].base)
    path = stack.tmp / "hatchway.yaml"
    path.write_text(yaml.safe_dump(config))
    stack.hatchway_key = asyncio.run(bench_key(db_url))
    port = free_port()
    args = [sys.executable, "-m", "hatchway", "serve", "--config", str(path), "--port", str(port)]
    args += ["--log-level", "warning"]
    return stack.start("hatchway", args, port=port, health="/healthz")


# -- LiteLLM --------------------------------------------------------------------------------------


def litellm_bin() -> Path:
    return LITELLM_VENV / "bin" / "litellm"


def ensure_litellm() -> str:
    """Create bench/.litellm-venv with litellm[proxy] on first use (pip shows its progress);
    return the installed version."""
    python = LITELLM_VENV / "bin" / "python"
    if not litellm_bin().exists():
        print(
            f"installing litellm[proxy]=={LITELLM_VERSION} into {LITELLM_VENV} (first run only)…", flush=True
        )
        subprocess.run([sys.executable, "-m", "venv", str(LITELLM_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--upgrade", "pip"], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", f"litellm[proxy]=={LITELLM_VERSION}"], check=True
        )
    out = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def start_litellm(stack: Stack, upstream: Server, rounds: Server | None, mcp: dict[str, Server]) -> Server:
    """LiteLLM's proxy, one worker, no database: model ``bench`` passes through to the same
    upstream; ``tools-N`` go to the scripted upstream (LiteLLM sends a Responses API request on as
    one to an ``openai/`` model), with the 20 ms MCP tool server as ``mcp_servers.bench`` and the
    200 ms one as ``mcp_servers.fan``."""

    def entry(name: str, server: Server, upstream_model: str) -> dict[str, object]:
        params = {"model": f"openai/{upstream_model}", "api_base": f"{server.base}/v1", "api_key": "sk-up"}
        return {"model_name": name, "litellm_params": params}

    model_list = [entry("bench", upstream, "bench-model")]
    config: dict[str, object] = {
        "model_list": model_list,
        "general_settings": {"master_key": LITELLM_KEY},
        "litellm_settings": {"telemetry": False, "drop_params": True},
    }
    if rounds is not None:
        model_list += [entry(m, rounds, m) for m in ("plain", "tools-1", "tools-3", "fanout-8")]
        config["mcp_servers"] = {
            "bench": {"url": f"{mcp['mcp-20ms'].base}/mcp", "transport": "http"},
            "fan": {"url": f"{mcp['mcp-200ms'].base}/mcp", "transport": "http"},
        }
    path = stack.tmp / "litellm.yaml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    env = {
        **os.environ,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no fetch of the model price list at start
        "LITELLM_TELEMETRY": "False",
        "LITELLM_LOG": "ERROR",
        "DISABLE_SCHEMA_UPDATE": "True",
    }
    env.pop("DATABASE_URL", None)
    args = [str(litellm_bin()), "--config", str(path), "--host", "127.0.0.1", "--port", str(port)]
    args += ["--num_workers", "1"]
    return stack.start("litellm", args, port=port, health="/health/liveliness", env=env, timeout=180)


@contextlib.contextmanager
def running(tmp: Path) -> Iterator[Stack]:
    stack = Stack(tmp)
    try:
        yield stack
    finally:
        stack.close()


def gateway_env(src: Path | None = None) -> dict[str, str]:
    """This environment without the variables that would win over a gateway's hatchway.yaml."""
    env = _env(src)
    for name in ("HATCHWAY_DATABASE_URL", "HATCHWAY_REDIS_URL"):
        env.pop(name, None)
    return env


def start_serve(stack: Stack, name: str, config: dict, src: Path | None = None) -> str:
    """``hatchway serve`` named ``name`` with ``config`` (its own directory and SQLite added), one
    worker, the hatchway of ``src`` if given; returns an API key of a new organisation."""
    home = stack.tmp / "".join(c if c.isalnum() else "-" for c in name)
    home.mkdir()
    db_url = f"sqlite+aiosqlite:///{home / 'hatchway.db'}"
    path = home / "hatchway.yaml"
    path.write_text(yaml.safe_dump({"database_url": db_url, **config}))
    key = asyncio.run(bench_key(db_url))
    port = free_port()
    args = [sys.executable, "-m", "hatchway", "serve", "--config", str(path), "--port", str(port)]
    args += ["--log-level", "warning"]
    stack.start(name, args, port=port, health="/healthz", cwd=home, env=gateway_env(src))
    return key
