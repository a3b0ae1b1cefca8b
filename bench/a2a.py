"""What the A2A adapter adds (docs/a2a.md): a blocking A2A ``SendMessage`` (JSON-RPC) to a
published agent against the same agent called as a plain Responses request (``POST /v1/responses``,
``model: agent:helper``), one request after the other, interleaved, on `hatchway serve` (SQLite) and
an upstream answering at once.

    python -m bench.a2a [--requests 400] [--rounds 3]

Prints p50/p99 of each and the difference at p50 (the target is ≤ 1 ms). An A2A task is a stored
background response that the call waits for: what it adds is the SDK's JSON-RPC and protobuf
handling, the task's row (written with the response, in its transaction), the background run's task
and the wait on its events, and the Task built from the run as it ended. About 30 s.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import httpx
import yaml

from bench.common import bench_key, free_port, passthrough_settings, process, python, summary, wait_http

TARGET_MS = 1.0


async def measure(base: str, key: str, requests: int) -> tuple[list[float], list[float]]:
    headers = {"authorization": f"Bearer {key}", "a2a-version": "1.0"}
    plain = {"model": "agent:helper", "input": "hi"}
    a2a_body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}},
    }
    responses, tasks = [], []
    async with httpx.AsyncClient(timeout=30.0) as client:

        async def once(url: str, body: dict[str, object]) -> float:
            started = time.perf_counter()
            answer = await client.post(url, json=body, headers=headers)
            elapsed = (time.perf_counter() - started) * 1000
            answer.raise_for_status()
            if answer.json().get("error"):
                raise RuntimeError(answer.text)
            return elapsed

        for _ in range(50):  # warm-up
            await once(f"{base}/v1/responses", plain)
            await once(f"{base}/a2a/helper", a2a_body)
        for _ in range(requests):
            responses.append(await once(f"{base}/v1/responses", plain))
            tasks.append(await once(f"{base}/a2a/helper", a2a_body))
    return responses, tasks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-a2a-") as tmp:
        upstream_port, gateway_port = free_port(), free_port()
        database_url = f"sqlite+aiosqlite:///{Path(tmp) / 'h.db'}"
        config = passthrough_settings(database_url, f"http://127.0.0.1:{upstream_port}")
        config["master_key_file"] = str(Path(tmp) / "master.key")
        config["agents"] = [{"name": "helper", "model": "bench", "a2a": {"publish": True}}]
        (Path(tmp) / "hatchway.yaml").write_text(yaml.safe_dump(config))
        key = asyncio.run(bench_key(database_url))
        upstream = [python(), "-m", "bench.upstream", "--port", str(upstream_port), "--latency-ms", "0"]
        serve = [python(), "-m", "hatchway", "serve", "--config", str(Path(tmp) / "hatchway.yaml")]
        with process(upstream), process([*serve, "--port", str(gateway_port), "--log-level", "warning"]):
            base = f"http://127.0.0.1:{gateway_port}"
            wait_http(f"http://127.0.0.1:{upstream_port}/v1/models")
            wait_http(f"{base}/healthz")
            best: tuple[dict[str, float], dict[str, float]] | None = None
            for round_ in range(args.rounds):
                plain, a2a = (summary(s) for s in asyncio.run(measure(base, key, args.requests)))
                added = a2a["p50"] - plain["p50"]
                print(
                    f"round {round_ + 1}: Responses p50 {plain['p50']:.2f} ms p99 {plain['p99']:.2f} | "
                    f"A2A SendMessage p50 {a2a['p50']:.2f} ms p99 {a2a['p99']:.2f} | "
                    f"added p50 {added:+.2f} ms"
                )
                if best is None or added < best[1]["p50"] - best[0]["p50"]:
                    best = (plain, a2a)
    assert best is not None
    added = best[1]["p50"] - best[0]["p50"]
    verdict = "PASS" if added <= TARGET_MS else "FAIL"
    print(f"A2A adapter added p50 (best of {args.rounds} rounds): {added:+.2f} ms")
    print(f"target ≤ {TARGET_MS} ms: {verdict}")


if __name__ == "__main__":
    main()
