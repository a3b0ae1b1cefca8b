"""hatchway.yaml's ``limits:`` through a real gateway and the official client: 429s in OpenAI's shape,
the ``x-ratelimit-*`` headers, scopes apart from one another, and one count across replicas on Redis."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import openai
import pytest

from tests.conftest import GatewayFactory
from tests.support.backends import REDIS_URL
from tests.support.replicas import purge_redis, unique_redis_prefix
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import wait_until

USER = [{"role": "user", "content": "hi"}]


def _chat(client: openai.OpenAI, **kwargs: Any) -> Any:
    return client.chat.completions.with_raw_response.create(model="gpt-4o", messages=USER, **kwargs)


def test_a_key_limit_admits_n_requests_and_refuses_the_next(
    gateway_factory: GatewayFactory, llm: ScriptedLLM
) -> None:
    llm.default = Reply(text="ok")
    gateway = gateway_factory(limits={"keys": {"*": {"requests_per_minute": 3}}})
    client = gateway.client()

    remaining = []
    for _ in range(3):
        answer = _chat(client)
        assert answer.headers["x-ratelimit-limit-requests"] == "3"
        assert answer.headers["x-ratelimit-reset-requests"].endswith("s")
        remaining.append(answer.headers["x-ratelimit-remaining-requests"])
    assert remaining == ["2", "1", "0"]

    with pytest.raises(openai.RateLimitError) as refused:
        _chat(client)
    error = refused.value
    assert error.status_code == 429
    assert error.code == "rate_limit_exceeded"
    assert error.param == "limits.keys.*.requests_per_minute"
    # A window counts in buckets of a sixtieth of it: a request leaves at most one bucket late.
    assert 1 <= int(error.response.headers["retry-after"]) <= 61
    assert len(llm.requests) == 3  # the refused request reached no upstream

    other = gateway.new_org()  # another organisation's key, at the same time
    assert _chat(gateway.client(key=other.key)).parse().choices[0].message.content == "ok"


def test_the_responses_api_counts_against_the_organisation(
    gateway_factory: GatewayFactory, llm: ScriptedLLM
) -> None:
    llm.default = Reply(text="ok")
    gateway = gateway_factory(limits={"defaults": {"requests_per_minute": 2}})
    client = gateway.client()

    first = client.responses.with_raw_response.create(model="gpt-4o", input="x")
    assert first.headers["x-ratelimit-remaining-requests"] == "1"
    _chat(client)  # both run routes share the organisation's window
    with pytest.raises(openai.RateLimitError) as refused:
        client.responses.create(model="gpt-4o", input="x")
    assert refused.value.param == "limits.defaults.requests_per_minute"


def test_an_organisation_entry_overrides_the_defaults(
    gateway_factory: GatewayFactory, llm: ScriptedLLM
) -> None:
    llm.default = Reply(text="ok")
    name = f"acme-{uuid.uuid4().hex[:8]}"
    gateway = gateway_factory(
        limits={"defaults": {"requests_per_minute": 1}, "organisations": {name: {"requests_per_minute": 2}}}
    )
    client = gateway.client(key=gateway.new_org(name).key)
    _chat(client)
    _chat(client)
    with pytest.raises(openai.RateLimitError) as refused:
        _chat(client)
    assert refused.value.param == f"limits.organisations.{name}.requests_per_minute"
    default = gateway.client()  # the gateway's own organisation has no entry: the defaults
    _chat(default)
    with pytest.raises(openai.RateLimitError) as refused:
        _chat(default)
    assert refused.value.param == "limits.defaults.requests_per_minute"


def test_a_concurrency_limit_refuses_a_second_run_while_the_first_is_held(
    gateway_factory: GatewayFactory, llm: ScriptedLLM
) -> None:
    gateway = gateway_factory(limits={"users": {"*": {"concurrent_runs": 1}}})
    client = gateway.client(default_headers={"X-On-Behalf-Of": "alice"})
    gate = threading.Event()
    llm.reply("held", gate=gate)
    llm.default = Reply(text="later")
    held: list[Any] = []
    first = threading.Thread(target=lambda: held.append(_chat(client).parse()))
    first.start()
    try:
        wait_until(lambda: llm.requests, message="the first run to reach the upstream")
        with pytest.raises(openai.RateLimitError) as refused:
            _chat(client)
        assert refused.value.code == "concurrency_limit_exceeded"
        assert refused.value.param == "limits.users.*.concurrent_runs"
        assert refused.value.response.headers["retry-after"] == "1"
        bob = gateway.client(default_headers={"X-On-Behalf-Of": "bob"})  # each end user has their own
        assert _chat(bob).parse().choices[0].message.content == "later"
    finally:
        gate.set()
        first.join(timeout=10)
    assert held[0].choices[0].message.content == "held"

    def admitted() -> bool:  # the slot is given back as the first run's scope closes
        try:
            return _chat(client).parse().choices[0].message.content == "later"
        except openai.RateLimitError:
            return False

    wait_until(admitted, message="alice's slot to be free again")


def test_a_tokens_limit_reserves_max_tokens_and_counts_what_was_used(
    gateway_factory: GatewayFactory, llm: ScriptedLLM
) -> None:
    gateway = gateway_factory(limits={"keys": {"default": {"tokens_per_minute": 1000}}})
    client = gateway.client()
    with pytest.raises(openai.RateLimitError) as refused:
        _chat(client, max_tokens=2000)  # could never fit: refused before any call
    assert refused.value.code == "tokens_limit_exceeded"
    assert refused.value.param == "limits.keys.default.tokens_per_minute"
    assert llm.requests == []

    # Reserves its input only (no max_tokens), then reports 900 tokens: the extra is counted after.
    llm.reply("long", prompt_tokens=500, completion_tokens=400)
    llm.default = Reply(text="short", prompt_tokens=1, completion_tokens=1)
    first = _chat(client)
    assert first.headers["x-ratelimit-limit-tokens"] == "1000"

    wait_until(
        lambda: int(_chat(client).headers["x-ratelimit-remaining-tokens"]) < 200,
        message="the tokens used past the reservation to be counted",
    )
    with pytest.raises(openai.RateLimitError) as refused:
        _chat(client, max_tokens=200)
    assert refused.value.code == "tokens_limit_exceeded"


def test_no_limit_configured_sends_no_rate_limit_headers(
    gateway_factory: GatewayFactory, llm: ScriptedLLM
) -> None:
    llm.reply("ok")
    answer = _chat(gateway_factory().client())
    assert not [h for h in answer.headers if h.startswith("x-ratelimit-")]


@pytest.mark.redis
@pytest.mark.skipif(not REDIS_URL, reason="Redis not configured: set HATCHWAY_TEST_REDIS_URL")
def test_two_gateways_on_one_redis_share_the_count(gateway_factory: GatewayFactory, llm: ScriptedLLM) -> None:
    llm.default = Reply(text="ok")
    prefix = unique_redis_prefix()
    shared = {
        "redis_url": REDIS_URL,
        "redis_prefix": prefix,
        "limits": {"keys": {"*": {"requests_per_minute": 4, "concurrent_runs": 1}}},
    }
    try:
        one = gateway_factory(**shared)
        two = gateway_factory(**shared)  # the same SQLite database: one's key works on both
        a, b = one.client(), two.client(key=one.key)
        assert [_chat(c).headers["x-ratelimit-remaining-requests"] for c in (a, b, a)] == ["3", "2", "1"]
        gate = threading.Event()
        llm.reply("held", gate=gate)
        held = threading.Thread(target=lambda: _chat(a))
        held.start()
        try:
            wait_until(lambda: len(llm.requests) == 4, message="the held run to reach the upstream")
            with pytest.raises(openai.RateLimitError) as refused:
                _chat(b)  # the other replica sees the slot taken
            assert refused.value.code == "concurrency_limit_exceeded"
        finally:
            gate.set()
            held.join(timeout=10)
        # The fifth request of the minute, across both (refused for its slot until the held run's is back).
        wait_until(lambda: _refusal_code(b) == "rate_limit_exceeded", message="the window to be full")
    finally:
        purge_redis(REDIS_URL, prefix)


def _refusal_code(client: openai.OpenAI) -> str | None:
    try:
        _chat(client)
    except openai.RateLimitError as exc:
        return exc.code
    return None
