"""Spend budgets, background concurrency, the Responses WebSocket and compaction under ``limits:``,
refusals in the run log, and ``hatchway limits set`` applied by a running gateway — through a real
gateway and the official client."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import openai
import pytest

from tests.api.test_responses_socket import turn
from tests.conftest import GatewayFactory
from tests.support import cli
from tests.support.backends import REDIS_URL
from tests.support.gateway import RunningGateway
from tests.support.replicas import purge_redis, unique_redis_prefix
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import wait_until

USER = [{"role": "user", "content": "hi"}]
PRICED = [
    {
        "name": "gpt-4o",
        "provider": "upstream",
        "upstream_model": "gpt-4o-2024",
        "price": {"input_per_mtok": 1_000_000, "output_per_mtok": 1_000_000},  # 1 USD per token
    }
]


def _chat(client: openai.OpenAI, **kwargs: Any) -> Any:
    return client.chat.completions.with_raw_response.create(model="gpt-4o", messages=USER, **kwargs)


def _refusal(call: Any) -> openai.RateLimitError | None:
    try:
        call()
    except openai.RateLimitError as exc:
        return exc
    return None


def test_a_daily_budget_refuses_once_spent_until_midnight_and_a_new_gateway_counts_it_too(
    gateway_factory: GatewayFactory, llm: ScriptedLLM
) -> None:
    llm.default = Reply(text="ok", prompt_tokens=3, completion_tokens=2)  # 5 USD a call
    config = {"models": PRICED, "limits": {"keys": {"*": {"budget_usd_per_day": 8}}}}
    gateway = gateway_factory(**config)
    client = gateway.client()

    assert _chat(client).parse().choices[0].message.content == "ok"  # 0 spent: admitted
    assert _chat(client).parse().choices[0].message.content == "ok"  # 5 spent < 8: admitted, to 10
    refused = wait_until(lambda: _refusal(lambda: _chat(client)), message="the budget to be spent")
    assert refused.status_code == 429 and refused.code == "budget_exceeded"
    assert refused.param == "limits.keys.*.budget_usd_per_day"
    midnight = (datetime.now(UTC) + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    assert refused.response.headers["x-hatchway-budget-reset"] == f"{midnight:%Y-%m-%dT%H:%M:%SZ}"
    left = (midnight - datetime.now(UTC)).total_seconds()
    assert abs(int(refused.response.headers["retry-after"]) - left) <= 5
    assert "10.000000 USD has been spent this day" in refused.message
    assert len(llm.requests) == 2  # the refused requests reached no upstream

    other = gateway.new_org()  # another organisation's key has its own budget
    assert _chat(gateway.client(key=other.key)).parse().choices[0].message.content == "ok"

    # A gateway started later on the same database starts its count from the run log.
    def priced_records() -> int:
        page = httpx.get(f"{gateway.url}/v1/logs", headers={"authorization": f"Bearer {gateway.key}"}).json()
        return len([r for r in page["data"] if r["http_status"] == 200])

    wait_until(lambda: priced_records() == 2, message="the two runs' records to be written")
    later = RunningGateway(gateway.config_path).start(gateway.org)
    try:
        again = _refusal(lambda: _chat(later.client()))
        assert again is not None and again.code == "budget_exceeded"
    finally:
        later.stop()


def test_a_monthly_budget_of_an_agent_counts_its_runs_only(
    gateway_factory: GatewayFactory, llm: ScriptedLLM
) -> None:
    llm.default = Reply(text="ok", prompt_tokens=1, completion_tokens=1)
    gateway = gateway_factory(models=PRICED, limits={"users": {"ana": {"budget_usd_per_month": 1}}})
    ana = gateway.client(default_headers={"X-On-Behalf-Of": "ana"})
    bob = gateway.client(default_headers={"X-On-Behalf-Of": "bob"})
    _chat(ana)
    refused = wait_until(lambda: _refusal(lambda: _chat(ana)), message="ana's budget to be spent")
    assert refused.code == "budget_exceeded" and refused.param == "limits.users.ana.budget_usd_per_month"
    assert "this month" in refused.message
    assert _chat(bob).parse().choices[0].message.content == "ok"  # bob has no budget of his own


def test_background_runs_have_their_own_concurrency_limit(
    gateway_factory: GatewayFactory, llm: ScriptedLLM
) -> None:
    gateway = gateway_factory(limits={"keys": {"*": {"concurrent_background_runs": 1}}})
    client = gateway.client()
    gate = threading.Event()
    llm.reply("held", gate=gate)
    llm.default = Reply(text="ok")
    first = client.responses.create(model="gpt-4o", input="long", background=True)
    try:
        wait_until(lambda: llm.requests, message="the background run to reach the upstream")
        with pytest.raises(openai.RateLimitError) as refused:
            client.responses.create(model="gpt-4o", input="another", background=True)
        assert refused.value.code == "concurrency_limit_exceeded"
        assert refused.value.param == "limits.keys.*.concurrent_background_runs"
        # A foreground request is not a background run.
        assert client.responses.create(model="gpt-4o", input="now").output_text == "ok"
    finally:
        gate.set()
    wait_until(lambda: client.responses.retrieve(first.id).status == "completed", message="the first to end")
    wait_until(
        lambda: (
            _refusal(lambda: client.responses.create(model="gpt-4o", input="next", background=True)) is None
        ),
        message="the background slot to be free again",
    )


def test_a_refused_response_is_in_the_run_log(gateway_factory: GatewayFactory, llm: ScriptedLLM) -> None:
    llm.default = Reply(text="ok")
    gateway = gateway_factory(limits={"keys": {"*": {"requests_per_minute": 1}}})
    client = gateway.client()
    client.responses.create(model="gpt-4o", input="one")
    with pytest.raises(openai.RateLimitError):
        client.responses.create(model="gpt-4o", input="two")

    def refused_records() -> list[dict[str, Any]]:
        page = httpx.get(f"{gateway.url}/v1/logs", headers={"authorization": f"Bearer {gateway.key}"}).json()
        return [r for r in page["data"] if r["http_status"] == 429]

    [record] = wait_until(refused_records, message="the refusal's record")
    assert record["route"] == "responses" and record["status"] == "error"
    assert record["model"] == "gpt-4o"


def test_the_websocket_and_compaction_count_in_the_same_limits(
    gateway_factory: GatewayFactory, llm: ScriptedLLM
) -> None:
    llm.default = Reply(text="ok")
    gateway = gateway_factory(limits={"keys": {"*": {"requests_per_minute": 2}}})
    client = gateway.client()
    with client.responses.connect() as conn:
        conn.response.create(model="gpt-4o", input="one", store=False)
        assert turn(conn)[-1]["type"] == "response.completed"
        conn.response.create(model="gpt-4o", input="two", store=False)
        assert turn(conn)[-1]["type"] == "response.completed"
        conn.response.create(model="gpt-4o", input="three", store=False)
        [refused] = turn(conn)
    assert refused["type"] == "error" and refused["status"] == 429
    assert refused["error"]["code"] == "rate_limit_exceeded"
    assert refused["error"]["param"] == "limits.keys.*.requests_per_minute"

    compacted = httpx.post(
        f"{gateway.url}/v1/responses/compact",
        json={"model": "gpt-4o", "input": [{"role": "user", "content": "hi"}]},
        headers={"authorization": f"Bearer {gateway.key}"},
    )
    assert compacted.status_code == 429, compacted.text
    assert compacted.json()["error"]["code"] == "rate_limit_exceeded"
    assert len(llm.requests) == 2


def test_limits_set_with_the_cli_apply_to_a_running_gateway(
    gateway_factory: GatewayFactory, llm: ScriptedLLM
) -> None:
    llm.default = Reply(text="ok")
    gateway = gateway_factory(limits={"refresh_seconds": 0.2})
    client = gateway.client()
    assert "x-ratelimit-limit-requests" not in _chat(client).headers  # nothing limited yet
    org = gateway.org
    assert org is not None

    config = ["--config", str(gateway.config_path)]
    done = cli.run(
        ["limits", "set", "--org", org.org_name, "requests_per_minute=2", *config],
        cwd=gateway.config_path.parent,
    )
    assert done.returncode == 0, done.stderr
    assert f"limits.organisations.{org.org_name}: requests_per_minute=2" in done.stdout
    wait_until(
        lambda: _chat(client).headers.get("x-ratelimit-limit-requests") == "2", message="the new limit"
    )
    refused = wait_until(lambda: _refusal(lambda: _chat(client)), message="the limit to refuse")
    assert refused.param == f"limits.organisations.{org.org_name}.requests_per_minute"

    shown = cli.run(
        ["limits", "show", "--json", "--config", str(gateway.config_path)], cwd=gateway.config_path.parent
    )
    assert shown.returncode == 0, shown.stderr
    assert '"requests_per_minute": 2' in shown.stdout

    # An organisation's key has no way to change them: no route takes limits.
    for method in ("PUT", "POST", "PATCH"):
        answer = httpx.request(
            method,
            f"{gateway.url}/v1/limits",
            json={"organisations": {org.org_name: {"requests_per_minute": 1000}}},
            headers={"authorization": f"Bearer {gateway.key}"},
        )
        assert answer.status_code in (404, 405), answer.text

    bad = cli.run(
        ["limits", "set", "--org", org.org_name, "concurrent_runs=0", "--config", str(gateway.config_path)],
        cwd=gateway.config_path.parent,
    )
    assert bad.returncode == 2 and "concurrent_runs" in bad.stderr


CENT_A_TOKEN = [
    {
        "name": "gpt-4o",
        "provider": "upstream",
        "upstream_model": "gpt-4o-2024",
        "price": {"input_per_mtok": 0, "output_per_mtok": 20_000},  # 0.02 USD an output token
    }
]


@pytest.mark.parametrize(
    "backend", ["memory", pytest.param("redis", marks=[pytest.mark.redis, pytest.mark.postgres])]
)
def test_requests_started_together_hold_their_estimate_so_a_budget_is_passed_by_one_call_at_most(
    backend: str, request: pytest.FixtureRequest, gateway_factory: GatewayFactory, llm: ScriptedLLM
) -> None:
    """8 requests at once, each costing 0.02 USD (max_tokens 1), under a 0.05 daily budget: each
    admitted one holds its estimate (0.02) until it ends, so 3 are let in (0, 0.02, 0.04 held: below
    0.05) and 5 refused — not 8 let in because none had ended yet. On Redis, across two gateways."""
    gate = threading.Event()
    llm.default = Reply(text="ok", prompt_tokens=5, completion_tokens=1, gate=gate)
    config: dict[str, Any] = {"models": CENT_A_TOKEN, "limits": {"keys": {"*": {"budget_usd_per_day": 0.05}}}}
    prefix = ""
    if backend == "redis":
        if not REDIS_URL:
            pytest.skip("Redis not configured: set HATCHWAY_TEST_REDIS_URL")
        prefix = unique_redis_prefix()
        config |= {"redis_url": REDIS_URL, "redis_prefix": prefix}
        first = gateway_factory(request.getfixturevalue("pg_database_url"), **config)
        second = RunningGateway(first.config_path).start(first.org)
        request.addfinalizer(second.stop)
        gateways = [first, second]
    else:
        gateways = [gateway_factory(**config)]
    try:
        outcomes: list[Any] = []

        def send(gateway: RunningGateway) -> None:
            try:
                outcomes.append(_chat(gateway.client(key=gateways[0].key), max_tokens=1).parse())
            except openai.RateLimitError as exc:
                outcomes.append(exc)

        threads = [threading.Thread(target=send, args=(gateways[i % len(gateways)],)) for i in range(8)]
        for thread in threads:
            thread.start()
        # The refused ones are answered at once; the admitted ones wait at the upstream.
        wait_until(lambda: len(outcomes) + len(llm.requests) == 8, timeout=60, message="8 requests decided")
        gate.set()
        for thread in threads:
            thread.join(timeout=60)

        refused = [o for o in outcomes if isinstance(o, openai.RateLimitError)]
        answered = [o for o in outcomes if not isinstance(o, openai.RateLimitError)]
        assert (len(answered), len(refused), len(llm.requests)) == (3, 5, 3)
        for refusal in refused:
            assert refusal.code == "budget_exceeded"
            assert "USD more is held by runs in progress" in refusal.message
            assert refusal.response.headers["retry-after"] == "1"  # held, not spent: worth a retry soon
        # Once they ended, what they cost (0.06) is spent: refused until midnight, nothing held.
        late = _refusal(lambda: _chat(gateways[-1].client(), max_tokens=1))
        assert late is not None and "0.060000 USD has been spent" in late.message
        assert "held" not in late.message and int(late.response.headers["retry-after"]) > 1
    finally:
        if prefix:
            purge_redis(REDIS_URL, prefix)
