"""Per-user OAuth end to end: the gateway acts as each end user toward an MCP server.

Real parts on loopback: an MCP server written with the official SDK acting as an OAuth resource
server, an Authlib authorization server with a login and consent page driven in headless Chromium,
the gateway under uvicorn, the official ``openai`` client as the caller, a scripted model that
calls ``tickets__whoami`` (the server answers with the user behind the token).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.agent_loop import write_plugin
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, missing_browser
from tests.support.cli import run
from tests.support.gateway import OrgKey, RunningGateway, base_config, write_config
from tests.support.leak_scanner import SecretScanner
from tests.support.oauth_server import AuthorizedMcpServer, OAuthTestServer
from tests.support.scripted_llm import Reply, ScriptedLLM
from tests.support.servers import free_port

LINK = re.compile(r"http://127\.0\.0\.1:\d+/oauth/connect/oc_[A-Za-z0-9_-]+")
USERS = {"alice": "pw-alice", "bob": "pw-bob"}


def whoami_model(body: dict[str, Any]) -> Reply:
    last = body["messages"][-1]
    if last["role"] == "tool":
        return Reply(text=f"You are {str(last['content']).strip(chr(34))}.")
    return Reply(tool_calls=[("tickets__whoami", {})])


class Stack:
    def __init__(
        self,
        tmp_path: Path,
        llm: ScriptedLLM,
        *,
        users: dict[str, str] = USERS,
        agent: dict[str, Any] | None = None,
        access_ttl: int = 30,
        org: OrgKey | None = None,
        **config_extra: Any,
    ) -> None:
        port = free_port()
        self.public = f"http://127.0.0.1:{port}"
        # Access tokens live 30 s: inside the gateway's refresh margin (60 s), so every call after
        # the first one refreshes, as a call near a token's expiry does.
        self.idp = OAuthTestServer(
            users=users, redirect_uri=f"{self.public}/oauth/callback", access_ttl=access_ttl
        ).start()
        self.mcp = AuthorizedMcpServer(self.idp).start()
        plugin = write_plugin(
            tmp_path,
            "tickets",
            {
                "mcp_servers": [
                    {
                        "id": "tickets",
                        "url": self.mcp.url,
                        "auth": {
                            "type": "oauth",
                            "grant": "authorization_code",
                            "client_id": self.idp.client.client_id,
                            "secret_ref": "secret.idp_client",
                        },
                    }
                ],
                **({"agent": agent} if agent else {}),
            },
        )
        config = base_config(
            tmp_path,
            llm.base_url,
            public_base_url=self.public,
            allow_private_mcp_urls=True,
            agents=[{"name": "tickets", "model": "gpt-4o", "instructions": "Help.", "plugin": plugin}],
            **config_extra,
        )
        self.gateway = RunningGateway(write_config(tmp_path, config), port=port).start(org)
        assert self.gateway.put_secret("idp_client", self.idp.client.client_secret).status_code == 201
        llm.handler = whoami_model
        self.client = self.gateway.client()
        self.bodies: list[str] = []

    def ask(self, user: str, text: str = "Who am I?") -> str:
        response = self.client.chat.completions.with_raw_response.create(
            model="agent:tickets",
            messages=[{"role": "user", "content": text}],
            extra_headers={"X-On-Behalf-Of": user},
        )
        self.bodies.append(response.text)
        answer = response.parse().choices[0].message.content
        assert answer is not None
        return answer

    def stop(self) -> None:
        self.gateway.stop()
        self.mcp.stop()
        self.idp.stop()


@pytest.fixture
def stack(tmp_path: Path, llm: ScriptedLLM) -> Iterator[Stack]:
    if reason := missing_browser():
        pytest.skip(reason)
    running = Stack(tmp_path, llm)
    yield running
    running.stop()


class Browser:
    """Headless Chromium through Playwright's sync API (started after every asyncio.run of setup)."""

    def __init__(self) -> None:
        from playwright.sync_api import sync_playwright

        self._playwright = sync_playwright().start()
        self._browser = self._playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        self.redirects: list[str] = []

    def consent(self, link: str, user: str, password: str) -> str:
        """Follow the link, sign in, allow; the text of the page the gateway shows at the end."""
        context = self._browser.new_context()
        context.set_default_timeout(15_000)
        page = context.new_page()
        page.on("request", lambda r: "/oauth/callback" in r.url and self.redirects.append(r.url))
        page.goto(link)
        # The gateway's page says whose account this connects and where the sign-in happens.
        assert f"for the user {user}" in page.inner_text("body")
        page.click("#continue")
        page.fill("#username", user)
        page.fill("#password", password)
        page.click("#allow")
        page.wait_for_url(re.compile(r".*/oauth/callback.*"))
        text = page.inner_text("body")
        context.close()
        return text

    def revoke_in_dashboard(self, gateway_url: str, key: str, user: str, server: str) -> str:
        """Sign in to /ui, open Connections, revoke one; the table's text before the revocation."""
        context = self._browser.new_context()
        context.set_default_timeout(15_000)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{gateway_url}/ui")
        page.get_by_label("API key").fill(key)
        page.get_by_role("button", name="Sign in").click()
        page.get_by_role("link", name="Connections").click()
        listed = page.get_by_role("table", name=re.compile("End users' connections"))
        listed.get_by_role("row").filter(has_text=user).wait_for()
        text = listed.inner_text()
        page.once("dialog", lambda dialog: dialog.accept())
        page.get_by_role("button", name=f"Revoke {user}'s connection to {server}").click()
        listed.get_by_role("row").filter(has_text=user).wait_for(state="detached")
        context.close()
        assert not errors, errors
        return text

    def close(self) -> None:
        self._browser.close()
        self._playwright.stop()


def test_each_end_user_authorizes_once_and_the_tool_runs_with_their_own_token(
    stack: Stack, secret_scanner: SecretScanner, tmp_path: Path
) -> None:
    # A request that names no end user never gets anyone's token (not even the organisation's):
    # the server's tools are not listed, and the run record says why.
    anonymous = stack.client.chat.completions.create(
        model="agent:tickets", messages=[{"role": "user", "content": "Who am I?"}]
    )
    assert "unknown_tool" in (anonymous.choices[0].message.content or "")
    record = httpx.get(
        f"{stack.gateway.url}/v1/logs",
        params={"limit": 1},
        headers={"authorization": f"Bearer {stack.gateway.key}"},
    ).json()["data"][0]
    listing = next(step for step in record["steps"] if step["type"] == "list_tools")
    assert listing["outcome"] == "error" and "X-On-Behalf-Of" in listing["error"], listing

    first = stack.ask("alice")
    alice_link = LINK.search(first)
    assert alice_link is not None, first
    assert stack.mcp.calls == []  # nothing reached the tool without the user's token

    browser = Browser()
    try:
        page = browser.consent(alice_link.group(0), "alice", USERS["alice"])
        assert "Connected" in page, page
        refreshes = stack.idp.store.refreshes
        assert stack.ask("alice") == "You are user:alice."
        # The token the consent obtained was about to expire: refreshed silently (and rotated).
        assert stack.idp.store.refreshes > refreshes

        second_user = stack.ask("bob")
        bob_link = LINK.search(second_user)
        assert bob_link is not None and bob_link.group(0) != alice_link.group(0), second_user
        assert "Connected" in browser.consent(bob_link.group(0), "bob", USERS["bob"])
        assert stack.ask("bob") == "You are user:bob."
        assert stack.ask("alice") == "You are user:alice."  # still alice's own token
        assert stack.mcp.calls == ["alice", "bob", "alice"]

        # The authorization server's redirect, replayed, and a state it never issued: both refused.
        replayed = httpx.get(browser.redirects[0])
        assert replayed.status_code == 400 and "already used" in replayed.text
        foreign = httpx.get(f"{stack.public}/oauth/callback", params={"code": "x", "state": "forged"})
        assert foreign.status_code == 400

        # The user's refresh token is revoked at the authorization server: the user is asked again.
        stack.idp.store.revoke_user("alice")
        again = stack.ask("alice")
        relink = LINK.search(again)
        assert relink is not None and relink.group(0) != alice_link.group(0), again
        assert "Connected" in browser.consent(relink.group(0), "alice", USERS["alice"])
        assert stack.ask("alice") == "You are user:alice."
    finally:
        browser.close()

    listed = httpx.get(
        f"{stack.gateway.url}/v1/connections",
        headers={"authorization": f"Bearer {stack.gateway.key}", "x-on-behalf-of": "alice"},
    )
    assert listed.status_code == 200
    connections = listed.json()["data"]
    assert [c["server"] for c in connections] == ["tickets"] and connections[0]["expires_at"] is not None
    assert "token" not in listed.text.replace("access token", "")
    stack.bodies.append(listed.text)

    # The end user disconnects through the API, the operator through the CLI: either way the next
    # call asks for a new authorization.
    org = stack.gateway.org
    assert org is not None
    config = ["--org", org.org_name, "--config", str(stack.gateway.config_path)]
    shown = run(["connections", "list", "--user", "alice", *config], tmp_path)
    assert shown.returncode == 0 and "tickets" in shown.stdout, shown.stderr
    stack.bodies.append(shown.stdout + shown.stderr)
    everyone = httpx.get(
        f"{stack.gateway.url}/v1/connections", headers={"authorization": f"Bearer {stack.gateway.key}"}
    )
    assert [(c["user"], c["server"]) for c in everyone.json()["data"]] == [
        ("alice", "tickets"),
        ("bob", "tickets"),
    ]
    stack.bodies.append(everyone.text)
    browser = Browser()
    try:
        shown_in_ui = browser.revoke_in_dashboard(stack.gateway.url, stack.gateway.key, "bob", "tickets")
    finally:
        browser.close()
    assert "alice" in shown_in_ui and "tickets:read" in shown_in_ui
    assert LINK.search(stack.ask("bob"))
    revoked = run(["connections", "revoke", "tickets", "--user", "alice", *config], tmp_path)
    assert revoked.returncode == 0, revoked.stderr
    assert LINK.search(stack.ask("alice"))
    nobody = httpx.delete(
        f"{stack.gateway.url}/v1/connections/tickets",
        headers={"authorization": f"Bearer {stack.gateway.key}"},
    )
    assert nobody.status_code == 400 and nobody.json()["error"]["param"] == "X-On-Behalf-Of"
    left = httpx.get(
        f"{stack.gateway.url}/v1/connections", headers={"authorization": f"Bearer {stack.gateway.key}"}
    )
    assert left.json()["data"] == []

    for body in stack.bodies:
        secret_scanner.observe("a gateway response", body)
    tokens = [t.access_token for t in stack.idp.store.tokens] + [
        t.refresh_token for t in stack.idp.store.tokens if t.refresh_token
    ]
    assert len(tokens) >= 8
    secret_scanner.watch(*tokens, stack.idp.client.client_secret)
    secret_scanner.watch_database(stack.gateway.settings.database_url)
