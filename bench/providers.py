"""What a provider and a fallback cost on the pass-through hot path, at concurrency 1.

    python -m bench.providers [--requests 600] [--latency-ms 20] [--json PATH]

Two fixed-latency upstreams (``bench.upstream``): one OpenAI-shaped (``/v1/chat/completions``), one
Anthropic-shaped (``/v1/messages``), and a third answering 429 at once. Then, each its own
``hatchway serve`` (one worker, SQLite), every gateway called with the same Chat Completions body
through the official wire (an httpx client, keep-alive):

- ``openai``: a model on the OpenAI-shaped upstream (``type: openai``), the ``make bench`` path;
- ``anthropic``: the same model on the Anthropic-shaped one (``type: anthropic``: the body mapped to
  Messages, the answer back to Chat Completions);
- ``fallback, unused``: a model with ``fallbacks`` whose own target answers (the failover wrapper's
  cost alone);
- ``fallback, taken``: its target answers 429 at once, so every call is one failed attempt and then
  the fallback (``failover.retries: 0``: no backoff in the figure; its circuit never opens);
- ``fallback (circuit open)``: the same with the default breaker: after five 429s the target is
  skipped, so a call goes to the fallback without trying it.

Each gateway's added p50 is against calling its upstream directly (``direct, openai`` /
``direct, anthropic``, with that upstream's own body), all requests one to each target in turn, so a
drift of the machine's speed falls on all alike. About 60 s at the defaults on 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

import httpx

from bench.common import percentile
from bench.limits import Target, interleaved
from bench.passthrough import BODY
from bench.stack import Server, Stack, running, start_bench_module, start_serve

ANTHROPIC_BODY = json.dumps(
    {"model": "bench-model", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
).encode()


def start_gateway(
    stack: Stack, name: str, providers: list[dict[str, Any]], models: list[dict[str, Any]]
) -> str:
    failover: dict[str, Any] = {"retries": 0}
    if name == "fallback, taken":  # every call tries the target that fails: its circuit never opens
        failover["breaker_failures"] = 1_000_000
    return start_serve(stack, name, {"providers": providers, "models": models, "failover": failover})


def gateways(openai: Server, anthropic: Server, limited: Server) -> dict[str, tuple[list, list]]:
    """name → (providers, models) of each gateway; every one serves the public model ``bench``."""
    up = {"id": "up", "base_url": f"{openai.base}/v1"}
    primary = {
        "name": "bench",
        "provider": "limited",
        "upstream_model": "bench-model",
        "fallbacks": ["spare"],
    }
    spare = {"name": "spare", "provider": "up", "upstream_model": "bench-model"}
    taken = ([up, {"id": "limited", "base_url": f"{limited.base}/v1"}], [primary, spare])
    return {
        "openai": ([up], [{"name": "bench", "provider": "up", "upstream_model": "bench-model"}]),
        "anthropic": (
            [{"id": "claude", "type": "anthropic", "base_url": f"{anthropic.base}/v1"}],
            [{"name": "bench", "provider": "claude", "upstream_model": "bench-model"}],
        ),
        "fallback, unused": (
            [up],
            [
                {"name": "bench", "provider": "up", "upstream_model": "bench-model", "fallbacks": ["spare"]},
                {"name": "spare", "provider": "up", "upstream_model": "bench-model"},
            ],
        ),
        "fallback, taken": taken,
        "fallback (circuit open)": taken,
    }


BASELINE = {"openai": "direct, openai", "anthropic": "direct, anthropic"}


def measure(requests: int, latency_ms: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hatchway-bench-") as tmp, running(Path(tmp)) as stack:
        latency = ["--latency-ms", str(latency_ms)]
        openai = start_bench_module(stack, "openai upstream", "upstream", latency, "/")
        anthropic = start_bench_module(
            stack, "anthropic upstream", "upstream", [*latency, "--shape", "anthropic"], "/"
        )
        limited = start_bench_module(
            stack, "429 upstream", "upstream", ["--latency-ms", "0", "--status", "429"], "/"
        )
        json_headers = {"content-type": "application/json"}
        targets: dict[str, Target] = {
            "direct, openai": (f"{openai.base}/v1/chat/completions", json_headers),
            "direct, anthropic": (f"{anthropic.base}/v1/messages", json_headers, ANTHROPIC_BODY),
        }
        for name, (providers, models) in gateways(openai, anthropic, limited).items():
            key = start_gateway(stack, name, providers, models)
            url = f"{stack.servers[name].base}/v1/chat/completions"
            headers = {"authorization": f"Bearer {key}", **json_headers}
            body = json.loads(BODY)
            check = httpx.post(url, json=body | {"model": "bench"}, headers=headers, timeout=30)
            check.raise_for_status()
            targets[name] = (url, headers, json.dumps(body | {"model": "bench"}).encode())
        samples = asyncio.run(interleaved(targets, requests, warmup=30))
    out: dict[str, Any] = {"requests": requests, "upstream_latency_ms": latency_ms, "targets": {}}
    for name, s in samples.items():
        baseline = None if name.startswith("direct") else BASELINE.get(name, "direct, openai")
        figures = {"p50_ms": percentile(s, 50), "p99_ms": percentile(s, 99), "vs": baseline}
        if baseline is not None:
            figures["added_p50_ms"] = figures["p50_ms"] - percentile(samples[baseline], 50)
        out["targets"][name] = figures
    return out


def report(result: dict[str, Any]) -> None:
    print(
        f"POST /v1/chat/completions, concurrency 1, {result['requests']} requests per target, one to each in "
        f"turn, upstream latency {result['upstream_latency_ms']:g} ms"
    )
    print(f"{'target':<24} {'p50 ms':>8} {'p99 ms':>8} {'added p50':>10}  vs")
    for name, f in result["targets"].items():
        added = f"{f['added_p50_ms']:+.3f}" if "added_p50_ms" in f else ""
        print(f"{name:<24} {f['p50_ms']:>8.2f} {f['p99_ms']:>8.2f} {added:>10}  {f['vs'] or ''}")
    base = result["targets"]["openai"]["p50_ms"]
    for name in ("anthropic", "fallback, unused", "fallback, taken", "fallback (circuit open)"):
        print(f"  {name}: {result['targets'][name]['p50_ms'] - base:+.3f} ms p50 against the openai gateway")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    result = measure(args.requests, args.latency_ms)
    report(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
