"""A hostile or broken upstream's usage is not trusted (red team round two): a negative count or one
past 2^63 is the upstream's malformed reply — a 502 ``upstream_malformed`` naming the field — on every
provider type, never a negative cost (a credit against a budget) or a 500; and a budget seeded from
the run log never counts a negative cost written before the figures were checked."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import openai
import pytest

from hatchway.ids import new_id
from hatchway.store.db import Database
from hatchway.store.tables import RequestLog
from tests.conftest import GatewayFactory
from tests.support.gateway import RunningGateway
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import wait_until

USER = [{"role": "user", "content": "hi"}]
PRICE = {"input_per_mtok": 1_000_000, "output_per_mtok": 1_000_000}  # 1 USD per token
VENDORS = {
    # type: (base path, the usage field the upstream's own shape names)
    "openai": ("/v1", "prompt_tokens"),
    "anthropic": ("/v1", "input_tokens"),
    "gemini": ("/v1beta", "promptTokenCount"),
}


def _records(gateway: RunningGateway, count: int) -> list[dict[str, Any]]:
    """The run log's records, once there are ``count`` of them (they are written after the answer)."""

    def read() -> list[dict[str, Any]] | None:
        page = httpx.get(f"{gateway.url}/v1/logs", headers={"authorization": f"Bearer {gateway.key}"})
        data = page.json()["data"]
        return data if len(data) >= count else None

    return wait_until(read, timeout=30, message=f"{count} run-log records")


def _config(llm: ScriptedLLM, vendor: str) -> dict[str, Any]:
    path, _ = VENDORS[vendor]
    provider = {"id": "up", "type": vendor, "base_url": f"{llm.server.url}{path}", "api_key": "k"}
    upstream_model = {"openai": "gpt-4o", "anthropic": "claude-sonnet-4-5", "gemini": "gemini-2.5-flash"}
    model = {"name": "model", "provider": "up", "upstream_model": upstream_model[vendor], "price": PRICE}
    return {"providers": [provider], "models": [model]}


@pytest.mark.parametrize("vendor", list(VENDORS))
@pytest.mark.parametrize("count", [-1_000_000, 2**63 + 5], ids=["negative", "past-2^63"])
def test_an_upstreams_impossible_usage_is_a_malformed_reply_not_a_cost(
    gateway_factory: GatewayFactory, llm: ScriptedLLM, vendor: str, count: int
) -> None:
    gateway = gateway_factory(**_config(llm, vendor))
    llm.reply("ok", prompt_tokens=count, completion_tokens=2)

    with pytest.raises(openai.APIStatusError) as caught:
        gateway.client().chat.completions.create(model="model", messages=USER)

    assert caught.value.status_code == 502
    body = caught.value.body
    assert isinstance(body, dict) and body["code"] == "upstream_malformed", body
    assert VENDORS[vendor][1] in body["message"]  # the field path, as every malformed reply says
    records = _records(gateway, 1)
    assert [r["http_status"] for r in records] == [502]
    assert all((r["cost_usd"] or 0) >= 0 for r in records)


def test_a_streamed_impossible_usage_is_refused_too(
    gateway_factory: GatewayFactory, llm: ScriptedLLM
) -> None:
    gateway = gateway_factory(**_config(llm, "openai"))
    llm.reply("ok", prompt_tokens=-1_000_000, completion_tokens=2, chunk_size=1)

    stream = gateway.client().chat.completions.create(
        model="model", messages=USER, stream=True, stream_options={"include_usage": True}
    )
    with pytest.raises(openai.APIError) as caught:
        for _ in stream:
            pass

    assert "upstream_malformed" in str(caught.value) or "prompt_tokens" in str(caught.value)
    [record] = _records(gateway, 1)
    assert record["http_status"] == 502 and (record["cost_usd"] or 0) >= 0


async def _write_credit(database_url: str, org_id: str) -> None:
    """A record as an unchecked upstream left it before: −1,000,000 tokens, −1,000,000 USD."""
    db = Database(database_url)
    try:
        async with db.session() as s:
            s.add(
                RequestLog(
                    id=new_id("log"),
                    org_id=org_id,
                    route="chat.completions",
                    model="model",
                    status="ok",
                    http_status=200,
                    latency_ms=1.0,
                    prompt_tokens=-1_000_000,
                    cost_usd=-1_000_000.0,
                )
            )
    finally:
        await db.close()


def test_a_budget_seeded_from_the_run_log_counts_no_negative_cost(
    gateway_factory: GatewayFactory, llm: ScriptedLLM
) -> None:
    config = _config(llm, "openai") | {"limits": {"defaults": {"budget_usd_per_day": 8}}}  # per organisation
    first = gateway_factory(**config)
    first.stop()
    asyncio.run(_write_credit(first.settings.database_url, first.org.org_id))
    llm.default = Reply(text="ok", prompt_tokens=3, completion_tokens=2)  # 5 USD a call

    gateway = RunningGateway(first.config_path).start(first.org)
    try:
        client = gateway.client()
        answers = 0
        refused: openai.RateLimitError | None = None
        for _ in range(6):
            try:
                client.chat.completions.create(model="model", messages=USER)
                answers += 1
            except openai.RateLimitError as exc:
                refused = exc
                break
        # 0 → 5 → 10 USD: the third call is refused (one in flight may be admitted while the second
        # settles), never the −1,000,000 USD "credit".
        assert refused is not None and refused.code == "budget_exceeded", answers
        assert answers in (2, 3)
    finally:
        gateway.stop()


@pytest.mark.parametrize("vendor", ["gemini", "anthropic"])
def test_the_output_limit_reserved_is_the_one_sent(
    gateway_factory: GatewayFactory, llm: ScriptedLLM, vendor: str
) -> None:
    """``max_completion_tokens: 1`` beside ``max_tokens: 100000`` reserved 1 token and sent Gemini
    ``maxOutputTokens: 100000``: now the largest is both reserved and sent."""
    limits = {"keys": {"*": {"tokens_per_minute": 1_000_000}}}
    gateway = gateway_factory(**_config(llm, vendor), limits=limits)
    llm.reply("ok", prompt_tokens=3, completion_tokens=2)

    raw = gateway.client().chat.completions.with_raw_response.create(
        model="model", messages=USER, max_completion_tokens=1, max_tokens=100_000
    )

    sent = llm.requests[-1]
    if vendor == "gemini":
        assert sent["generationConfig"]["maxOutputTokens"] == 100_000
    else:
        assert sent["max_tokens"] == 100_000
    remaining = int(raw.headers["x-ratelimit-remaining-tokens"])
    assert remaining <= 1_000_000 - 100_000  # what was reserved while it ran: at least the largest
