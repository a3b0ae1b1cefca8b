"""An MCP endpoint's calls are runs like any other: admitted to the limits of their key,
organisation, end user and agent, counted in ``GET /v1/usage``, held to the budgets — through the
official MCP Python SDK's client on both protocol revisions."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support.mcp_endpoints import calc_endpoint
from tests.support.mcp_servers import McpTestServer
from tests.support.scripted_llm import Reply, ScriptedLLM

LIMITED = 4


async def _calls(
    url: str, key: str, mode: str, count: int, user: str | None = None
) -> list[types.CallToolResult]:
    headers = {"authorization": f"Bearer {key}", **({"x-on-behalf-of": user} if user else {})}
    http = httpx2.AsyncClient(headers=headers, timeout=30)
    async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:  # type: ignore[arg-type]
        await client.list_tools()  # listing is no run: it counts in no limit
        return [await client.call_tool("calc__add", {"a": i, "b": 1}) for i in range(count)]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_key_limited_to_n_calls_a_minute_gets_n_and_then_a_refusal_it_can_read(
    mode: str, mcp_server_factory: Callable[..., McpTestServer], gateway_factory: Any, tmp_path: Path
) -> None:
    _, gateway = calc_endpoint(
        mcp_server_factory,
        gateway_factory,
        tmp_path,
        config={"limits": {"keys": {"*": {"requests_per_minute": LIMITED}}}},
    )

    results = asyncio.run(_calls(f"{gateway.url}/mcp/tools", gateway.key, mode, LIMITED + 2))

    assert [r.content[0].text for r in results[:LIMITED]] == [str(i + 1) for i in range(LIMITED)]
    for refused in results[LIMITED:]:
        assert refused.is_error
        error = json.loads(refused.content[0].text)["error"]
        assert error["code"] == "rate_limit_exceeded"
        assert "limits.keys.*.requests_per_minute is 4" in error["message"]
        assert refused.structured_content is not None
        assert int(refused.structured_content["error"]["retry_after"]) >= 1
    logs = httpx.get(f"{gateway.url}/v1/logs", headers={"authorization": f"Bearer {gateway.key}"}).json()[
        "data"
    ]
    statuses = sorted(r["http_status"] for r in logs if r["route"] == "mcp:tools")
    assert statuses == [200] * LIMITED + [429, 429]


def test_endpoint_calls_count_in_usage_per_end_user_and_in_the_users_limits(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory: Any, tmp_path: Path
) -> None:
    _, gateway = calc_endpoint(
        mcp_server_factory,
        gateway_factory,
        tmp_path,
        config={"limits": {"users": {"*": {"requests_per_minute": 2}}}},
    )
    url = f"{gateway.url}/mcp/tools"

    ana = asyncio.run(_calls(url, gateway.key, "auto", 3, user="ana"))
    bob = asyncio.run(_calls(url, gateway.key, "auto", 2, user="bob"))

    assert [r.is_error for r in ana] == [False, False, True]  # ana's third, not bob's first
    assert [r.is_error for r in bob] == [False, False]
    usage = httpx.get(
        f"{gateway.url}/v1/usage",
        params={"group_by": "user"},
        headers={"authorization": f"Bearer {gateway.key}"},
    ).json()
    requests = {row["user"]: row["requests"] for row in usage["data"]}
    assert requests["ana"] == 3 and requests["bob"] == 2


def test_a_spent_budget_refuses_endpoint_calls_too(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory: Any, llm: ScriptedLLM, tmp_path: Path
) -> None:
    """Spend by chat (priced: 1 USD a token) is the organisation's budget, which the endpoint's
    calls are held to as well."""
    llm.default = Reply(text="ok", prompt_tokens=3, completion_tokens=2)
    priced = [
        {
            "name": "gpt-4o",
            "provider": "upstream",
            "upstream_model": "gpt-4o-2024",
            "price": {"input_per_mtok": 1_000_000, "output_per_mtok": 1_000_000},
        }
    ]
    _, gateway = calc_endpoint(
        mcp_server_factory,
        gateway_factory,
        tmp_path,
        config={"limits": {"defaults": {"budget_usd_per_day": 4}}, "models": priced},
    )
    chat = gateway.client().chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}]
    )
    assert chat.choices[0].message.content == "ok"  # 5 USD spent

    [refused] = asyncio.run(_calls(f"{gateway.url}/mcp/tools", gateway.key, "auto", 1))

    assert refused.is_error and json.loads(refused.content[0].text)["error"]["code"] == "budget_exceeded"
