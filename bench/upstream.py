"""A fixed-latency OpenAI-compatible upstream for benchmarks: one canned completion (JSON, even to a
request that asks for a stream) after exactly ``--latency-ms``.

    python -m bench.upstream --port 9100 --latency-ms 20

It is ``hatchway.demo.upstream.ScriptedUpstream`` (raw ASGI) with a ``decide`` that returns the same
raw body every time: the completion is serialised once, so a request costs reading and parsing its
body and one wait, and the benchmark measures the gateways, not this.
"""

from __future__ import annotations

import argparse
from typing import Any

from bench.asgi import serve
from hatchway.demo.upstream import Reply, ScriptedUpstream, completion, json_bytes

MODEL = "bench-model"
ANSWER = Reply("ok", prompt_tokens=10, completion_tokens=1)


def make_app(latency_s: float) -> ScriptedUpstream:
    canned = Reply(raw_body=json_bytes(completion(ANSWER, MODEL)), delay=latency_s)

    def decide(_: dict[str, Any]) -> Reply:
        return canned

    return ScriptedUpstream(decide, model=MODEL)


def main() -> None:
    parser = argparse.ArgumentParser(description="A fixed-latency OpenAI-compatible upstream.")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    args = parser.parse_args()
    serve(make_app(args.latency_ms / 1000), args.port)


if __name__ == "__main__":
    main()
