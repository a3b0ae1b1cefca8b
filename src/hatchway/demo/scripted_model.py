"""The demo's stand-in for an LLM: an OpenAI-compatible ``/v1/chat/completions`` that answers from
``script.decide`` (deterministic, no model weights, no network). Streaming requests get the same
answer as SSE chunks. Every completion names its model ``SCRIPTED_MODEL``.

The wire format is ``hatchway.demo.upstream``'s, the scripted upstream the tests and the benchmarks
use too; this module only turns the script's turns into its replies.

Run alone as the upstream of ``make run`` (examples/hatchway.yaml expects one on port 9000):
``python -m hatchway.demo.scripted_model --port 9000``.
"""

from __future__ import annotations

import argparse
from typing import Any

from hatchway.demo.script import Turn, decide
from hatchway.demo.upstream import Reply, ScriptedUpstream

SCRIPTED_MODEL = "hatchway-demo-scripted"


def reply(turn: Turn) -> Reply:
    """The upstream's reply for one scripted turn (its usage a rough count of the words written)."""
    words = len((turn.text or "").split()) + 8 * len(turn.tool_calls)
    return Reply(
        text=turn.text,
        tool_calls=list(turn.tool_calls),
        delay=turn.delay,
        prompt_tokens=20,
        completion_tokens=words,
    )


def _decide(body: dict[str, Any]) -> Reply:
    return reply(decide(body))


def create_app() -> ScriptedUpstream:
    """The scripted model as an ASGI app (``/v1/chat/completions``, ``/v1/models``)."""
    return ScriptedUpstream(_decide, model=SCRIPTED_MODEL, models=[SCRIPTED_MODEL])


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description="The demo's scripted OpenAI-compatible model (not an LLM).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    args = parser.parse_args(argv)
    print(f"scripted model (deterministic, not an LLM) at http://{args.host}:{args.port}/v1")
    uvicorn.run(create_app(), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
