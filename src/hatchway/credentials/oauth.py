"""The OAuth 2.1 exchanges the gateway makes at a token endpoint it was configured with.

``client_credentials`` (RFC 6749 §4.4); the JWT bearer grant (RFC 7523 §2.1), which presents an
assertion — a workload's identity token (workload identity federation) or an ID-JAG; and the token
exchange (RFC 8693) that turns a user's identity token into an ID-JAG at the enterprise IdP
(enterprise-managed authorization, SEP-990). ``TokenGrant`` describes any of them.

The client authenticates as §2.3.1 requires: HTTP Basic with the form-urlencoded client id and
secret (``client_secret_basic``, the default), or both in the form body (``client_secret_post``);
or, with no shared secret at all, with a JWT signed by its private key (``private_key_jwt``,
RFC 7523 §2.2, see ``assertion.py``); or not at all (``none``: a JWT bearer grant whose assertion
is the proof, or a public client at an IdP), sending only its ``client_id``.
Anything short of a well-formed bearer token — a non-2xx status, a redirect (never followed), a
timeout, a body over 64 KiB, no ``access_token`` — raises McpAuthError; nothing falls back to an
unauthenticated request. Error messages name the server and the endpoint, never a secret: what
the endpoint says back is scrubbed of every credential the request carried (the client secret, the
Basic header, the client assertion, the presented assertion or subject token), raw or encoded,
since some endpoints echo their input.

Why not the MCP SDK's ``ClientCredentialsOAuthProvider`` / ``PrivateKeyJWTOAuthProvider``: they are
``httpx.Auth`` flows bound to one MCP connection, with their own token storage and discovery from the
server's 401. Here one token serves every pooled connection of an organisation, is sealed in the
database for every replica (``tokens.py``), comes from a ``token_url`` the operator configured (never
from metadata a server advertises), and is posted to the address the egress check pinned
(``PinnedAddress``) — none of which the providers can be told. Discovery, where Hatchway does it
(``hatchway mcp probe``), is on the SDK's helpers (``cli/oauth_discovery.py``). The SDK's assertion
helper sends no ``kid`` and checks no key size, so ``assertion.py`` stays.
"""

from __future__ import annotations

import asyncio
import base64
import re
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote_plus, urlsplit

import orjson

from hatchway.config.token_endpoints import ClientAuth, token_url_problem
from hatchway.credentials.assertion import ASSERTION_TYPE, sign_assertion
from hatchway.credentials.egress import PinnedAddress
from hatchway.errors import McpAuthError
from hatchway.redaction import Redactor

if TYPE_CHECKING:  # httpx is imported when a token is first fetched (see assertion.py for why)
    import httpx

MAX_TOKEN_BODY = 64 * 1024
_TOKEN_CHARS = re.compile(r"^[\x21-\x7e]+$")  # visible ASCII: safe inside an Authorization header
DEFAULT_EXPIRES_IN = 300.0
"""Used when the endpoint omits ``expires_in`` (RFC 6749 makes it optional): refetch every 5 min."""


def _display(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}{':' + str(parts.port) if parts.port else ''}{parts.path}"


CLIENT_CREDENTIALS = "client_credentials"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ID_JAG = "urn:ietf:params:oauth:token-type:id-jag"
"""The token type of an Identity Assertion JWT Authorization Grant (what the IdP's exchange issues)."""
_SECRET_FIELDS = ("client_secret", "client_assertion", "assertion", "subject_token")


@dataclass(frozen=True, slots=True)
class TokenGrant:
    """One exchange to perform at a token endpoint: a grant type, its fields, the client's credential."""

    token_url: str
    client_id: str
    client_secret: str = field(repr=False)
    """The client secret, or for ``private_key_jwt`` the PEM private key (never sent); empty for ``none``."""
    scopes: tuple[str, ...] = ()
    auth_method: ClientAuth | Literal["none"] = "client_secret_basic"
    audience: str | None = None
    """``private_key_jwt``: the assertion's ``aud`` (the token_url when None)."""
    kid: str | None = None
    grant_type: str = CLIENT_CREDENTIALS
    assertion: str | None = field(default=None, repr=False)
    """``JWT_BEARER``: the assertion presented (a workload's identity token, an ID-JAG)."""
    fields: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    """Other form fields of the grant (a token exchange's ``subject_token``, ``audience``…)."""
    issued_type: str | None = None
    """A token exchange's expected ``issued_token_type``: its result is not a bearer token to check."""


@dataclass(frozen=True, slots=True)
class AccessToken:
    value: str = field(repr=False)
    expires_in: float


def _basic(client_id: str, client_secret: str) -> str:
    pair = f"{quote_plus(client_id, safe='')}:{quote_plus(client_secret, safe='')}"
    return "Basic " + base64.b64encode(pair.encode()).decode("ascii")


def build_request(grant: TokenGrant) -> tuple[dict[str, str], dict[str, str]]:
    """The headers and form fields of the token request."""
    form = {"grant_type": grant.grant_type, **dict(grant.fields)}
    if grant.assertion is not None:
        form["assertion"] = grant.assertion
    if grant.scopes:
        form["scope"] = " ".join(grant.scopes)
    headers = {
        "Accept": "application/json",
        "Accept-Encoding": "identity",  # the 64 KiB cap applies to what we read, so no compression
    }
    if grant.auth_method == "private_key_jwt":
        assertion = sign_assertion(
            grant.client_secret,
            client_id=grant.client_id,
            audience=grant.audience or grant.token_url,
            kid=grant.kid,
        )
        form |= {
            "client_id": grant.client_id,
            "client_assertion_type": ASSERTION_TYPE,
            "client_assertion": assertion,
        }
    elif grant.auth_method == "client_secret_post":
        form |= {"client_id": grant.client_id, "client_secret": grant.client_secret}
    elif grant.auth_method == "none":
        if grant.client_id:
            form["client_id"] = grant.client_id
    else:
        headers["Authorization"] = _basic(grant.client_id, grant.client_secret)
    return headers, form


class TokenEndpoint:
    """Performs exchanges; ``verify`` is the TLS trust (a CA bundle context in tests)."""

    def __init__(
        self,
        *,
        verify: ssl.SSLContext | bool | None = None,
        timeout: float = 10.0,
        max_body: int = MAX_TOKEN_BODY,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._verify = verify
        """None: the system's CA store, in one context made on the first exchange (loading it costs
        ~0.1 s and a few MiB, which a gateway without OAuth servers should not pay at start)."""
        self.timeout = timeout
        self.max_body = max_body
        self.transport = transport

    @property
    def verify(self) -> ssl.SSLContext | bool:
        if self._verify is None:
            self._verify = ssl.create_default_context()
        return self._verify

    async def exchange(
        self,
        grant: TokenGrant,
        *,
        what: str,
        budget: float | None = None,
        pin: PinnedAddress | None = None,
    ) -> AccessToken:
        """Fetch a token within ``budget`` seconds (the run's time left) and the endpoint timeout.

        ``what`` names the server in errors; ``pin`` fixes the address to connect to.
        """
        if problem := token_url_problem(grant.token_url):
            raise McpAuthError(f"{what}: token_url {problem}", code="oauth_bad_token_url")
        import httpx

        limit = self.timeout if budget is None else max(min(budget, self.timeout), 0.001)
        endpoint = f"{what}: the OAuth token endpoint {_display(grant.token_url)}"
        headers, form = build_request(grant)
        try:
            async with asyncio.timeout(limit):
                status, body = await self._post(grant.token_url, headers, form, pin, endpoint)
        except TimeoutError:
            raise McpAuthError(f"{endpoint} did not answer within {limit:g}s", code="oauth_timeout") from None
        except httpx.TransportError as exc:
            raise McpAuthError(
                f"{endpoint} is unreachable ({type(exc).__name__})", code="oauth_unreachable"
            ) from None
        sent = sent_credentials(grant, headers, form)
        return parse_token_response(status, body, endpoint, sent, issued_type=grant.issued_type)

    async def _post(
        self,
        token_url: str,
        headers: dict[str, str],
        form: dict[str, str],
        pin: PinnedAddress | None,
        endpoint: str,
    ) -> tuple[int, bytes]:
        import httpx

        url = httpx.URL(token_url)
        extensions: dict[str, Any] = {}
        if pin is not None:
            url, host, extensions = pin.apply(url)
            headers |= host
        async with (
            httpx.AsyncClient(
                verify=self.verify,
                follow_redirects=False,
                timeout=self.timeout,
                trust_env=False,
                transport=self.transport,
            ) as client,
            client.stream("POST", url, headers=headers, data=form, extensions=extensions) as response,
        ):
            if 300 <= response.status_code < 400:
                raise McpAuthError(
                    f"{endpoint} answered with a redirect ({response.status_code}); redirects are not "
                    "followed",
                    code="oauth_redirect",
                )
            too_large = McpAuthError(
                f"{endpoint} sent a body over {self.max_body // 1024} KiB", code="oauth_too_large"
            )
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > self.max_body:
                raise too_large
            body = bytearray()
            async for chunk in response.aiter_raw():
                body += chunk
                if len(body) > self.max_body:
                    raise too_large
            return response.status_code, bytes(body)


def sent_credentials(grant: TokenGrant, headers: dict[str, str], form: dict[str, str]) -> tuple[str, ...]:
    """Every credential a token request carries: the client secret (or private key), the HTTP Basic
    header, the ``private_key_jwt`` client assertion, the presented assertion or subject token — and
    each JWT's signature alone, which an endpoint may quote ("signature … does not verify")."""
    values = [grant.client_secret, headers.get("Authorization", "")]
    for name in _SECRET_FIELDS:
        value = form.get(name, "")
        values.append(value)
        if value.count(".") == 2:
            values.append(value.rsplit(".", 1)[-1])
    return tuple(v for v in values if v)


def parse_token_response(
    status: int, body: bytes, endpoint: str, sent: Sequence[str], *, issued_type: str | None = None
) -> AccessToken:
    """An AccessToken from the endpoint's answer, or McpAuthError saying what was wrong with it
    (its words scrubbed of ``sent``, the request's credentials). With ``issued_type`` (a token
    exchange) the answer must say it issued that type, and its ``token_type`` is not read."""
    data = _json_object(body)
    if not 200 <= status < 300:
        detail = _oauth_error(data, sent)
        raise McpAuthError(f"{endpoint} answered HTTP {status}{detail}", code="oauth_failed")
    if data is None:
        raise McpAuthError(f"{endpoint} did not answer with a JSON object", code="oauth_bad_response")
    token = data.get("access_token")
    if not isinstance(token, str) or not token:
        raise McpAuthError(f"{endpoint} answered without an access_token", code="oauth_bad_response")
    if not _TOKEN_CHARS.match(token):
        raise McpAuthError(
            f"{endpoint} sent an access_token with invalid characters", code="oauth_bad_response"
        )
    if issued_type is not None:
        if data.get("issued_token_type") != issued_type:
            raise McpAuthError(
                f"{endpoint} issued a token of type '{str(data.get('issued_token_type'))[:80]}', "
                f"not {issued_type}",
                code="oauth_bad_response",
            )
        return AccessToken(token, _expires_in(data.get("expires_in")))
    token_type = data.get("token_type")
    if token_type is not None and str(token_type).lower() != "bearer":
        raise McpAuthError(
            f"{endpoint} issued a token of type '{str(token_type)[:32]}'; only bearer tokens are supported",
            code="oauth_bad_response",
        )
    return AccessToken(token, _expires_in(data.get("expires_in")))


def _json_object(body: bytes) -> dict[str, Any] | None:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def _oauth_error(data: dict[str, Any] | None, sent: Sequence[str]) -> str:
    # RFC 6749 §5.2 error codes are short and safe to show; the description is scrubbed, then cut
    # (cut first, a credential on the edge would leave its first half), in every encoding.
    if not data or not isinstance(data.get("error"), str):
        return ""
    redactor = Redactor(sent)
    text = redactor.redact(data["error"])[:64]
    if isinstance(data.get("error_description"), str):
        text += f": {redactor.redact(data['error_description'])[:200]}"
    return f" ({text})"


def _expires_in(value: Any) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return DEFAULT_EXPIRES_IN
    return seconds if 0 < seconds < 10 * 365 * 86400 else DEFAULT_EXPIRES_IN
