"""An in-process model for loop unit tests, in the spirit of pydantic-ai's ``FunctionModel``: a function
decides each response from the request; streaming splits its text into deltas. And a toolset of plain
async functions, so ``AgentLoop`` runs with no server at all."""

from __future__ import annotations

import inspect
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson

from hatchway.engine.context import RunContext
from hatchway.engine.items import FunctionCall, FunctionCallOutput, Item, ToolSpec, Usage
from hatchway.engine.loop import AgentLoop, LoopSettings
from hatchway.engine.providers.base import (
    ModelProvider,
    ModelRequest,
    ModelResponse,
    StreamDone,
    StreamEvent,
    TextDelta,
)
from hatchway.engine.providers.routing import ResolvedModel
from hatchway.engine.tools.base import RunPreamble, ToolResult, Toolset
from hatchway.engine.tools.router import ToolRouter
from hatchway.principal import Principal

Decide = Callable[[ModelRequest], ModelResponse | Awaitable[ModelResponse]]
_ids = itertools.count(1)


def answer(
    text: str | None = None, *calls: tuple[str, dict[str, Any]], finish_reason: str | None = None
) -> ModelResponse:
    """A model response: ``text`` and/or tool calls ``(name, arguments)``."""
    tool_calls = [
        FunctionCall(f"call_{next(_ids)}", name, orjson.dumps(args).decode()) for name, args in calls
    ]
    return ModelResponse(
        text=text,
        tool_calls=tool_calls,
        finish_reason=finish_reason or ("tool_calls" if tool_calls else "stop"),
        usage=Usage(prompt_tokens=10, completion_tokens=2),
        model="function-model",
    )


def outputs(request: ModelRequest) -> list[str]:
    """The tool outputs the model has seen so far."""
    return [i.output for i in request.items if isinstance(i, FunctionCallOutput)]


class FunctionModel(ModelProvider):
    """A provider whose every response comes from ``decide(request)``; ``requests`` keeps them all."""

    id = "function"

    def __init__(self, decide: Decide, *, chunk_size: int = 3) -> None:
        self.decide = decide
        self.chunk_size = chunk_size
        self.requests: list[ModelRequest] = []

    async def request(self, req: ModelRequest) -> ModelResponse:
        self.requests.append(ModelRequest(req.model, list(req.items), list(req.tools)))
        response = self.decide(req)
        return await response if inspect.isawaitable(response) else response

    async def stream(self, req: ModelRequest) -> AsyncIterator[StreamEvent]:
        response = await self.request(req)
        text = response.text or ""
        for i in range(0, len(text), self.chunk_size):
            yield TextDelta(text[i : i + self.chunk_size])
        yield StreamDone(response)


ToolFunction = Callable[..., Awaitable[str | ToolResult]]


class FunctionToolset(Toolset):
    """Tools that are async functions of their arguments (and the run context, as ``ctx``)."""

    def __init__(self, *functions: ToolFunction, preamble: RunPreamble | None = None) -> None:
        self.functions = {f.__name__: f for f in functions}
        self.preamble = preamble
        self.calls: list[FunctionCall] = []

    async def list_tools(self, ctx: RunContext) -> list[ToolSpec]:
        return [ToolSpec(name=name) for name in self.functions]

    async def call_tool(self, call: FunctionCall, ctx: RunContext) -> ToolResult:
        self.calls.append(call)
        function = self.functions[call.name]
        arguments = orjson.loads(call.arguments or "{}")
        if "ctx" in inspect.signature(function).parameters:
            arguments["ctx"] = ctx
        result = await function(**arguments)
        return result if isinstance(result, ToolResult) else ToolResult(output=result)

    async def before_run(self, items: list[Item], ctx: RunContext) -> RunPreamble | None:
        return self.preamble


def agent_loop(
    model: FunctionModel,
    *toolsets: Toolset,
    client_tools: list[ToolSpec] | None = None,
    **settings: Any,
) -> AgentLoop:
    router = ToolRouter(toolsets=list(toolsets), client_tools=client_tools or [])
    return AgentLoop(ResolvedModel("m", model, "m-upstream"), router, LoopSettings(**settings))


def run_context(deadline_seconds: float = 60.0) -> RunContext:
    return RunContext.from_headers(Principal("org_1", "acme"), {}, deadline_seconds=deadline_seconds)
