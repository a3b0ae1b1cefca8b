"""The route × role matrix: every route of the gateway, called over HTTP with a key of each role, gets
exactly what the role grants, and everything else is 403 ``insufficient_role`` naming the role needed.

The expectations are written here, apart from ``access/roles.py``: a route added to the app without a
line here fails ``test_the_matrix_names_every_route``; a role granted more or less than written here
fails the matrix.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute, APIWebSocketRoute
from starlette.routing import Route

from hatchway.principal import Role
from hatchway.store.db import Database
from hatchway.store.orgs import OrgStore
from tests.support.gateway import RunningGateway, base_config, write_config
from tests.support.mcp_endpoints import calc_endpoint
from tests.support.mcp_servers import McpTestServer
from tests.support.scripted_llm import ScriptedLLM

APP, VIEWER, ADMIN, PLATFORM = Role.APP, Role.VIEWER, Role.ADMIN, Role.PLATFORM
EVERY = frozenset(Role)
INFERENCE = frozenset({APP, ADMIN, PLATFORM})
READERS = frozenset({VIEWER, ADMIN, PLATFORM})
ADMINS = frozenset({ADMIN, PLATFORM})
NONE_BUT_PLATFORM = frozenset({PLATFORM})

CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
MESSAGE = {"model": "gpt-4o", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
MCP_INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    """The template, as the app names it."""
    roles: frozenset[Role]
    url: str | None = None
    """The concrete path called (default: ``path``); ``{org}`` is the caller's organisation."""
    body: Any = None

    def target(self, org: str) -> str:
        return (self.url or self.path).replace("{org}", org)


MATRIX = [
    # inference
    Call("POST", "/v1/chat/completions", INFERENCE, body=CHAT),
    Call("POST", "/v1/messages", INFERENCE, body=MESSAGE),
    Call("POST", "/v1/messages/count_tokens", INFERENCE, body=MESSAGE),
    Call("POST", "/v1/responses", INFERENCE, body={"model": "gpt-4o", "input": "hi"}),
    Call("POST", "/v1/responses/compact", INFERENCE, body={"model": "gpt-4o", "input": "hi"}),
    Call("POST", "/v1/responses/{response_id}/cancel", INFERENCE, url="/v1/responses/resp_x/cancel"),
    Call("DELETE", "/v1/responses/{response_id}", INFERENCE, url="/v1/responses/resp_x"),
    Call("POST", "/mcp/{name}", INFERENCE, url="/mcp/tools", body=MCP_INIT),
    Call("GET", "/v1/responses/{response_id}", EVERY, url="/v1/responses/resp_x"),
    Call("GET", "/v1/responses/{response_id}/input_items", EVERY, url="/v1/responses/resp_x/input_items"),
    Call("GET", "/v1/models", EVERY),
    Call("GET", "/v1/mcp/servers", EVERY),
    Call("GET", "/v1/mcp/endpoints", EVERY),
    # one end user's objects
    Call("GET", "/v1/operations", EVERY),
    Call("GET", "/v1/operations/{operation_id}", EVERY, url="/v1/operations/op_x"),
    Call("POST", "/v1/operations/{operation_id}/confirm", INFERENCE, url="/v1/operations/op_x/confirm"),
    Call("POST", "/v1/operations/{operation_id}/cancel", INFERENCE, url="/v1/operations/op_x/cancel"),
    Call("GET", "/v1/approvals", EVERY),
    Call("GET", "/v1/approvals/{operation_id}", EVERY, url="/v1/approvals/op_x"),
    Call("POST", "/v1/approvals/{operation_id}/approve", INFERENCE, url="/v1/approvals/op_x/approve"),
    Call("POST", "/v1/approvals/{operation_id}/reject", INFERENCE, url="/v1/approvals/op_x/reject"),
    Call("GET", "/v1/connections", EVERY),
    Call("DELETE", "/v1/connections/{server}", INFERENCE, url="/v1/connections/calc"),
    # the organisation's records
    Call("GET", "/v1/responses", READERS),
    Call("GET", "/v1/logs", READERS),
    Call("GET", "/v1/logs/{log_id}", READERS, url="/v1/logs/log_x"),
    Call("GET", "/v1/usage", READERS),
    Call("GET", "/v1/tools/drift", READERS),
    # the organisation's configuration
    Call("GET", "/v1/secrets", ADMINS),
    Call("PUT", "/v1/secrets/{name}", ADMINS, url="/v1/secrets/matrix", body={"value": "v"}),
    Call("DELETE", "/v1/secrets/{name}", ADMINS, url="/v1/secrets/matrix"),
    Call("POST", "/v1/tools/drift/{server}/approve", ADMINS, url="/v1/tools/drift/calc/approve", body={}),
    # the admin API
    Call("GET", "/v1/admin/me", EVERY),
    Call("GET", "/v1/admin/orgs", NONE_BUT_PLATFORM),
    Call("POST", "/v1/admin/orgs", NONE_BUT_PLATFORM, body={"name": "made-by-matrix"}),
    Call("GET", "/v1/admin/orgs/{org}", ADMINS),
    Call("GET", "/v1/admin/orgs/{org}/keys", ADMINS),
    Call("POST", "/v1/admin/orgs/{org}/keys", ADMINS, body={"name": "made-by-matrix"}),
    Call("GET", "/v1/admin/orgs/{org}/keys/{key_id}", ADMINS, url="/v1/admin/orgs/{org}/keys/key_x"),
    Call("PATCH", "/v1/admin/orgs/{org}/keys/{key_id}", ADMINS, url="/v1/admin/orgs/{org}/keys/key_x"),
    Call("DELETE", "/v1/admin/orgs/{org}/keys/{key_id}", ADMINS, url="/v1/admin/orgs/{org}/keys/key_x"),
    Call(
        "POST",
        "/v1/admin/orgs/{org}/keys/{key_id}/rotate",
        ADMINS,
        url="/v1/admin/orgs/{org}/keys/key_x/rotate",
    ),
    Call("GET", "/v1/admin/orgs/{org}/limits", ADMINS),
    Call(
        "PUT", "/v1/admin/orgs/{org}/limits", NONE_BUT_PLATFORM, body={"values": {"requests_per_minute": 600}}
    ),
    Call("DELETE", "/v1/admin/orgs/{org}/limits", NONE_BUT_PLATFORM),
    Call("GET", "/v1/admin/orgs/{org}/settings", ADMINS),
    Call("GET", "/v1/admin/orgs/{org}/audit", ADMINS),
]

PUBLIC = {
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),  # its own token or network list (observability settings)
    ("GET", "/ui"),
    ("GET", "/oauth/connect/{consent_id}"),  # a one-time consent link
    ("GET", "/oauth/callback"),  # the authorization server's redirect, bound to its state
    ("GET", "/oauth/client-metadata.json"),
    ("GET", "/openapi.json"),
    # SSO for people (api/sso.py): a person has no key; each route is safe without one.
    ("GET", "/ui/config.json"),  # says whether SSO is on, nothing more
    ("GET", "/ui/login"),  # only sends the browser to the configured provider, a new state bound to it
    ("GET", "/ui/callback"),  # signs in only the browser that began the sign-in, once (state, nonce, PKCE)
    ("POST", "/ui/logout"),  # ends only the session its cookie names, and only with its CSRF token
    ("GET", "/ui/session"),  # tells a page only about the session its own cookie names
}
"""Routes no key opens: each names why it is safe unauthenticated."""
NOT_IN_SCHEMA = {("GET", "/mcp/{name}"), ("DELETE", "/mcp/{name}"), ("WEBSOCKET", "/v1/responses")}
"""Routes the matrix reaches through another test (the MCP SDK's stream and session end, the
WebSocket in ``test_a_viewer_key_cannot_open_the_responses_websocket``)."""


@dataclass
class Keys:
    org_id: str
    org_name: str
    by_role: dict[Role, str]
    other_admin: str
    """The admin key of another organisation."""


def _make_keys(gateway: RunningGateway) -> Keys:
    async def create() -> Keys:
        db = Database(gateway.settings.database_url)
        try:
            store = OrgStore(db)
            assert gateway.org is not None
            org = gateway.org
            keys = {role: (await store.create_key(org.org_id, role.value, role=role))[1] for role in Role}
            other = await store.create_org("other-org")
            _, other_admin = await store.create_key(other.id, "admin", role=ADMIN)
            return Keys(org.org_id, org.org_name, keys, other_admin)
        finally:
            await db.close()

    return asyncio.run(create())


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningGateway, Keys]]:
    """One gateway for the module (the ``calc`` endpoint at ``/mcp/tools``) and a key of each role:
    the calls change nothing another test's expectations depend on."""
    tmp = tmp_path_factory.mktemp("roles")
    llm = ScriptedLLM().start()
    servers: list[McpTestServer] = []
    gateways: list[RunningGateway] = []

    def mcp_server(name: str = "test", **options: Any) -> McpTestServer:
        servers.append(McpTestServer(name, **options).with_standard_tools().start())
        return servers[-1]

    def gateway(database_url: str | None = None, **overrides: Any) -> RunningGateway:
        path = write_config(tmp, base_config(tmp, llm.base_url, database_url, **overrides))
        gateways.append(RunningGateway(path).start())
        return gateways[-1]

    try:
        _, running = calc_endpoint(mcp_server, gateway, tmp)
        yield running, _make_keys(running)
    finally:
        for started in gateways:
            started.stop()
        for server in servers:
            server.stop()
        llm.stop()


def _call(gateway: RunningGateway, key: str, call: Call, org: str) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}", "x-on-behalf-of": "matrix-user"}
    if call.path.startswith("/mcp/"):
        headers |= {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-06-18"}
    with httpx.Client(base_url=gateway.url, timeout=60) as client:
        return client.request(call.method, call.target(org), json=call.body, headers=headers)


def _refused_for_role(answer: httpx.Response) -> bool:
    """A 403 for the role: ``insufficient_role`` (Anthropic's error shape, which has no code, on
    ``/v1/messages``: its ``permission_error`` naming the role)."""
    if answer.status_code != 403:
        return False
    error = answer.json()["error"]
    return error.get("code") == "insufficient_role" or (
        error.get("type") == "permission_error" and "role" in error["message"] and "code" not in error
    )


@pytest.mark.parametrize("role", list(Role), ids=lambda r: r.value)
def test_each_role_gets_exactly_what_it_is_granted(stack: tuple[RunningGateway, Keys], role: Role) -> None:
    gateway, keys = stack
    wrong = []
    for call in MATRIX:
        answer = _call(gateway, keys.by_role[role], call, keys.org_name)
        denied = _refused_for_role(answer)
        if role in call.roles and (denied or answer.status_code in (401, 500)):
            wrong.append(
                f"{call.method} {call.path}: refused to {role} ({answer.status_code} {answer.text[:160]})"
            )
        if role not in call.roles and not denied:
            wrong.append(
                f"{call.method} {call.path}: allowed to {role} ({answer.status_code} {answer.text[:160]})"
            )
        if denied:
            message = answer.json()["error"]["message"]
            assert "role" in message and role.value in message, message
    assert wrong == []


def test_a_denial_names_the_role_needed(stack: tuple[RunningGateway, Keys]) -> None:
    gateway, keys = stack
    answer = _call(gateway, keys.by_role[APP], Call("PUT", "/v1/secrets/x", ADMINS, body={"value": "v"}), "")
    assert answer.status_code == 403
    error = answer.json()["error"]
    assert error["code"] == "insufficient_role" and error["type"] == "permission_error"
    assert "needs a key with the admin role" in error["message"] and "is app" in error["message"]
    viewer = _call(
        gateway, keys.by_role[VIEWER], Call("POST", "/v1/chat/completions", INFERENCE, body=CHAT), ""
    )
    assert viewer.status_code == 403 and "app role" in viewer.json()["error"]["message"]


def test_one_organisations_admin_cannot_touch_another(stack: tuple[RunningGateway, Keys]) -> None:
    gateway, keys = stack
    for call in MATRIX:
        if not call.path.startswith("/v1/admin/orgs/{org}"):
            continue
        answer = _call(gateway, keys.other_admin, call, keys.org_name)
        assert answer.status_code == 403, (call, answer.text)
        by_id = _call(gateway, keys.other_admin, call, keys.org_id)
        assert by_id.status_code == 403, (call, by_id.text)
    # and a platform admin may
    listed = _call(
        gateway, keys.by_role[PLATFORM], Call("GET", "/v1/admin/orgs/{org}/keys", ADMINS), keys.org_name
    )
    assert listed.status_code == 200 and len(listed.json()["data"]) >= 4


def test_an_app_key_cannot_mint_a_key_and_an_admin_cannot_mint_a_platform_key(
    stack: tuple[RunningGateway, Keys],
) -> None:
    gateway, keys = stack
    mint = Call("POST", "/v1/admin/orgs/{org}/keys", ADMINS, body={"name": "mine", "role": "admin"})
    assert _call(gateway, keys.by_role[APP], mint, keys.org_name).status_code == 403
    platform = Call("POST", "/v1/admin/orgs/{org}/keys", ADMINS, body={"name": "p", "role": "platform"})
    refused = _call(gateway, keys.by_role[ADMIN], platform, keys.org_name)
    assert refused.status_code == 403 and refused.json()["error"]["param"] == "role"


def test_a_viewer_key_cannot_open_the_responses_websocket(stack: tuple[RunningGateway, Keys]) -> None:
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    gateway, keys = stack
    url = gateway.url.replace("http://", "ws://") + "/v1/responses"
    with pytest.raises(InvalidStatus) as refused:
        connect(url, additional_headers={"authorization": f"Bearer {keys.by_role[VIEWER]}"}, open_timeout=30)
    assert refused.value.response.status_code == 403
    with connect(url, additional_headers={"authorization": f"Bearer {keys.by_role[APP]}"}, open_timeout=30):
        pass


def _served(routes: list[Any]) -> Iterator[tuple[str, str]]:
    """(method, path) of every route the app serves, through included routers."""
    for route in routes:
        if hasattr(route, "original_router"):
            yield from _served(route.original_router.routes)
        elif isinstance(route, APIWebSocketRoute):
            yield "WEBSOCKET", route.path
        elif isinstance(route, APIRoute | Route):
            yield from ((m, route.path) for m in route.methods or () if m != "HEAD")


def test_the_matrix_names_every_route(stack: tuple[RunningGateway, Keys]) -> None:
    """Every route the app serves is in MATRIX, PUBLIC or NOT_IN_SCHEMA (a new route must be placed
    there, and so in ``access/roles.py``, or every key is refused it)."""
    gateway, _ = stack
    app = gateway.server.server.config.app
    served = set(_served(app.routes)) | {("POST", path) for path in app.direct_routes}
    named = {(c.method, c.path) for c in MATRIX} | PUBLIC | NOT_IN_SCHEMA
    assert served - named == set()
    assert {("POST", "/v1/chat/completions"), ("WEBSOCKET", "/v1/responses"), ("GET", "/v1/logs")} <= served
