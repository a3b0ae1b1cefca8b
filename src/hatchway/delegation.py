"""Client-side subagent delegation over the Responses API, with the official ``openai`` client.

The parent response gets a ``spawn_subagent`` function tool. Each round, every call it makes runs
as a child response, all in parallel; once all have finished (a barrier) the parent is resumed
once, with ``previous_response_id`` and one ``function_call_output`` per call, until it answers
with a plain message. Arguments are parsed defensively, transient child failures are retried with
backoff, and a child that fails for good becomes a structured failure the parent can reason about::

    {"ok": true, "response_id": "resp_…", "output_text": "…"}
    {"ok": false, "error_code": "invalid_arguments" | "child_request_failed", "message": "…"}

``delegate()`` takes an ``openai.OpenAI`` client (children run on threads);
``adelegate()`` takes an ``openai.AsyncOpenAI`` client (children run as tasks).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import openai

from hatchway.engine.tools.subagents.contract import (
    ATTEMPTS,
    CHILD_FAILED,
    CHILD_INSTRUCTIONS,
    INVALID_ARGUMENTS,
    SpawnArguments,
    failure,
    function_tool,
    parse_spawn_arguments,
    success,
)

SPAWN_SUBAGENT_TOOL: dict[str, Any] = function_tool()
ORCHESTRATOR_INSTRUCTIONS = (
    "You are an orchestrator. Use spawn_subagent for parallel, focused tasks. You may call it several "
    "times in one round when the tasks can run in parallel. Once every tool result is back, answer "
    "the user directly."
)
TRANSIENT_ERRORS = (
    openai.APIConnectionError,  # includes APITimeoutError
    openai.RateLimitError,
    openai.InternalServerError,
)


@dataclass
class DelegationSettings:
    """How the loop runs; the defaults are the seed's."""

    model: str
    instructions: str = ORCHESTRATOR_INSTRUCTIONS
    child_model: str | None = None
    """Model of the children when a call names none (default: the parent's model)."""
    child_instructions: str = CHILD_INSTRUCTIONS
    on_behalf_of: str | None = None
    """Sent as ``X-On-Behalf-Of`` on the parent and every child request."""
    max_tool_calls: int = 8
    """Children run for one whole delegation at most; further calls are answered as not run."""
    tool_choice: str = "auto"
    attempts: int = ATTEMPTS
    backoff_seconds: float = 0.5
    """Wait ``backoff_seconds * attempt`` before retrying a transient child failure."""
    extra_tools: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class DelegationResult:
    output_text: str
    response: Any
    """The parent's final ``Response``."""
    parent_response_ids: list[str] = field(default_factory=list)
    child_results: list[dict[str, Any]] = field(default_factory=list)
    """Every child payload returned to the parent, in order."""
    stopped_at_max_tool_calls: bool = False


# -- the pieces both drivers share ---------------------------------------------------------------


def spawn_calls(response: Any) -> list[Any]:
    """The parent's ``spawn_subagent`` function calls of one round."""
    return [
        item for item in response.output if item.type == "function_call" and item.name == "spawn_subagent"
    ]


def child_request(args: SpawnArguments, settings: DelegationSettings) -> dict[str, Any]:
    return {
        "model": args.model or settings.child_model or settings.model,
        "instructions": args.instructions or settings.child_instructions,
        "input": args.task,
        "store": True,
    }


def call_output(call_id: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": json.dumps(payload)}


def _headers(settings: DelegationSettings) -> dict[str, str]:
    return {"X-On-Behalf-Of": settings.on_behalf_of} if settings.on_behalf_of else {}


def _parent_request(settings: DelegationSettings) -> dict[str, Any]:
    return {
        "model": settings.model,
        "tools": [SPAWN_SUBAGENT_TOOL, *settings.extra_tools],
        "parallel_tool_calls": True,
        "max_tool_calls": settings.max_tool_calls,
        "store": True,
        "extra_headers": _headers(settings),
    }


class _Budget:
    """Counts children against ``max_tool_calls`` across the whole delegation."""

    def __init__(self, limit: int) -> None:
        self.left = limit
        self.hit = False
        self.rounds_after_exhaustion = 0

    def split(self, calls: list[Any]) -> tuple[list[Any], list[Any]]:
        if self.left <= 0:
            self.rounds_after_exhaustion += 1
        run, refused = calls[: self.left], calls[self.left :]
        self.left -= len(run)
        self.hit = self.hit or bool(refused)
        return run, refused

    @property
    def parent_ignores_limit(self) -> bool:
        """The parent was told to answer (tool_choice none) and still delegated: stop here."""
        return self.rounds_after_exhaustion > 1


def _not_run(limit: int) -> dict[str, Any]:
    return failure(CHILD_FAILED, f"Not run: this delegation reached max_tool_calls ({limit}).")


def _next_parent(
    settings: DelegationSettings, previous_id: str, outputs: list[dict[str, Any]], budget: _Budget
) -> dict[str, Any]:
    request = {**_parent_request(settings), "previous_response_id": previous_id, "input": outputs}
    if budget.left <= 0:
        request["tool_choice"] = "none"  # no budget left: the parent must answer now
    return request


# -- synchronous driver --------------------------------------------------------------------------


def run_child(
    client: openai.OpenAI,
    raw_arguments: str,
    settings: DelegationSettings,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """One child response with recovery; always returns a success or failure payload."""
    args = parse_spawn_arguments(raw_arguments)
    if isinstance(args, str):
        return failure(INVALID_ARGUMENTS, args)
    last_error = "The child response failed"
    for attempt in range(settings.attempts):
        try:
            child = client.responses.create(**child_request(args, settings), extra_headers=_headers(settings))
        except TRANSIENT_ERRORS as exc:
            last_error = str(exc)
        except openai.APIError as exc:
            return failure(CHILD_FAILED, str(exc))
        else:
            if child.status == "completed":
                return success(child.id, child.output_text)
            last_error = f"The child response ended with status {child.status}"
        if attempt < settings.attempts - 1:
            sleep(settings.backoff_seconds * (attempt + 1))
    return failure(CHILD_FAILED, last_error)


def delegate(client: openai.OpenAI, input: Any, settings: DelegationSettings) -> DelegationResult:
    """Run the delegation loop to the parent's final answer."""
    budget = _Budget(settings.max_tool_calls)
    response = client.responses.create(
        **_parent_request(settings),
        instructions=settings.instructions,
        input=input,
        tool_choice=settings.tool_choice,
    )
    result = DelegationResult(output_text="", response=response, parent_response_ids=[response.id])
    with ThreadPoolExecutor(max_workers=max(settings.max_tool_calls, 1)) as pool:
        while calls := spawn_calls(response):
            run, refused = budget.split(calls)
            if budget.parent_ignores_limit:
                break
            futures = [pool.submit(run_child, client, c.arguments, settings) for c in run]
            payloads = [f.result() for f in futures]  # the barrier: every child has finished
            payloads += [_not_run(settings.max_tool_calls) for _ in refused]
            result.child_results.extend(payloads)
            outputs = [call_output(c.call_id, p) for c, p in zip([*run, *refused], payloads, strict=True)]
            response = client.responses.create(**_next_parent(settings, response.id, outputs, budget))
            result.parent_response_ids.append(response.id)
    result.response, result.output_text = response, response.output_text
    result.stopped_at_max_tool_calls = budget.hit
    return result


# -- asynchronous driver -------------------------------------------------------------------------


async def arun_child(
    client: openai.AsyncOpenAI, raw_arguments: str, settings: DelegationSettings
) -> dict[str, Any]:
    """``run_child`` for ``AsyncOpenAI``."""
    args = parse_spawn_arguments(raw_arguments)
    if isinstance(args, str):
        return failure(INVALID_ARGUMENTS, args)
    last_error = "The child response failed"
    for attempt in range(settings.attempts):
        try:
            child = await client.responses.create(
                **child_request(args, settings), extra_headers=_headers(settings)
            )
        except TRANSIENT_ERRORS as exc:
            last_error = str(exc)
        except openai.APIError as exc:
            return failure(CHILD_FAILED, str(exc))
        else:
            if child.status == "completed":
                return success(child.id, child.output_text)
            last_error = f"The child response ended with status {child.status}"
        if attempt < settings.attempts - 1:
            await asyncio.sleep(settings.backoff_seconds * (attempt + 1))
    return failure(CHILD_FAILED, last_error)


async def adelegate(client: openai.AsyncOpenAI, input: Any, settings: DelegationSettings) -> DelegationResult:
    """``delegate`` for ``AsyncOpenAI``."""
    budget = _Budget(settings.max_tool_calls)
    response = await client.responses.create(
        **_parent_request(settings),
        instructions=settings.instructions,
        input=input,
        tool_choice=settings.tool_choice,
    )
    result = DelegationResult(output_text="", response=response, parent_response_ids=[response.id])
    while calls := spawn_calls(response):
        run, refused = budget.split(calls)
        if budget.parent_ignores_limit:
            break
        payloads = list(await asyncio.gather(*(arun_child(client, c.arguments, settings) for c in run)))
        payloads += [_not_run(settings.max_tool_calls) for _ in refused]
        result.child_results.extend(payloads)
        outputs = [call_output(c.call_id, p) for c, p in zip([*run, *refused], payloads, strict=True)]
        response = await client.responses.create(**_next_parent(settings, response.id, outputs, budget))
        result.parent_response_ids.append(response.id)
    result.response, result.output_text = response, response.output_text
    result.stopped_at_max_tool_calls = budget.hit
    return result
