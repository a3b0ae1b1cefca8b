"""Two versions of the gateway side by side at concurrency 1, as `make bench` measures it (wrk).

    python -m bench.ab OTHER_SRC [--rounds 6] [--seconds 4] [--latency-ms 20]

Starts the fixed-latency upstream, make bench's agent-loop upstream and MCP tool servers, and two
`hatchway serve` in make bench's configuration: this checkout's and the one whose ``src`` is
``OTHER_SRC`` (e.g. a `git worktree` of another commit). Then, after make bench's warm-up (wrk at
concurrency 64, ``--warm-seconds`` per target), ``--rounds`` rounds of one wrk run
per target (direct, other, this), in alternating order, so that the machine's drift lands on all
three alike; prints each round's added p50 and the median. A single `make bench` reads concurrency 1
once, and on a small VM that figure moves by ±0.15 ms between runs of the same code: this tells
whether a change moved it.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from bench.common import ROOT, add_agentic, passthrough_settings
from bench.load import Target, wrk
from bench.run import BODY
from bench.stack import Server, Stack, start_mcp_tool, start_rounds_upstream, start_serve, start_upstream


def _gateway(
    stack: Stack, name: str, src: Path, upstream: Server, rounds: Server, mcp: list[Server]
) -> Target:
    config = passthrough_settings("", upstream.base)
    del config["database_url"]  # its own SQLite (``start_serve``)
    plugins = stack.tmp / f"{name}-plugins"
    plugins.mkdir()
    add_agentic(config, plugins, rounds.base, mcp[0].base, mcp[1].base)
    key = start_serve(stack, name, config, src)
    return Target(name, f"{stack.servers[name].base}/v1/chat/completions", f"Bearer {key}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__)
    parser.add_argument("other_src", type=Path, help="the other version's src directory")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=4.0, help="one wrk run")
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--warm-seconds", type=float, default=2.0, help="wrk c=64 first, as make bench does")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        stack = Stack(Path(tmp))
        try:
            upstream = start_upstream(stack, "upstream", args.latency_ms)
            rounds = start_rounds_upstream(stack, args.latency_ms, 500.0)
            mcp = [start_mcp_tool(stack, "mcp-20ms", 20.0), start_mcp_tool(stack, "mcp-200ms", 200.0)]
            targets = [
                Target("direct", f"{upstream.base}/v1/chat/completions"),
                _gateway(stack, "other", args.other_src.resolve(), upstream, rounds, mcp),
                _gateway(stack, "this", ROOT / "src", upstream, rounds, mcp),
            ]
            for target in targets:
                wrk(target, BODY, connections=64, seconds=args.warm_seconds)
            p50: dict[str, list[float]] = {t.name: [] for t in targets}
            for n in range(args.rounds):
                for target in targets if n % 2 == 0 else targets[::-1]:
                    p50[target.name].append(wrk(target, BODY, connections=1, seconds=args.seconds)["p50"])
        finally:
            stack.close()
    for name in ("other", "this"):
        added = [through - direct for through, direct in zip(p50[name], p50["direct"], strict=True)]
        shown = " ".join(f"{a:+.2f}" for a in added)
        print(f"{name:<6} added p50 per round (ms): {shown}   median {statistics.median(added):+.2f}")
    print(f"direct p50 per round (ms): {' '.join(f'{d:.2f}' for d in p50['direct'])}")


if __name__ == "__main__":
    main()
