"""The person's step of an OAuth authorization-code grant, as ``UserOAuth`` delegates it.

A ``Consent`` gets the answer to one authorization request — the redirect's code, state and iss —
and says which request it answers (the one given, or, when the answer is held across turns, one
made earlier). ``HeadlessConsent`` follows the authorization endpoint's redirect itself (test
servers that approve at once); ``LoopbackConsent`` sends a person there and takes the redirect on a
loopback port; the gateway's conversation consent is ``grants.ConversationConsent``.
"""

from __future__ import annotations

import asyncio
import contextlib
import webbrowser
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import parse_qs, urljoin, urlparse

import httpx2
from mcp.client.auth import OAuthFlowError
from mcp.shared.auth import AuthorizationCodeResult

_CALLBACK_PATH = "/callback"


class AuthorizationPending(Exception):
    """The end user has not authorized this server yet: they must follow ``link`` first."""

    def __init__(self, link: str, *, server_id: str = "") -> None:
        super().__init__(f"authorization required: {link}")
        self.link = link
        self.server_id = server_id


@dataclass(frozen=True, slots=True)
class AuthorizationRequest:
    """One authorization the client asks for: where to send the person, and what binds the answer."""

    url: str
    """The authorization endpoint with every parameter (client id, PKCE challenge, state, scope…)."""
    state: str
    code_verifier: str
    redirect_uri: str
    issuer: str | None
    """The authorization server's issuer, which the redirect's ``iss`` must match (RFC 9207)."""


class Consent(Protocol):
    """Gets the person's answer to an authorization request: the redirect's code, state and iss, with
    the request they answered (the one given, or, held across turns, one made earlier)."""

    async def authorize(
        self, request: AuthorizationRequest
    ) -> tuple[AuthorizationCodeResult, AuthorizationRequest]: ...


class HeadlessConsent:
    """Follows the authorization endpoint's redirect without a person (test servers that approve at once)."""

    def __init__(self, *, redirect_uri: str, timeout: float = 30.0, max_hops: int = 5) -> None:
        self.redirect_uri = redirect_uri
        """Where the client says the redirect goes; nothing listens there, the redirect is read instead."""
        self.timeout = timeout
        self.max_hops = max_hops

    async def authorize(
        self, request: AuthorizationRequest
    ) -> tuple[AuthorizationCodeResult, AuthorizationRequest]:
        url = request.url
        async with httpx2.AsyncClient(timeout=self.timeout, follow_redirects=False, trust_env=False) as http:
            for _ in range(self.max_hops):
                response = await http.get(url)
                location = response.headers.get("location")
                if response.status_code not in (301, 302, 303, 307, 308) or not location:
                    raise OAuthFlowError(
                        f"the authorization endpoint answered HTTP {response.status_code} "
                        "without a redirect; "
                        "it needs a person: use --oauth instead of --oauth-headless"
                    )
                url = urljoin(url, location)
                if url.startswith(request.redirect_uri):
                    return redirect_result(url), request
        raise OAuthFlowError(f"the authorization endpoint redirected more than {self.max_hops} times")


class LoopbackConsent:
    """Sends a person to the authorization endpoint and takes the redirect on a loopback port."""

    def __init__(
        self,
        *,
        port: int,
        announce: Callable[[str], None],
        open_browser: bool = True,
        timeout: float = 300.0,
    ) -> None:
        self.port = port
        self.announce = announce
        self.open_browser = open_browser
        self.timeout = timeout

    @property
    def redirect_uri(self) -> str:
        return f"http://127.0.0.1:{self.port}{_CALLBACK_PATH}"

    async def authorize(
        self, request: AuthorizationRequest
    ) -> tuple[AuthorizationCodeResult, AuthorizationRequest]:
        arrived: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            # A loopback listener for one redirect: the request line is all it needs, so the
            # standard library's streams are enough (no web framework for one GET).
            with contextlib.suppress(Exception):
                line = (await asyncio.wait_for(reader.readline(), 10)).decode("latin-1")
                _method, target, *_ = line.split(" ")
                body = b"Authorized. You can close this window and return to the terminal."
                if urlparse(target).path != _CALLBACK_PATH:
                    body = b"Not found."
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                await writer.drain()
                if urlparse(target).path == _CALLBACK_PATH and not arrived.done():
                    arrived.set_result(f"http://127.0.0.1:{self.port}{target}")
            writer.close()

        server = await asyncio.start_server(on_connection, "127.0.0.1", self.port)
        try:
            self.announce(request.url)
            if self.open_browser:
                with contextlib.suppress(Exception):
                    webbrowser.open(request.url)
            try:
                url = await asyncio.wait_for(arrived, self.timeout)
            except TimeoutError:
                raise OAuthFlowError(f"no authorization arrived within {self.timeout:.0f} s") from None
        finally:
            server.close()
            await server.wait_closed()
        return redirect_result(url), request


def redirect_result(url: str) -> AuthorizationCodeResult:
    """The code, state and iss of an authorization redirect; OAuthFlowError when it carries an error."""
    query = parse_qs(urlparse(url).query)
    if "error" in query:
        reason = query.get("error_description", query["error"])[0]
        raise OAuthFlowError(f"the authorization server refused: {query['error'][0]} ({reason})")
    code = query.get("code", [""])[0]
    if not code:
        raise OAuthFlowError("the authorization redirect carries no code")
    return AuthorizationCodeResult(
        code=code, state=query.get("state", [None])[0], iss=query.get("iss", [None])[0]
    )
