"""A tool that asks the end user (MCP 2026-07-28 input requests), end to end through the gateway.

An MCP server written with the official SDK whose ``book`` tool asks two questions in two rounds
(the dates, then a confirmation that quotes them); the official ``openai`` client talks to the
gateway with a ``hatchway-session``; a scripted model calls the tool and reports its result. The
question reaches the end user, survives a gateway restart between the turns, another end user's
answer is refused, and the answers complete the call.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import httpx
import openai
import pytest
from mcp.server import MCPServer
from mcp.server.mcpserver.resolve import Elicit, Resolve, Sample
from mcp_types import CreateMessageResult, SamplingMessage, TextContent
from pydantic import BaseModel, Field

from tests.support.agent_loop import log_of, write_plugin
from tests.support.gateway import RunningGateway, base_config, write_config
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import ServerThread


class Dates(BaseModel):
    checkin: str
    nights: int = 1


class Confirm(BaseModel):
    ok: bool


def ask_dates(room: str) -> Elicit[Dates]:
    return Elicit(f"Which dates for room {room}?", Dates)


def ask_confirm(room: str, dates: Annotated[Dates, Resolve(ask_dates)]) -> Elicit[Confirm]:
    return Elicit(f"Book room {room}: {dates.nights} night(s) from {dates.checkin}?", Confirm)


class BookingServer:
    def __init__(self) -> None:
        mcp = MCPServer("booking", log_level="WARNING")
        self.booked: list[str] = []

        @mcp.tool()
        def book(
            room: str,
            dates: Annotated[Dates, Resolve(ask_dates)],
            confirm: Annotated[Confirm, Resolve(ask_confirm)],
        ) -> str:
            """Book a room; asks the user for the dates and a confirmation."""
            if not confirm.ok:
                return "not booked"
            self.booked.append(room)
            return f"booked room {room} from {dates.checkin} for {dates.nights} night(s)"

        self.server = ServerThread(mcp.streamable_http_app(), timeout_graceful_shutdown=1)

    @property
    def url(self) -> str:
        return f"{self.server.url}/mcp"


def booking_model(body: dict[str, Any]) -> Reply:
    last = body["messages"][-1]
    if last["role"] == "tool":
        return Reply(text=f"Done: {str(last['content']).strip(chr(34))}")
    return Reply(tool_calls=[("booking__book", {"room": "7"})])


@pytest.fixture
def booking() -> Iterator[BookingServer]:
    server = BookingServer()
    server.server.start()
    yield server
    server.server.stop()


def test_a_tools_questions_reach_the_end_user_across_a_restart(
    booking: BookingServer, llm: ScriptedLLM, tmp_path: Path
) -> None:
    plugin = write_plugin(tmp_path, "booking", {"mcp_servers": [{"id": "booking", "url": booking.url}]})
    other = BookingServer()  # another server with the same id, in another agent's plugin
    other.server.start()
    lookalike = write_plugin(tmp_path, "lookalike", {"mcp_servers": [{"id": "booking", "url": other.url}]})
    config = base_config(
        tmp_path,
        llm.base_url,
        allow_private_mcp_urls=True,
        agents=[
            {"name": "booking", "model": "gpt-4o", "instructions": "Book.", "plugin": plugin},
            {"name": "lookalike", "model": "gpt-4o", "instructions": "Book.", "plugin": lookalike},
        ],
    )
    path = write_config(tmp_path, config)
    llm.handler = booking_model
    first = RunningGateway(path).start()

    def ask(gateway: RunningGateway, text: str, user: str = "alice", agent: str = "booking") -> str:
        reply = gateway.client().chat.completions.create(
            model=f"agent:{agent}",
            messages=[{"role": "user", "content": text}],
            extra_headers={"hatchway-session": "trip-1", "X-On-Behalf-Of": user},
        )
        return reply.choices[0].message.content or ""

    try:
        question = ask(first, "Book room 7 please")
        assert question.startswith("The booking tool asks:\nWhich dates for room 7?"), question
        assert "checkin" in question and "nights" in question
    finally:
        first.stop()

    second = RunningGateway(path).start(org=first.org)  # a restart: same database, new process state
    try:
        with pytest.raises(openai.PermissionDeniedError) as refused:
            ask(second, "checkin: 2026-12-24", user="bob")
        assert refused.value.code == "input_not_yours"

        unreadable = ask(second, "nights: lots")
        assert "could not use that answer" in unreadable and "Which dates" in unreadable

        confirm = ask(second, "checkin: 2026-12-24")
        assert "\nBook room 7: 1 night(s) from 2026-12-24?" in confirm, confirm  # the default applied
        assert booking.booked == []

        done = ask(second, "yes")
        assert done == "Done: booked room 7 from 2026-12-24 for 1 night(s)"
        assert booking.booked == ["7"]
        assert "Which dates" in ask(second, "Book room 7 please")  # a new call asks anew
        # The open question is booking's own: an agent whose plugin merely has a server of the same
        # id does not take the reply as its answer (nor send that server the call's state).
        assert "Which dates" in ask(second, "checkin: 2026-12-24", agent="lookalike")
        assert other.booked == []

        records = httpx.get(
            f"{second.url}/v1/logs", params={"limit": 20}, headers={"authorization": f"Bearer {second.key}"}
        ).json()["data"]
        rounds = [s for r in records for s in r["steps"] if s["type"] == "input_round"]
        asked = sorted(s["input_round"] for s in rounds if "asked" in s)
        answered = sorted(s["input_round"] for s in rounds if s.get("answered"))
        assert asked == [1, 1, 1, 2] and answered == [1, 2], rounds  # each round of each call, logged
    finally:
        second.stop()
        other.server.stop()


def sample_summary(text: str) -> Sample:
    prompt = SamplingMessage(role="user", content=TextContent(type="text", text=f"Summarize: {text}"))
    return Sample([prompt], max_tokens=50_000)


def summarizing_model(body: dict[str, Any]) -> Reply:
    last = body["messages"][-1]
    if str(last.get("content", "")).startswith("Summarize: "):  # the server's sampling request
        assert "tools" not in body and body["max_tokens"] == 4096  # no tools; capped
        return Reply(text="SHORT VERSION", prompt_tokens=300, completion_tokens=5)
    if last["role"] == "tool":
        return Reply(text=f"Done: {str(last['content']).strip(chr(34))}")
    return Reply(tool_calls=[("notes__summarize", {"text": "a long report"})])


@pytest.mark.parametrize("allowed", [True, False])
def test_a_sampling_request_is_answered_by_the_runs_model_only_when_the_plugin_allows_it(
    allowed: bool, llm: ScriptedLLM, tmp_path: Path
) -> None:
    mcp = MCPServer("notes", log_level="WARNING")

    @mcp.tool()
    def summarize(text: str, summary: Annotated[CreateMessageResult, Resolve(sample_summary)]) -> str:
        """Summarize a text with the client's model."""
        assert isinstance(summary.content, TextContent)
        return f"summary: {summary.content.text}"

    server = ServerThread(mcp.streamable_http_app(), timeout_graceful_shutdown=1).start()
    plugin = write_plugin(
        tmp_path,
        "notes",
        {"mcp_servers": [{"id": "notes", "url": f"{server.url}/mcp"}], "agent": {"allow_sampling": allowed}},
    )
    config = base_config(
        tmp_path,
        llm.base_url,
        allow_private_mcp_urls=True,
        agents=[{"name": "notes", "model": "gpt-4o", "instructions": "Help.", "plugin": plugin}],
    )
    llm.handler = summarizing_model
    gateway = RunningGateway(write_config(tmp_path, config)).start()
    try:
        raw = gateway.client().chat.completions.with_raw_response.create(
            model="agent:notes", messages=[{"role": "user", "content": "Summarize the report"}]
        )
        reply = raw.parse()
        answer = reply.choices[0].message.content or ""
        if allowed:
            assert answer == "Done: summary: SHORT VERSION"
            assert reply.usage is not None and reply.usage.total_tokens > 0
            # The server's sampling call is the run's spend: in its record, not in the client's usage.
            record = log_of(gateway, raw.headers["x-hatchway-request-id"])
            assert record["usage"]["prompt_tokens"] == reply.usage.prompt_tokens + 300
            assert record["usage"]["completion_tokens"] == reply.usage.completion_tokens + 5
            [step] = [s for s in record["steps"] if s["type"] == "sampling"]
            assert (step["model"], step["prompt_tokens"], step["completion_tokens"]) == ("gpt-4o", 300, 5)
        else:
            assert "mcp_input_unsupported" in answer and "allow_sampling" in answer
    finally:
        gateway.stop()
        server.stop()


class Code(BaseModel):
    code: str = Field(pattern=r"^(a+)+$")  # a catastrophic regex, if anyone evaluated it


def ask_code(room: str) -> Elicit[Code]:
    return Elicit(f"Door code for {room}?", Code)


def test_a_question_outside_what_mcp_allows_is_refused_not_asked(llm: ScriptedLLM, tmp_path: Path) -> None:
    mcp = MCPServer("doors", log_level="WARNING")

    @mcp.tool()
    def unlock(room: str, code: Annotated[Code, Resolve(ask_code)]) -> str:
        """Unlock a door with a code the user types."""
        return "unlocked"

    server = ServerThread(mcp.streamable_http_app(), timeout_graceful_shutdown=1).start()
    plugin = write_plugin(tmp_path, "doors", {"mcp_servers": [{"id": "doors", "url": f"{server.url}/mcp"}]})
    config = base_config(
        tmp_path,
        llm.base_url,
        allow_private_mcp_urls=True,
        agents=[{"name": "doors", "model": "gpt-4o", "instructions": "Help.", "plugin": plugin}],
    )

    def model(body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return Reply(text=f"Result: {last['content']}")
        return Reply(tool_calls=[("doors__unlock", {"room": "7"})])

    llm.handler = model
    gateway = RunningGateway(write_config(tmp_path, config)).start()
    try:
        reply = gateway.client().chat.completions.create(
            model="agent:doors",
            messages=[{"role": "user", "content": "Open room 7"}],
            extra_headers={"hatchway-session": "s-1"},
        )
        answer = reply.choices[0].message.content or ""
        assert "mcp_input_unsupported" in answer and "pattern" in answer, answer
    finally:
        gateway.stop()
        server.stop()
