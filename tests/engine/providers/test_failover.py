"""A model with several targets and fallbacks (``models[].targets``, ``models[].fallbacks``,
``failover:``): retried and failed over before the first byte, never after; circuits that open,
are probed and close; weights honoured."""

from __future__ import annotations

import asyncio
import collections
import random
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from hatchway.config.settings import Settings
from hatchway.engine.items import Message
from hatchway.engine.providers.base import ModelRequest
from hatchway.engine.providers.failover import Breaker, FailoverProvider
from hatchway.engine.providers.routing import ModelRouter
from tests.support.agent_loop import USER, log_of
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import free_port


@pytest.fixture
def backup() -> Iterator[ScriptedLLM]:
    server = ScriptedLLM().start()
    yield server
    server.stop()


def _two(a: str, b: str, **failover: Any) -> dict[str, Any]:
    """Model ``main`` on provider ``a``, falling back to ``spare`` on provider ``b``."""
    return {
        "providers": [
            {"id": "a", "base_url": a, "timeout_seconds": 5},
            {"id": "b", "base_url": b, "timeout_seconds": 5},
        ],
        "models": [
            {"name": "main", "provider": "a", "upstream_model": "model-a", "fallbacks": ["spare"]},
            {"name": "spare", "provider": "b", "upstream_model": "model-b"},
        ],
        "failover": {"retries": 0, **failover},
    }


def test_a_429_falls_back_to_the_next_model_in_one_client_request(
    gateway_factory, llm: ScriptedLLM, backup: ScriptedLLM
) -> None:
    gateway = gateway_factory(**_two(llm.base_url, backup.base_url))
    llm.reply(status=429, error="rate limited")
    backup.reply("from the spare")

    raw = gateway.client().chat.completions.with_raw_response.create(model="main", messages=USER)

    assert raw.parse().choices[0].message.content == "from the spare"
    assert raw.headers["x-hatchway-served-by"] == "b/model-b"
    assert (len(llm.requests), len(backup.requests)) == (1, 1)
    assert (llm.requests[0]["model"], backup.requests[0]["model"]) == ("model-a", "model-b")
    step = next(
        s for s in log_of(gateway, raw.headers["x-hatchway-request-id"])["steps"] if s["type"] == "model_call"
    )
    assert step["served_by"] == "b/model-b"
    assert [a["target"] for a in step["failed_attempts"]] == ["a/model-a"]
    assert "429" in step["failed_attempts"][0]["error"]


def test_a_retry_honours_retry_after_then_a_4xx_is_not_failed_over(
    gateway_factory, llm: ScriptedLLM, backup: ScriptedLLM
) -> None:
    gateway = gateway_factory(**_two(llm.base_url, backup.base_url, retries=1, backoff_seconds=0))
    llm.reply(status=503, error="busy").reply("second try")
    answer = gateway.client().chat.completions.create(model="main", messages=USER)
    assert answer.choices[0].message.content == "second try" and len(backup.requests) == 0

    llm.reply(status=400, error="bad request")  # the request's fault: no other target would do better
    with pytest.raises(openai.BadRequestError):
        gateway.client().chat.completions.create(model="main", messages=USER)
    assert len(backup.requests) == 0


def test_a_target_that_is_down_opens_its_circuit_is_skipped_then_probed_and_closed(
    gateway_factory, backup: ScriptedLLM
) -> None:
    port = free_port()
    down = f"http://127.0.0.1:{port}/v1"
    gateway = gateway_factory(**_two(down, backup.base_url, breaker_failures=2, breaker_open_seconds=1.0))
    backup.default = Reply(text="spare")
    client = gateway.client()

    def served(n: int = 1) -> list[tuple[str, list[str]]]:
        out = []
        for _ in range(n):
            raw = client.chat.completions.with_raw_response.create(model="main", messages=USER)
            step = next(
                s
                for s in log_of(gateway, raw.headers["x-hatchway-request-id"])["steps"]
                if s["type"] == "model_call"
            )
            out.append((step["served_by"], [a["target"] for a in step["failed_attempts"]]))
        return out

    # Two refused connections open A's circuit; the third call does not even try it.
    assert served(3) == [("b/model-b", ["a/model-a"])] * 2 + [("b/model-b", [])]
    primary = ScriptedLLM(port=port).start()
    try:
        primary.default = Reply(text="primary is back")
        deadline = time.monotonic() + 10  # once the circuit's second is over, a call probes A
        while served()[0][0] != "a/model-a":
            assert time.monotonic() < deadline, "the open circuit was never probed"
            time.sleep(0.05)
        assert served(2) == [("a/model-a", [])] * 2  # closed again
    finally:
        primary.stop()


def test_a_stream_that_failed_after_its_first_byte_is_not_retried(
    gateway_factory, llm: ScriptedLLM, backup: ScriptedLLM
) -> None:
    gateway = gateway_factory(**_two(llm.base_url, backup.base_url, retries=2, backoff_seconds=0))
    llm.reply("a long answer that breaks", chunk_size=2, abort_after=3)
    backup.reply("never")
    got: list[str] = []
    with pytest.raises(openai.APIError):
        for chunk in gateway.client().chat.completions.create(model="main", messages=USER, stream=True):
            got += [chunk.choices[0].delta.content or ""] if chunk.choices else []
    assert "".join(got).startswith("a ")  # what reached the client stays what it got
    assert (len(llm.requests), len(backup.requests)) == (1, 0)


def test_weights_share_the_calls_between_targets(llm: ScriptedLLM, backup: ScriptedLLM) -> None:
    settings = Settings.model_validate(
        {
            "providers": [{"id": "a", "base_url": llm.base_url}, {"id": "b", "base_url": backup.base_url}],
            "models": [
                {
                    "name": "shared",
                    "targets": [
                        {"provider": "a", "upstream_model": "m", "weight": 3},
                        {"provider": "b", "upstream_model": "m", "weight": 1},
                    ],
                }
            ],
        }
    )
    llm.default = backup.default = Reply(text="ok")

    async def main() -> tuple[collections.Counter[str], collections.Counter[str]]:
        router = ModelRouter(settings)
        provider = router.resolve("shared").provider
        assert isinstance(provider, FailoverProvider)
        provider.rng = random.Random(7)
        # 1,000 calls' choice of target (the draw each call makes), then 100 calls made for real.
        drawn = collections.Counter(provider.order()[0].name for _ in range(1000))
        served: collections.Counter[str] = collections.Counter()
        request = ModelRequest("m", [Message("user", "hi")])
        try:
            for _ in range(100):
                served[(await provider.request(request)).served_by or ""] += 1
        finally:
            await router.aclose()
        return drawn, served

    drawn, served = asyncio.run(main())
    assert 700 <= drawn["a/m"] <= 800 and drawn["a/m"] + drawn["b/m"] == 1000  # 750 expected: 3 to 1
    assert 60 <= served["a/m"] <= 90 and served["a/m"] + served["b/m"] == 100
    assert (len(llm.requests), len(backup.requests)) == (served["a/m"], served["b/m"])


def test_settings_refuse_a_model_with_both_provider_and_targets_or_an_unknown_fallback() -> None:
    base = {"providers": [{"id": "a", "base_url": "http://127.0.0.1:9/v1"}]}
    with pytest.raises(ValueError, match="either provider"):
        Settings.model_validate(
            base | {"models": [{"name": "x", "provider": "a", "targets": [{"provider": "a"}]}]}
        )
    with pytest.raises(ValueError, match=r"models\[0\]\.fallbacks\[0\]"):
        Settings.model_validate(base | {"models": [{"name": "x", "provider": "a", "fallbacks": ["y"]}]})
    with pytest.raises(ValueError, match=r"models\[0\]\.targets\[1\]\.provider"):
        Settings.model_validate(
            base | {"models": [{"name": "x", "targets": [{"provider": "a"}, {"provider": "z"}]}]}
        )


def test_a_half_open_circuit_lets_one_probe_through_at_a_time() -> None:
    breaker = Breaker(failures_to_open=2, open_seconds=10)
    breaker.failed(0.0)
    assert breaker.claim(1.0)  # one failure: still closed
    breaker.failed(1.0)
    assert not breaker.allows(5.0) and not breaker.claim(5.0)  # open
    assert breaker.allows(11.0)  # listed in a call's order without being claimed: still probe-able
    assert breaker.claim(11.0) and not breaker.claim(11.0)  # one probe at a time
    breaker.released()  # the probe was cancelled: another may try
    assert breaker.claim(11.5)
    breaker.succeeded()
    assert breaker.claim(12.0) and breaker.claim(12.0)  # closed again
