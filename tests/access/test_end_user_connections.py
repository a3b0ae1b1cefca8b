"""With verified end users on, the per-user OAuth connection a run uses is the verified subject's: the
app sends only the user's token (no ``X-On-Behalf-Of``), the consent link it gets is for that subject,
the tool then runs with that subject's own upstream token, another subject's token reaches only its
own connection, and a token for alice with ``X-On-Behalf-Of: bob`` is refused before anything runs.
The per-user OAuth stack is ``tests/credentials/test_per_user_oauth.py``'s (a real authorization
server, a real MCP server checking its tokens, Chromium for the consent)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from hatchway.principal import Role
from hatchway.store.db import Database
from hatchway.store.orgs import OrgStore
from tests.access.test_end_users import AUDIENCE, HEADER, ISSUER, ScriptedIdp
from tests.credentials.test_per_user_oauth import LINK, USERS, Browser, Stack
from tests.support.browser import missing_browser
from tests.support.gateway import create_org_key
from tests.support.scripted_llm import ScriptedLLM


@pytest.fixture
def user_idp() -> Iterator[ScriptedIdp]:
    server = ScriptedIdp()
    server.thread.start()
    yield server
    server.thread.stop()


@pytest.fixture
def stack(tmp_path: Path, llm: ScriptedLLM, user_idp: ScriptedIdp) -> Iterator[Stack]:
    if reason := missing_browser():
        pytest.skip(reason)
    url = f"sqlite+aiosqlite:///{tmp_path / 'hatchway.db'}"
    org = asyncio.run(create_org_key(url, "verified"))
    end_users = {
        "organisations": ["verified"],
        "issuer": ISSUER,
        "jwks_url": f"{user_idp.thread.url}/jwks",
        "audience": AUDIENCE,
    }
    running = Stack(tmp_path, llm, org=org, access={"end_users": [end_users]})
    running.app = running.gateway.client(_app_key(running))  # type: ignore[attr-defined]
    yield running
    running.stop()


def _app_key(stack: Stack) -> str:
    async def create() -> str:
        db = Database(stack.gateway.settings.database_url)
        try:
            return (await OrgStore(db).create_key("verified", "web", role=Role.APP))[1]
        finally:
            await db.close()

    return asyncio.run(create())


def _ask(stack: Stack, headers: dict[str, str]) -> str:
    """A chat turn with the app's key (an ``app`` key: it must prove its user)."""
    answer = stack.app.chat.completions.create(  # type: ignore[attr-defined]
        model="agent:tickets", messages=[{"role": "user", "content": "Who am I?"}], extra_headers=headers
    )
    return answer.choices[0].message.content or ""


def test_the_connection_used_is_the_verified_subjects(stack: Stack, user_idp: ScriptedIdp) -> None:
    alice = {HEADER: user_idp.token("alice", AUDIENCE)}
    bob = {HEADER: user_idp.token("bob", AUDIENCE)}
    first = _ask(stack, alice)
    link = LINK.search(first)
    assert link is not None, first
    browser = Browser()
    try:
        # the consent page names the verified subject as the user being connected
        assert "Connected" in browser.consent(link.group(0), "alice", USERS["alice"])
    finally:
        browser.close()
    assert _ask(stack, alice) == "You are user:alice."
    assert LINK.search(_ask(stack, bob)) is not None  # bob has no connection: his own link, not alice's
    calls = len(stack.mcp.calls)
    with pytest.raises(openai.PermissionDeniedError) as refused:
        _ask(stack, {**alice, "X-On-Behalf-Of": "bob"})
    assert "X-On-Behalf-Of" in str(refused.value)
    with pytest.raises(openai.AuthenticationError):
        _ask(stack, {})  # no token at all
    assert len(stack.mcp.calls) == calls
