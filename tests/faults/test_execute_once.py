"""Execute once, for real: one user intent, one execution, whatever duplicates of the "yes" arrive.

Two ``hatchway serve`` processes on one PostgreSQL and one Redis (each also runs queued background
responses); the example ``contas`` MCP server records each execution in its ledger before it answers
and then takes ``HOLD`` seconds, as a slow backend does. The end user's "sim" arrives several times —
together, staggered 0.4 s and 0.8 s apart (the issue's double click, SDK retry and second tab),
split across both replicas — through Chat Completions, the Responses API (stored chains, background
responses) and ``POST /v1/operations/{id}/confirm``. Every duplicate must be answered with the
operation's outcome, and the ledger must hold one execution per question answered.

A model that calls the tool again after the yes (scripted so below) opens a new operation that says
it repeats the first, and nothing but a reply to that new question executes it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest
import yaml

from tests.support.backends import NEEDS_PG_AND_REDIS, REDIS_URL
from tests.support.contas import ANSWER, ASK, QUESTION, RunningContas, contas_model
from tests.support.gateway import OrgKey, create_org_key
from tests.support.paths import EXAMPLE_AGENT
from tests.support.replicas import (
    Replicas,
    ServeProcess,
    eventually,
    purge_redis,
    replica_config,
    unique_redis_prefix,
)
from tests.support.scripted_llm import Reply, ScriptedLLM

pytestmark = NEEDS_PG_AND_REDIS

HOLD = 2.5
"""Seconds each execution takes after the server recorded it (the issue measured 1–12 s)."""
DUPLICATES = 6
DECIDED = "Operation {} (cancelar_vas_avulso) was confirmed already and executed once: COMPLETED"
"""How the gateway answers a duplicate yes: the outcome of the operation it already confirmed."""
CANCELLATIONS = {"cancelar_vas_avulso", "cancelar_vas_lote", "cancelar_vas_fluxo"}


@dataclass
class World:
    replicas: Replicas
    a: ServeProcess
    b: ServeProcess
    upstream: ScriptedLLM
    contas: RunningContas
    database_url: str


@pytest.fixture(scope="module")
def world(pg_database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("execute-once")
    upstream = ScriptedLLM().start()
    contas = RunningContas().start()
    contas.backend.hold_seconds = HOLD
    prefix = unique_redis_prefix()
    plugin = tmp / "contas.yaml"
    server = {"id": "contas", "url": contas.url, "timeout_ms": 60_000, "max_retries": 0}
    plugin.write_text(yaml.safe_dump({"version": "1", "mcp_servers": [server]}), encoding="utf-8")
    config = replica_config(tmp, pg_database_url, REDIS_URL, prefix, upstream.base_url)
    config["background"]["serve_concurrency"] = 4  # the replicas run queued responses too
    config["agents"] = [
        {
            "name": "contas",
            "model": "gpt-4o",
            "plugin": str(plugin),
            "tools": str(EXAMPLE_AGENT / "tools.yaml"),
            "tool_policies": str(EXAMPLE_AGENT / "tool_policies.yaml"),
        }
    ]
    replicas = Replicas(tmp, config)
    try:
        a, b = replicas.serve("a"), replicas.serve("b")
        yield World(replicas, a, b, upstream, contas, pg_database_url)
    finally:
        replicas.stop()
        purge_redis(REDIS_URL, prefix)
        contas.stop()
        upstream.stop()


@pytest.fixture
def org(world: World) -> OrgKey:
    """A fresh organisation per test (its operations and sessions are its own)."""
    import asyncio

    world.upstream.handler = contas_model
    return asyncio.run(create_org_key(world.database_url))


class Ledger:
    """The contas server's executions from the start of a test on."""

    def __init__(self, contas: RunningContas) -> None:
        self.contas = contas
        self.start = len(contas.backend.calls)

    def executions(self) -> list[str]:
        """The operation id (idempotency key) of each execution since the start, in order."""
        calls = self.contas.backend.calls[self.start :]
        return [c["idempotency_key"] for c in calls if c["tool"] in CANCELLATIONS]


def staggered(gap: float, count: int, send: Callable[[int], Any]) -> list[Any]:
    """``send(i)`` for i in 0..count-1 from threads of their own: all at once (``gap`` 0, released
    together by a barrier) or the i-th ``gap * i`` seconds after the first (a user clicking again,
    a client retrying); returns what each returned, in order."""
    barrier = threading.Barrier(count)
    start = time.monotonic() + 0.2

    def one(i: int) -> Any:
        if gap == 0:
            barrier.wait(30)
        else:  # pacing a load, not waiting for an outcome
            threading.Event().wait(max(start + gap * i - time.monotonic(), 0))
        return send(i)

    with ThreadPoolExecutor(count) as pool:
        futures: list[Future[Any]] = [pool.submit(one, i) for i in range(count)]
        return [f.result(240) for f in futures]


def _replica(world: World, i: int) -> ServeProcess:
    return world.a if i % 2 == 0 else world.b


def _chat(replica: ServeProcess, org: OrgKey, messages: list[dict[str, Any]], session: str) -> Any:
    headers = {"hatchway-session": session, "X-On-Behalf-Of": "ana"}
    client = replica.client(org.key)
    return client.chat.completions.with_raw_response.create(
        model="agent:contas", messages=messages, extra_headers=headers, timeout=180
    )


def _text(raw: Any) -> str:
    return raw.parse().choices[0].message.content


def _operation(world: World, org: OrgKey, op_id: str) -> dict[str, Any]:
    response = world.a.http("GET", f"/v1/operations/{op_id}", org.key)
    assert response.status_code == 200, response.text
    return response.json()


def _ask_by_chat(world: World, org: OrgKey, session: str) -> tuple[list[dict[str, Any]], str]:
    raw = _chat(world.a, org, [{"role": "user", "content": ASK}], session)
    assert _text(raw) == QUESTION
    turn = [{"role": "user", "content": ASK}, {"role": "assistant", "content": QUESTION}]
    return turn, raw.headers["x-hatchway-operation-id"]


# -- Chat Completions ----------------------------------------------------------------------------------


@pytest.mark.parametrize("gap", [0.0, 0.4, 0.8], ids=["together", "0.4s-apart", "0.8s-apart"])
def test_duplicate_yes_replies_by_chat_execute_once_and_each_gets_the_outcome(
    world: World, org: OrgKey, gap: float
) -> None:
    ledger = Ledger(world.contas)
    turn, op_id = _ask_by_chat(world, org, f"chat-{gap}")
    yes = [*turn, {"role": "user", "content": "sim"}]

    answers = staggered(gap, DUPLICATES, lambda i: _text(_chat(_replica(world, i), org, yes, f"chat-{gap}")))

    assert ledger.executions() == [op_id]
    assert answers.count(ANSWER) == 1, answers  # the reply that executed it: the model reports
    duplicates = [a for a in answers if a != ANSWER]
    assert len(duplicates) == DUPLICATES - 1
    assert all(a.startswith(DECIDED.format(op_id)) and "PARTIAL_SUCCESS" in a for a in duplicates), duplicates
    assert _operation(world, org, op_id)["status"] == "COMPLETED"


# -- the Responses API, stored chains and background responses --------------------------------------------


def _responses(replica: ServeProcess, org: OrgKey) -> openai.OpenAI:
    return replica.client(org.key).with_options(default_headers={"X-On-Behalf-Of": "ana"}, timeout=180)


def _final(client: openai.OpenAI, response: Any) -> Any:
    """A background response once it has ended."""
    return eventually(
        lambda: (r := client.responses.retrieve(response.id)).status in ("completed", "failed") and r,
        timeout=180,
        message=f"background response {response.id} to end",
    )


@pytest.mark.parametrize("gap", [0.0, 0.4, 0.8], ids=["together", "0.4s-apart", "0.8s-apart"])
def test_duplicate_yes_replies_by_responses_and_background_execute_once(
    world: World, org: OrgKey, gap: float
) -> None:
    ledger = Ledger(world.contas)
    asked = _responses(world.a, org).responses.create(model="agent:contas", input=ASK)
    assert asked.output_text == QUESTION
    [op_id] = {json.loads(i.output)["operation_id"] for i in asked.output if i.type == "mcp_call"}

    def reply(i: int) -> str:
        client = _responses(_replica(world, i), org)
        background = i % 3 == 2  # every third one a background response, run by either replica's queue
        created = client.responses.create(
            model="agent:contas", input="sim", previous_response_id=asked.id, background=background
        )
        done = _final(client, created) if background else created
        assert done.status == "completed", f"{done.id}: {done.error}\n{world.replicas.logs()}"
        return done.output_text

    answers = staggered(gap, DUPLICATES, reply)

    assert ledger.executions() == [op_id]
    assert answers.count(ANSWER) == 1, answers
    assert all(a == ANSWER or a.startswith(DECIDED.format(op_id)) for a in answers), answers
    assert _operation(world, org, op_id)["confirmed_via"] == "reply"


# -- the confirm endpoint, mixed with the chat -----------------------------------------------------------


def test_duplicates_through_the_confirm_endpoint_and_the_chat_execute_once(world: World, org: OrgKey) -> None:
    ledger = Ledger(world.contas)
    turn, op_id = _ask_by_chat(world, org, "mixed")
    yes = [*turn, {"role": "user", "content": "sim"}]

    def send(i: int) -> tuple[str, Any]:
        replica = _replica(world, i)
        if i % 2 == 0:
            confirmed = replica.http(
                "POST", f"/v1/operations/{op_id}/confirm", org.key, headers={"X-On-Behalf-Of": "ana"}
            )
            return "confirm", confirmed
        return "chat", _text(_chat(replica, org, yes, "mixed"))

    results = staggered(0.4, DUPLICATES, send)

    assert ledger.executions() == [op_id]
    confirms = [r for kind, r in results if kind == "confirm"]
    chats = [r for kind, r in results if kind == "chat"]
    assert all(r.status_code in (200, 409) for r in confirms), [r.text for r in confirms]
    # Every confirmation that did not execute is answered with the outcome, never "EXECUTING".
    assert all(
        (r.json() if r.status_code == 200 else r.json()["operation"])["status"] == "COMPLETED"
        for r in confirms
    )
    assert all(a == ANSWER or a.startswith(DECIDED.format(op_id)) for a in chats), chats
    assert sum(r.status_code == 200 for r in confirms) + chats.count(ANSWER) == 1


# -- a model that calls the tool again after the yes ------------------------------------------------------


def _recalling_model(body: dict[str, Any]) -> Reply:
    """``contas_model``, except that it calls the tool again with the same arguments after a yes —
    once the operation has executed, and whenever the user's last word is "sim" (after "Você
    confirma…?" → "sim", a real model does just that when the gateway hands it the message)."""
    last = body["messages"][-1]
    executed = last["role"] == "tool" and json.loads(last["content"]).get("status") == "COMPLETED"
    if executed or (last["role"] == "user" and last["content"] == "sim"):
        return Reply(tool_calls=[("cancelar_vas_avulso", {"subject": "Produto A, Produto B e Produto C"})])
    return contas_model(body)


def test_a_model_that_calls_the_tool_again_gets_no_second_execution_without_a_new_answer(
    world: World, org: OrgKey
) -> None:
    world.upstream.handler = _recalling_model
    ledger = Ledger(world.contas)
    turn, op_id = _ask_by_chat(world, org, "recall")
    yes = [*turn, {"role": "user", "content": "sim"}]

    answers = staggered(0.4, DUPLICATES, lambda i: _chat(_replica(world, i), org, yes, "recall"))

    assert ledger.executions() == [op_id]
    # The yes that executed it ends with the model's new call: a new question, saying what it repeats.
    asked_again = [r for r in answers if r.headers["x-hatchway-operation-id"] != op_id]
    assert len(asked_again) == 1
    repeat_id = asked_again[0].headers["x-hatchway-operation-id"]
    repeat_question = _text(asked_again[0])
    assert (
        repeat_question.startswith(QUESTION)
        and f"This repeats operation {op_id}, confirmed" in repeat_question
    )
    repeat = _operation(world, org, repeat_id)
    assert repeat["status"] == "AWAITING_CONFIRMATION" and repeat["repeat_of"] == op_id
    # Every other copy of the "sim" was told the first one's outcome (and the question now open).
    for duplicate in (r for r in answers if r is not asked_again[0]):
        assert _text(duplicate).startswith(DECIDED.format(op_id))

    # More copies of the old "sim", a bare "sim" with no conversation: none of them answers the new
    # question, so nothing runs again.
    for i in range(2):
        assert _text(_chat(_replica(world, i), org, yes, "recall")).startswith(DECIDED.format(op_id))
    bare = _text(_chat(world.b, org, [{"role": "user", "content": "sim"}], "recall"))
    assert bare == repeat_question
    assert ledger.executions() == [op_id]

    # The user answers the new question itself: that is a second intent, and it executes once.
    world.upstream.handler = contas_model
    second_turn = [
        *yes,
        {"role": "assistant", "content": repeat_question},
        {"role": "user", "content": "sim"},
    ]
    assert _text(_chat(world.b, org, second_turn, "recall")) == ANSWER
    assert ledger.executions() == [op_id, repeat_id]


def test_a_late_duplicate_on_the_other_replica_is_answered_from_the_stored_outcome(
    world: World, org: OrgKey
) -> None:
    """The duplicate that lands after the execution ended (an SDK's retry after a timeout, with httpx
    as a plain client) is answered at once from the stored outcome by the other replica."""
    ledger = Ledger(world.contas)
    turn, op_id = _ask_by_chat(world, org, "late")
    yes = [*turn, {"role": "user", "content": "sim"}]
    assert _text(_chat(world.a, org, yes, "late")) == ANSWER
    calls = len(world.upstream.requests)
    late = httpx.post(
        f"{world.b.url}/v1/chat/completions",
        headers={"authorization": f"Bearer {org.key}", "hatchway-session": "late", "X-On-Behalf-Of": "ana"},
        json={"model": "agent:contas", "messages": yes},
        timeout=60,
    )
    assert late.status_code == 200 and late.headers["x-hatchway-operation-id"] == op_id
    assert late.json()["choices"][0]["message"]["content"].startswith(DECIDED.format(op_id))
    assert len(world.upstream.requests) == calls  # the model was not asked
    assert ledger.executions() == [op_id]
