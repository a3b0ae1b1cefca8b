"""Two gateways on one database (SQLite and PostgreSQL): chains and cancels cross replicas."""

from __future__ import annotations

import json

import openai
import pytest

from tests.support.responses_api import WEATHER, poll
from tests.support.scripted_llm import ScriptedLLM
from tests.support.servers import wait_until


def test_chain_started_on_one_replica_continues_on_another(
    gateway_factory, llm: ScriptedLLM, database_url: str
) -> None:
    first = gateway_factory(database_url=database_url)
    second = gateway_factory(database_url=database_url)
    llm.reply(tool_calls=[("get_weather", {"city": "Braga"}, "call_braga")])
    llm.reply("Braga: 15°C")
    llm.reply("You asked about Braga.")

    a = first.client().responses.create(model="gpt-4o", input="Braga?", tools=[WEATHER], store=True)
    b = second.client(first.key).responses.create(
        model="gpt-4o",
        previous_response_id=a.id,
        input=[{"type": "function_call_output", "call_id": "call_braga", "output": "15°C"}],
        tools=[WEATHER],
    )
    c = first.client().responses.create(model="gpt-4o", previous_response_id=b.id, input="what did I ask?")

    assert (b.output_text, c.output_text) == ("Braga: 15°C", "You asked about Braga.")
    messages = llm.requests[2]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "user"]
    assert json.loads(messages[1]["tool_calls"][0]["function"]["arguments"]) == {"city": "Braga"}
    items = second.client(first.key).responses.input_items.list(b.id).data
    assert [(i.type, i.call_id) for i in items] == [("function_call_output", "call_braga")]


def test_cancel_through_another_replica_stops_the_run(
    gateway_factory, llm: ScriptedLLM, database_url: str
) -> None:
    llm.reply("never", delay=20)
    runner = gateway_factory(database_url=database_url, response_lease_seconds=0.6)
    other = gateway_factory(database_url=database_url, response_lease_seconds=0.6)
    created = runner.client().responses.create(model="gpt-4o", input="x", background=True)
    poll(runner.client(), created.id, ("in_progress",))
    wait_until(lambda: llm.requests, message="the upstream call to start")

    cancelled = other.client(runner.key).responses.cancel(created.id)

    assert cancelled.status == "cancelled"
    # the runner's lease heartbeat sees the cancel and stops its task, which logs the interruption
    wait_until(
        lambda: [
            r for r in runner.client().get("/logs", cast_to=object)["data"] if r["response_id"] == created.id
        ],
        timeout=5,
        message="the runner to stop the cancelled run",
    )
    assert runner.client().responses.retrieve(created.id).status == "cancelled"


def test_background_on_each_backend(gateway_factory, llm: ScriptedLLM, database_url: str) -> None:
    llm.reply("stored everywhere", delay=0.2)
    gw = gateway_factory(database_url=database_url)
    client = gw.client()

    created = client.responses.create(model="gpt-4o", input="x", background=True, metadata={"k": "v"})

    done = poll(client, created.id, ("completed",))
    assert done.output_text == "stored everywhere" and done.metadata == {"k": "v"}
    client.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)
