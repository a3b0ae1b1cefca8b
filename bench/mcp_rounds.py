"""The agent loop's own overhead per tool round: total time − model time − tool time.

    python -m bench.mcp_rounds [--requests 300] [--model-latency-ms 20] [--tool-latency-ms 20]

Starts, as separate processes on loopback, a scripted two-round upstream (round 1 asks for one MCP
tool call, round 2 answers; each response takes exactly --model-latency-ms), a fixed-latency MCP
server built with the official SDK (--tool-latency-ms), and `hatchway serve` with a routing rule
binding a plugin to that server. Requests are sent one after the other (concurrency 1):

- "agent" requests run two model rounds and one MCP tool call;
- "plain" requests (no plugin) run one model round.

Printed: client-side latency percentiles; the overhead of an agent request seen from outside
(total − 2 × model latency − tool latency); the cost of the tool round alone (agent − plain −
model latency − tool latency); and the gateway's own view from its run records (latency minus the
model and tool durations it measured, i.e. the loop's bookkeeping without the network hops).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
from pathlib import Path

import httpx
import yaml

from bench.common import ROOT, bench_key, free_port, process, python, sequential_latencies, summary, wait_http


def _body(model: str) -> bytes:
    return json.dumps({"model": model, "messages": [{"role": "user", "content": "look it up"}]}).encode()


def _write_config(tmp: Path, up_port: int, mcp_port: int) -> tuple[Path, str]:
    db_url = f"sqlite+aiosqlite:///{tmp / 'bench.db'}"
    plugin = {
        "version": "1",
        "mcp_servers": [{"id": "bench", "url": f"http://127.0.0.1:{mcp_port}/mcp", "tools": ["lookup"]}],
        "agent": {"max_rounds": 4},
    }
    (tmp / "plugin.yaml").write_text(yaml.safe_dump(plugin))
    config = {
        "database_url": db_url,
        "providers": [{"id": "up", "base_url": f"http://127.0.0.1:{up_port}/v1"}],
        "models": [
            {"name": "bench-agent", "provider": "up", "upstream_model": "tools"},
            {"name": "bench-plain", "provider": "up", "upstream_model": "plain"},
        ],
        "routing_rules": [{"name": "bench", "match": {"model": "bench-agent"}, "plugin": "plugin.yaml"}],
    }
    path = tmp / "hatchway.yaml"
    path.write_text(yaml.safe_dump(config))
    return path, db_url


def _loop_overheads(gw_url: str, key: str, n: int) -> list[float]:
    """From the run records: latency − Σ model_call − Σ tool_call durations, per agent request."""
    out: list[float] = []
    after = None
    with httpx.Client(timeout=30) as client:
        while len(out) < n:
            params = {"has_tool_calls": "true", "limit": 200, **({"after": after} if after else {})}
            page = client.get(f"{gw_url}/v1/logs", params=params, headers={"authorization": f"Bearer {key}"})
            page.raise_for_status()
            data = page.json()
            for record in data["data"]:
                steps = record["steps"]
                model = sum(s["duration_ms"] for s in steps if s["type"] == "model_call")
                tools = sum(s["duration_ms"] for s in steps if s["type"] == "tool_call")
                out.append(record["latency_ms"] - model - tools)
            if not data["has_more"]:
                break
            after = data["last_id"]
    return out[:n]


def measure(requests: int, model_latency_ms: float, tool_latency_ms: float) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        up_port, mcp_port, gw_port = free_port(), free_port(), free_port()
        config, db_url = _write_config(tmp, up_port, mcp_port)
        key = asyncio.run(bench_key(db_url))
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        upstream = [
            python(),
            "-m",
            "bench.rounds_upstream",
            "--port",
            str(up_port),
            "--latency-ms",
            str(model_latency_ms),
        ]
        mcp = [
            python(),
            "-m",
            "bench.mcp_tool_server",
            "--port",
            str(mcp_port),
            "--latency-ms",
            str(tool_latency_ms),
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
        headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
        url = f"http://127.0.0.1:{gw_port}/v1/chat/completions"
        with (
            process(upstream, cwd=ROOT, env=env),
            process(mcp, cwd=ROOT, env=env),
            process(gateway, cwd=tmp, env=env),
        ):
            wait_http(f"http://127.0.0.1:{up_port}/")
            wait_http(f"http://127.0.0.1:{mcp_port}/mcp")
            wait_http(f"http://127.0.0.1:{gw_port}/healthz")
            warmup = min(20, requests)
            plain = asyncio.run(sequential_latencies(url, _body("bench-plain"), headers, requests, warmup))
            agent = asyncio.run(sequential_latencies(url, _body("bench-agent"), headers, requests, warmup))
            loop_view = _loop_overheads(f"http://127.0.0.1:{gw_port}", key, requests)
    a, p = summary(agent), summary(plain)
    outside = [t - 2 * model_latency_ms - tool_latency_ms for t in agent]
    return {
        "requests": requests,
        "model_latency_ms": model_latency_ms,
        "tool_latency_ms": tool_latency_ms,
        "agent": a,
        "plain": p,
        "overhead_agent_request": summary(outside),
        "tool_round_cost_p50_ms": a["p50"] - p["p50"] - model_latency_ms - tool_latency_ms,
        "loop_bookkeeping": summary(loop_view),
    }


def print_table(result: dict[str, object]) -> None:
    print(
        f"agent loop, concurrency 1, {result['requests']} requests each; model latency "
        f"{result['model_latency_ms']} ms per round, MCP tool latency {result['tool_latency_ms']} ms"
    )
    print(f"{'':<44} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8}")
    rows = (
        ("plain request (1 model round)", result["plain"]),
        ("agent request (2 model rounds + 1 MCP call)", result["agent"]),
        ("overhead of agent request (total-model-tool)", result["overhead_agent_request"]),
        ("loop bookkeeping (from the run records)", result["loop_bookkeeping"]),
    )
    for name, s in rows:
        print(f"{name:<44} {s['p50']:>8.2f} {s['p90']:>8.2f} {s['p99']:>8.2f}")  # type: ignore[index]
    cost = result["tool_round_cost_p50_ms"]
    print(f"cost of one tool round beyond its model and tool time (p50): {cost:.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--model-latency-ms", type=float, default=20.0)
    parser.add_argument("--tool-latency-ms", type=float, default=20.0)
    args = parser.parse_args()
    print_table(measure(args.requests, args.model_latency_ms, args.tool_latency_ms))


if __name__ == "__main__":
    main()
