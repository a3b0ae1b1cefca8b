"""DPoP (RFC 9449, SEP-1932) on the per-user OAuth flow, over real HTTP: an authorization server and an
MCP server that both demand proofs and nonces, judged here with PyJWT (not with the client's code).

What a server may rely on: the token request carries a proof; the token it binds is presented as
``Authorization: DPoP``; every request carries a fresh proof (its own ``jti``) for its method and URL,
with ``ath`` for the token, signed by the one key the token was bound to; a ``use_dpop_nonce``
challenge is answered with the nonce, and a server that keeps challenging is not asked forever.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import jwt
import pytest
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthToken
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from hatchway.cli.probe_session import GivenSecrets, ProbeGrants, ToolCall, probe_context, probe_server
from hatchway.credentials import VaultCredentials
from hatchway.credentials.consent import HeadlessConsent
from hatchway.credentials.dpop import MAX_NONCE_RETRIES, DpopKey
from hatchway.credentials.user_oauth import MemoryGrants, UserOAuth
from hatchway.errors import ToolError
from hatchway.store.cache import MemoryCache
from tests.support.server_configs import server
from tests.support.servers import ServerThread

pytestmark = pytest.mark.anyio

AS_NONCE = "as-nonce-1"
RS_NONCE = "rs-nonce-1"
REDIRECT = "http://127.0.0.1:9/callback"


def _ath(token: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(token.encode()).digest()).rstrip(b"=").decode()


@dataclass
class Proof:
    header: dict[str, Any]
    claims: dict[str, Any]


def _verified(proof: str | None) -> Proof:
    """The proof's header and claims once its signature verifies against the key it embeds."""
    assert proof, "no DPoP header"
    header = jwt.get_unverified_header(proof)
    assert header["typ"] == "dpop+jwt" and header["alg"] == "ES256"
    assert "d" not in header["jwk"], "the private key was sent"
    claims = jwt.decode(proof, jwt.PyJWK(header["jwk"]).key, algorithms=["ES256"])
    return Proof(header, claims)


@dataclass
class DpopWorld:
    """An authorization server and an MCP server that both want DPoP with a nonce."""

    nonce_forever: bool = False
    """The MCP server challenges every proof with a new nonce: the client must give up."""
    token_proofs: list[Proof] = field(default_factory=list)
    resource_proofs: list[Proof] = field(default_factory=list)
    schemes: list[str] = field(default_factory=list)
    as_challenges: int = 0
    rs_challenges: int = 0
    tokens: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each issued token → the public key it is bound to."""
    issuer: str = ""
    """The authorization server's URL: served by the same app on another port (another origin)."""

    def __post_init__(self) -> None:
        mcp = MCPServer("dpop", log_level="WARNING")

        @mcp.tool(description="Echo the text back.")
        async def echo(text: str) -> str:
            return f"echo:{text}"

        self.mcp_app = mcp.streamable_http_app()
        self.router = Starlette(
            routes=[
                Route("/.well-known/oauth-protected-resource/mcp", self.resource_metadata),
                Route("/.well-known/oauth-authorization-server", self.server_metadata),
                Route("/register", self.register, methods=["POST"]),
                Route("/authorize", self.authorize),
                Route("/token", self.token, methods=["POST"]),
            ]
        )
        self._nonces = itertools.count()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/mcp":
            refused = self.judge(Request(scope))
            await (refused or self.mcp_app)(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self.mcp_app(scope, receive, send)
        else:
            await self.router(scope, receive, send)

    # -- the MCP server --------------------------------------------------------------------------

    def judge(self, request: Request) -> Response | None:
        base = str(request.base_url).rstrip("/")
        authorization = request.headers.get("authorization")
        if authorization is None:
            metadata = f'DPoP resource_metadata="{base}/.well-known/oauth-protected-resource/mcp"'
            return JSONResponse({"error": "unauthorized"}, 401, {"www-authenticate": metadata})
        scheme, _, token = authorization.partition(" ")
        self.schemes.append(scheme)
        proof = _verified(request.headers.get("dpop"))
        self.resource_proofs.append(proof)
        assert proof.claims["htm"] == request.method and proof.claims["htu"] == f"{base}/mcp"
        assert proof.claims["ath"] == _ath(token)
        assert proof.header["jwk"] == self.tokens[token], "proved with another key than the token's"
        wanted = f"rs-nonce-{next(self._nonces)}" if self.nonce_forever else RS_NONCE
        if proof.claims.get("nonce") != wanted:
            self.rs_challenges += 1
            challenge = 'DPoP error="use_dpop_nonce", error_description="a nonce is required"'
            headers = {"www-authenticate": challenge, "dpop-nonce": wanted}
            return JSONResponse({"error": "use_dpop_nonce"}, 401, headers)
        return None

    async def resource_metadata(self, request: Request) -> Response:
        base = str(request.base_url).rstrip("/")
        return JSONResponse({"resource": f"{base}/mcp", "authorization_servers": [self.issuer]})

    # -- the authorization server ----------------------------------------------------------------

    async def server_metadata(self, request: Request) -> Response:
        base = str(request.base_url).rstrip("/")
        return JSONResponse(
            {
                "issuer": base,
                "authorization_endpoint": f"{base}/authorize",
                "token_endpoint": f"{base}/token",
                "registration_endpoint": f"{base}/register",
                "response_types_supported": ["code"],
                "code_challenge_methods_supported": ["S256"],
                "token_endpoint_auth_methods_supported": ["none"],
                "dpop_signing_alg_values_supported": ["ES256"],
            }
        )

    async def register(self, request: Request) -> Response:
        body = await request.json()
        return JSONResponse({**body, "client_id": "dpop-client", "token_endpoint_auth_method": "none"}, 201)

    async def authorize(self, request: Request) -> Response:
        query = request.query_params
        return RedirectResponse(f"{query['redirect_uri']}?code=the-code&state={query['state']}", 302)

    async def token(self, request: Request) -> Response:
        base = str(request.base_url).rstrip("/")
        proof = _verified(request.headers.get("dpop"))
        self.token_proofs.append(proof)
        assert proof.claims["htm"] == "POST" and proof.claims["htu"] == f"{base}/token"
        assert "ath" not in proof.claims
        if proof.claims.get("nonce") != AS_NONCE:
            self.as_challenges += 1
            body = {"error": "use_dpop_nonce", "error_description": "send a nonce"}
            return JSONResponse(body, 400, {"dpop-nonce": AS_NONCE})
        token = f"dpop-token-{len(self.tokens)}"
        self.tokens[token] = proof.header["jwk"]
        return JSONResponse({"access_token": token, "token_type": "DPoP", "expires_in": 3600})


@pytest.fixture
def world() -> Iterator[tuple[DpopWorld, ServerThread]]:
    """The MCP server (the thread yielded) and its authorization server, each on its own port."""
    app = DpopWorld()
    authorization = ServerThread(app, timeout_graceful_shutdown=1, lifespan="off").start()
    app.issuer = authorization.url
    thread = ServerThread(app, timeout_graceful_shutdown=1).start()
    yield app, thread
    thread.stop()
    authorization.stop()


def _credentials() -> VaultCredentials:
    grants = ProbeGrants(HeadlessConsent(redirect_uri=REDIRECT), redirect_uri=REDIRECT)
    return VaultCredentials(GivenSecrets({}), MemoryCache(), allow_private_hosts=True, user_grants=grants)


async def test_a_bound_token_is_proven_on_every_request_with_one_key_and_the_nonces(
    world: tuple[DpopWorld, ServerThread], caplog: pytest.LogCaptureFixture
) -> None:
    app, thread = world
    entry = server("dpop", f"{thread.url}/mcp", type="oauth", grant="authorization_code", dpop=True)
    caplog.set_level(logging.DEBUG)

    report = await probe_server(
        entry, _credentials(), probe_context(timeout=30), calls=[ToolCall("echo", {"text": "hi"})]
    )

    _call, outcome = report.results[0]
    assert not isinstance(outcome, ToolError) and outcome.text == "echo:hi"
    # The token endpoint: challenged once for its nonce, answered once with it.
    assert app.as_challenges == 1 and [p.claims.get("nonce") for p in app.token_proofs] == [None, AS_NONCE]
    # The MCP server: the DPoP scheme always, one challenge, then the nonce on every later proof.
    assert set(app.schemes) == {"DPoP"} and app.rs_challenges == 1
    assert [p.claims.get("nonce") for p in app.resource_proofs][1:] == [RS_NONCE] * (
        len(app.resource_proofs) - 1
    )
    # A fresh proof per request (unique jti), all signed with the key the token is bound to.
    proofs = app.token_proofs + app.resource_proofs
    assert len({p.claims["jti"] for p in proofs}) == len(proofs) >= 5
    assert len({str(sorted(p.header["jwk"].items())) for p in proofs}) == 1
    # Nothing the flow logged carries the token (or the proofs that would replay it).
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert not any(token in logged for token in app.tokens)


async def test_a_server_that_keeps_asking_for_new_nonces_is_not_asked_forever(
    world: tuple[DpopWorld, ServerThread],
) -> None:
    app, thread = world
    app.nonce_forever = True
    entry = server("dpop", f"{thread.url}/mcp", type="oauth", grant="authorization_code", dpop=True)
    entry = entry.model_copy(update={"max_retries": 0})

    with pytest.raises(ToolError) as failed:
        await probe_server(entry, _credentials(), probe_context(timeout=30))

    assert failed.value.code == "mcp_unauthorized", failed.value
    # Every request is sent again at most MAX_NONCE_RETRIES times for a nonce; past that the 401
    # goes to the flow (which authorizes anew once) and to the client (which retries a 401 once):
    # a handful of requests, where a client chasing nonces would spin until its deadline.
    assert MAX_NONCE_RETRIES == 1
    assert app.rs_challenges <= 16, app.rs_challenges
    # Each proof carries the latest nonce the server gave, the refused answers' included.
    nonces = [p.claims.get("nonce") for p in app.resource_proofs]
    assert nonces == [None] + [f"rs-nonce-{i}" for i in range(len(nonces) - 1)]


async def test_another_replica_proves_with_the_key_the_stored_token_is_bound_to(
    world: tuple[DpopWorld, ServerThread],
) -> None:
    _app, thread = world
    store = MemoryGrants()

    def flow() -> UserOAuth:
        return UserOAuth(
            f"{thread.url}/mcp",
            redirect_uri=REDIRECT,
            store=store,
            consent=HeadlessConsent(redirect_uri=REDIRECT),
            dpop=True,
        )

    first = flow()
    first.token_scheme = "DPoP"  # what the token endpoint's answer said
    await first.context.storage.set_tokens(OAuthToken(access_token="t", expires_in=60))
    assert store.grant is not None and store.grant.dpop_key is not None

    second = flow()
    await second._initialize()

    assert second.token_scheme == "DPoP"
    assert first.dpop is not None and second.dpop is not None
    assert second.dpop.public_jwk == first.dpop.public_jwk
    assert DpopKey.from_pem(store.grant.dpop_key).thumbprint() == first.dpop.thumbprint()
