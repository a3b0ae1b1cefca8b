"""A fixed-latency OpenAI-compatible upstream for benchmarks: one canned completion (JSON, even to a
request that asks for a stream) after exactly ``--latency-ms``.

    python -m bench.upstream --port 9100 --latency-ms 20 [--shape anthropic] [--status 429]

It is ``hatchway.demo.upstream.ScriptedUpstream`` (raw ASGI) with a ``decide`` that returns the same
raw body every time: the completion is serialised once, so a request costs reading and parsing its
body and one wait, and the benchmark measures the gateways, not this.
"""

from __future__ import annotations

import argparse
from typing import Any

from bench.asgi import serve
from hatchway.demo import vendor_wire
from hatchway.demo.upstream import Reply, ScriptedUpstream, completion, error_body, json_bytes

MODEL = "bench-model"
ANSWER = Reply("ok", prompt_tokens=10, completion_tokens=1)


def make_app(latency_s: float, shape: str = "openai", status: int = 200) -> ScriptedUpstream:
    """``shape``: the canned answer's wire format, ``openai`` (Chat Completions) or ``anthropic``
    (Messages, served at ``/v1/messages``); ``status``: 429 or another error answers that, in the
    shape's error body, every time."""
    if status >= 400:
        error = "rate limited" if status == 429 else "failed"
        body = vendor_wire.anthropic_error(status, error) if shape == "anthropic" else error_body(error)
    else:
        body = (
            vendor_wire.anthropic_message(ANSWER, MODEL)
            if shape == "anthropic"
            else completion(ANSWER, MODEL)
        )
    canned = Reply(raw_body=json_bytes(body), delay=latency_s, status=status)

    def decide(_: dict[str, Any]) -> Reply:
        return canned

    return ScriptedUpstream(decide, model=MODEL, anthropic=shape == "anthropic")


def main() -> None:
    parser = argparse.ArgumentParser(description="A fixed-latency OpenAI-compatible upstream.")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--shape", choices=("openai", "anthropic"), default="openai")
    parser.add_argument(
        "--status", type=int, default=200, help="answer this status every time (429: rate limited)"
    )
    args = parser.parse_args()
    serve(make_app(args.latency_ms / 1000, args.shape, args.status), args.port)


if __name__ == "__main__":
    main()
