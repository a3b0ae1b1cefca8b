"""Every error Hatchway raises, in one tree.

    HatchwayError
    ├── ConfigError ............ a bad hatchway.yaml, plugin, tools.yaml or policy file
    ├── RequestError ........... the caller's fault, mapped to a 4xx
    │   ├── InvalidRequest ..... 400 (field path in ``param``)
    │   │   └── SignInInvalid .. an SSO callback's ``state``: forged, expired, used, another browser's
    │   ├── AuthenticationError  401
    │   │   ├── SessionEnded ... a signed-in person's session cookie names no live session
    │   │   └── SignInFailed ... the identity provider refused a sign-in, or its ID token is not valid
    │   ├── PermissionDenied ... 403
    │   │   ├── InsufficientRole  a route or object the key's (or person's) role is not granted
    │   │   ├── CsrfFailed ..... a change made with a session cookie but without its CSRF token
    │   │   └── NoRoleMapped ... signed in at the provider, but no group is mapped to a role here
    │   ├── NotFound ........... 404
    │   │   └── ModelNotFound
    │   ├── Conflict ........... 409
    │   ├── TooLarge ........... 413: a request body past its limit
    │   ├── RateLimited ........ 429: a requests-per-minute limit of ``limits:`` (``param`` names it)
    │   │   ├── TokensLimited .. 429: its tokens do not fit a tokens-per-minute limit
    │   │   ├── ConcurrencyLimited  429: as many runs as a concurrency limit allows are in progress
    │   │   └── BudgetExceeded . 429: a USD budget per day or month is spent
    │   │   └── HeadTooLarge ... 431: a request head (line and headers) past its limit
    │   └── ClientGone ......... 499: the client went away before the answer (nothing is sent)
    ├── Unavailable ............ 503 (a capability this process cannot serve right now)
    │   ├── IdentityProviderUnavailable  the SSO provider cannot be reached, or describes itself wrongly
    │   └── LimitsUnavailable .. Redis cannot count the limits (``limits.on_redis_failure: refuse``)
    ├── InternalError .......... 500: a bug; what a client is told instead of a traceback
    ├── ProviderError .......... the upstream LLM failed
    │   ├── ProviderUnavailable  502 (connect error, broken response)
    │   │   └── ProviderMalformed  a 200 whose body or stream is not a completion (field path named)
    │   ├── ProviderTimeout .... 504
    │   └── ProviderStatusError  the upstream's own 4xx passed through, 5xx as 502
    ├── ToolError .............. a tool call failed; the model receives it as a structured result
    │   ├── McpServerError
    │   │   └── McpAuthError ... credentials for an MCP server could not be obtained
    │   ├── ToolTimeout
    │   └── ToolOutcomeUnknown . a call may have reached the tool; no answer came: not sent again
    └── VaultError ............. secrets could not be stored or read
        ├── SecretNotFound
        ├── DecryptionError
        └── MasterKeyError ..... the master key is missing, malformed or too widely readable

Policy outcomes such as a confirmation being required are loop steps, not errors.
Each class knows its HTTP status and OpenAI error ``type``; ``api/errors.py`` turns any of them
into ``{"error": {"message", "type", "param", "code"}}`` in one place.
"""

from __future__ import annotations

from typing import Any


class HatchwayError(Exception):
    """Base of every error Hatchway raises on purpose."""

    status_code: int = 500
    error_type: str = "server_error"
    default_code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code or self.default_code

    def to_body(self) -> dict[str, Any]:
        """The OpenAI-shaped error body."""
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }


class ConfigError(HatchwayError):
    """A configuration file is invalid; ``problems`` lists ``(field path, message)`` pairs."""

    status_code = 400
    error_type = "invalid_request_error"
    default_code = "invalid_config"

    def __init__(self, source: str, problems: list[tuple[str, str]]) -> None:
        self.source = source
        self.problems = problems
        lines = [f"{path}: {msg}" if path else msg for path, msg in problems]
        first = problems[0][0] if problems else None
        super().__init__(f"{source}: " + "; ".join(lines), param=first or None)

    def render(self) -> str:
        """A multi-line report for the CLI: the file, then one line per problem."""
        body = "\n".join(f"  {path or '(root)'}: {msg}" for path, msg in self.problems)
        return f"{self.source} is invalid:\n{body}"


class RequestError(HatchwayError):
    """The request cannot be served as sent."""

    status_code = 400
    error_type = "invalid_request_error"


class InvalidRequest(RequestError):
    """Malformed or contradictory input; ``param`` names the field."""

    default_code = "invalid_request"


class AuthenticationError(RequestError):
    """Missing or wrong API key."""

    status_code = 401
    error_type = "authentication_error"
    default_code = "invalid_api_key"


class PermissionDenied(RequestError):
    """Authenticated, but not allowed to do this."""

    status_code = 403
    error_type = "permission_error"
    default_code = "forbidden"


class InsufficientRole(PermissionDenied):
    """The caller's role does not grant this route or object; the message names the role needed."""

    default_code = "insufficient_role"


class SignInInvalid(InvalidRequest):
    """An SSO callback whose ``state`` is missing, forged, expired, already used, or was issued to
    another browser (``access/sso.py``)."""

    default_code = "sso_state_invalid"


class SessionEnded(AuthenticationError):
    """The session cookie names no live session (signed out, expired, idle too long or unknown)."""

    default_code = "session_expired"


class SignInFailed(AuthenticationError):
    """The identity provider refused the sign-in, or its answer (the ID token) could not be verified."""

    default_code = "sso_failed"


class CsrfFailed(PermissionDenied):
    """A state-changing request made with a session cookie but without the session's CSRF token."""

    default_code = "csrf_failed"


class NoRoleMapped(PermissionDenied):
    """A person the provider signed in, none of whose groups ``access.sso.role_mappings`` maps to a role."""

    default_code = "sso_no_role"

    def __init__(self, message: str, *, subject: str) -> None:
        super().__init__(message)
        self.subject = subject


class NotFound(RequestError):
    """The named object does not exist for this organisation."""

    status_code = 404
    error_type = "not_found_error"
    default_code = "not_found"


class ModelNotFound(NotFound):
    """No provider serves the requested model."""

    default_code = "model_not_found"

    def __init__(self, model: str) -> None:
        super().__init__(
            f"The model '{model}' does not exist: use a name from GET /v1/models or '<provider>/<model>'.",
            param="model",
        )


class Conflict(RequestError):
    """The object is in a state that does not allow this action."""

    status_code = 409
    default_code = "conflict"


class TooLarge(RequestError):
    """A request body past ``max_request_body_bytes``; the HTTP protocol answers it while reading."""

    status_code = 413
    default_code = "request_too_large"


class HeadTooLarge(TooLarge):
    """A request line and headers past ``max_request_header_bytes``, answered before the app sees them."""

    status_code = 431
    default_code = "request_headers_too_large"


class RateLimited(RequestError):
    """A limit of hatchway.yaml's ``limits:`` refused the request before it started; ``param`` names
    the limit (``limits.keys.<name>.requests_per_minute``), ``headers`` say when to retry."""

    status_code = 429
    error_type = "rate_limit_error"
    default_code = "rate_limit_exceeded"

    def __init__(self, message: str, *, param: str, headers: dict[str, str]) -> None:
        super().__init__(message, param=param)
        self.headers = headers


class TokensLimited(RateLimited):
    """The tokens a request reserves do not fit in a ``tokens_per_minute`` of ``limits:``."""

    default_code = "tokens_limit_exceeded"


class ConcurrencyLimited(RateLimited):
    """A ``concurrent_runs`` of ``limits:`` is reached."""

    default_code = "concurrency_limit_exceeded"


class BudgetExceeded(RateLimited):
    """A ``budget_usd_per_day`` or ``budget_usd_per_month`` of ``limits:`` is spent; ``retry-after``
    and ``x-hatchway-budget-reset`` say when its day or month ends."""

    default_code = "budget_exceeded"


class ClientGone(RequestError):
    """The client disconnected before its request was read or answered; nobody gets a response."""

    status_code = 499  # nginx's convention, as the run log records it
    default_code = "client_gone"

    def __init__(self, message: str = "The client went away before the run finished.") -> None:
        super().__init__(message)


class Unavailable(HatchwayError):
    """The gateway cannot serve this right now (a component is not configured or not running)."""

    status_code = 503
    error_type = "server_error"
    default_code = "unavailable"


class SchemaNotCurrent(Unavailable):
    """The database schema is not the one this release needs and this process does not migrate
    (``migrate_on_start: false``): ``hatchway migrate`` has not run for this release yet."""

    default_code = "schema_not_current"

    def __init__(
        self, applied: frozenset[str], needed: frozenset[str], unknown: frozenset[str] = frozenset()
    ) -> None:
        at = ", ".join(sorted(applied)) or "no migration applied"
        if unknown:  # `hatchway migrate` of this release cannot help: it has no such migration
            super().__init__(
                f"the database schema is at {at}, which holds {', '.join(sorted(unknown))} that this "
                "release does not know: a newer release of Hatchway has migrated it. Run that release "
                "(Hatchway does not migrate a database down)"
            )
        else:
            super().__init__(
                f"the database schema is at {at}; this release needs {', '.join(sorted(needed))}: run "
                "`hatchway migrate` once for this release (migrate_on_start is false)"
            )
        self.applied = applied
        self.needed = needed


class IdentityProviderUnavailable(Unavailable):
    """The SSO identity provider cannot be reached, or its discovery document is not the issuer's."""

    default_code = "sso_provider_unavailable"


class LimitsUnavailable(Unavailable):
    """Redis cannot count a request in the limits and ``limits.on_redis_failure`` is ``refuse``;
    ``headers`` carry ``retry-after``."""

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message)
        self.headers = {"retry-after": str(retry_after)}


class InternalError(HatchwayError):
    """A bug in the gateway, as a client or a stored response is told of it (the log has the rest)."""

    status_code = 500
    default_code = "internal_error"

    def __init__(self, message: str = "Internal error.") -> None:
        super().__init__(message)


class ProviderError(HatchwayError):
    """The upstream model provider failed."""

    status_code = 502
    error_type = "upstream_error"
    default_code = "upstream_error"


class ProviderUnavailable(ProviderError):
    """The upstream could not be reached or answered with something unusable."""

    default_code = "upstream_unavailable"


class ProviderMalformed(ProviderUnavailable):
    """The upstream answered 200 with something that is not a completion: a body or a stream chunk of
    the wrong shape (the message names the field path), not JSON, not UTF-8, not decompressible."""

    default_code = "upstream_malformed"


class ProviderTimeout(ProviderError):
    """The upstream did not answer in time."""

    status_code = 504
    default_code = "upstream_timeout"


class ProviderStatusError(ProviderError):
    """The upstream answered with an error status; 4xx are passed through as-is."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        body: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, code=f"upstream_{status}")
        self.upstream_status = status
        self.retry_after = retry_after
        """The upstream's ``retry-after``, in seconds (a 429's or a 503's), when it sent one."""
        self.status_code = status if 400 <= status < 500 else 502
        self.body = body
        if 400 <= status < 500:
            self.error_type = "invalid_request_error" if status != 429 else "rate_limit_error"

    def to_body(self) -> dict[str, Any]:
        if self.body and isinstance(self.body.get("error"), dict) and 400 <= self.upstream_status < 500:
            return self.body
        return super().to_body()


class ToolError(HatchwayError):
    """A tool call failed; the loop hands it to the model as a structured result."""

    error_type = "tool_error"
    default_code = "tool_error"

    def __init__(self, message: str, *, code: str | None = None, transient: bool = False) -> None:
        super().__init__(message, code=code)
        self.transient = transient


class McpServerError(ToolError):
    """The MCP server could not be reached or broke the protocol."""

    default_code = "mcp_server_error"
    rpc_error: Any = None
    """The server's JSON-RPC error (``ErrorData``) when it answered with one."""


class McpAuthError(McpServerError):
    """An MCP server's credentials could not be obtained (vault, OAuth token endpoint); no request is sent."""

    default_code = "mcp_auth_failed"


class AuthorizationRequired(McpAuthError):
    """The end user has not authorized this per-user OAuth server yet: ``link`` lets them do it.

    The loop pauses on it with a message carrying the link; the user's next turn resumes the call."""

    default_code = "authorization_required"

    def __init__(self, server_id: str, link: str) -> None:
        super().__init__(
            f"{server_id}: the user must authorize this server first; open {link} and then ask again",
        )
        self.server_id = server_id
        self.link = link


class ToolTimeout(ToolError):
    """The tool did not answer within its server's ``timeout_ms``."""

    default_code = "tool_timeout"


class ToolOutcomeUnknown(ToolError):
    """A call failed after its request may have reached the server (no answer in time, a cut
    connection, an error status): the tool may or may not have acted, so it is not sent again
    (unless it is idempotent) and not called failed. ``cause`` is the failure as it was seen."""

    default_code = "tool_outcome_unknown"

    def __init__(self, message: str, *, cause: ToolError, code: str | None = None) -> None:
        super().__init__(message, code=code)
        self.cause = cause

    @property
    def timed_out(self) -> bool:
        """Whether the failure was no answer within the server's ``timeout_ms``."""
        return isinstance(self.cause, ToolTimeout)


class VaultError(HatchwayError):
    """Secrets could not be stored or read."""

    error_type = "vault_error"
    default_code = "vault_error"


class SecretNotFound(VaultError):
    """No secret of that name in this organisation."""

    status_code = 404
    error_type = "not_found_error"
    default_code = "secret_not_found"


class DecryptionError(VaultError):
    """A secret could not be decrypted (wrong master key or tampered data)."""

    default_code = "decryption_failed"


class MasterKeyError(VaultError):
    """The master key could not be loaded: malformed, wrong length, or its file is readable by others."""

    default_code = "master_key_invalid"
