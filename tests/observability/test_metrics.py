"""``GET /metrics``: the listed series exist, move when a run happens, and stay per gateway."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.support.agent_loop import USER, rounds, rule_for, summarise
from tests.support.mcp_servers import McpTestServer
from tests.support.metrics import scrape, value
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import wait_until


def test_series_move_when_a_run_happens(
    mcp_server_factory: Callable[..., McpTestServer], gateway_factory, llm: ScriptedLLM, tmp_path: Path
) -> None:
    search = mcp_server_factory("search")
    plugin = {
        "mcp_servers": [{"id": "search", "url": search.url, "tools": ["echo", "fail"]}],
        "agent": {"tool_cache_ttl_seconds": 60},
    }
    gateway = gateway_factory(**rule_for(tmp_path, plugin))
    before = scrape(gateway)
    assert value(before, "hatchway_runs_in_flight") == 0
    assert value(before, "hatchway_runs_total", route="chat.completions", model="gpt-4o", status="ok") == 0

    llm.handler = rounds(
        Reply(
            tool_calls=[("search__echo", {"text": "x"}), ("search__fail", {})],
            prompt_tokens=40,
            completion_tokens=6,
        ),
        Reply(tool_calls=[("search__echo", {"text": "x"})]),  # the same call again: a cache hit
        summarise,
    )
    gateway.client().chat.completions.create(model="gpt-4o", messages=USER)
    after = scrape(gateway)

    chat = {"route": "chat.completions", "model": "gpt-4o"}
    assert value(after, "hatchway_runs_total", **chat, status="ok") == 1
    assert value(after, "hatchway_run_duration_seconds_count", **chat, status="ok") == 1
    assert value(after, "hatchway_run_rounds_sum", **chat) == 3
    assert value(after, "hatchway_tokens_total", model="gpt-4o", type="input") == 40 + 11 + 11
    assert value(after, "hatchway_tokens_total", model="gpt-4o", type="output") == 6 + 7 + 7
    assert value(after, "hatchway_tool_calls_total", server="search", tool="echo", outcome="ok") == 2
    assert value(after, "hatchway_tool_calls_total", server="search", tool="fail", outcome="tool_error") == 1
    assert value(after, "hatchway_tool_cache_hits_total", server="search", tool="echo") == 1
    http = {"route": "/v1/chat/completions", "method": "POST", "status": "200"}
    assert value(after, "hatchway_http_requests_total", **http) == 1
    assert value(after, "hatchway_http_request_duration_seconds_count", **http) == 1
    assert value(after, "hatchway_http_request_duration_seconds_sum", **http) > 0
    assert value(after, "hatchway_runs_in_flight") == 0
    metrics_route = {"route": "/metrics", "method": "GET", "status": "200"}
    assert value(after, "hatchway_http_requests_total", **metrics_route) == 1  # the first scrape


def test_runs_in_flight_counts_a_run_while_it_runs(gateway, llm: ScriptedLLM) -> None:
    llm.reply("slow answer", delay=1.0)
    done = threading.Event()

    def call() -> None:
        gateway.client().chat.completions.create(model="gpt-4o", messages=USER)
        done.set()

    thread = threading.Thread(target=call)
    thread.start()
    wait_until(lambda: value(scrape(gateway), "hatchway_runs_in_flight") == 1, message="one run in flight")
    thread.join(30)
    assert done.is_set() and value(scrape(gateway), "hatchway_runs_in_flight") == 0


def test_errors_and_unknown_paths_are_labelled_without_raw_paths(gateway) -> None:
    headers = {"authorization": f"Bearer {gateway.key}"}
    assert httpx.get(f"{gateway.url}/v1/logs/log_doesnotexist", headers=headers).status_code == 404
    assert httpx.get(f"{gateway.url}/no/such/page").status_code == 404
    samples = scrape(gateway)
    assert (
        value(samples, "hatchway_http_requests_total", route="/v1/logs/{log_id}", method="GET", status="404")
        == 1
    )
    assert value(samples, "hatchway_http_requests_total", route="unmatched", method="GET", status="404") == 1
    assert not [k for k in samples if ("route", "/no/such/page") in k[1]]


def test_two_gateways_in_one_process_keep_their_own_series(gateway_factory, llm: ScriptedLLM) -> None:
    first, second = gateway_factory(), gateway_factory()
    llm.reply("one")
    first.client().chat.completions.create(model="gpt-4o", messages=USER)

    labels = {"route": "chat.completions", "model": "gpt-4o", "status": "ok"}
    assert value(scrape(first), "hatchway_runs_total", **labels) == 1
    assert value(scrape(second), "hatchway_runs_total", **labels) == 0
