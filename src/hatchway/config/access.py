"""hatchway.yaml's ``access:`` and ``audit:``: key rotation, verified end users, SSO for people, and the
audit trail's checkpoints (docs/access.md)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from hatchway.config.loading import StrictModel

_ASYMMETRIC = ["RS256", "PS256", "ES256", "EdDSA"]


def _asymmetric_only(algorithms: list[str]) -> None:
    bad = [a for a in algorithms if a.lower() == "none" or a.upper().startswith("HS")]
    if bad:
        raise ValueError(f"algorithms: {bad[0]} is not accepted (asymmetric signatures only)")


class EndUserTokens(StrictModel):
    """Verified end users for some organisations: the app sends its user's token from its own identity
    provider in ``header``; the gateway checks its signature against the IdP's JWKS, its issuer,
    audience and expiry, and its subject is the end user (a different ``X-On-Behalf-Of`` is refused)."""

    organisations: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]
    """The organisations (names or ids) whose requests must carry a valid user token."""
    issuer: Annotated[str, Field(pattern=r"^https?://")]
    """Every token's ``iss``."""
    jwks_url: Annotated[str, Field(pattern=r"^https?://")]
    """The IdP's published keys (cached 300 s; refetched for an unknown key id, at most every 30 s)."""
    audience: Annotated[str, Field(min_length=1)]
    """Every token's ``aud`` must include this (the app's client id at the IdP, usually)."""
    algorithms: list[str] = Field(default_factory=lambda: list(_ASYMMETRIC))
    """Signature algorithms accepted (never ``none``, never HMAC)."""
    leeway_seconds: Annotated[float, Field(ge=0, le=300)] = 30.0
    """Clock skew allowed on ``exp``, ``nbf`` and ``iat``."""
    subject_claim: Annotated[str, Field(min_length=1)] = "sub"
    """The claim naming the end user."""
    groups_claim: Annotated[str, Field(min_length=1)] = "groups"
    """The claim listing the user's groups: an approval routed to a group (tool_policies.yaml
    ``approvals``) may be decided by a member who sends such a token with a key."""
    header: Annotated[str, Field(pattern=r"^[A-Za-z0-9-]+$")] = "X-Hatchway-User-Token"
    """The request header carrying the token."""

    @model_validator(mode="after")
    def _algorithms(self) -> EndUserTokens:
        _asymmetric_only(self.algorithms)
        return self


class SsoRoleMapping(StrictModel):
    """A group (from the ID token's ``groups_claim``) and the role it grants."""

    group: Annotated[str, Field(min_length=1)]
    """A value of the groups claim (a group's name; Entra ID: its object id, or an app role's value)."""
    role: Literal["app", "viewer", "admin", "platform"]
    """``platform``: an admin of every organisation (``organisation`` then not given)."""
    organisation: str | None = None
    """The organisation (name or id) the role is granted in."""

    @model_validator(mode="after")
    def _scope(self) -> SsoRoleMapping:
        if (self.role == "platform") != (self.organisation is None):
            raise ValueError("organisation: give one for app, viewer and admin, none for platform")
        return self


class SsoSettings(StrictModel):
    """People sign in to the dashboard and the admin API with OpenID Connect (authorization code + PKCE)."""

    issuer: Annotated[str, Field(pattern=r"^https?://")]
    """The OpenID provider (discovery: ``<issuer>/.well-known/openid-configuration``)."""
    client_id: Annotated[str, Field(min_length=1)]
    """The gateway's client id at the provider (every ID token's audience)."""
    client_secret: str | None = None
    """``env:NAME`` or ``secret.<name>`` (the ``system`` organisation's vault); none for a public client."""
    scopes: list[str] = Field(default_factory=lambda: ["openid", "profile", "email"])
    """Asked for at sign-in (``openid`` is required; some providers release groups for ``groups``)."""
    groups_claim: Annotated[str, Field(min_length=1)] = "groups"
    """The claim listing the person's groups, read from the ID token or else the userinfo answer
    (Entra ID's app roles: ``roles``)."""
    role_mappings: list[SsoRoleMapping] = Field(default_factory=list)
    """Groups → a role in an organisation (or ``platform``); a person with none mapped gets no session."""
    session_seconds: Annotated[float, Field(gt=0, le=7 * 86_400)] = 8 * 3600.0
    """A session ends this long after sign-in, whatever its use."""
    idle_seconds: Annotated[float, Field(gt=0, le=7 * 86_400)] = 3600.0
    """A session unused this long ends."""
    login_seconds: Annotated[float, Field(ge=30, le=3600)] = 600.0
    """How long a started sign-in may take at the provider (its ``state``, nonce, PKCE verifier and
    the browser's pre-login cookie): a callback after that is refused."""
    redirect_url: Annotated[str | None, Field(pattern=r"^https?://[^?#]+/ui/callback$")] = None
    """The redirect URI registered at the provider; default: ``public_base_url`` + ``/ui/callback``,
    or the address the browser reached the gateway at when ``public_base_url`` is not set."""
    timeout_seconds: Annotated[float, Field(gt=0, le=120)] = 10.0
    """Each call to the provider (discovery, keys, token, userinfo)."""
    max_pending_logins: Annotated[int, Field(ge=10, le=1_000_000)] = 10_000
    """Sign-ins started and not yet finished, across replicas; past this the oldest make room for
    new ones: a flood of started sign-ins can neither fill the database nor lock people out."""

    @model_validator(mode="after")
    def _openid(self) -> SsoSettings:
        if "openid" not in self.scopes:
            raise ValueError("scopes: must include 'openid' (without it the provider sends no ID token)")
        return self


class AccessSettings(StrictModel):
    """Who may do what (docs/access.md)."""

    key_cache_seconds: Annotated[float, Field(gt=0, le=300)] = 10.0
    """How long a replica trusts a key it has looked up: a key revoked, expired, narrowed or given
    another role elsewhere keeps its old powers on another replica for at most this long (the replica
    that changed it forgets at once). Lower costs a database read per key that often."""
    key_rotation_grace_seconds: Annotated[float, Field(ge=0, le=30 * 86_400)] = 86_400.0
    """After ``keys rotate``, the old key keeps working this long (unless revoked)."""
    end_users: list[EndUserTokens] = Field(default_factory=list)
    """Organisations whose end users must be proven by a token from their identity provider
    (docs/access.md, "Verified end users")."""
    sso: SsoSettings | None = None
    """People sign in to the dashboard and the admin API with OpenID Connect (docs/access.md, "Sign-in
    with SSO"); none: keys only."""


class AuditSettings(StrictModel):
    """The tamper-evident audit trail (docs/access.md, "Audit trail")."""

    checkpoint_every: Annotated[int, Field(ge=1, le=100_000)] = 100
    """A signed checkpoint of an organisation's chain every this many entries (and its head, signed,
    after every entry)."""
    otel_logs: bool = True
    """Also emit every entry as an OpenTelemetry log record (when ``otel`` exports logs)."""
