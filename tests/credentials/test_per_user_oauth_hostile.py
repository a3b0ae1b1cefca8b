"""Per-user OAuth against a careless tool and a revoked connection (red team round two).

- Several runs of one user started together right after connecting: the tool echoes the bearer it
  got. Each run registered the token for redaction only when it was the one that loaded the user's
  flow; the runs queued behind it sent the same token unregistered, and it reached the model, the
  answer, the run log and then the tool-result cache (21 of 24 answers across 3 users x 8 runs).
- A revoked connection (``DELETE /v1/connections/{server}``) still had that user's private results
  served from the tool-result cache, with no token used.

Real parts as in ``test_per_user_oauth.py``: an Authlib authorization server driven in headless
Chromium, an MCP server of the official SDK, the gateway under uvicorn, the official openai client.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.credentials.test_per_user_oauth import LINK, Browser, Stack
from tests.support.browser import missing_browser
from tests.support.scripted_llm import Reply, ScriptedLLM

TRIO = {"alice": "pw-alice", "bob": "pw-bob", "carol": "pw-carol"}
RUNS_EACH = 8
CACHED = {"tool_cache_ttl_seconds": 300}


def echo_model(body: dict[str, Any]) -> Reply:
    """Calls the careless tool and repeats what it said (as a model fooled by it would)."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return Reply(text=f"The tool said: {last['content']}")
    if "whoami" in str(body["messages"][-1].get("content")):
        return Reply(tool_calls=[("tickets__whoami", {})])
    return Reply(tool_calls=[("tickets__echo_token", {})])


@pytest.fixture
def trio(tmp_path: Path, llm: ScriptedLLM) -> Iterator[Stack]:
    if reason := missing_browser():
        pytest.skip(reason)
    running = Stack(tmp_path, llm, users=TRIO, agent=CACHED, access_ttl=3600)
    llm.handler = echo_model
    yield running
    running.stop()


def _connect(stack: Stack, users: dict[str, str]) -> None:
    browser = Browser()
    try:
        for user, password in users.items():
            asked = stack.ask(user, "whoami")
            link = LINK.search(asked)
            assert link is not None, asked
            assert "Connected" in browser.consent(link.group(0), user, password)
    finally:
        browser.close()


def _tokens(stack: Stack) -> list[str]:
    issued = stack.idp.store.tokens
    return [v for t in issued for v in (t.access_token, t.refresh_token) if v]


def _logs(stack: Stack) -> str:
    return httpx.get(
        f"{stack.gateway.url}/v1/logs",
        params={"limit": 100},
        headers={"authorization": f"Bearer {stack.gateway.key}"},
    ).text


def test_runs_started_together_right_after_connecting_never_show_the_users_token(trio: Stack) -> None:
    _connect(trio, TRIO)
    barrier = threading.Barrier(len(TRIO) * RUNS_EACH)

    def run(user: str) -> tuple[str, str]:
        barrier.wait(60)
        return user, trio.ask(user, "Echo.")

    with ThreadPoolExecutor(len(TRIO) * RUNS_EACH) as pool:
        answers = list(pool.map(run, [user for user in TRIO for _ in range(RUNS_EACH)]))

    tokens = _tokens(trio)
    assert tokens
    for user, answer in answers:
        assert answer.startswith(f"The tool said: {user} called with"), answer  # the tool ran as them
        assert not [t for t in tokens if t in answer], answer
    # …nor from the tool-result cache afterwards, nor in the run log.
    for user in TRIO:
        again = trio.ask(user, "Echo.")
        assert again.startswith(f"The tool said: {user} called with")
        assert not [t for t in tokens if t in again]
    logs = _logs(trio)
    assert not [t for t in tokens if t in logs]
    assert not [t for t in tokens if any(t in body for body in trio.bodies)]


def test_a_revoked_connection_is_not_answered_from_the_cache(trio: Stack) -> None:
    _connect(trio, {"alice": TRIO["alice"]})
    assert trio.ask("alice", "whoami") == "The tool said: user:alice"
    calls = len(trio.mcp.calls)
    assert trio.ask("alice", "whoami") == "The tool said: user:alice"  # from the cache: no call
    assert len(trio.mcp.calls) == calls

    revoked = httpx.delete(
        f"{trio.gateway.url}/v1/connections/tickets",
        headers={"authorization": f"Bearer {trio.gateway.key}", "x-on-behalf-of": "alice"},
    )
    assert revoked.status_code == 200, revoked.text

    after = trio.ask("alice", "whoami")
    assert "user:alice" not in after and LINK.search(after) is not None, after  # asked to connect again
    assert len(trio.mcp.calls) == calls
