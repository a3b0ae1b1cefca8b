"""Turning ``hatchway mcp probe`` options into the server entry and credentials the gateway would use.

Secrets never come from argv (shell history, ``ps``): a bearer token or client secret is read from
stdin or from a named environment variable, a private key from stdin or a file. They are handed to
``VaultCredentials`` through ``GivenSecrets``, so the probe authenticates exactly as a run does.
A workload's assertion (``--assertion-*``) or a user's identity token (``--subject-token-*``) given as a
file or an environment variable becomes the plugin's own ``file:`` / ``env:`` reference, read by the
same code as the gateway's; given on stdin, it is a given secret like the others.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from hatchway.cli.oauth_discovery import AuthorizationServer, discover_authorization_server
from hatchway.config.loading import validate_document
from hatchway.config.plugin import McpServerConfig
from hatchway.errors import InvalidRequest

PROBE_SERVER_ID = "probe"
BEARER = "probe_bearer"
CLIENT_SECRET = "probe_client_secret"
PRIVATE_KEY = "probe_private_key"
ASSERTION = "probe_assertion"
SUBJECT_TOKEN = "probe_subject_token"
_DISCOVERY_TIMEOUT = 10.0


@dataclass
class TokenSource:
    """Where one assertion-like token comes from: a file, an environment variable or stdin."""

    file: Path | None = None
    env: str | None = None
    stdin: bool = False

    def given(self) -> bool:
        return self.file is not None or self.env is not None or self.stdin

    def ref(self, name: str, flag: str) -> str:
        """The plugin reference for it: ``file:<absolute path>``, ``env:<NAME>`` or ``secret.<name>``."""
        if sum((self.file is not None, self.env is not None, self.stdin)) > 1:
            raise InvalidRequest(f"give one of {flag}-file, {flag}-env or {flag}-stdin")
        if self.file is not None:
            return f"file:{self.file.expanduser().resolve()}"
        if self.env is not None:
            return f"env:{self.env}"
        return f"secret.{name}"


@dataclass
class SecretInputs:
    """Where each secret comes from: ``stdin`` is read once, so at most one secret may use it."""

    bearer_env: str | None = None
    bearer_stdin: bool = False
    client_secret_env: str | None = None
    client_secret_stdin: bool = False
    private_key_file: Path | None = None
    private_key_stdin: bool = False
    assertion: TokenSource = field(default_factory=TokenSource)
    """``--assertion-*``: a workload's identity token (``grant: jwt_bearer``)."""
    subject_token: TokenSource = field(default_factory=TokenSource)
    """``--subject-token-*``: the identity token exchanged at the IdP (``grant: identity_assertion``)."""

    def read(self, stdin: Any) -> dict[str, str]:
        """The given secrets by vault name; InvalidRequest for a missing or doubly-sourced one."""
        from_stdin = (
            self.bearer_stdin,
            self.client_secret_stdin,
            self.private_key_stdin,
            self.assertion.stdin,
            self.subject_token.stdin,
        )
        if sum(from_stdin) > 1:
            raise InvalidRequest("only one secret can be read from stdin")
        values: dict[str, str] = {}
        sources = (
            (BEARER, self.bearer_env, self.bearer_stdin, "--bearer-env", "--bearer-stdin"),
            (
                CLIENT_SECRET,
                self.client_secret_env,
                self.client_secret_stdin,
                "--client-secret-env",
                "…-stdin",
            ),
        )
        for name, env, from_stdin, env_flag, stdin_flag in sources:
            if env and from_stdin:
                raise InvalidRequest(f"give {env_flag} or {stdin_flag}, not both")
            if env:
                values[name] = _from_env(env, env_flag)
            elif from_stdin:
                values[name] = _from_stdin(stdin, stdin_flag)
        if self.private_key_file is not None and self.private_key_stdin:
            raise InvalidRequest("give --private-key-file or --private-key-stdin, not both")
        if self.private_key_file is not None:
            try:
                values[PRIVATE_KEY] = self.private_key_file.read_text(encoding="utf-8")
            except OSError as exc:
                raise InvalidRequest(f"--private-key-file {self.private_key_file}: {exc.strerror}") from None
        elif self.private_key_stdin:
            values[PRIVATE_KEY] = _from_stdin(stdin, "--private-key-stdin")
        if self.assertion.stdin:
            values[ASSERTION] = _from_stdin(stdin, "--assertion-stdin")
        if self.subject_token.stdin:
            values[SUBJECT_TOKEN] = _from_stdin(stdin, "--subject-token-stdin")
        return values

    def token_refs(self) -> dict[str, str]:
        """The plugin's ``assertion_ref`` / ``subject_token_ref`` for the tokens given."""
        refs: dict[str, str] = {}
        if self.assertion.given():
            refs["assertion_ref"] = self.assertion.ref(ASSERTION, "--assertion")
        if self.subject_token.given():
            refs["subject_token_ref"] = self.subject_token.ref(SUBJECT_TOKEN, "--subject-token")
        return refs


@dataclass
class OAuthInputs:
    token_url: str | None = None
    grant: str | None = None
    """``authorization_code`` (``--oauth`` / ``--oauth-headless``): act as the person running the probe."""
    client_id: str | None = None
    client_auth: str | None = None
    scopes: list[str] = field(default_factory=list)
    kid: str | None = None
    audience: str | None = None
    dpop: bool = False
    """``--dpop``: with ``--oauth``, ask for DPoP-bound tokens and prove them on every request."""
    idp_token_url: str | None = None
    idp_client_id: str | None = None
    token_refs: dict[str, str] = field(default_factory=dict)
    """``assertion_ref`` / ``subject_token_ref``, from ``SecretInputs.token_refs``."""


@dataclass
class Target:
    """The server to probe, as options describe it (URL or command; transport; auth)."""

    url: str | None = None
    sse: bool = False
    command: str | None = None
    args: list[str] = field(default_factory=list)
    timeout_ms: int = 30_000
    retries: int = 0

    def entry(self) -> dict[str, Any]:
        """The plugin ``mcp_servers[]`` entry, before auth."""
        data: dict[str, Any] = {
            "id": PROBE_SERVER_ID,
            "timeout_ms": self.timeout_ms,
            "max_retries": self.retries,
        }
        if self.command is not None:
            if self.url is not None:
                raise InvalidRequest("give a URL or --command, not both")
            if self.sse:
                raise InvalidRequest("--sse is for URL servers; --command servers speak stdio")
            return data | {"command": self.command, "args": list(self.args)}
        if self.url is None:
            raise InvalidRequest(
                "give the server's URL, --command for a stdio server, or --plugin with --server"
            )
        if self.args:
            raise InvalidRequest("--arg is for --command servers")
        return data | {"url": self.url, "transport": "sse" if self.sse else "streamable_http"}


async def build_server(
    target: Target, oauth: OAuthInputs, secrets: dict[str, str]
) -> tuple[McpServerConfig, AuthorizationServer | None]:
    """The validated server entry; discovers the token endpoint when OAuth has no token URL."""
    data = target.entry()
    discovered = None
    if oauth.dpop and oauth.grant != "authorization_code":
        raise InvalidRequest("--dpop goes with --oauth or --oauth-headless (grant authorization_code)")
    if BEARER in secrets:
        if oauth.client_id:
            raise InvalidRequest("give a bearer token or OAuth client credentials, not both")
        data["auth"] = {"type": "bearer", "secret_ref": f"secret.{BEARER}"}
    elif oauth.grant == "authorization_code":
        if target.url is None or target.command is not None:
            raise InvalidRequest("--oauth needs an HTTP server URL")
        if oauth.token_url is not None:
            raise InvalidRequest("--oauth discovers the endpoints from the server; drop --oauth-token-url")
        data["auth"] = _user_oauth_block(oauth, secrets)
    elif oauth.token_refs or oauth.idp_token_url:
        if target.url is None:
            raise InvalidRequest("an assertion grant needs an HTTP server URL")
        if oauth.token_url is None:
            discovered = await _discover(target.url)
        data["auth"] = _assertion_block(oauth, secrets, discovered)
    elif oauth.client_id or oauth.token_url:
        if target.url is None:
            raise InvalidRequest("OAuth needs an HTTP server URL")
        if oauth.token_url is None:
            discovered = await _discover(target.url)
        data["auth"] = _oauth_block(oauth, secrets, discovered)
    elif CLIENT_SECRET in secrets or PRIVATE_KEY in secrets:
        raise InvalidRequest("a client secret or private key needs --client-id")
    return validate_document(McpServerConfig, data, "probe options"), discovered


def _oauth_block(
    oauth: OAuthInputs, secrets: dict[str, str], discovered: AuthorizationServer | None
) -> dict[str, Any]:
    if not oauth.client_id:
        raise InvalidRequest("OAuth needs --client-id")
    method = oauth.client_auth or _default_method(secrets, discovered)
    block: dict[str, Any] = {
        "type": "oauth",
        "token_url": oauth.token_url or (discovered.token_endpoint if discovered else None),
        "client_id": oauth.client_id,
        "scopes": list(oauth.scopes),
        "client_auth": method,
    }
    if method == "private_key_jwt":
        if PRIVATE_KEY not in secrets:
            raise InvalidRequest("private_key_jwt needs --private-key-file or --private-key-stdin")
        # RFC 7523bis: the audience is the authorization server's issuer; fall back to the token URL.
        audience = oauth.audience or (discovered.issuer if discovered else None)
        return block | {"private_key_ref": f"secret.{PRIVATE_KEY}", "kid": oauth.kid, "audience": audience}
    if CLIENT_SECRET not in secrets:
        raise InvalidRequest("OAuth client credentials need --client-secret-stdin or --client-secret-env")
    return block | {"secret_ref": f"secret.{CLIENT_SECRET}"}


def _assertion_block(
    oauth: OAuthInputs, secrets: dict[str, str], discovered: AuthorizationServer | None
) -> dict[str, Any]:
    """``grant: jwt_bearer`` (a workload's assertion) or ``identity_assertion`` (an ID-JAG from the IdP)."""
    token_url = oauth.token_url or (discovered.token_endpoint if discovered else None)
    block: dict[str, Any] = {"type": "oauth", "token_url": token_url, "scopes": list(oauth.scopes)}
    if oauth.client_id:
        block["client_id"] = oauth.client_id
    if oauth.idp_token_url:
        if "subject_token_ref" not in oauth.token_refs:
            raise InvalidRequest(
                "--idp-token-url needs the identity token: --subject-token-file, -env or -stdin"
            )
        if "assertion_ref" in oauth.token_refs:
            raise InvalidRequest(
                "give --assertion-* (jwt_bearer) or --idp-token-url (identity_assertion), not both"
            )
        # The ID-JAG is asked for the authorization server's issuer (SEP-990).
        audience = oauth.audience or (discovered.issuer if discovered else None)
        block |= {
            "grant": "identity_assertion",
            "idp_token_url": oauth.idp_token_url,
            "subject_token_ref": oauth.token_refs["subject_token_ref"],
            "audience": audience,
        }
        if oauth.idp_client_id:
            block["idp_client_id"] = oauth.idp_client_id
    else:
        if "subject_token_ref" in oauth.token_refs:
            raise InvalidRequest("--subject-token-* goes with --idp-token-url")
        block |= {"grant": "jwt_bearer", "assertion_ref": oauth.token_refs["assertion_ref"]}
    return block | _client_credential(oauth, secrets, discovered, required=oauth.idp_token_url is not None)


def _client_credential(
    oauth: OAuthInputs, secrets: dict[str, str], discovered: AuthorizationServer | None, *, required: bool
) -> dict[str, Any]:
    """How an assertion grant's client authenticates: a secret, a private key, or (jwt_bearer) not at all."""
    if PRIVATE_KEY in secrets:
        return {
            "client_auth": "private_key_jwt",
            "private_key_ref": f"secret.{PRIVATE_KEY}",
            "kid": oauth.kid,
        }
    if CLIENT_SECRET in secrets:
        method = oauth.client_auth or _default_method(secrets, discovered)
        return {"client_auth": method, "secret_ref": f"secret.{CLIENT_SECRET}"}
    if required:
        raise InvalidRequest(
            "--idp-token-url: the authorization server wants a confidential client: "
            "--client-secret-stdin, --client-secret-env or --private-key-*"
        )
    return {}


def _user_oauth_block(oauth: OAuthInputs, secrets: dict[str, str]) -> dict[str, Any]:
    if PRIVATE_KEY in secrets:
        raise InvalidRequest("--oauth takes a client secret, not a private key")
    block: dict[str, Any] = {"type": "oauth", "grant": "authorization_code", "scopes": list(oauth.scopes)}
    if oauth.client_id:
        block["client_id"] = oauth.client_id
    elif CLIENT_SECRET in secrets:
        raise InvalidRequest("a client secret needs --client-id (a pre-registered client)")
    if CLIENT_SECRET in secrets:
        block["secret_ref"] = f"secret.{CLIENT_SECRET}"
    if oauth.client_auth:
        block["client_auth"] = oauth.client_auth
    if oauth.dpop:
        block["dpop"] = True
    return block


def _default_method(secrets: dict[str, str], discovered: AuthorizationServer | None) -> str:
    if PRIVATE_KEY in secrets:
        return "private_key_jwt"
    methods = discovered.auth_methods if discovered else ()
    if methods and "client_secret_basic" not in methods and "client_secret_post" in methods:
        return "client_secret_post"
    return "client_secret_basic"


async def _discover(url: str) -> AuthorizationServer:
    async with httpx.AsyncClient(
        timeout=_DISCOVERY_TIMEOUT, follow_redirects=False, trust_env=False
    ) as client:
        return await discover_authorization_server(url, client=client)


def _from_env(name: str, flag: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise InvalidRequest(f"{flag} {name}: the environment variable is not set or empty")
    return value


def _from_stdin(stdin: Any, flag: str) -> str:
    value = stdin.read().removesuffix("\n").removesuffix("\r")
    if not value:
        raise InvalidRequest(f"{flag}: nothing was read from stdin")
    return value
