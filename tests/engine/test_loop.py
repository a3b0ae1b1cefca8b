"""``AgentLoop`` in process, driven by a ``FunctionModel``: rounds, the deadline, parallel tools,
``max_rounds``, interruptions, ``max_tool_calls``, client tools and streaming — no server involved.
(The adapters' end-to-end tests over HTTP are in tests/api/.)"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import pytest

from hatchway.engine.context import RunContext
from hatchway.engine.items import FunctionCall, ToolSpec
from hatchway.engine.loop import (
    OutputTextDelta,
    RoundStarted,
    RunFinished,
    RunResult,
    ToolCallFinished,
    ToolCallStarted,
    milliseconds,
)
from hatchway.engine.providers.base import ModelRequest, ModelResponse
from hatchway.engine.tools.base import Interruption, RunPreamble, ToolResult
from hatchway.engine.tools.payloads import TRUNCATION_MARKER
from tests.support.function_model import (
    FunctionModel,
    FunctionToolset,
    agent_loop,
    answer,
    outputs,
    run_context,
)


async def lookup(q: str) -> str:
    return f"found {q}"


def run(loop: Any, ctx: RunContext | None = None, items: list[Any] | None = None) -> RunResult:
    return asyncio.run(loop.run(items or [], ctx or run_context()))


def steps(result: RunResult) -> list[dict[str, Any]]:
    """The loop's steps as the run log stores them."""
    return [step.to_dict() for step in result.steps]


def test_a_plain_answer_is_one_round() -> None:
    model = FunctionModel(lambda request: answer("hello"))

    result = run(agent_loop(model))

    assert (result.text, result.finish_reason, result.rounds, result.tool_calls) == ("hello", "stop", 1, 0)
    assert [s["type"] for s in steps(result)] == ["model_call"]


def test_tool_results_go_back_to_the_model_until_it_answers() -> None:
    def decide(request: ModelRequest) -> ModelResponse:
        seen = outputs(request)
        return answer(None, ("lookup", {"q": f"n{len(seen)}"})) if len(seen) < 2 else answer(" | ".join(seen))

    model = FunctionModel(decide)
    ctx = run_context()

    result = run(agent_loop(model, FunctionToolset(lookup)), ctx)

    assert result.text == "found n0 | found n1" and result.rounds == 3 and result.tool_calls == 2
    assert [s["type"] for s in steps(result)] == [
        "model_call",
        "tool_call",
        "model_call",
        "tool_call",
        "model_call",
    ]
    assert ctx.run.tool_calls == 2 and ctx.run.usage.prompt_tokens == 30  # the run-wide counters too


def test_max_rounds_runs_the_last_rounds_tools_then_returns_that_response() -> None:
    model = FunctionModel(lambda request: answer("still looking", ("lookup", {"q": "x"})))
    tools = FunctionToolset(lookup)

    result = run(agent_loop(model, tools, max_rounds=2))

    assert (result.finish_reason, result.max_rounds_hit, result.rounds) == ("max_rounds", True, 2)
    assert result.text == "still looking" and len(tools.calls) == 2 and len(model.requests) == 2


def test_the_deadline_during_tools_ends_the_run_with_the_last_response() -> None:
    ctx = run_context()
    cancelled = asyncio.Event()

    def decide(request: ModelRequest) -> ModelResponse:
        ctx.deadline = time.monotonic() + 0.05  # the tool never answers: only the deadline ends it
        return answer("Looking it up…", ("hang", {}))

    async def hang() -> str:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()
        return "never"

    result = run(agent_loop(FunctionModel(decide), FunctionToolset(hang)), ctx)

    assert (result.finish_reason, result.text, result.rounds) == ("timeout", "Looking it up…", 1)
    assert cancelled.is_set()  # the tool still running was cancelled, not left behind
    assert orjson.loads(result.new_items[-1].output)["error"]["code"] == "timeout"  # type: ignore[union-attr]


def test_a_tool_is_not_started_once_the_deadline_has_passed() -> None:
    ctx = run_context()
    tools = FunctionToolset(lookup)

    def decide(request: ModelRequest) -> ModelResponse:
        ctx.deadline = time.monotonic()  # passed as the model answers
        return answer("Looking it up…", ("lookup", {"q": "x"}))

    result = run(agent_loop(FunctionModel(decide), tools), ctx)

    assert result.finish_reason == "timeout" and tools.calls == []


def test_the_deadline_during_a_model_call_returns_the_previous_complete_response() -> None:
    ctx = run_context()

    async def decide(request: ModelRequest) -> ModelResponse:
        if not outputs(request):
            return answer("first answer", ("shorten", {}))
        await asyncio.Event().wait()  # the second call never answers: only the deadline ends it
        raise AssertionError("unreachable")

    async def shorten() -> str:
        ctx.deadline = time.monotonic() + 0.05
        return "the run has 50 ms left"

    result = run(agent_loop(FunctionModel(decide), FunctionToolset(shorten)), ctx)

    assert (result.finish_reason, result.text, result.rounds) == ("timeout", "first answer", 2)
    assert [s["outcome"] for s in steps(result) if s["type"] == "model_call"] == ["ok", "timeout"]


@pytest.mark.parametrize(("parallel", "order"), [(True, "AB ab"), (False, "Aa Bb")])
def test_the_tools_of_a_round_run_together_or_one_by_one(parallel: bool, order: str) -> None:
    seen: list[str] = []

    def step(name: str) -> Any:
        async def tool() -> str:
            seen.append(name)
            await asyncio.sleep(0)
            seen.append(name.lower())
            return name

        tool.__name__ = name
        return tool

    def decide(request: ModelRequest) -> ModelResponse:
        return answer("done") if outputs(request) else answer(None, ("A", {}), ("B", {}))

    run(agent_loop(FunctionModel(decide), FunctionToolset(step("A"), step("B")), tool_call_parallel=parallel))

    assert "".join(seen) == order.replace(" ", "")


def test_an_interruption_asks_the_user_and_stops_the_run() -> None:
    async def cancel_plan() -> ToolResult:
        return ToolResult(
            output="awaiting the user", interrupt=Interruption("Confirm?", {"operation_id": "op_1"})
        )

    model = FunctionModel(lambda request: answer(None, ("cancel_plan", {})))

    result = run(agent_loop(model, FunctionToolset(cancel_plan)))

    assert (result.text, result.finish_reason, len(model.requests)) == ("Confirm?", "stop", 1)
    assert result.interruption is not None and result.interruption.data == {"operation_id": "op_1"}


def test_a_toolset_may_answer_before_the_model_is_called() -> None:
    model = FunctionModel(lambda request: answer("unused"))
    toolset = FunctionToolset(lookup, preamble=RunPreamble(answer="Você confirma?"))

    result = run(agent_loop(model, toolset))

    assert (result.text, result.rounds, model.requests) == ("Você confirma?", 0, [])


def test_max_tool_calls_refuses_the_calls_over_it_and_stops_offering_tools() -> None:
    def decide(request: ModelRequest) -> ModelResponse:
        if outputs(request):
            return answer(f"{len(request.tools)} tools offered")
        return answer(None, ("lookup", {"q": "a"}), ("lookup", {"q": "b"}))

    tools = FunctionToolset(lookup)

    result = run(agent_loop(FunctionModel(decide), tools, max_tool_calls=1))

    assert result.text == "0 tools offered" and result.tool_calls == 1 and len(tools.calls) == 1
    refused = [s for s in steps(result) if s["type"] == "tool_call" and s["outcome"] == "error"]
    assert [s["error_code"] for s in refused] == ["max_tool_calls_reached"]


def test_a_client_tool_pauses_the_run_after_the_gateways_calls_of_the_round() -> None:
    model = FunctionModel(
        lambda request: answer(None, ("lookup", {"q": "a"}), ("get_weather", {"city": "Lisboa"}))
    )
    tools = FunctionToolset(lookup)

    result = run(agent_loop(model, tools, client_tools=[ToolSpec(name="get_weather")]))

    assert result.finish_reason == "tool_calls" and [c.name for c in result.client_calls] == ["get_weather"]
    assert [c.name for c in tools.calls] == ["lookup"] and result.has_tool_calls


def test_a_failing_tool_gives_the_model_a_structured_error() -> None:
    async def broken() -> str:
        raise RuntimeError("disk on fire")

    def decide(request: ModelRequest) -> ModelResponse:
        return answer(f"saw {outputs(request)[0]}") if outputs(request) else answer(None, ("broken", {}))

    result = run(agent_loop(FunctionModel(decide), FunctionToolset(broken)))

    body = orjson.loads(result.text.removeprefix("saw "))  # type: ignore[union-attr]
    assert body["error"]["code"] == "tool_failed" and body["error"]["message"].startswith("RuntimeError:")
    assert "disk on fire" not in result.text  # an exception's message may quote SQL or hosts: logged only


def test_long_tool_results_are_cut_before_the_model_reads_them() -> None:
    async def big() -> str:
        return "x" * 1000

    def decide(request: ModelRequest) -> ModelResponse:
        return answer(outputs(request)[0]) if outputs(request) else answer(None, ("big", {}))

    result = run(agent_loop(FunctionModel(decide), FunctionToolset(big), max_tool_result_chars=300))

    assert result.text == "x" * 300 + TRUNCATION_MARKER.format(n=700)


def test_final_only_streams_the_answer_but_holds_the_text_of_tool_rounds() -> None:
    def decide(request: ModelRequest) -> ModelResponse:
        return answer("The answer.") if outputs(request) else answer("Let me look…", ("lookup", {"q": "a"}))

    loop = agent_loop(FunctionModel(decide), FunctionToolset(lookup))

    async def events() -> list[Any]:
        return [e async for e in loop.events([], run_context(), stream=True)]

    seen = asyncio.run(events())

    streamed = "".join(e.text for e in seen if isinstance(e, OutputTextDelta))
    assert streamed == "The answer."
    kinds = [type(e) for e in seen]
    assert kinds[0] is RoundStarted and kinds[-1] is RunFinished
    assert kinds.index(ToolCallStarted) < kinds.index(ToolCallFinished)


def test_unknown_tools_are_structured_errors_not_crashes() -> None:
    def decide(request: ModelRequest) -> ModelResponse:
        return answer(outputs(request)[0]) if outputs(request) else answer(None, ("nope", {}))

    result = run(agent_loop(FunctionModel(decide), FunctionToolset(lookup)))

    assert orjson.loads(result.text or "")["error"]["code"] == "unknown_tool"


def test_a_call_keeps_its_id_from_model_to_result() -> None:
    call = FunctionCall("call_fixed", "lookup", '{"q": "z"}')

    def decide(request: ModelRequest) -> ModelResponse:
        if outputs(request):
            return answer("ok")
        return ModelResponse(text=None, tool_calls=[call], finish_reason="tool_calls", usage=answer().usage)

    result = run(agent_loop(FunctionModel(decide), FunctionToolset(lookup)))

    [step] = [s for s in steps(result) if s["type"] == "tool_call"]
    assert step["call_id"] == "call_fixed" and step["result_preview"] == "found z"


@pytest.mark.parametrize(
    ("seconds", "decimals", "expected"),
    [(0.0123456, 3, 12.346), (1.5, 3, 1500.0), (1733420000.12367, 1, 1733420000123.7), (0.0000004, 3, 0.0)],
)
def test_step_times_are_milliseconds_to_the_places_the_run_log_keeps(
    seconds: float, decimals: int, expected: float
) -> None:
    assert milliseconds(seconds, decimals) == expected


def test_a_model_step_records_its_start_and_duration_in_milliseconds() -> None:
    before = time.time() * 1000
    result = run(agent_loop(FunctionModel(lambda request: answer("hello"))))
    step = steps(result)[0]
    assert step["type"] == "model_call" and before - 1 <= step["started_at_ms"] <= time.time() * 1000
    assert 0 <= step["duration_ms"] < 10_000 and step["duration_ms"] == round(step["duration_ms"], 3)
