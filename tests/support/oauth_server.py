"""A real OAuth 2.1 authorization server for the per-user OAuth tests, built with Authlib (Flask).

It does what an identity provider in front of Jira or Google does for one registered client: a
login and consent page (HTML, driven in headless Chromium), the authorization code grant with
PKCE (S256 required), refresh tokens (rotated: each refresh token works once), RFC 8414 metadata
and the RFC 9207 ``iss`` in its redirects. Test hooks shorten token lifetimes and revoke a user's
tokens. ``AuthorizedMcpServer`` is an MCP server (official SDK) that accepts only its tokens and
answers ``whoami`` with the user a token was issued to.

Served by werkzeug in a thread (Authlib's server integration is Flask's, a WSGI app).
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from authlib.integrations.flask_oauth2 import AuthorizationServer
from authlib.oauth2.rfc6749 import ClientMixin, grants
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oauth2.rfc9207 import IssuerParameter
from flask import Flask, jsonify, request
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from werkzeug.serving import make_server

from tests.support.servers import ServerThread, free_port

SCOPE = "tickets:read"
_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>Sign in</title></head><body>
<h1>Sign in to Test IdP</h1><p>{client} asks to read your tickets ({scope}).</p>
<form method="post" action="/authorize?{query}">
<label>User <input name="username" id="username"></label>
<label>Password <input name="password" id="password" type="password"></label>
<button type="submit" name="consent" value="allow" id="allow">Allow</button>
<button type="submit" name="consent" value="deny" id="deny">Deny</button>
</form>{error}</body></html>"""


@dataclass
class User:
    name: str

    def get_user_id(self) -> str:
        return self.name


@dataclass
class Client(ClientMixin):
    client_id: str
    client_secret: str
    redirect_uris: list[str]

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str:
        return self.redirect_uris[0]

    def get_allowed_scope(self, scope: str) -> str:
        return " ".join(s for s in (scope or "").split() if s in (SCOPE, "offline_access"))

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return redirect_uri in self.redirect_uris

    def check_client_secret(self, client_secret: str) -> bool:
        return secrets.compare_digest(client_secret, self.client_secret)

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method in ("client_secret_basic", "client_secret_post")

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in ("authorization_code", "refresh_token")


@dataclass
class Code:
    code: str
    client_id: str
    redirect_uri: str
    scope: str
    user: str
    code_challenge: str | None
    code_challenge_method: str | None
    expires_at: float

    def get_redirect_uri(self) -> str:
        return self.redirect_uri

    def get_scope(self) -> str:
        return self.scope


@dataclass
class Token:
    access_token: str
    refresh_token: str | None
    scope: str
    user: str
    client_id: str
    expires_at: float
    resource: str | None = None
    """The RFC 8707 resource the client asked the token for (the audience the server checks)."""
    revoked: bool = False

    def get_scope(self) -> str:
        return self.scope

    def get_user(self) -> User:
        return User(self.user)

    def check_client(self, client: Client) -> bool:
        return self.client_id == client.client_id

    def get_expires_in(self) -> int:
        return max(int(self.expires_at - time.time()), 0)

    def is_expired(self) -> bool:
        return self.expires_at <= time.time()

    def is_revoked(self) -> bool:
        return self.revoked


@dataclass
class TokenStore:
    tokens: list[Token] = field(default_factory=list)
    codes: dict[str, Code] = field(default_factory=dict)
    refreshes: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def active(self, access_token: str) -> Token | None:
        with self.lock:
            for token in self.tokens:
                if (
                    token.access_token == access_token
                    and not token.revoked
                    and token.expires_at > time.time()
                ):
                    return token
        return None

    def revoke_user(self, user: str) -> None:
        with self.lock:
            for token in self.tokens:
                if token.user == user:
                    token.revoked = True

    def issued(self, user: str) -> list[Token]:
        with self.lock:
            return [t for t in self.tokens if t.user == user]


class CodeGrant(grants.AuthorizationCodeGrant):
    TOKEN_ENDPOINT_AUTH_METHODS: ClassVar[list[str]] = ["client_secret_basic", "client_secret_post"]

    @property
    def store(self) -> TokenStore:
        return self.server.idp.store  # type: ignore[no-any-return]

    def save_authorization_code(self, code: str, req: Any) -> None:
        self.store.codes[code] = Code(
            code=code,
            client_id=req.client.get_client_id(),
            redirect_uri=req.payload.redirect_uri,
            scope=req.payload.scope or "",
            user=req.user.get_user_id(),
            code_challenge=req.payload.data.get("code_challenge"),
            code_challenge_method=req.payload.data.get("code_challenge_method"),
            expires_at=time.time() + 300,
        )

    def query_authorization_code(self, code: str, client: Client) -> Code | None:
        found = self.store.codes.get(code)
        if found is None or found.client_id != client.client_id or found.expires_at < time.time():
            return None
        return found

    def delete_authorization_code(self, authorization_code: Code) -> None:
        self.store.codes.pop(authorization_code.code, None)

    def authenticate_user(self, authorization_code: Code) -> User:
        return User(authorization_code.user)


class RefreshGrant(grants.RefreshTokenGrant):
    TOKEN_ENDPOINT_AUTH_METHODS: ClassVar[list[str]] = ["client_secret_basic", "client_secret_post"]
    INCLUDE_NEW_REFRESH_TOKEN = True

    @property
    def store(self) -> TokenStore:
        return self.server.idp.store  # type: ignore[no-any-return]

    def authenticate_refresh_token(self, refresh_token: str) -> Token | None:
        time.sleep(self.server.idp.refresh_delay)  # type: ignore[attr-defined]  (a slow identity provider)
        with self.store.lock:  # single use: taken (revoked) as it is checked, so a second use fails
            for token in self.store.tokens:
                if token.refresh_token == refresh_token and not token.revoked:
                    token.revoked = True
                    return token
        return None

    def authenticate_user(self, refresh_token: Token) -> User:
        return User(refresh_token.user)

    def revoke_old_credential(self, refresh_token: Token) -> None:
        with self.store.lock:  # already revoked when it was taken
            self.store.refreshes += 1


class Issuer(IssuerParameter):
    """RFC 9207: the server names itself in every authorization response."""

    def __init__(self, issuer: str) -> None:
        self.issuer = issuer

    def get_issuer(self) -> str:
        return self.issuer


class OAuthTestServer:
    """The authorization server; ``client_id``/``client_secret`` is the one registered client."""

    def __init__(self, *, users: dict[str, str], redirect_uri: str, access_ttl: int = 3600) -> None:
        # Authlib refuses plain http unless told: everything here is loopback.
        os.environ["AUTHLIB_INSECURE_TRANSPORT"] = "1"
        # The authorization server's own debug log prints the tokens it issues: it is the identity
        # provider's, not the gateway's, and the leak scan reads every log record of the test.
        logging.getLogger("authlib").setLevel(logging.INFO)
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.users = users
        self.access_ttl = access_ttl
        self.refresh_delay = 0.0
        """Seconds the token endpoint takes to check a refresh token (to make refreshes overlap)."""
        self.client = Client("hatchway-test", secrets.token_urlsafe(16), [redirect_uri])
        self.store = TokenStore()
        self.app = self._app()
        self._server = make_server("127.0.0.1", self.port, self.app, threaded=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> OAuthTestServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._thread.join(10)

    def _app(self) -> Flask:
        app = Flask("test-idp")
        owner = self

        app.config["OAUTH2_REFRESH_TOKEN_GENERATOR"] = True
        store = self.store

        def save_token(token: dict[str, Any], req: Any) -> None:
            with store.lock:
                store.tokens.append(
                    Token(
                        access_token=token["access_token"],
                        refresh_token=token.get("refresh_token"),
                        scope=token.get("scope", ""),
                        user=req.user.get_user_id(),
                        client_id=req.client.get_client_id(),
                        expires_at=time.time() + token["expires_in"],
                        resource=req.payload.data.get("resource"),
                    )
                )

        server = AuthorizationServer(
            app,
            query_client=lambda cid: owner.client if cid == owner.client.client_id else None,
            save_token=save_token,
        )
        server.idp = owner  # type: ignore[attr-defined]  (the grants read the store through it)
        server.register_token_generator("default", _TokenGenerator(lambda: owner.access_ttl))

        server.register_grant(CodeGrant, [CodeChallenge(required=True)])
        server.register_grant(RefreshGrant)
        server.register_extension(Issuer(owner.issuer))

        self._routes(app, server)
        return app

    def _routes(self, app: Flask, server: AuthorizationServer) -> None:
        owner = self

        @app.get("/.well-known/oauth-authorization-server")
        def metadata() -> Any:
            return jsonify(
                {
                    "issuer": owner.issuer,
                    "authorization_endpoint": f"{owner.issuer}/authorize",
                    "token_endpoint": f"{owner.issuer}/token",
                    "response_types_supported": ["code"],
                    "grant_types_supported": ["authorization_code", "refresh_token"],
                    "code_challenge_methods_supported": ["S256"],
                    "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
                    "scopes_supported": [SCOPE, "offline_access"],
                    "authorization_response_iss_parameter_supported": True,
                }
            )

        @app.route("/authorize", methods=["GET", "POST"])
        def authorize() -> Any:
            query = request.query_string.decode()
            page = _PAGE.format(client=owner.client.client_id, scope=SCOPE, query=query, error="{error}")
            if request.method == "GET":
                server.get_consent_grant(end_user=None)  # validates the request before showing the page
                return page.replace("{error}", "")
            name = request.form.get("username", "")
            if request.form.get("consent") != "allow":
                grant = server.get_consent_grant(end_user=None)
                return server.create_authorization_response(grant_user=None, grant=grant)
            if owner.users.get(name) != request.form.get("password"):
                return page.replace("{error}", "<p id='error'>Wrong user or password.</p>"), 401
            grant = server.get_consent_grant(end_user=User(name))
            return server.create_authorization_response(grant_user=User(name), grant=grant)

        @app.post("/token")
        def token() -> Any:
            return server.create_token_response()


class _TokenGenerator:
    """Bearer tokens with the server's current lifetime (a test hook shortens it)."""

    def __init__(self, ttl: Any) -> None:
        self.ttl = ttl

    def __call__(
        self,
        grant_type: str,
        client: Any,
        user: Any = None,
        scope: Any = None,
        expires_in: Any = None,
        include_refresh_token: bool = True,
    ) -> dict[str, Any]:
        token = {
            "token_type": "Bearer",
            "access_token": "at-" + secrets.token_urlsafe(24),
            "expires_in": int(self.ttl()),
        }
        if scope:
            token["scope"] = scope
        if include_refresh_token:
            token["refresh_token"] = "rt-" + secrets.token_urlsafe(24)
        return token


class _IdpVerifier:
    """The resource server's token check: an active token of the authorization server."""

    def __init__(self, store: TokenStore) -> None:
        self.store = store

    async def verify_token(self, token: str) -> AccessToken | None:
        found = self.store.active(token)
        if found is None:
            return None
        return AccessToken(
            token=token,
            client_id=found.client_id,
            scopes=found.scope.split(),
            expires_at=int(found.expires_at),
            resource=found.resource,
            subject=found.user,
        )


class AuthorizedMcpServer:
    """An MCP server (official SDK) that is an OAuth resource server of ``idp``: ``whoami`` answers
    with the user the call's token belongs to."""

    def __init__(self, idp: OAuthTestServer) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.calls: list[str] = []
        store = idp.store
        mcp = MCPServer(
            "tickets",
            log_level="WARNING",
            token_verifier=_IdpVerifier(store),
            auth=AuthSettings(
                issuer_url=idp.issuer,  # type: ignore[arg-type]
                resource_server_url=self.url,  # type: ignore[arg-type]
                required_scopes=[SCOPE],
                validate_token_resource=True,
            ),
        )

        @mcp.tool()
        def whoami() -> str:
            """Who the caller is, as the token says."""
            access = get_access_token()
            assert access is not None
            token = next(t for t in store.tokens if t.access_token == access.token)
            self.calls.append(token.user)
            return f"user:{token.user}"

        @mcp.tool()
        def echo_token() -> str:
            """A careless tool: answers with the bearer token it was called with."""
            access = get_access_token()
            assert access is not None
            token = next(t for t in store.tokens if t.access_token == access.token)
            self.calls.append(token.user)
            return f"{token.user} called with {access.token}"

        self.server = ServerThread(mcp.streamable_http_app(), port=self.port, timeout_graceful_shutdown=1)

    def start(self) -> AuthorizedMcpServer:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()
