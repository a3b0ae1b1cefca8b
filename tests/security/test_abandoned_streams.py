"""A stream its client abandons still costs what the upstream generated (red team round two): it was
recorded with 0 tokens and 0 USD, so budgets and token limits never saw it (4 of 4 streams of a
5,000-token prompt admitted under a 0.05 USD budget; read to the end the same request cost 10 USD).
Now the run counts an estimate — the request's size, the text already streamed — and its record says
it is one (``usage_estimated``)."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.conftest import GatewayFactory
from tests.support.scripted_llm import ScriptedLLM
from tests.support.servers import wait_until

PRICED = [
    {
        "name": "gpt-4o",
        "provider": "upstream",
        "upstream_model": "gpt-4o-2024",
        "price": {"input_per_mtok": 1_000_000, "output_per_mtok": 1_000_000},  # 1 USD per token
    }
]
PROMPT = "resuma este documento: " + "lorem ipsum " * 400  # ~4,800 characters, ~1,200 tokens


def _records(gateway: Any) -> list[dict[str, Any]]:
    page = httpx.get(f"{gateway.url}/v1/logs", headers={"authorization": f"Bearer {gateway.key}"})
    return page.json()["data"]


def test_an_abandoned_stream_is_counted_and_held_to_the_budget(
    gateway_factory: GatewayFactory, llm: ScriptedLLM
) -> None:
    gateway = gateway_factory(models=PRICED, limits={"keys": {"*": {"budget_usd_per_day": 500}}})
    llm.reply("palavra " * 2000, chunk_size=40, chunk_delay=0.02)  # ~16,000 characters over ~8 s

    body = {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": PROMPT}]}
    headers = {"authorization": f"Bearer {gateway.key}"}
    with httpx.stream("POST", f"{gateway.url}/v1/chat/completions", json=body, headers=headers) as stream:
        read = 0
        for line in stream.iter_lines():
            read += line.startswith("data: ")
            if read == 5:
                break  # the client leaves mid-answer

    [record] = wait_until(lambda: _records(gateway) or None, timeout=60, message="the abandoned run's record")
    assert record["http_status"] == 499, record
    usage = record["usage"]
    assert usage["prompt_tokens"] >= 1000, record  # the request's size over four
    assert 0 < usage["completion_tokens"] < 2000, record  # what was streamed before it left, not all
    assert record["cost_usd"] == pytest.approx(usage["total_tokens"])
    [estimated] = [s for s in record["steps"] if s["type"] == "usage_estimated"]
    assert estimated["prompt_tokens"] == usage["prompt_tokens"]

    # The estimate is spend: at 1 USD a token the budget of 500 USD is gone.
    llm.reply("ok")
    with pytest.raises(openai.RateLimitError) as refused:
        gateway.client().chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert refused.value.code == "budget_exceeded"
