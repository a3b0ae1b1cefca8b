"""Upstream failures map to the right status with a clear message."""

from __future__ import annotations

import openai
import pytest

from tests.support.scripted_llm import ScriptedLLM
from tests.support.servers import free_port


def test_upstream_down_is_502(gateway_factory) -> None:
    gw = gateway_factory(providers=[{"id": "upstream", "base_url": f"http://127.0.0.1:{free_port()}/v1"}])
    with pytest.raises(openai.APIStatusError) as info:
        gw.client().chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    assert info.value.status_code == 502
    assert "unreachable" in info.value.body["message"]


def test_upstream_slow_is_504(gateway_factory, llm: ScriptedLLM) -> None:
    gw = gateway_factory(providers=[{"id": "upstream", "base_url": llm.base_url, "timeout_seconds": 0.3}])
    llm.reply("too late", delay=2.0)
    with pytest.raises(openai.APIStatusError) as info:
        gw.client().chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    assert info.value.status_code == 504
    assert info.value.body["code"] == "upstream_timeout"


@pytest.mark.parametrize(("status", "exc"), [(429, openai.RateLimitError), (400, openai.BadRequestError)])
def test_upstream_4xx_passed_through(gateway, llm: ScriptedLLM, status: int, exc: type[Exception]) -> None:
    llm.reply(status=status, error=f"upstream says {status}")
    with pytest.raises(exc) as info:
        gateway.client().chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    assert info.value.status_code == status
    assert info.value.body["message"] == f"upstream says {status}"


def test_upstream_4xx_passed_through_when_streaming(gateway, llm: ScriptedLLM) -> None:
    llm.reply(status=429, error="slow down")
    with pytest.raises(openai.RateLimitError):
        gateway.client().chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "x"}], stream=True
        )


def test_upstream_5xx_becomes_502(gateway, llm: ScriptedLLM) -> None:
    llm.reply(status=503, error="overloaded")
    with pytest.raises(openai.APIStatusError) as info:
        gateway.client().chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    assert info.value.status_code == 502
    assert "overloaded" in info.value.body["message"]


def test_upstream_garbage_is_502(gateway, llm: ScriptedLLM) -> None:
    llm.reply(raw_body=b"<html>oops</html>")
    with pytest.raises(openai.APIStatusError) as info:
        gateway.client().chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    assert info.value.status_code == 502
