"""The limits when Redis fails (docs/reliability.md, "Limits when Redis fails"): a Redis that refuses
or hangs costs every run route at most ``limits.redis_timeout_seconds`` and is answered as
``limits.on_redis_failure`` says — never a 500; a queued background response gives back the tokens
it reserved; after a Redis restart a budget's count is the run log's sum again."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from hatchway.limits.scopes import reserved_tokens
from tests.conftest import GatewayFactory
from tests.support.gateway import RunningGateway
from tests.support.redis_server import RedisServer
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import wait_until

TIMEOUT = 0.5
"""``limits.redis_timeout_seconds`` of these gateways."""
BOUND = TIMEOUT + 2.5
"""The longest a request may take with Redis failing: the limits' bound, and a loaded machine's
slack for the rest of the request (a scripted upstream answering at once)."""
USER = [{"role": "user", "content": "hi"}]


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path).start()
    yield server
    server.stop()


def _limited(redis_server: RedisServer, **limits: Any) -> dict[str, Any]:
    return {
        "redis_url": redis_server.url,
        "background": {"serve_concurrency": 1},
        "limits": {
            "keys": {"*": {"requests_per_minute": 1000, "tokens_per_minute": 100_000, "concurrent_runs": 10}},
            "redis_timeout_seconds": TIMEOUT,
            **limits,
        },
    }


def _routes(gateway: RunningGateway) -> dict[str, Callable[[], int]]:
    """Each run route, called once with an official SDK (httpx for compaction): its HTTP status."""
    client = gateway.client()
    claude = anthropic.Anthropic(base_url=gateway.url, api_key=gateway.key, max_retries=0, timeout=30)

    def status(call: Callable[[], Any]) -> Callable[[], int]:
        def called() -> int:
            try:
                return int(call().http_response.status_code)
            except (openai.APIStatusError, anthropic.APIStatusError) as exc:
                return exc.status_code

        return called

    def compact() -> int:
        url = f"{gateway.url}/v1/responses/compact"
        body = {"model": "gpt-4o", "input": USER}
        return httpx.post(
            url, json=body, headers={"authorization": f"Bearer {gateway.key}"}, timeout=30
        ).status_code

    return {
        "chat": status(
            lambda: client.chat.completions.with_raw_response.create(model="gpt-4o", messages=USER)
        ),
        "messages": status(
            lambda: claude.messages.with_raw_response.create(model="gpt-4o", max_tokens=50, messages=USER)
        ),
        "responses": status(lambda: client.responses.with_raw_response.create(model="gpt-4o", input="hi")),
        "background": status(
            lambda: client.responses.with_raw_response.create(model="gpt-4o", input="hi", background=True)
        ),
        "compact": compact,
    }


def _timed(call: Callable[[], int]) -> tuple[int, float]:
    started = time.monotonic()
    status = call()
    return status, time.monotonic() - started


def _metric(gateway: RunningGateway, outcome: str) -> float:
    text = httpx.get(f"{gateway.url}/metrics", timeout=30).text
    series = f'hatchway_limits_redis_failures_total{{outcome="{outcome}",step="admit"}}'
    return next(float(line.split()[-1]) for line in text.splitlines() if line.startswith(series))


@pytest.mark.parametrize("failure", ["refusing", "hung"])
def test_admit_lets_every_run_route_in_unchecked_within_the_bound(
    gateway_factory: GatewayFactory, llm: ScriptedLLM, redis_server: RedisServer, failure: str
) -> None:
    llm.default = Reply(text="ok", prompt_tokens=3, completion_tokens=2)
    gateway = gateway_factory(**_limited(redis_server))  # on_redis_failure: admit, the default
    routes = _routes(gateway)
    assert {name: call() for name, call in routes.items()} == dict.fromkeys(routes, 200)  # Redis answers

    with _failing(redis_server, failure):
        answers = {name: _timed(call) for name, call in routes.items()}
    statuses = {name: status for name, (status, _) in answers.items()}
    # The job queue of background responses is Redis too: that one is 503, from the queue, whose
    # own calls wait up to redis-py's 5 s socket timeout.
    assert statuses == {**dict.fromkeys(routes, 200), "background": 503}
    bounds = {**dict.fromkeys(routes, BOUND), "background": 5 + BOUND}
    assert [name for name, (_, took) in answers.items() if took > bounds[name]] == []
    assert _metric(gateway, "admitted") >= len(routes)


@pytest.mark.parametrize("failure", ["refusing", "hung"])
def test_refuse_answers_every_run_route_503_with_retry_after_within_the_bound(
    gateway_factory: GatewayFactory, llm: ScriptedLLM, redis_server: RedisServer, failure: str
) -> None:
    llm.default = Reply(text="ok")
    gateway = gateway_factory(**_limited(redis_server, on_redis_failure="refuse", refresh_seconds=2))
    client = gateway.client()
    with _failing(redis_server, failure):
        started = time.monotonic()
        answer = httpx.post(
            f"{gateway.url}/v1/chat/completions",
            json={"model": "gpt-4o", "messages": USER},
            headers={"authorization": f"Bearer {gateway.key}"},
            timeout=30,
        )
        took = time.monotonic() - started
        answers = {name: _timed(call) for name, call in _routes(gateway).items()}
        with pytest.raises(openai.InternalServerError) as refused:
            client.chat.completions.create(model="gpt-4o", messages=USER)
    assert answer.status_code == 503 and took <= BOUND
    assert answer.headers["retry-after"] == "2"  # limits.refresh_seconds: when slots are given back
    error = answer.json()["error"]
    assert error["code"] == "unavailable" and error["type"] == "server_error"
    assert "Redis did not answer" in error["message"]
    assert {name: status for name, (status, _) in answers.items()} == dict.fromkeys(answers, 503)
    assert [name for name, (_, took) in answers.items() if took > BOUND] == []
    assert refused.value.code == "unavailable"
    assert len(llm.requests) == 0  # a refused request reaches no upstream
    assert _metric(gateway, "refused") >= len(answers) + 2

    # Redis answers again: so do the routes.
    assert client.chat.completions.create(model="gpt-4o", messages=USER).choices[0].message.content == "ok"


def _failing(redis_server: RedisServer, failure: str) -> AbstractContextManager[None]:
    return redis_server.hung() if failure == "hung" else redis_server.refusing()


LIMIT = 100_000


def _tokens_left(gateway: RunningGateway) -> int:
    """The tokens-per-minute window's room, read off a request that never fits (refused: counted nowhere)."""
    answer = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": "gpt-4o", "messages": USER, "max_tokens": LIMIT},
        headers={"authorization": f"Bearer {gateway.key}"},
        timeout=30,
    )
    assert answer.status_code == 429 and answer.json()["error"]["code"] == "tokens_limit_exceeded", (
        answer.text
    )
    return int(answer.headers["x-ratelimit-remaining-tokens"])


def _queue_background(gateway: RunningGateway, max_output_tokens: int) -> tuple[str, int]:
    """A background response for the job queue, sent as known bytes: its id and its reservation."""
    raw = orjson.dumps(
        {"model": "gpt-4o", "input": "hi", "background": True, "max_output_tokens": max_output_tokens}
    )
    answer = httpx.post(
        f"{gateway.url}/v1/responses",
        content=raw,
        headers={"authorization": f"Bearer {gateway.key}", "content-type": "application/json"},
        timeout=30,
    )
    assert answer.status_code == 200 and answer.json()["status"] == "queued", answer.text
    return answer.json()["id"], reserved_tokens(max_output_tokens, len(raw))


def test_a_queued_background_response_gives_back_what_it_reserved_and_did_not_use(
    gateway_factory: GatewayFactory, llm: ScriptedLLM, redis_server: RedisServer
) -> None:
    llm.default = Reply(text="ok", prompt_tokens=30, completion_tokens=20)  # uses 50 tokens
    config = _limited(redis_server)
    config["limits"]["keys"]["*"] = {"tokens_per_minute": LIMIT}
    gateway = gateway_factory(**config)
    client = gateway.client()

    done, reserved = _queue_background(gateway, 5_000)
    assert reserved > 5_000
    wait_until(lambda: client.responses.retrieve(done).status == "completed", message="the response to run")
    # Its worker settles it: the window holds what it used, not its reservation as well.
    wait_until(lambda: _tokens_left(gateway) == LIMIT - 50, timeout=15, message="the reservation back")


def test_a_queued_background_response_cancelled_before_it_ran_gives_back_its_reservation(
    gateway_factory: GatewayFactory, llm: ScriptedLLM, redis_server: RedisServer
) -> None:
    config = _limited(redis_server)
    config["limits"]["keys"]["*"] = {"tokens_per_minute": LIMIT}
    config["background"] = {"serve_concurrency": 0}  # no worker: it stays queued
    gateway = gateway_factory(**config)

    queued, reserved = _queue_background(gateway, 5_000)
    assert _tokens_left(gateway) == LIMIT - reserved
    assert gateway.client().responses.cancel(queued).status == "cancelled"
    wait_until(lambda: _tokens_left(gateway) == LIMIT, timeout=15, message="the reservation back")
    assert llm.requests == []


PRICED = [
    {
        "name": "gpt-4o",
        "provider": "upstream",
        "upstream_model": "gpt-4o-2024",
        "price": {"input_per_mtok": 10_000, "output_per_mtok": 10_000},  # 0.01 USD per token
    }
]


class Budgeted:
    """A gateway whose runs cost 5 USD each against a 1 USD daily budget, so any run spends it and a
    probe is refused with the count in its message; ``runs`` are admitted at once, each held at the
    upstream until ``finish(name)``. Records reach the log 2 s after their run, so a count read
    from the log then misses the runs in flight. A run's admission holds the estimate of its short
    prompt (about 0.2 USD; no output is held), which lets all of them in; the upstream then reports
    500 tokens."""

    def __init__(
        self,
        factory: GatewayFactory,
        llm: ScriptedLLM,
        redis_server: RedisServer,
        database_url: str,
        *names: str,
    ) -> None:
        self.gates = {name: threading.Event() for name in names}
        llm.handler = lambda body: Reply(
            text="ok",
            prompt_tokens=300,
            completion_tokens=200,
            gate=self.gates.get(body["messages"][-1]["content"]),
        )
        config = _limited(redis_server, refresh_seconds=0.2, budget_hold_output_tokens=0)
        config["limits"]["keys"]["*"] = {"budget_usd_per_day": 1}
        config["run_records"] = {"linger_seconds": 2, "retry_seconds": 0.5}
        upstream = {"id": "upstream", "base_url": llm.base_url, "timeout_seconds": 60}  # runs held a while
        self.gateway = factory(database_url, providers=[upstream], models=PRICED, **config)
        self.client = self.gateway.client()
        self.runs = {name: threading.Thread(target=_chat, args=(self.client, name)) for name in names}
        for run in self.runs.values():  # all admitted while nothing is spent
            run.start()
        wait_until(lambda: len(llm.requests) == len(names), message="the runs to reach the upstream")

    def finish(self, name: str) -> None:
        self.gates[name].set()
        self.runs[name].join(timeout=30)
        assert not self.runs[name].is_alive()

    def probe(self) -> float | None:
        """The count, from a refusal's message (a refused request costs nothing); None if admitted."""
        try:
            self.client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "probe"}]
            )
        except openai.RateLimitError as exc:
            return float(exc.message.partition(" USD has been spent")[0].rpartition(" ")[2])
        return None

    def logged_usd(self) -> float:
        usage = httpx.get(
            f"{self.gateway.url}/v1/usage",
            params={"since": datetime.now(UTC).strftime("%Y-%m-%dT00:00:00Z")},
            headers={"authorization": f"Bearer {self.gateway.key}"},
            timeout=30,
        )
        return float(usage.json()["totals"]["cost_usd"])

    def wait_for_the_count_to_be_the_logs_sum(self) -> None:
        wait_until(
            lambda: self.probe() == self.logged_usd(),
            timeout=20,
            interval=0.2,
            message="the count to be the run log's sum",
        )


def test_after_a_redis_restart_a_budget_count_is_the_run_logs_sum(
    gateway_factory: GatewayFactory, llm: ScriptedLLM, redis_server: RedisServer, database_url: str
) -> None:
    budget = Budgeted(gateway_factory, llm, redis_server, database_url, "before", "after", "refused")
    # A run settled just before Redis restarts, and one just after, before the count is read again.
    budget.finish("before")
    wait_until(lambda: budget.probe() is not None, message="the first run's cost to be counted")
    redis_server.restart()
    budget.finish("after")
    budget.probe()
    # A run settled while Redis refused connections, and Redis back empty.
    redis_server.stop()
    budget.finish("refused")
    redis_server.start()
    budget.probe()
    budget.wait_for_the_count_to_be_the_logs_sum()
    assert budget.logged_usd() >= 15  # the three runs at least (and any probe let in meanwhile)


def test_a_run_settled_while_redis_hung_is_counted_once_it_answers(
    gateway_factory: GatewayFactory, llm: ScriptedLLM, redis_server: RedisServer, database_url: str
) -> None:
    budget = Budgeted(gateway_factory, llm, redis_server, database_url, "hung")
    with redis_server.hung():  # Redis keeps its data: the count is there, without this run
        budget.finish("hung")
        wait_until(lambda: budget.logged_usd() == 5, message="the run to end (its record in the log)")
    budget.wait_for_the_count_to_be_the_logs_sum()


def _chat(client: openai.OpenAI, name: str) -> None:
    answer = client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": name}])
    assert answer.choices[0].message.content == "ok"
