"""The dashboard's cookies: the session of a person signed in with SSO, and the short-lived pre-login
cookie that binds a sign-in to the browser that started it.

Both are ``HttpOnly`` (no script reads them), ``SameSite=Lax`` (sent on the provider's top-level
redirect back to ``/ui/callback``, never on a cross-site POST) and ``Path=/``. Over https (the request's
scheme, or ``public_base_url``'s) they are ``Secure`` and named with the ``__Host-`` prefix, which a
browser accepts only from this very host over https: a sibling subdomain cannot plant one. A request
over https reads only the prefixed name, so an unprefixed cookie planted over plain http is ignored.
"""

from __future__ import annotations

from starlette.requests import HTTPConnection
from starlette.responses import Response

from hatchway.config.settings import Settings

SESSION_COOKIE = "hatchway_session"
LOGIN_COOKIE = "hatchway_login"
SECURE_PREFIX = "__Host-"


def served_securely(connection: HTTPConnection, settings: Settings) -> bool:
    """Whether the browser reaches the gateway over https (as uvicorn saw it, or as configured)."""
    return connection.url.scheme in ("https", "wss") or (settings.public_base_url or "").startswith(
        "https://"
    )


def cookie_name(base: str, secure: bool) -> str:
    return f"{SECURE_PREFIX}{base}" if secure else base


def read_cookie(connection: HTTPConnection, settings: Settings, base: str) -> str | None:
    """The cookie's value, under the one name this request's scheme allows."""
    return connection.cookies.get(cookie_name(base, served_securely(connection, settings))) or None


def set_cookie(
    response: Response, connection: HTTPConnection, settings: Settings, base: str, value: str, max_age: float
) -> None:
    secure = served_securely(connection, settings)
    response.set_cookie(
        cookie_name(base, secure),
        value,
        max_age=max(int(max_age), 1),
        path="/",
        secure=secure,
        httponly=True,
        samesite="lax",
    )


def clear_cookie(response: Response, connection: HTTPConnection, settings: Settings, base: str) -> None:
    secure = served_securely(connection, settings)
    response.delete_cookie(cookie_name(base, secure), path="/", secure=secure, httponly=True, samesite="lax")
