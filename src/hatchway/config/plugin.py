"""Plugin YAML v1: the MCP servers a run may use and how its agent loop behaves (seed 004).

```yaml
version: "1"
mcp_servers:
  - id: pesquisa_web
    url: "https://mcp.example.com/search"      # or command: + args: for a local stdio server
    auth: {type: bearer, secret_ref: "secret.mcp_search_api_key"}
    tools: [search_web, fetch_page]           # or "*"
    forward_headers: ["x-tenant-id"]
    timeout_ms: 5000
    max_retries: 2
    idempotent_tools: [search_web, "fetch_*"] # retried even when a failed call may have run
agent: {max_rounds: 10, stream_mode: final_only, tool_call_parallel: true, tool_cache_ttl_seconds: 300}
```
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, AliasChoices, ConfigDict, Field, field_validator, model_validator

from hatchway.config.headers import HEADER_NAME, forward_header_problem, never_forwarded
from hatchway.config.loading import StrictModel, parse_yaml_text, read_config_text, validate_document
from hatchway.config.token_endpoints import ClientAuth, token_source_problem, token_url_problem
from hatchway.errors import ConfigError
from hatchway.vault.names import ref_problem

SERVER_ID = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
_SCOPE_TOKEN = re.compile(r"^[\x21\x23-\x5b\x5d-\x7e]+$")


class _PluginModel(StrictModel):
    # Wrong types are errors, not coerced: "10" is not a max_rounds.
    model_config = ConfigDict(strict=True)


def _forwardable(name: str) -> str:
    problem = forward_header_problem(name)
    if problem is not None:
        raise ValueError(problem)
    return name


def _scope_token(scope: str) -> str:
    if not _SCOPE_TOKEN.match(scope):
        raise ValueError(
            f"one scope per entry: visible ASCII without spaces, '\"' or backslash (got {scope!r})"
        )
    return scope


def _secret_ref(value: str | None) -> str | None:
    if value is not None and (problem := ref_problem(value)):
        raise ValueError(problem)
    return value


_ASSERTION_GRANTS = ("assertion_ref", "idp_token_url", "idp_client_id", "subject_token_ref")
_OAUTH_ONLY = (
    "token_url",
    "client_id",
    "scopes",
    "client_auth",
    "private_key_ref",
    "kid",
    "audience",
    *_ASSERTION_GRANTS,
)
_CLIENT_CREDENTIALS_ONLY = ("token_url", "private_key_ref", "kid", "audience")
_USER_AUTH_METHODS = ("client_secret_basic", "client_secret_post", "none")
_JWT_ONLY = ("private_key_ref", "kid", "audience")


def _token_source(value: str | None) -> str | None:
    if value is not None and (problem := token_source_problem(value)):
        raise ValueError(problem)
    return value


def _auth_schema(schema: dict[str, Any]) -> None:
    # What ``McpAuth._complete`` requires per type, for editors (the validator stays the authority).
    schema["allOf"] = [
        {
            "if": {"properties": {"type": {"enum": ["bearer", "api_key"]}}, "required": ["type"]},
            "then": {"required": ["secret_ref"]},
        },
        {
            "if": {
                "properties": {"type": {"const": "oauth"}, "grant": {"const": "client_credentials"}},
                "required": ["type"],
            },
            "then": {"required": ["token_url", "client_id"]},
        },
        {
            "if": {
                "properties": {"type": {"const": "oauth"}, "grant": {"const": "jwt_bearer"}},
                "required": ["type", "grant"],
            },
            "then": {"required": ["token_url", "assertion_ref"]},
        },
        {
            "if": {
                "properties": {"type": {"const": "oauth"}, "grant": {"const": "identity_assertion"}},
                "required": ["type", "grant"],
            },
            "then": {
                "required": ["token_url", "client_id", "audience", "idp_token_url", "subject_token_ref"]
            },
        },
    ]


class McpAuth(_PluginModel):
    """How the gateway authenticates to one MCP server; secrets are named, never written here."""

    model_config = ConfigDict(json_schema_extra=_auth_schema)

    type: Literal["none", "bearer", "api_key", "oauth"] = "none"
    """``none``, ``bearer`` (``Authorization: Bearer <secret>``), ``api_key`` (``<header>: <secret>``)
    or ``oauth`` (``grant`` says which)."""
    grant: Literal["client_credentials", "authorization_code", "jwt_bearer", "identity_assertion"] = (
        "client_credentials"
    )
    """``type: oauth``: ``client_credentials`` authenticates the gateway as itself (``token_url``,
    ``client_id``, ``secret_ref``); ``authorization_code`` acts as the end user (``X-On-Behalf-Of``):
    each user authorizes the server once, through a link in the conversation, and the gateway keeps
    their token in the vault and refreshes it. Its endpoints are discovered from the server (RFC 9728,
    RFC 8414); ``client_id`` / ``secret_ref`` are a pre-registered client, else Hatchway's Client ID
    Metadata Document (``public_base_url``) or dynamic registration; ``scopes`` add to what the server
    asks for. ``jwt_bearer`` presents a workload's identity token (``assertion_ref``) at ``token_url``
    (RFC 7523, workload identity federation); ``identity_assertion`` exchanges a user's identity token
    (``subject_token_ref``) at the enterprise IdP (``idp_token_url``) for an ID-JAG and presents that
    at ``token_url`` (RFC 8693 then RFC 7523, enterprise-managed authorization)."""
    secret_ref: Annotated[str | None, AfterValidator(_secret_ref)] = None
    """``secret.<name>``: the vault entry (the token, the API key, or the OAuth client secret)."""
    header: str = "X-Api-Key"
    """The header that carries the key for ``type: api_key``."""
    token_url: str | None = None
    """``type: oauth``: the https token endpoint of the client_credentials grant."""
    client_id: str | None = None
    """``type: oauth``: the client id at the token endpoint."""
    scopes: list[Annotated[str, AfterValidator(_scope_token)]] = Field(default_factory=list)
    """``type: oauth``: sent space-separated, so each is one RFC 6749 scope-token (no spaces)."""
    client_auth: Literal["client_secret_basic", "client_secret_post", "private_key_jwt", "none"] | None = (
        Field(default=None, validation_alias=AliasChoices("client_auth", "token_endpoint_auth_method"))
    )
    """How an ``oauth`` client authenticates at the token endpoint: ``client_secret_basic`` (HTTP Basic,
    the default), ``client_secret_post`` (in the form body), as RFC 6749 §2.3.1 allows, or
    ``private_key_jwt`` (a signed RFC 7523 assertion). ``token_endpoint_auth_method`` (RFC 7591's
    name) is accepted as an alias."""
    private_key_ref: Annotated[str | None, AfterValidator(_secret_ref)] = None
    """``secret.<name>``: the PEM private key for ``private_key_jwt`` (EC P-256 → ES256, RSA → RS256)."""
    kid: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    """The key id put in the assertion's header, when the identity provider wants one."""
    audience: str | None = None
    """The assertion's ``aud``; the token_url when omitted (some providers want their issuer instead).
    With ``grant: identity_assertion``: the issuer of the MCP server's authorization server, the
    audience the ID-JAG is asked for (required)."""
    dpop: bool = False
    """``grant: authorization_code``: ask for DPoP-bound tokens (RFC 9449) and prove possession of the
    key on every request (``Authorization: DPoP``, a fresh proof each time, the servers' nonces)."""
    assertion_ref: Annotated[str | None, AfterValidator(_token_source)] = None
    """``grant: jwt_bearer``: where the workload's assertion (a JWT its identity provider issued for
    ``token_url``'s server) is read at each exchange: ``secret.<name>``, ``env:<NAME>`` or
    ``file:<absolute path>`` (a Kubernetes projected token). ``env:``/``file:`` are for plugins in
    hatchway.yaml only."""
    idp_token_url: str | None = None
    """``grant: identity_assertion``: the enterprise IdP's https token endpoint, where the user's
    identity token is exchanged (RFC 8693) for an ID-JAG."""
    idp_client_id: str | None = None
    """``grant: identity_assertion``: the gateway's client id at the IdP, when it wants one."""
    subject_token_ref: Annotated[str | None, AfterValidator(_token_source)] = None
    """``grant: identity_assertion``: where the identity token exchanged at the IdP is read, like
    ``assertion_ref`` (``secret.<name>``, ``env:<NAME>``, ``file:<absolute path>``)."""
    subject_token_type: Literal["id_token", "saml2", "access_token", "jwt"] = "id_token"
    """``grant: identity_assertion``: what ``subject_token_ref`` holds (RFC 8693 token type)."""

    @field_validator("token_url", "idp_token_url")
    @classmethod
    def _token_url(cls, value: str | None) -> str | None:
        if value is not None and (problem := token_url_problem(value)):
            raise ValueError(problem)
        return value

    @field_validator("header")
    @classmethod
    def _header(cls, value: str) -> str:
        if not HEADER_NAME.match(value):
            raise ValueError(f"not a valid header name (got {value!r})")
        return value

    @property
    def per_user(self) -> bool:
        """Whether the gateway reaches the server as the end user (``grant: authorization_code``)."""
        return self.type == "oauth" and self.grant == "authorization_code"

    @property
    def method(self) -> ClientAuth:
        """The token endpoint authentication actually used (``grant: client_credentials`` only)."""
        return self.client_auth if self.client_auth not in (None, "none") else "client_secret_basic"  # type: ignore[return-value]

    @property
    def assertion_grant(self) -> bool:
        """Whether the token comes from presenting an assertion (``jwt_bearer``, ``identity_assertion``)."""
        return self.type == "oauth" and self.grant in ("jwt_bearer", "identity_assertion")

    @model_validator(mode="after")
    def _complete(self) -> McpAuth:
        if self.dpop and not self.per_user:
            raise ValueError("dpop: only with type oauth and grant authorization_code")
        if self.type == "oauth":
            self._check_oauth()
        else:
            for name in _OAUTH_ONLY:
                if getattr(self, name) not in (None, []):
                    raise ValueError(f"{name}: {', '.join(_OAUTH_ONLY)} only apply to auth type oauth")
        if self.type in ("bearer", "api_key") and self.secret_ref is None:
            raise ValueError(f"secret_ref: required for auth type {self.type} (e.g. secret.my_key)")
        if self.type == "none" and self.secret_ref is not None:
            raise ValueError("secret_ref: not used with auth type none; set type to bearer, api_key or oauth")
        return self

    def _check_oauth(self) -> None:
        if self.grant not in ("jwt_bearer", "identity_assertion"):
            self._only_for_assertion_grants()
        if self.grant == "authorization_code":
            self._check_user_oauth()
            return
        if self.grant == "jwt_bearer":
            self._check_jwt_bearer()
            return
        if self.grant == "identity_assertion":
            self._check_identity_assertion()
        if self.client_auth == "none":
            raise ValueError(
                "client_auth: none is for grant authorization_code; client_credentials authenticates"
            )
        if self.token_url is None:
            raise ValueError("token_url: required for auth type oauth (an https token endpoint)")
        if not self.client_id:
            raise ValueError("client_id: required for auth type oauth")
        if self._check_client_secret():
            return
        for name in _JWT_ONLY:
            if getattr(self, name) is not None and not (
                name == "audience" and self.grant == "identity_assertion"
            ):
                raise ValueError(f"{name}: only used with client_auth private_key_jwt")

    def _only_for_assertion_grants(self) -> None:
        for name in _ASSERTION_GRANTS:
            if getattr(self, name) is not None:
                raise ValueError(f"{name}: only used with grant jwt_bearer or identity_assertion")

    def _check_jwt_bearer(self) -> None:
        for name in ("idp_token_url", "idp_client_id", "subject_token_ref"):
            if getattr(self, name) is not None:
                raise ValueError(f"{name}: only used with grant identity_assertion")
        if self.token_url is None:
            raise ValueError("token_url: required for grant jwt_bearer (the authorization server's)")
        if self.assertion_ref is None:
            raise ValueError(
                "assertion_ref: required for grant jwt_bearer (secret.<name>, env:<NAME> or file:<path>)"
            )
        if self.client_auth in (None, "none") and self.secret_ref is None and self.private_key_ref is None:
            return  # RFC 7523 §3.1: the assertion alone may authenticate; client_id (if any) is sent
        if self.client_auth == "none":
            raise ValueError("client_auth: none sends no secret; drop secret_ref / private_key_ref")
        if not self.client_id:
            raise ValueError(
                "client_id: required when the client authenticates (secret_ref or private_key_ref)"
            )
        self._check_client_secret()

    def _check_identity_assertion(self) -> None:
        if self.assertion_ref is not None:
            raise ValueError("assertion_ref: not used with grant identity_assertion; the IdP issues it")
        for name, hint in (
            ("idp_token_url", "the enterprise IdP's https token endpoint"),
            ("subject_token_ref", "secret.<name>, env:<NAME> or file:<path> holding the identity token"),
            ("audience", "the issuer of the MCP server's authorization server"),
        ):
            if getattr(self, name) is None:
                raise ValueError(f"{name}: required for grant identity_assertion ({hint})")

    def _check_client_secret(self) -> bool:
        """The client's own credential is there (True: a private key, False: a secret)."""
        if self.method == "private_key_jwt":
            if self.private_key_ref is None:
                raise ValueError(
                    "private_key_ref: required with client_auth private_key_jwt "
                    "(secret.<name> holding a PEM key)"
                )
            if self.secret_ref is not None:
                raise ValueError(
                    "secret_ref: not used with client_auth private_key_jwt; the key is private_key_ref"
                )
            return True
        if self.secret_ref is None:
            raise ValueError("secret_ref: required for auth type oauth (e.g. secret.my_key)")
        return False

    def _check_user_oauth(self) -> None:
        for name in _CLIENT_CREDENTIALS_ONLY:
            if getattr(self, name) is not None:
                raise ValueError(
                    f"{name}: not used with grant authorization_code "
                    "(the endpoints are discovered from the server)"
                )
        if self.client_auth is not None and self.client_auth not in _USER_AUTH_METHODS:
            raise ValueError(
                f"client_auth: with grant authorization_code, one of {', '.join(_USER_AUTH_METHODS)}"
            )
        if self.secret_ref is not None and self.client_id is None:
            raise ValueError("secret_ref: the secret of a pre-registered client; give its client_id too")


class McpServerConfig(_PluginModel):
    """One MCP server: a URL (streamable HTTP or SSE) or a local command (stdio)."""

    model_config = ConfigDict(json_schema_extra={"oneOf": [{"required": ["url"]}, {"required": ["command"]}]})

    id: Annotated[str, Field(pattern=SERVER_ID)]
    """Unique in the plugin; the server's tools reach the model as ``<id>__<tool>``."""
    url: str | None = None
    """The server's streamable HTTP endpoint (or its SSE endpoint with ``transport: sse``)."""
    command: str | None = None
    """Run a local server over stdio instead (plugins from hatchway.yaml only)."""
    args: list[str] = Field(default_factory=list)
    """Arguments of ``command``."""
    transport: Literal["streamable_http", "sse"] | None = None
    """For ``url`` servers; streamable HTTP when omitted."""
    auth: McpAuth = Field(default_factory=McpAuth)
    """How the gateway authenticates to the server."""
    tools: list[Annotated[str, Field(min_length=1)]] | Literal["*"] = "*"
    """The tools exposed to the model; ``"*"`` exposes every tool of the server."""
    forward_headers: list[Annotated[str, AfterValidator(_forwardable)]] = Field(default_factory=list)
    """Headers copied from the client's request to this server only. ``authorization``, ``cookie``,
    ``host``, hop-by-hop, framing and MCP session headers are never forwarded: listed, they are
    dropped (``hatchway plugin check`` warns, the response's ``x-hatchway-dropped-headers`` header
    and the run record's ``list_tools`` step name them)."""
    timeout_ms: Annotated[int, Field(ge=1, le=600_000)] = 10_000
    """Timeout of one attempt of a call."""
    max_retries: Annotated[int, Field(ge=0, le=10)] = 2
    """Retries of a failed call. A call that provably never reached the server (the connection was
    refused or never opened) is retried; one that may have reached it (a timeout, a cut connection,
    a 5xx) only when the tool is idempotent (``idempotent_tools``, or the server's ``idempotentHint``
    or ``readOnlyHint``), else the model is told its outcome is unknown. A tool's own error is never
    retried; a failed listing of the tools (read-only) always is."""
    tool_drift: Literal["block", "warn", "allow"] | None = None
    """What a tool whose definition changed since it was approved gets (docs/security.md,
    "Tool-definition pinning"): ``block`` withholds it (and tools the server adds) until ``hatchway
    tools approve``; ``warn`` keeps it, logged; ``allow`` pins nothing. Unset: ``block`` for inline
    plugins' servers, ``warn`` for those of plugins named in hatchway.yaml."""
    idempotent_tools: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    """Tools safe to call again after a failure that may have reached them (``max_retries``):
    names of the server's tools or globs (``get_*``, ``search_?``; ``*`` for all). A call of any other
    tool runs at most once unless the server itself annotates the tool ``idempotentHint`` or
    ``readOnlyHint``."""
    tasks: Literal["auto", "off"] = "auto"
    """MCP Tasks (docs/mcp-plugins.md, "Tasks"): ``auto`` declares the tasks extension on calls to a
    server that advertises it, so the server may answer a slow call with a task, which the gateway
    polls — durably: a background response that loses its replica polls the same task again, never
    calling the tool twice; ``off`` never declares it (such a server then answers at once, or
    refuses a tool that needs a task)."""
    task_tools: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    """Tools known to be slow (names or globs): their calls declare the tasks extension even to a
    server that does not advertise it (with ``tasks: auto``)."""

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and (not re.match(r"^https?://[^/\s]+\S*$", value) or not _splits(value)):
            raise ValueError(f"must be an http(s) URL such as https://mcp.example.com/mcp (got {value!r})")
        return value

    @field_validator("tools", mode="before")
    @classmethod
    def _tools(cls, value: Any) -> Any:
        if isinstance(value, str) and value != "*":
            raise ValueError(f'must be a list of tool names or "*" (got {value!r})')
        return value

    @model_validator(mode="after")
    def _shape(self) -> McpServerConfig:
        if (self.url is None) == (self.command is None):
            raise ValueError("url: give exactly one of url (HTTP) or command (stdio)")
        if self.command is not None:
            if self.transport is not None:
                raise ValueError("transport: only for url servers; a command server speaks stdio")
            if self.auth.type != "none":
                raise ValueError("auth.type: stdio servers (command) take no HTTP auth; use type none")
            if self.forward_headers:
                raise ValueError("forward_headers: stdio servers (command) receive no HTTP headers")
        elif self.args:
            raise ValueError("args: only for command (stdio) servers")
        seen: set[str] = set()
        for i, name in enumerate(self.forward_headers):
            if name.lower() in seen:
                raise ValueError(f"forward_headers[{i}]: {name!r} is listed twice")
            if self.auth.type == "api_key" and name.lower() == self.auth.header.lower():
                raise ValueError(
                    f"forward_headers[{i}]: {name!r} carries this server's API key (auth.header); "
                    "it cannot be forwarded"
                )
            seen.add(name.lower())
        return self

    @property
    def dropped_headers(self) -> list[str]:
        """``forward_headers`` entries that are never forwarded (``authorization``, ``cookie``…)."""
        return never_forwarded(self.forward_headers)

    @property
    def kind(self) -> Literal["streamable_http", "sse", "stdio"]:
        """The transport actually used."""
        if self.command is not None:
            return "stdio"
        return self.transport or "streamable_http"

    @property
    def target(self) -> str:
        """Where the server is: its URL, or its command line."""
        return self.url if self.url is not None else " ".join([self.command or "", *self.args])

    def exposes(self, tool: str) -> bool:
        """Whether the allowlist lets the model see ``tool``."""
        return self.tools == "*" or tool in self.tools

    def declares_idempotent(self, tool: str) -> bool:
        """Whether ``idempotent_tools`` names ``tool`` (or a glob matches it, case-sensitively)."""
        return any(fnmatchcase(tool, pattern) for pattern in self.idempotent_tools)


StreamMode = Literal["final_only", "disabled"]


class PluginAgentConfig(_PluginModel):
    """The agent loop settings of a plugin."""

    max_rounds: Annotated[int, Field(ge=1, le=100)] = 10
    """Model rounds before the loop stops: the last round's tool calls run, then that round's model
    response is returned (``finish_reason: "max_rounds"``)."""
    stream_mode: StreamMode = "final_only"
    """``final_only``: tool rounds (and text written before a tool call) are not streamed, the answer
    is; ``disabled``: the answer is sent as one chunk at the end."""
    tool_call_parallel: bool = True
    """Run the tool calls of one round concurrently."""
    tool_cache_ttl_seconds: Annotated[int, Field(ge=0, le=86_400)] = 0
    """Cache tool results per (organisation, server, tool, arguments) for this long; 0 = off."""
    prompt_guard_on_tool_output: bool = False
    """Guard this plugin's runs: every tool result spotlighted and scanned, and a transactional tool
    called after tool output asks the end user (hatchway.yaml's ``guards:`` says how;
    docs/security.md, "Untrusted tool output")."""
    max_run_tokens: Annotated[int | None, Field(ge=1)] = None
    """A budget of model tokens (input + output) for the whole run tree — this run's rounds and every
    subagent's: when the next round would pass it, the model gets one last round with no tools and is
    told to answer with what it has (docs/limits.md, "Run budgets"). None: no budget."""
    max_run_cost_usd: Annotated[float | None, Field(gt=0)] = None
    """The same, in USD, priced as the run record prices each model call."""
    max_run_tool_calls: Annotated[int | None, Field(ge=1)] = None
    """The same, in gateway tool calls over the tree (subagents' included)."""
    allow_sampling: bool = False
    """Let this plugin's MCP servers ask the gateway's model (an MCP sampling request): answered with
    the run's model, at most ``max_sampling_tokens`` tokens, inside the run's deadline, and counted in
    its usage. Off: a sampling request fails the tool call with ``mcp_input_unsupported``."""


def _plugin_schema(schema: dict[str, Any]) -> None:
    # ``_version`` below reads a YAML integer 1 as "1".
    version = schema["properties"]["version"]
    schema["properties"]["version"] = {"enum": ["1", 1], "description": version.get("description", "")}


class PluginConfig(_PluginModel):
    """A whole plugin file (version 1)."""

    model_config = ConfigDict(json_schema_extra=_plugin_schema)

    version: Literal["1"]
    """The file format's version: ``"1"`` (a YAML ``1`` is read as ``"1"``)."""
    mcp_servers: list[McpServerConfig] = Field(default_factory=list)
    """The servers whose tools a run may use."""
    agent: PluginAgentConfig = Field(default_factory=PluginAgentConfig)
    """How the agent loop runs."""

    @field_validator("version", mode="before")
    @classmethod
    def _version(cls, value: Any) -> Any:
        return "1" if value == 1 and not isinstance(value, bool) else value

    @model_validator(mode="after")
    def _unique_ids(self) -> PluginConfig:
        seen: set[str] = set()
        for i, server in enumerate(self.mcp_servers):
            if server.id in seen:
                raise ValueError(f"mcp_servers[{i}].id: duplicate server id {server.id!r}")
            seen.add(server.id)
        return self

    def server(self, server_id: str) -> McpServerConfig | None:
        return next((s for s in self.mcp_servers if s.id == server_id), None)


def load_plugin(path: str | Path) -> PluginConfig:
    """Read and validate a plugin file; ConfigError names the file and each field path."""
    path = Path(path)
    return parse_plugin(read_config_text(path), str(path))


def _splits(url: str) -> bool:
    """Whether ``url`` has a host and a port the standard library can read: it refuses, by raising,
    characters that NFKC-normalise into URL syntax (a fullwidth ``／`` or ``＃``) and ports past 65535."""
    try:
        parts = urlsplit(url)
        _ = parts.port
    except ValueError:
        return False
    return bool(parts.hostname)


def parse_plugin(text: str, source: str, *, untrusted: bool = False) -> PluginConfig:
    """Validate plugin YAML given as text (``source`` names it in errors; ``untrusted``: from an API
    caller, parsed within limits)."""
    return validate_plugin(parse_yaml_text(text, source, untrusted=untrusted), source)


def validate_plugin(data: Any, source: str) -> PluginConfig:
    """Validate parsed plugin data, reporting every problem at once (duplicate ids included)."""
    try:
        return validate_document(PluginConfig, data, source)
    except ConfigError as exc:
        known = {path for path, _ in exc.problems}
        extra = [p for p in _duplicate_ids(data) if p[0] not in known]
        if not extra:
            raise
        raise ConfigError(source, [*exc.problems, *extra]) from None


def _duplicate_ids(data: Any) -> list[tuple[str, str]]:
    # The model validator only runs once every server is valid; a file with other mistakes
    # still deserves to hear about its duplicate ids in the same report.
    servers = data.get("mcp_servers") if isinstance(data, dict) else None
    if not isinstance(servers, list):
        return []
    seen: set[str] = set()
    problems = []
    for i, server in enumerate(servers):
        server_id = server.get("id") if isinstance(server, dict) else None
        if isinstance(server_id, str):
            if server_id in seen:
                problems.append((f"mcp_servers[{i}].id", f"duplicate server id {server_id!r}"))
            seen.add(server_id)
    return problems
