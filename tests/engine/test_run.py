"""``RunScope``: whichever way a run's block is left, the gauge goes back, its span ends and exactly one
record is written — or none, for a run handed to the job queue, whose worker records it."""

from __future__ import annotations

import asyncio
import time

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from hatchway.config.settings import Settings
from hatchway.engine.context import MAX_SIDE_STEPS, RunContext
from hatchway.engine.items import ToolSpec, Usage
from hatchway.engine.loop import RunResult
from hatchway.engine.providers.base import ModelRequest, ModelResponse
from hatchway.engine.run import RECORD_DELAY_SECONDS, RunScopes
from hatchway.engine.run_log import ListToolsStep, SideCallStep
from hatchway.errors import ProviderUnavailable
from hatchway.observability.metrics import Metrics
from hatchway.observability.telemetry import Telemetry
from hatchway.observability.tracing import Tracing
from hatchway.principal import Principal
from hatchway.store.db import Database
from hatchway.store.logs import LogWriter, Record
from tests.support.function_model import FunctionModel, FunctionToolset, agent_loop, answer, outputs

SETTINGS = Settings.model_validate({"providers": [{"id": "u", "base_url": "http://127.0.0.1:9/v1"}]})


class Harness:
    """Real telemetry (an in-memory span exporter) and a real log writer whose records are kept."""

    def __init__(self, record_delay_seconds: float = RECORD_DELAY_SECONDS) -> None:
        self.exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.telemetry = Telemetry(Metrics(), Tracing.from_settings(SETTINGS, provider))
        self.writer = LogWriter(
            Database("sqlite+aiosqlite:///:memory:")
        )  # never started: records stay queued
        self.submitted: list[Record] = []
        self.writer.observers.append(self.submitted.append)
        self.scopes = RunScopes(self.telemetry, self.writer, record_delay_seconds=record_delay_seconds)

    @property
    def records(self) -> list[Record]:
        """The records submitted, once the closed runs' are (as a reader's flush does)."""
        self.scopes.record_closed()
        return self.submitted

    def in_flight(self) -> float:
        return self.telemetry.metrics.runs_in_flight._value.get()

    def finished_spans(self) -> list[ReadableSpan]:
        self.scopes.record_closed()
        return list(self.exporter.get_finished_spans())

    def run_spans(self) -> list[str]:
        return [s.name for s in self.finished_spans()]


def context() -> RunContext:
    return RunContext(principal=Principal("org_1", "acme", "key_1", "ci"))


def test_a_run_that_answers_is_recorded_once_with_its_result() -> None:
    h = Harness()

    async def run() -> None:
        async with h.scopes.open("chat.completions", context(), model="gpt-4o") as scope:
            scope.begin(name="gpt-4o", agent=None, plugin_source=None)
            assert h.in_flight() == 1
            result = RunResult(text="hi", rounds=2)
            scope.end(200, result)
            scope.end(502, error="a later word does not change it")

    asyncio.run(run())

    [record] = h.records
    assert (record.status, record.http_status, record.rounds, record.model) == ("ok", 200, 2, "gpt-4o")
    assert h.in_flight() == 0 and h.run_spans() == ["invoke_agent gpt-4o"]


def test_a_closed_run_leaves_flight_at_once_and_is_recorded_shortly_after_without_a_reader() -> None:
    h = Harness()
    seen: list[tuple[float, float]] = []

    async def run() -> None:
        recorded = asyncio.Event()
        h.writer.observers.append(lambda record: recorded.set())
        async with h.scopes.open("chat.completions", context(), model="gpt-4o") as scope:
            scope.begin(name="gpt-4o", agent=None, plugin_source=None)
            scope.end(200, RunResult(text="hi", rounds=1))
        seen.append(
            (h.in_flight(), len(h.submitted))
        )  # the answer's bytes are out: the next request may come
        async with asyncio.timeout(5):
            await recorded.wait()  # no flush, no reader: the scopes' timer records it

    asyncio.run(run())
    assert seen == [(0, 0)]
    [record] = h.submitted
    assert record.http_status == 200
    [span] = h.exporter.get_finished_spans()
    assert span.name == "invoke_agent gpt-4o"


def test_runs_closed_on_a_later_loop_are_recorded_by_a_timer_of_that_loop() -> None:
    h = Harness()

    async def run(number: int) -> None:
        async with h.scopes.open("chat.completions", context(), model="gpt-4o") as scope:
            scope.end(200, RunResult(text=f"hi {number}", rounds=1))

    asyncio.run(run(1))  # this loop ends before its timer fires

    async def second() -> None:
        both = asyncio.Event()
        h.writer.observers.append(lambda record: both.set() if len(h.submitted) == 2 else None)
        await run(2)
        async with asyncio.timeout(5):
            await both.wait()  # with no reader: the second loop's timer records them both

    asyncio.run(second())
    assert [r.http_status for r in h.submitted] == [200, 200]


def test_a_run_recorded_later_keeps_the_latency_and_end_it_had_when_it_closed() -> None:
    h = Harness(record_delay_seconds=60)  # recorded only when asked to
    times: dict[str, float] = {}

    async def run() -> None:
        times["opened"] = time.monotonic()
        async with h.scopes.open("chat.completions", context(), model="gpt-4o") as scope:
            scope.begin(name="gpt-4o", agent=None, plugin_source=None)
            scope.end(200, RunResult(text="hi", rounds=1))
        times["closed"], times["closed_ns"] = time.monotonic(), time.time_ns()
        until = time.monotonic() + 0.05
        while time.monotonic() < until:  # 50 ms pass before anyone reads (the clock, not a sleep)
            pass
        assert h.submitted == [] and h.in_flight() == 0

    asyncio.run(run())
    [record] = h.records  # a reader's flush records what closed
    assert record.latency_ms <= (times["closed"] - times["opened"]) * 1000
    [span] = h.finished_spans()
    assert span.end_time is not None and span.end_time <= times["closed_ns"]


@pytest.mark.parametrize(
    ("raised", "status", "error"),
    [
        (ProviderUnavailable("upstream down"), 502, "upstream down"),
        (KeyError("a bug"), 500, "Internal error (KeyError)."),
    ],
)
def test_an_error_leaving_the_block_is_recorded_with_its_status(
    raised: Exception, status: int, error: str
) -> None:
    h = Harness()

    async def run() -> None:
        async with h.scopes.open("responses", context()) as scope:
            scope.begin(name="agent:contas", agent="contas", plugin_source="agent:contas")
            raise raised

    with pytest.raises(type(raised)):
        asyncio.run(run())

    [record] = h.records
    assert (record.status, record.http_status, record.error, record.agent) == (
        "error",
        status,
        error,
        "contas",
    )
    assert h.in_flight() == 0
    [span] = h.finished_spans()
    assert span.status.status_code.name == "ERROR"


def test_a_cancelled_run_is_recorded_as_interrupted() -> None:
    h = Harness()
    entered = asyncio.Event()

    async def run() -> None:
        async with h.scopes.open("responses", context()) as scope:
            scope.begin(name="gpt-4o", agent=None, plugin_source=None)
            entered.set()
            await asyncio.Event().wait()

    async def main() -> None:
        task = asyncio.create_task(run())
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())

    [record] = h.records
    assert record.http_status == 499 and "interrupted" in (record.error or "")
    assert h.in_flight() == 0 and len(h.run_spans()) == 1


def test_a_block_left_without_an_ending_is_a_client_gone() -> None:
    h = Harness()

    async def run() -> None:
        async with h.scopes.open("chat.completions", context()) as scope:
            scope.begin(name="gpt-4o", agent=None, plugin_source=None)  # a stream whose client hung up

    asyncio.run(run())

    [record] = h.records
    assert record.http_status == 499 and record.status == "error"
    assert h.in_flight() == 0


def test_a_run_handed_to_the_queue_writes_no_record_here_and_ends_its_span() -> None:
    h = Harness()

    async def run() -> None:
        async with h.scopes.open("responses", context()) as scope:
            scope.begin(name="gpt-4o", agent=None, plugin_source=None)
            scope.hand_off()

    asyncio.run(run())

    assert h.records == [] and h.in_flight() == 0
    [span] = h.finished_spans()
    assert span.attributes is not None and span.attributes["hatchway.status"] == "queued"


def test_a_request_refused_before_planning_is_recorded_without_a_span_or_gauge() -> None:
    h = Harness()

    async def run() -> None:
        async with h.scopes.open("chat.completions", context()) as scope:
            scope.end(400, error="messages: Field required")

    asyncio.run(run())

    [record] = h.records
    assert record.http_status == 400 and h.in_flight() == 0 and h.run_spans() == []


def test_the_record_carries_the_servers_whose_tools_could_not_be_listed() -> None:
    h = Harness()
    ctx = context()

    async def run() -> None:
        async with h.scopes.open("chat.completions", ctx) as scope:
            ctx.run.report(ListToolsStep.failed("search", "cannot reach the server"))
            scope.end(200, RunResult())

    asyncio.run(run())

    [record] = h.records
    assert record.steps[0] == {
        "type": "list_tools",
        "round": 1,
        "server": "search",
        "outcome": "error",
        "error": "cannot reach the server",
    }


class _ListingToolset(FunctionToolset):
    """Tools whose listing could not reach one of their servers (``search``)."""

    async def list_tools(self, ctx: RunContext) -> list[ToolSpec]:
        ctx.run.report(ListToolsStep.failed("search", "cannot reach the server"))
        return await super().list_tools(ctx)


def test_a_listing_is_recorded_in_the_round_it_happened_in() -> None:
    """The loop lists its tools for the first round; a toolset that lists again later (a server
    whose tools changed mid-run) reports that listing in the round the run is in, not round 1."""
    h = Harness()
    ctx = context()

    async def lookup(q: str, ctx: RunContext) -> str:
        if q == "again":  # round 2: the toolset listed its server again, and it was gone
            ctx.run.report(ListToolsStep.failed("archive", "listed again: the server is gone"))
        return f"found {q}"

    def decide(request: ModelRequest) -> ModelResponse:
        seen = outputs(request)
        if len(seen) == 2:
            return answer("done")
        return answer(None, ("lookup", {"q": "again" if seen else "first"}))

    async def run() -> None:
        async with h.scopes.open("chat.completions", ctx) as scope:
            loop = agent_loop(FunctionModel(decide), _ListingToolset(lookup))
            scope.end(200, await loop.run([], ctx))

    asyncio.run(run())

    [record] = h.records
    listings = [s for s in record.steps if s["type"] == "list_tools"]
    assert listings == [
        {
            "type": "list_tools",
            "round": 1,
            "server": "search",
            "outcome": "error",
            "error": "cannot reach the server",
        },
        {
            "type": "list_tools",
            "round": 2,
            "server": "archive",
            "outcome": "error",
            "error": "listed again: the server is gone",
        },
    ]
    assert [s["round"] for s in record.steps if s["type"] == "tool_call"] == [1, 2]


def test_side_calls_past_the_kept_steps_are_counted_not_recorded_one_by_one() -> None:
    """A server that samples for as long as the run lasts: every call's tokens count, the record
    keeps the first MAX_SIDE_STEPS steps and the number of the others."""
    h = Harness()
    ctx = context()

    async def run() -> None:
        async with h.scopes.open("chat.completions", ctx) as scope:
            for _ in range(MAX_SIDE_STEPS + 50):
                usage = Usage(prompt_tokens=10, completion_tokens=1)
                ctx.run.report(SideCallStep("sampling", "m", usage=usage))
            scope.end(200, RunResult())

    asyncio.run(run())

    [record] = h.records
    calls = MAX_SIDE_STEPS + 50
    assert (record.prompt_tokens, record.completion_tokens) == (10 * calls, calls)
    assert sum(step["type"] == "sampling" for step in record.steps) == MAX_SIDE_STEPS
    assert record.steps[-1] == {"type": "side_calls_omitted", "count": 50}


def test_closing_twice_records_once_and_a_scope_begins_once() -> None:
    h = Harness()
    scope = h.scopes.open("chat.completions", context())
    scope.begin(name="gpt-4o", agent=None, plugin_source=None)
    with pytest.raises(RuntimeError):
        scope.begin(name="gpt-4o", agent=None, plugin_source=None)
    scope.close()
    scope.close(KeyError("late"))
    assert len(h.records) == 1 and h.in_flight() == 0


def test_a_subagent_state_rolls_up_into_its_run_tree() -> None:
    parent = context()
    child = parent.child()
    grandchild = child.child()
    parent.run.tool_calls, child.run.tool_calls, grandchild.run.tool_calls = 1, 2, 3
    child.run.usage.prompt_tokens = 10
    assert grandchild.run.root is parent.run
    assert parent.run.tree_tool_calls() == 6 and child.run.tree_tool_calls() == 5
    assert parent.run.tree_usage().prompt_tokens == 10
    assert (child.depth, grandchild.depth, grandchild.principal) == (1, 2, parent.principal)
