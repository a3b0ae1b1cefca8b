"""A real OAuth token endpoint over TLS (certificate from a CA made in the test with ``trustme``).

``TokenEndpoint.behaviour`` decides each answer (``ok``, ``status_500``, ``hang``, ``oversized``,
``oversized_chunked``, ``no_token``, ``redirect``, ``mac_token``, ``echo``: a 401 whose
``error_description`` repeats the credentials it received, as endpoints with debug output do);
every request's headers, form and raw body are kept in ``requests``. ``gate`` (a threading.Event)
holds ``ok`` answers until the test opens it.

``IssuedTokens`` is the resource server's side of the same identity provider: an MCP server built
with the official SDK (``MCPServer(token_verifier=…)``) accepts exactly the tokens this endpoint
issued, with their scopes, until they expire or the test revokes them.

With ``public_key`` set (a PEM public key) the endpoint is a ``private_key_jwt`` client: every
request must carry an RFC 7523 client assertion that verifies against that key, with ``iss`` and
``sub`` equal to ``client_id`` and ``aud`` equal to ``audience`` (the token URL by default); it
answers 401 ``invalid_client`` otherwise. Verified assertions are kept in ``assertions``.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import ssl
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote_plus

import jwt
import trustme
from mcp.server.auth.provider import AccessToken
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.servers import ServerThread


class Clock:
    """Wall-clock stand-in the test moves forward by hand (``VaultCredentials(clock=…)``)."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class TokenRequest:
    headers: dict[str, str]
    form: dict[str, str]
    body: bytes = b""

    def client_id(self) -> str | None:
        """The client id, from HTTP Basic or from the form (client_secret_post)."""
        basic = self.basic_credentials()
        return basic[0] if basic is not None else self.form.get("client_id")

    def basic_credentials(self) -> tuple[str, str] | None:
        """The (client id, secret) of an HTTP Basic header, form-urldecoded as RFC 6749 §2.3.1 says."""
        scheme, _, value = self.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "basic":
            return None
        user, _, password = base64.b64decode(value).decode().partition(":")
        return unquote_plus(user), unquote_plus(password)


@dataclass(frozen=True)
class Grant:
    client_id: str
    scopes: list[str]
    expires_at: float
    """Wall-clock time after which the token is refused."""


@dataclass
class TokenEndpoint:
    """The server; ``url`` is ``https://localhost:<port>/token``; ``client_tls()`` trusts its CA."""

    tmp_path: Path
    behaviour: str = "ok"
    expires_in: Any = 3600
    requests: list[TokenRequest] = field(default_factory=list)
    gate: threading.Event = field(default_factory=threading.Event)
    redirect_hits: int = 0
    issued: list[str] = field(default_factory=list)
    """Every access token handed out, in order (unique per endpoint, so a leak scan can look for them)."""
    grants: dict[str, Grant] = field(default_factory=dict)
    """What each issued token stands for: client, scopes, expiry (read by ``IssuedTokens``)."""
    revoked: set[str] = field(default_factory=set)
    """Tokens the test revoked: ``IssuedTokens`` refuses them before they expire."""
    revoke_new: bool = False
    """Revoke each token as it is issued (the resource server no longer trusts this client)."""
    public_key: str | None = None
    client_id: str | None = None
    audience: str | None = None
    assertions: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    """(header, claims) of every client assertion that verified."""
    rejections: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.ca = trustme.CA()
        cert = self.ca.issue_cert("localhost", "127.0.0.1")
        pem = self.tmp_path / "token-endpoint.pem"
        cert.private_key_and_cert_chain_pem.write_to_path(str(pem))
        self.gate.set()
        self._counter = itertools.count(1)
        self._prefix = f"at-{uuid.uuid4().hex[:12]}"
        self._release = threading.Event()
        app = Starlette(
            routes=[
                Route("/token", self._token, methods=["POST"]),
                Route("/elsewhere", self._elsewhere, methods=["POST", "GET"]),
            ]
        )
        self.server = ServerThread(app, ssl_keyfile=str(pem), ssl_certfile=str(pem))

    @property
    def origin(self) -> str:
        return f"https://localhost:{self.server.port}"

    @property
    def url(self) -> str:
        return f"{self.origin}/token"

    def client_tls(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context()
        self.ca.configure_trust(ctx)
        return ctx

    def start(self) -> TokenEndpoint:
        self.server.start()
        return self

    def stop(self) -> None:
        self._release.set()
        self.gate.set()
        self.server.stop()

    def revoke_all(self) -> None:
        """Revoke every token issued so far (the MCP server then answers 401 to them)."""
        self.revoked.update(self.issued)

    async def _token(self, request: Request) -> Response:
        body = await request.body()
        form = {k: str(v) for k, v in (await request.form()).items()}
        token_request = TokenRequest({k.lower(): v for k, v in request.headers.items()}, form, body)
        self.requests.append(token_request)
        if self.public_key is not None and (problem := self._check_assertion(form)):
            self.rejections.append(problem)
            return JSONResponse({"error": "invalid_client", "error_description": problem}, status_code=401)
        return await self._answer(token_request)

    def _check_assertion(self, form: dict[str, str]) -> str | None:
        if form.get("client_assertion_type") != "urn:ietf:params:oauth:client-assertion-type:jwt-bearer":
            return "wrong client_assertion_type"
        assertion = form.get("client_assertion", "")
        try:
            claims = jwt.decode(
                assertion,
                self.public_key,
                algorithms=["ES256", "RS256"],
                audience=self.audience or self.url,
                options={"require": ["iss", "sub", "aud", "exp", "jti"]},
            )
        except jwt.PyJWTError as exc:
            return f"assertion rejected: {exc}"
        if claims["iss"] != self.client_id or claims["sub"] != self.client_id:
            return "iss/sub is not the client_id"
        if form.get("client_id") not in (None, self.client_id):
            return "client_id differs from the assertion"
        self.assertions.append((jwt.get_unverified_header(assertion), claims))
        return None

    async def _answer(self, request: TokenRequest) -> Response:
        match self.behaviour:
            case "status_500":
                return JSONResponse({"error": "server_error", "error_description": "down"}, status_code=500)
            case "hang":
                await asyncio.to_thread(self._release.wait, 60)
                return JSONResponse({"access_token": "late", "expires_in": 3600})
            case "oversized":
                return JSONResponse({"access_token": "big", "padding": "x" * (70 * 1024)})
            case "oversized_chunked":
                return StreamingResponse(_chunks(70), media_type="application/json")
            case "no_token":
                return JSONResponse({"token_type": "bearer", "expires_in": 3600})
            case "redirect":
                return RedirectResponse("/elsewhere", status_code=307)
            case "mac_token":
                return JSONResponse({"access_token": "m", "token_type": "mac", "expires_in": 3600})
            case "echo":
                return JSONResponse({"error": "invalid_client", "error_description": _echo(request)}, 401)
        await asyncio.to_thread(self.gate.wait, 60)
        token = f"{self._prefix}-{next(self._counter)}"
        lifetime = float(self.expires_in) if isinstance(self.expires_in, int | float) else 3600.0
        scopes = request.form.get("scope", "").split()
        self.grants[token] = Grant(request.client_id() or "", scopes, time.time() + lifetime)
        self.issued.append(token)
        if self.revoke_new:
            self.revoked.add(token)
        return JSONResponse({"access_token": token, "token_type": "Bearer", "expires_in": self.expires_in})

    async def _elsewhere(self, request: Request) -> Response:
        self.redirect_hits += 1
        return JSONResponse({"access_token": "from-redirect", "expires_in": 3600})


class IssuedTokens:
    """An SDK ``TokenVerifier``: the tokens ``endpoint`` issued, unexpired and not revoked."""

    def __init__(self, endpoint: TokenEndpoint) -> None:
        self.endpoint = endpoint

    async def verify_token(self, token: str) -> AccessToken | None:
        grant = self.endpoint.grants.get(token)
        if grant is None or token in self.endpoint.revoked or time.time() >= grant.expires_at:
            return None
        return AccessToken(
            token=token, client_id=grant.client_id, scopes=grant.scopes, expires_at=int(grant.expires_at) + 1
        )

    def expired(self, token: str) -> bool:
        """Whether ``token``'s lifetime is over (what the MCP server will say about it now)."""
        return time.time() >= self.endpoint.grants[token].expires_at


def _echo(request: TokenRequest) -> str:
    """What a chatty endpoint says back: the signature it could not verify, or the form and the
    Authorization header it was sent (within the first 200 characters the gateway shows)."""
    assertion = request.form.get("client_assertion")
    if assertion is not None:
        return f"client_assertion signature {assertion.rsplit('.', 1)[-1]} does not verify"
    return f"rejected {request.body.decode()} {request.headers.get('authorization', '')}".strip()


async def _chunks(kib: int):  # type: ignore[no-untyped-def]
    yield b'{"access_token": "big", "padding": "'
    for _ in range(kib):
        yield b"x" * 1024
    yield b'"}'
