"""``/ui/login``, ``/ui/callback``, ``/ui/logout``, ``/ui/session``, ``/ui/config.json``: people sign in
to the dashboard and the admin API with their company identity (OpenID Connect, ``access/sso.py``).

The routes are public (a person has no key); each is safe so:
- ``/ui/login`` only sends the browser to the configured provider, with a new ``state`` bound to this
  browser; its ``next`` is kept only when it is a path under ``/ui/`` (no open redirect).
- ``/ui/callback`` signs in only the browser that started the sign-in, once, with a code the
  provider issued for its verifier and an ID token carrying its nonce; the session id is new.
- ``/ui/logout`` needs the session's CSRF token, so another site cannot sign a person out.
- ``/ui/session`` tells a page only about the session its own cookie names.
- ``/ui/config.json`` says whether SSO is on.
"""

from __future__ import annotations

import html
from typing import Any

import orjson
from fastapi import APIRouter, Request
from starlette.responses import RedirectResponse, Response

from hatchway.access.administration import PLATFORM_TRAIL, Actor
from hatchway.access.gatekeeper import request_id_of
from hatchway.access.people import check_csrf
from hatchway.access.sessions import Grants, Session
from hatchway.api.auth import gateway_of, source_of
from hatchway.api.session_cookie import LOGIN_COOKIE, SESSION_COOKIE, clear_cookie, read_cookie, set_cookie
from hatchway.api.ui import SECURITY_HEADERS
from hatchway.errors import (
    IdentityProviderUnavailable,
    NoRoleMapped,
    SessionEnded,
    SignInFailed,
    SignInInvalid,
)
from hatchway.gateway import Gateway
from hatchway.principal import Role

router = APIRouter(include_in_schema=False)
HOME = "/ui/"
MAX_NEXT_CHARS = 512
_PAGE_HEADERS = {name.decode(): value.decode() for name, value in SECURITY_HEADERS} | {
    "cache-control": "no-store"
}


def safe_next(value: str | None) -> str:
    """``value`` when it is a path of the dashboard (``/ui`` or under ``/ui/``), else ``/ui/``: no
    scheme, no ``//`` (another host), no backslash (which browsers read as ``/``), no control character."""
    if not value or len(value) > MAX_NEXT_CHARS:
        return HOME
    if value != "/ui" and not value.startswith(HOME):
        return HOME
    if "//" in value or "\\" in value or ".." in value or any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        return HOME
    return value


def redirect_uri(request: Request, gw: Gateway) -> str:
    """``/ui/callback`` as the provider knows it (``access.sso.redirect_url``, else ``public_base_url``'s,
    else this request's own address: the provider accepts only the URIs registered with it)."""
    sso = gw.settings.access.sso
    if sso is not None and sso.redirect_url:
        return sso.redirect_url
    base = gw.settings.public_base_url or str(request.base_url)
    return base.rstrip("/") + "/ui/callback"


def _page(title: str, text: str, status: int) -> Response:
    """A small HTML answer for the browser (the callback's refusals), under the dashboard's policy."""
    body = (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><link rel='stylesheet' href='/ui/app.css'></head>"
        f"<body><main><section class='card narrow' id='sso-problem'><h1>{html.escape(title)}</h1>"
        f"<p>{html.escape(text)}</p><p><a href='{HOME}'>Back to the dashboard</a></p>"
        "</section></main></body></html>"
    )
    return Response(body, status_code=status, media_type="text/html", headers=_PAGE_HEADERS)


def _json(payload: Any, status: int = 200) -> Response:
    return Response(
        orjson.dumps(payload),
        status_code=status,
        media_type="application/json",
        headers={"cache-control": "no-store"},
    )


def _actor(request: Request, subject: str, role: Role) -> Actor:
    return Actor(f"sso:{subject}", role, source_of(request.scope), request_id_of(request.headers))


async def _record(request: Request, gw: Gateway, subject: str, grants: Grants, action: str) -> None:
    """One audit entry per organisation the person has a role in (and the platform's chain)."""
    target = f"sso:{subject}"
    for grant in grants.orgs:
        role = Role.PLATFORM if grants.platform else grant.role
        actor = _actor(request, subject, role)
        await gw.admin.record(actor, grant.org_id, action, target, detail={"role": role.value})
    if grants.platform:
        actor = _actor(request, subject, Role.PLATFORM)
        await gw.admin.record(actor, PLATFORM_TRAIL, action, target, detail={"role": "platform"})


@router.get("/ui/config.json")
async def config(request: Request) -> Response:
    """What the dashboard's sign-in page offers."""
    return _json({"sso": gateway_of(request).sign_in is not None, "login_url": "/ui/login"})


@router.get("/ui/login")
async def login(request: Request, next: str | None = None) -> Response:
    """Send the browser to the provider, binding the new sign-in to it with the pre-login cookie."""
    gw = gateway_of(request)
    if gw.sign_in is None or gw.settings.access.sso is None:
        return _page("Single sign-on is not set up", "Sign in with an API key instead.", 404)
    try:
        url, binding = await gw.sign_in.start(redirect_uri(request, gw), safe_next(next))
    except IdentityProviderUnavailable as exc:
        return _page("The identity provider is unavailable", exc.message, exc.status_code)
    response = RedirectResponse(url, status_code=303, headers={"cache-control": "no-store"})
    set_cookie(response, request, gw.settings, LOGIN_COOKIE, binding, gw.settings.access.sso.login_seconds)
    return response


@router.get("/ui/callback")
async def callback(request: Request) -> Response:
    """The provider's redirect: finish the sign-in, open a new session, go to the page asked for."""
    gw = gateway_of(request)
    if gw.sign_in is None or gw.sessions is None or gw.settings.access.sso is None:
        return _page("Single sign-on is not set up", "Sign in with an API key instead.", 404)
    query = request.query_params
    if query.get("error"):
        response = _page(
            "The identity provider did not sign you in", f"It answered: {query['error'][:200]}.", 400
        )
    else:
        response = await _finish(request, gw, query.get("state"), query.get("code"))
    clear_cookie(response, request, gw.settings, LOGIN_COOKIE)  # one sign-in per pre-login cookie
    return response


async def _finish(request: Request, gw: Gateway, state: str | None, code: str | None) -> Response:
    assert gw.sign_in is not None and gw.sessions is not None and gw.settings.access.sso is not None
    try:
        identity = await gw.sign_in.finish(state, code, read_cookie(request, gw.settings, LOGIN_COOKIE))
    except NoRoleMapped as exc:
        actor = _actor(request, exc.subject, Role.VIEWER)
        detail = {"reason": "no role mapped"}
        await gw.admin.record(
            actor, PLATFORM_TRAIL, "auth.denied", f"sso:{exc.subject}", outcome="denied", detail=detail
        )
        return _page("No access to this gateway", exc.message, exc.status_code)
    except (SignInInvalid, SignInFailed, IdentityProviderUnavailable) as exc:
        return _page("Sign-in failed", exc.message, exc.status_code)
    # Whatever session cookie the browser brought is ended, never adopted: the new session has a new id.
    await gw.sessions.end(read_cookie(request, gw.settings, SESSION_COOKIE))
    value, session = await gw.sessions.create(
        identity.subject, identity.name, identity.email, identity.grants, identity.groups
    )
    await _record(request, gw, session.subject, session.grants, "auth.sign_in")
    response = RedirectResponse(identity.next_path, status_code=303, headers={"cache-control": "no-store"})
    set_cookie(response, request, gw.settings, SESSION_COOKIE, value, gw.settings.access.sso.session_seconds)
    return response


async def _signed_in(request: Request, gw: Gateway, refusal: str) -> tuple[str, Session]:
    """The session cookie and the live session it names; SessionEnded (401, ``refusal``) otherwise."""
    cookie = read_cookie(request, gw.settings, SESSION_COOKIE)
    session = await gw.sessions.find(cookie) if gw.sessions is not None and cookie else None
    if session is None or cookie is None:
        raise SessionEnded(refusal)
    return cookie, session


@router.post("/ui/logout")
async def logout(request: Request) -> Response:
    """End the session everywhere (the database row: every replica refuses it from now on)."""
    gw = gateway_of(request)
    cookie, session = await _signed_in(request, gw, "No signed-in session to end.")
    check_csrf(session, request.headers.get("x-csrf-token"))
    assert gw.sessions is not None
    ended = await gw.sessions.end(cookie)
    if ended is not None:
        await _record(request, gw, ended.subject, ended.grants, "auth.sign_out")
    response = Response(status_code=204, headers={"cache-control": "no-store"})
    clear_cookie(response, request, gw.settings, SESSION_COOKIE)
    return response


@router.get("/ui/session")
async def current_session(request: Request) -> Response:
    """Who is signed in, the organisations they may act in, and the CSRF token for their changes."""
    gw = gateway_of(request)
    _, session = await _signed_in(request, gw, "Not signed in.")
    grants = session.grants
    organizations = [{"id": g.org_id, "name": g.name, "role": g.role.value} for g in grants.orgs]
    if grants.platform:  # an admin of every organisation: each is offered, as platform
        organizations = [{"id": o.id, "name": o.name, "role": "platform"} for o in await gw.orgs.list_orgs()]
    assert gw.settings.access.sso is not None
    return _json(
        {
            "object": "session",
            "subject": session.subject,
            "name": session.name,
            "email": session.email,
            "platform": grants.platform,
            "organizations": organizations,
            "csrf_token": session.csrf_token,
            "expires_at": session.expires_at.isoformat(),
            "idle_seconds": gw.settings.access.sso.idle_seconds,
        }
    )
