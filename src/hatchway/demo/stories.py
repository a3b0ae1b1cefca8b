"""The demo's three stories, played with the official ``openai`` client against the running gateway.

Each story prints its part of the transcript as it goes and raises ``StoryFailed`` (one line) when
the gateway, the model or the tools did not do what the story is about.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

import httpx
import openai
from rich.console import Console

from hatchway.demo import transcript

RESEARCH_QUESTION = "Which transports does the Model Context Protocol define, and what replaced HTTP+SSE?"
CANCEL_REQUEST = "cancele Produto A, Produto B e Produto C"
DELEGATION_REQUEST = "Brief me on three parts of MCP, one subagent each: transports, authorization, tools"
USER = "ana@demo"


class StoryFailed(Exception):
    """A story did not happen as it should; the message is the one-line reason."""


@dataclass
class StoryContext:
    """What every story uses: the official client, plain HTTP for Hatchway's own routes, the console."""

    client: openai.OpenAI
    http: httpx.Client
    console: Console
    model_label: str
    """How the transcript names the model ("scripted model" or the real model's name)."""
    contas_backend: Any
    """The example accounts server's state: how often each operation executed."""

    def get(self, path: str, **params: Any) -> dict[str, Any]:
        """``GET`` a Hatchway route as the demo's organisation; StoryFailed on an error status."""
        response = self.http.get(path, params=params)
        if response.status_code != 200:
            raise StoryFailed(f"GET {path} answered HTTP {response.status_code}: {response.text[:200]}")
        return response.json()


def research(ctx: StoryContext) -> dict[str, Any]:
    """Story 1: a question answered by the model over two rounds of MCP tool calls (Chat Completions)."""
    transcript.say(ctx.console, "user", RESEARCH_QUESTION)
    raw = ctx.client.chat.completions.with_raw_response.create(
        model="agent:research",
        messages=[{"role": "user", "content": RESEARCH_QUESTION}],
        extra_headers={"X-On-Behalf-Of": USER},
    )
    answer = raw.parse().choices[0].message.content or ""
    log = ctx.get(f"/v1/logs/{raw.headers['x-hatchway-request-id']}")
    steps = log["steps"]
    tool_rounds = sorted({s["round"] for s in steps if s.get("type") == "tool_call"})
    ctx.console.print(transcript.steps_table(steps))
    transcript.say(ctx.console, ctx.model_label, answer)
    if not tool_rounds:
        raise StoryFailed("the model answered without calling an MCP tool")
    if not answer.strip():
        raise StoryFailed("the model's final answer is empty")
    model_calls = sum(1 for s in steps if s.get("type") == "model_call")
    transcript.fact(
        ctx.console,
        f"{len(tool_rounds)} tool rounds and {model_calls} model calls inside one request "
        f"({log['latency_ms']:.0f} ms; log {log['id']})",
    )
    return {"tool_rounds": len(tool_rounds), "log_id": log["id"]}


def operation(ctx: StoryContext) -> dict[str, Any]:
    """Story 2: a multi-item cancellation, confirmed by the user, with a per-item verdict."""
    session = f"demo-{uuid.uuid4().hex[:8]}"
    headers = {"X-On-Behalf-Of": USER, "hatchway-session": session}
    conversation: list[dict[str, Any]] = [{"role": "user", "content": CANCEL_REQUEST}]
    transcript.say(ctx.console, "user", CANCEL_REQUEST)
    raw = ctx.client.chat.completions.with_raw_response.create(
        model="agent:contas", messages=conversation, extra_headers=headers
    )
    question = raw.parse().choices[0].message.content or ""
    op_id = raw.headers.get("x-hatchway-operation-id")
    if not op_id:
        transcript.say(ctx.console, ctx.model_label, question)
        raise StoryFailed("no operation was opened: the model did not call the transactional tool")
    note = f"the validator's question; operation {op_id} is AWAITING_CONFIRMATION, nothing ran yet"
    transcript.say(ctx.console, "hatchway", question, note=note)
    conversation += [{"role": "assistant", "content": question}, {"role": "user", "content": "sim"}]
    transcript.say(ctx.console, "user", "sim")
    answer = ctx.client.chat.completions.create(
        model="agent:contas", messages=conversation, extra_headers=headers
    )
    transcript.say(ctx.console, ctx.model_label, answer.choices[0].message.content or "")
    record = ctx.get(f"/v1/operations/{op_id}")
    ctx.console.print(transcript.items_table(record))
    executions = ctx.contas_backend.executions.get(op_id, 0)
    verdict = (record.get("verdict") or {}).get("status")
    if record["status"] != "COMPLETED" or not verdict:
        raise StoryFailed(f"operation {op_id} ended {record['status']} ({record.get('status_reason')})")
    if executions != 1:
        raise StoryFailed(f"the contas server executed operation {op_id} {executions} times (expected once)")
    transcript.fact(
        ctx.console,
        f"verdict {verdict}; the contas server executed it once (idempotency key = {op_id}); "
        f"confirmed by {record.get('confirmed_by')} via {record.get('confirmed_via')}",
    )
    return {"operation_id": op_id, "verdict": verdict, "items": record.get("items") or []}


def delegation(ctx: StoryContext) -> dict[str, Any]:
    """Story 3: a parent response delegates subagents in parallel (Responses API, hosted spawn_subagent)."""
    transcript.say(ctx.console, "user", DELEGATION_REQUEST)
    started = time.monotonic()
    parent = ctx.client.responses.create(
        model="agent:orchestrator", input=DELEGATION_REQUEST, extra_headers={"X-On-Behalf-Of": USER}
    )
    elapsed = time.monotonic() - started
    if parent.status != "completed":
        raise StoryFailed(f"the parent response ended {parent.status}: {parent.error}")
    children = ctx.get("/v1/responses", parent_response_id=parent.id)["data"]
    if not children:
        raise StoryFailed("the parent answered without delegating (no spawn_subagent call)")
    wall, child_seconds = _fan_out(ctx, parent.id)
    ctx.console.print(transcript.delegation_tree(parent.model_dump(), children, child_seconds))
    transcript.say(ctx.console, ctx.model_label, parent.output_text)
    unfinished = [c["id"] for c in children if c.get("status") != "completed"]
    if unfinished:
        raise StoryFailed(f"subagent responses did not complete: {', '.join(unfinished)}")
    one_by_one = sum(child_seconds.values())
    transcript.fact(
        ctx.console,
        f"{len(children)} children ran in parallel: fan-out wall time {wall:.2f} s "
        f"(one after another: {one_by_one:.2f} s); the whole request took {elapsed:.2f} s",
    )
    return {"parent_id": parent.id, "children": len(children), "fan_out_seconds": wall}


def _fan_out(ctx: StoryContext, parent_id: str) -> tuple[float, dict[str, float]]:
    """From the parent's run log: the wall time of its spawn_subagent calls, and each child's time."""
    records = ctx.get("/v1/logs", model="agent:orchestrator", limit=50)["data"]
    record = next((r for r in records if r.get("response_id") == parent_id), None)
    if record is None:
        return 0.0, {}
    spawns = [
        s for s in record["steps"] if s.get("type") == "tool_call" and s.get("tool") == "spawn_subagent"
    ]
    if not spawns:
        return 0.0, {}
    start = min(s["started_at_ms"] for s in spawns)
    end = max(s["started_at_ms"] + s["duration_ms"] for s in spawns)
    seconds = {s["child_response_id"]: s["duration_ms"] / 1000 for s in spawns if s.get("child_response_id")}
    return (end - start) / 1000, seconds
