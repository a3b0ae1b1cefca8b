"""A scripted OpenAI-compatible upstream for the agent-loop benchmarks: chat completions (streamed
or not) and a minimal Responses API, for gateways that call that (LiteLLM does).

    python -m bench.rounds_upstream --port 9101 --latency-ms 20 [--child-latency-ms 500]

What it answers depends on the upstream model named in the request:

- ``tools`` / ``tools-N``: asks for one call of ``bench__lookup`` per response until the conversation
  holds N tool results (``tools`` is ``tools-1``), then answers;
- ``fanout-K``: the first response asks for K calls of ``bench__lookup`` at once, then it answers;
- ``subagents-K``: a conversation whose user says ``fan out`` gets K ``spawn_subagent`` calls at
  once, then an answer; any other conversation is a child and is answered after
  ``--child-latency-ms`` (instead of ``--latency-ms``);
- anything else: answered at once.

Every other response waits exactly ``--latency-ms``, so model time is known exactly. It is
``hatchway.demo.upstream.ScriptedUpstream`` (raw ASGI) with this script as its ``decide``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from bench.asgi import serve
from hatchway.demo.upstream import Reply, ScriptedUpstream, ToolCall

MODEL = "bench-model"
TOKENS = {"prompt_tokens": 10, "completion_tokens": 1}


@dataclass
class Turn:
    """What the script looks at, from a chat completion or a Responses request alike."""

    model: str
    results: int
    last_user: str | None
    tool_names: list[str]

    @classmethod
    def parse(cls, body: dict[str, Any]) -> Turn:
        if "input" in body:  # a Responses API request
            items = body["input"]
            items = [{"role": "user", "content": items}] if isinstance(items, str) else items or []
            users = [i.get("content") for i in items if i.get("role") == "user"]
            return cls(
                model=str(body.get("model", "")),
                results=sum(1 for i in items if i.get("type") == "function_call_output"),
                last_user=_text(users[-1]) if users else None,
                tool_names=[t.get("name", "") for t in body.get("tools") or []],
            )
        messages = body.get("messages", [])
        users = [m.get("content") for m in messages if m.get("role") == "user"]
        return cls(
            model=str(body.get("model", "")),
            results=sum(1 for m in messages if m.get("role") == "tool"),
            last_user=_text(users[-1]) if users else None,
            tool_names=[(t.get("function") or {}).get("name", "") for t in body.get("tools") or []],
        )

    def tool(self, suffix: str, prefer: str = "") -> str:
        """The name the caller gave the tool (``bench__lookup`` in Hatchway, ``<server>-lookup`` in
        LiteLLM, which lists every server's: ``prefer`` picks the one whose name starts so)."""
        names = [n for n in self.tool_names if n.endswith(suffix)]
        return next((n for n in names if n.startswith(prefer)), names[0] if names else f"bench__{suffix}")

    def calls(self, name: str, arguments: list[dict[str, Any]], delay: float) -> Reply:
        calls: list[ToolCall] = [(name, a, f"call_{self.results}_{i}") for i, a in enumerate(arguments)]
        return Reply(tool_calls=calls, delay=delay, **TOKENS)

    def answer(self, delay: float) -> Reply:
        return Reply("ok", delay=delay, **TOKENS)


def _text(content: object) -> str | None:
    if isinstance(content, list):  # content parts
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else None


def _count(model: str, prefix: str) -> int:
    tail = model.split("/")[-1].removeprefix(prefix)
    return int(tail[1:]) if tail.startswith("-") else 1


def reply_for(turn: Turn, latency_s: float, child_latency_s: float) -> Reply:
    """The script's reply; a subagent child's comes after the child latency, every other after the
    model latency."""
    model = turn.model.split("/")[-1]
    if model.startswith("tools"):
        if turn.results < _count(model, "tools"):
            return turn.calls(turn.tool("lookup"), [{"q": "x"}], latency_s)
        return turn.answer(latency_s)
    if model.startswith("fanout"):
        if not turn.results:
            fan = [{"q": str(i)} for i in range(_count(model, "fanout"))]
            return turn.calls(turn.tool("lookup", prefer="fan"), fan, latency_s)
        return turn.answer(latency_s)
    if model.startswith("subagents"):
        if turn.last_user != "fan out":
            return turn.answer(child_latency_s)
        if not turn.results:
            tasks = [{"task": f"part {i}"} for i in range(_count(model, "subagents"))]
            return turn.calls("spawn_subagent", tasks, latency_s)
    return turn.answer(latency_s)


def make_app(latency_s: float, child_latency_s: float = 0.5) -> ScriptedUpstream:
    def decide(body: dict[str, Any]) -> Reply:
        return reply_for(Turn.parse(body), latency_s, child_latency_s)

    return ScriptedUpstream(decide, model=MODEL, responses=True)


def main() -> None:
    parser = argparse.ArgumentParser(description="A scripted upstream for the agent-loop benchmarks.")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--child-latency-ms", type=float, default=500.0)
    args = parser.parse_args()
    serve(make_app(args.latency_ms / 1000, args.child_latency_ms / 1000), args.port)


if __name__ == "__main__":
    main()
