"""A scripted OpenAI-compatible upstream for the agent-loop benchmarks (raw ASGI; chat completions
and a minimal Responses API, for gateways that call that).

    python -m bench.rounds_upstream --port 9101 --latency-ms 20 [--child-latency-ms 500]

What it answers depends on the upstream model named in the request:

- ``tools`` / ``tools-N``: asks for one call of ``bench__lookup`` per response until the conversation
  holds N tool results (``tools`` is ``tools-1``), then answers;
- ``fanout-K``: the first response asks for K calls of ``bench__lookup`` at once, then it answers;
- ``subagents-K``: a conversation whose user says ``fan out`` gets K ``spawn_subagent`` calls at
  once, then an answer; any other conversation is a child and is answered after
  ``--child-latency-ms`` (instead of ``--latency-ms``);
- anything else: answered at once.

Every other response waits exactly ``--latency-ms``, so model time is known exactly.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import dataclass

from bench.asgi import asgi_lifespan, serve

USAGE = {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}


def _completion(message: dict, finish_reason: str) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 1700000000,
            "model": "bench-model",
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": USAGE,
        }
    ).encode()


def _response(output: list[dict]) -> bytes:
    return json.dumps(
        {
            "id": "resp_bench",
            "object": "response",
            "created_at": 1700000000,
            "status": "completed",
            "model": "bench-model",
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": {"input_tokens": 10, "output_tokens": 1, "total_tokens": 11},
        }
    ).encode()


@dataclass
class Turn:
    """What the script looks at, from a chat completion or a Responses request alike."""

    model: str
    results: int
    last_user: str | None
    tool_names: list[str]
    responses_api: bool

    @classmethod
    def parse(cls, path: str, body: dict) -> Turn:
        if path.endswith("/responses"):
            items = body.get("input")
            items = [{"role": "user", "content": items}] if isinstance(items, str) else items or []
            users = [i.get("content") for i in items if i.get("role") == "user"]
            return cls(
                model=str(body.get("model", "")),
                results=sum(1 for i in items if i.get("type") == "function_call_output"),
                last_user=_text(users[-1]) if users else None,
                tool_names=[t.get("name", "") for t in body.get("tools") or []],
                responses_api=True,
            )
        messages = body.get("messages", [])
        users = [m.get("content") for m in messages if m.get("role") == "user"]
        return cls(
            model=str(body.get("model", "")),
            results=sum(1 for m in messages if m.get("role") == "tool"),
            last_user=_text(users[-1]) if users else None,
            tool_names=[(t.get("function") or {}).get("name", "") for t in body.get("tools") or []],
            responses_api=False,
        )

    def tool(self, suffix: str, prefer: str = "") -> str:
        """The name the caller gave the tool (``bench__lookup`` in Hatchway, ``<server>-lookup`` in
        LiteLLM, which lists every server's: ``prefer`` picks the one whose name starts so)."""
        names = [n for n in self.tool_names if n.endswith(suffix)]
        return next((n for n in names if n.startswith(prefer)), names[0] if names else f"bench__{suffix}")

    def calls(self, name: str, arguments: list[str]) -> bytes:
        ids = [f"call_{self.results}_{i}" for i in range(len(arguments))]
        if self.responses_api:
            return _response(
                [
                    {"type": "function_call", "id": f"fc_{c}", "call_id": c, "name": name, "arguments": a}
                    | {"status": "completed"}
                    for c, a in zip(ids, arguments, strict=True)
                ]
            )
        calls = [
            {"id": c, "type": "function", "function": {"name": name, "arguments": a}}
            for c, a in zip(ids, arguments, strict=True)
        ]
        return _completion({"role": "assistant", "content": None, "tool_calls": calls}, "tool_calls")

    def answer(self) -> bytes:
        if self.responses_api:
            text = {"type": "output_text", "text": "ok", "annotations": []}
            return _response(
                [
                    {
                        "type": "message",
                        "id": "msg_1",
                        "role": "assistant",
                        "status": "completed",
                        "content": [text],
                    }
                ]
            )
        return _completion({"role": "assistant", "content": "ok"}, "stop")


def _text(content: object) -> str | None:
    if isinstance(content, list):  # content parts
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else None


def _count(model: str, prefix: str) -> int:
    tail = model.split("/")[-1].removeprefix(prefix)
    return int(tail[1:]) if tail.startswith("-") else 1


def reply_for(turn: Turn) -> tuple[bytes, bool]:
    """The response body, and whether it is a subagent child's (answered after the child latency)."""
    model = turn.model.split("/")[-1]
    if model.startswith("tools"):
        wanted = _count(model, "tools")
        return (
            turn.calls(turn.tool("lookup"), ['{"q": "x"}']) if turn.results < wanted else turn.answer()
        ), False
    if model.startswith("fanout"):
        fan = [f'{{"q": "{i}"}}' for i in range(_count(model, "fanout"))]
        return (
            turn.calls(turn.tool("lookup", prefer="fan"), fan) if not turn.results else turn.answer()
        ), False
    if model.startswith("subagents"):
        if turn.last_user == "fan out":
            tasks = [f'{{"task": "part {i}"}}' for i in range(_count(model, "subagents"))]
            return (turn.calls("spawn_subagent", tasks) if not turn.results else turn.answer()), False
        return turn.answer(), True
    return turn.answer(), False


def make_app(latency_s: float, child_latency_s: float = 0.5):  # type: ignore[no-untyped-def]
    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] == "lifespan":
            await asgi_lifespan(receive, send)
            return
        chunks, more = [], True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        raw = b"".join(chunks)
        body, child = reply_for(Turn.parse(scope["path"], json.loads(raw) if raw else {}))
        delay = child_latency_s if child else latency_s
        if delay:
            await asyncio.sleep(delay)
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--child-latency-ms", type=float, default=500.0)
    args = parser.parse_args()
    serve(make_app(args.latency_ms / 1000, args.child_latency_ms / 1000), args.port)


if __name__ == "__main__":
    main()
