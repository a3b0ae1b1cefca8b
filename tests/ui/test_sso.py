"""People sign in to the dashboard with their company identity: OpenID Connect end to end, in Debian's
Chromium driven by Playwright, against a real OpenID provider on loopback (the npm ``oidc-provider``,
its own login page filled in), over two gateway replicas on one database (PostgreSQL when
``HATCHWAY_TEST_DATABASE_URL`` is set, else one SQLite file).

Each person sees only what their mapped role allows; a change without the session's CSRF token is
refused; signing out on one replica ends the session on the other at once; an expired or idle session
is refused; and login CSRF, open redirects after sign-in, session fixation and a forged ``state`` are
each tried and refused.
"""

from __future__ import annotations

import asyncio
import html
import re
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urljoin, urlsplit

import httpx
import pytest
from sqlalchemy import update

from hatchway.access.sessions import SsoSessionRow, session_hash
from hatchway.audit.entries import AuditEntry
from tests.support.backends import PG_URL, fresh_pg_database
from tests.support.browser import missing_browser
from tests.support.gateway import OrgKey, RunningGateway, base_config, create_org_key, write_config
from tests.support.oidc_provider import OidcProvider
from tests.support.servers import free_port
from tests.ui.conftest import TIMEOUT_MS

sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed")
expect = sync_api.Expect()  # this module's own, with generous waits (the shared one keeps its default)
Page = sync_api.Page
BrowserContext = sync_api.BrowserContext

CLIENT_ID = "hatchway-dashboard"
CLIENT_SECRET = "sso-test-client-secret"
SECRET_ENV = "HATCHWAY_TEST_SSO_CLIENT_SECRET"
ACCOUNTS = {
    "alice": {
        "name": "Alice Admin",
        "email": "alice@example.com",
        "groups": ["hatchway-admins", "globex-viewers"],
    },
    "victor": {"name": "Victor Viewer", "email": "victor@example.com", "groups": ["hatchway-viewers"]},
    "pat": {"name": "Pat Platform", "email": "pat@example.com", "groups": ["platform-ops"]},
    "mallory": {"name": "Mallory", "email": "mallory@example.com", "groups": ["marketing"]},
}
ROLE_MAPPINGS = [
    {"group": "hatchway-admins", "role": "admin", "organisation": "acme"},
    {"group": "hatchway-viewers", "role": "viewer", "organisation": "acme"},
    {"group": "globex-viewers", "role": "viewer", "organisation": "globex"},
    {"group": "platform-ops", "role": "platform"},
]
COOKIE = "hatchway_session"
expect.set_options(timeout=TIMEOUT_MS)


@dataclass
class Stack:
    provider: OidcProvider
    a: RunningGateway
    b: RunningGateway
    acme: OrgKey
    globex: OrgKey

    def audit(self, org_id: str, since: datetime) -> list[AuditEntry]:
        """The organisation's audit entries since ``since``, read on replica A's own event loop."""
        return self.a.server.call(self.a.gateway.audit.list(org_id, since=since, limit=1000))

    def change_session(self, cookie: str, **values: Any) -> None:
        """Rewrite a session's row, as time passing would (on replica A's own event loop)."""

        async def change() -> None:
            async with self.a.gateway.db.session() as s:
                await s.execute(
                    update(SsoSessionRow)
                    .where(SsoSessionRow.id_hash == session_hash(cookie))
                    .values(**values)
                )

        self.a.server.call(change())


@dataclass
class SsoSetUp:
    """What two gateway replicas with SSO run against: the OpenID provider, whose client redirects to
    ``ports``, the database, and ``access.sso`` for them; ``cleanup`` stops it all."""

    tmp: Path
    cleanup: ExitStack
    ports: tuple[int, int]
    provider: OidcProvider
    database_url: str
    sso: dict[str, Any]

    def replicas(self, config: dict[str, Any], org: OrgKey) -> tuple[RunningGateway, RunningGateway]:
        """The two replicas on ``config``, on ``ports``, started with ``org``'s key."""
        path = write_config(self.tmp, config)
        a = RunningGateway(path, port=self.ports[0]).start(org)
        self.cleanup.callback(a.stop)
        b = RunningGateway(path, port=self.ports[1]).start(org)
        self.cleanup.callback(b.stop)
        return a, b


@contextmanager
def sso_set_up(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    accounts: dict[str, dict[str, Any]],
    role_mappings: list[dict[str, str]],
) -> Iterator[SsoSetUp]:
    """The provider with ``accounts``, the database ``hatchway_<name>`` (PostgreSQL when configured,
    else one SQLite file) and the SSO settings mapping groups by ``role_mappings``, under a fresh
    ``<name>`` directory; skips without a browser."""
    reason = missing_browser()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp(name)
    with ExitStack() as cleanup, pytest.MonkeyPatch.context() as env:
        env.setenv(SECRET_ENV, CLIENT_SECRET)  # the client secret as a deployment gives it: env:NAME
        ports = free_port(), free_port()
        redirects = [f"http://127.0.0.1:{port}/ui/callback" for port in ports]
        provider = OidcProvider(
            CLIENT_ID, CLIENT_SECRET, redirects, accounts, tmp / "oidc-provider.log"
        ).start()
        cleanup.callback(provider.stop)
        database_url = (
            cleanup.enter_context(fresh_pg_database(f"hatchway_{name}"))
            if PG_URL
            else f"sqlite+aiosqlite:///{tmp / 'replicas.db'}"
        )
        sso = {
            "issuer": provider.issuer,
            "client_id": CLIENT_ID,
            "client_secret": f"env:{SECRET_ENV}",
            "scopes": ["openid", "profile", "email", "groups"],
            "role_mappings": role_mappings,
        }
        yield SsoSetUp(tmp, cleanup, ports, provider, database_url, sso)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with sso_set_up(tmp_path_factory, "sso", ACCOUNTS, ROLE_MAPPINGS) as setup:
        config = base_config(
            setup.tmp, "http://127.0.0.1:9/v1", setup.database_url, access={"sso": setup.sso}
        )
        acme = asyncio.run(create_org_key(setup.database_url, "acme"))
        globex = asyncio.run(create_org_key(setup.database_url, "globex"))
        a, b = setup.replicas(config, acme)
        yield Stack(setup.provider, a, b, acme, globex)


@pytest.fixture(scope="module")
def before_browser(stack: Stack) -> Stack:
    """What ``chromium`` (tests/ui/conftest.py) starts after: the stack."""
    return stack


def sign_in(
    context: BrowserContext, gateway: RunningGateway, login: str, page_hash: str = "#/requests"
) -> Page:
    """Sign in as ``login`` through the dashboard's SSO button and the provider's own login page."""
    page = context.new_page()
    page.goto(f"{gateway.url}/ui/{page_hash}")
    page.get_by_role("link", name="Sign in with SSO").click()
    fill_provider_login(page, login)
    page.wait_for_url(f"{gateway.url}/ui/**")
    return page


def fill_provider_login(page: Page, login: str) -> None:
    """The provider's development login page: any password for a known account."""
    page.wait_for_url(re.compile(r"/interaction/"))
    page.locator("input[name=login]").fill(login)
    page.locator("input[name=password]").fill("any password")
    page.get_by_role("button", name="Sign-in").click()


def session_cookie(context: BrowserContext, gateway: RunningGateway) -> str | None:
    found = [c["value"] for c in context.cookies(gateway.url) if c["name"] == COOKIE]
    return found[0] if found else None


def as_person(gateway: RunningGateway, cookie: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
    """A request carrying only the session cookie (and what ``kwargs`` add), as a browser would."""
    headers = {"cookie": f"{COOKIE}={cookie}", **kwargs.pop("headers", {})}
    return httpx.request(method, f"{gateway.url}{path}", headers=headers, timeout=60.0, **kwargs)


def csrf_token(gateway: RunningGateway, cookie: str) -> str:
    answer = as_person(gateway, cookie, "GET", "/ui/session")
    assert answer.status_code == 200, answer.text
    return str(answer.json()["csrf_token"])


def held_callback(context: BrowserContext, gateway: RunningGateway, login: str) -> str:
    """Begin a sign-in in ``context`` and sign in as ``login`` on the provider's own login form, but keep
    the provider's redirect back to the gateway instead of following it: the URL (code and state) an
    attacker harvests from their own sign-in. Sent with ``context.request``, which shares the
    context's cookies (the pre-login cookie, the provider's)."""
    http = context.request
    url = f"{gateway.url}/ui/login"
    answer = http.get(url, max_redirects=0)
    for _ in range(10):
        if answer.status in (302, 303):
            url = urljoin(url, answer.headers["location"])
            if url.startswith(f"{gateway.url}/ui/callback?"):
                return url
            answer = http.get(url, max_redirects=0)
            continue
        form = re.search(r'<form[^>]*action="([^"]+)"', answer.text())
        assert form is not None, answer.text()
        url = urljoin(url, html.unescape(form.group(1)))
        fields = {"prompt": "login", "login": login, "password": "any password"}
        answer = http.post(url, form=fields, max_redirects=0)
    raise AssertionError(f"no redirect back to the gateway; last answer {answer.status} from {url}")


def test_an_admin_signs_in_and_manages_the_organisation_a_viewer_role_elsewhere(
    stack: Stack, new_context: Callable[[], BrowserContext]
) -> None:
    since = datetime.now(UTC) - timedelta(seconds=1)
    context = new_context()
    page = sign_in(context, stack.a, "alice", "#/secrets")
    assert page.url == f"{stack.a.url}/ui/#/secrets"  # back on the page asked for
    expect(page.locator("#who")).to_have_text("Signed in as Alice Admin")
    expect(page.locator("#org-picker option")).to_have_text(["acme (admin)", "globex (viewer)"])

    page.get_by_label("Name", exact=True).fill("crm_token")
    page.get_by_label("Value").fill("sso-made-this")
    page.get_by_role("button", name="Add secret").click()  # a PUT: the page sends the CSRF token
    expect(page.get_by_role("cell", name="crm_token", exact=True)).to_be_visible()
    names = httpx.get(
        f"{stack.a.url}/v1/secrets", headers={"authorization": f"Bearer {stack.acme.key}"}, timeout=60
    )
    assert "crm_token" in [s["name"] for s in names.json()["data"]]

    page.get_by_role("link", name="Keys").click()
    expect(page.get_by_role("heading", name="Keys of acme")).to_be_visible()
    expect(
        page.get_by_role("cell", name="default", exact=True)
    ).to_be_visible()  # acme's own key, by name only

    page.locator("#org-picker").select_option(label="globex (viewer)")  # the same person, another role
    page.get_by_role("link", name="Secrets").click()
    expect(page.get_by_role("alert")).to_contain_text("admin role")

    cookie = session_cookie(context, stack.a)
    assert cookie is not None
    jar = next(c for c in context.cookies(stack.a.url) if c["name"] == COOKIE)
    assert (
        jar["httpOnly"] and jar["sameSite"] == "Lax" and jar["path"] == "/" and not jar["secure"]
    )  # http here
    trail = stack.audit(stack.acme.org_id, since)
    assert ("auth.sign_in", "sso:alice") in [(e.action, e.actor) for e in trail]
    assert ("secret.put", "sso:alice") in [(e.action, e.actor) for e in trail]
    assert ("auth.sign_in", "sso:alice") in [
        (e.action, e.actor) for e in stack.audit(stack.globex.org_id, since)
    ]


def test_a_viewer_reads_but_is_refused_secrets_and_new_keys(
    stack: Stack, new_context: Callable[[], BrowserContext]
) -> None:
    context = new_context()
    page = sign_in(context, stack.a, "victor", "#/secrets")
    expect(page.get_by_role("alert")).to_contain_text("admin role")
    expect(page.locator("#org-picker-field")).to_be_hidden()  # one organisation: nothing to pick
    cookie = session_cookie(context, stack.a)
    assert cookie is not None
    token = csrf_token(stack.a, cookie)
    secrets = as_person(stack.a, cookie, "GET", "/v1/secrets")
    assert secrets.status_code == 403 and secrets.json()["error"]["code"] == "insufficient_role"
    minted = as_person(
        stack.a,
        cookie,
        "POST",
        "/v1/admin/orgs/acme/keys",
        json={"name": "mine"},
        headers={"x-csrf-token": token},
    )
    assert minted.status_code == 403 and minted.json()["error"]["code"] == "insufficient_role"
    logs = as_person(stack.a, cookie, "GET", "/v1/logs")
    assert logs.status_code == 200  # what a viewer is for
    other = as_person(stack.a, cookie, "GET", "/v1/logs", headers={"hatchway-organization": "globex"})
    assert (
        other.status_code == 403
        and "no role in the organisation 'globex'" in other.json()["error"]["message"]
    )


def test_a_change_without_the_csrf_token_is_refused(
    stack: Stack, new_context: Callable[[], BrowserContext]
) -> None:
    context = new_context()
    page = sign_in(context, stack.a, "alice")
    refused_in_page = page.evaluate(
        """async () => {
            const answer = await fetch("/v1/secrets/planted", {
                method: "PUT", headers: {"content-type": "application/json", "hatchway-organization": "acme"},
                body: JSON.stringify({value: "x"}),
            });
            return [answer.status, (await answer.json()).error.code];
        }"""
    )
    assert refused_in_page == [403, "csrf_failed"]
    cookie = session_cookie(context, stack.a)
    assert cookie is not None
    body = {"value": "v"}
    org = {"hatchway-organization": "acme"}
    for headers in (org, {**org, "x-csrf-token": "guessed"}):
        answer = as_person(stack.a, cookie, "PUT", "/v1/secrets/csrf_probe", json=body, headers=headers)
        assert answer.status_code == 403 and answer.json()["error"]["code"] == "csrf_failed", answer.text
    kept = as_person(stack.a, cookie, "POST", "/ui/logout")
    assert kept.status_code == 403 and as_person(stack.a, cookie, "GET", "/ui/session").status_code == 200
    token = csrf_token(stack.a, cookie)
    done = as_person(
        stack.a, cookie, "PUT", "/v1/secrets/csrf_probe", json=body, headers={**org, "x-csrf-token": token}
    )
    assert done.status_code in (200, 201), done.text
    # The inference routes take keys only, whatever the cookie and token.
    chat = as_person(
        stack.a,
        cookie,
        "POST",
        "/v1/chat/completions",
        json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
        headers={**org, "x-csrf-token": token},
    )
    assert chat.status_code == 401


def test_signing_out_on_one_replica_ends_the_session_on_the_other(
    stack: Stack, new_context: Callable[[], BrowserContext]
) -> None:
    since = datetime.now(UTC) - timedelta(seconds=1)
    context = new_context()
    page = sign_in(context, stack.a, "alice")
    cookie = session_cookie(context, stack.a)
    assert cookie is not None
    on_b = as_person(stack.b, cookie, "GET", "/v1/secrets", headers={"hatchway-organization": "acme"})
    assert on_b.status_code == 200, on_b.text  # one session, seen by both replicas

    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("link", name="Sign in with SSO")).to_be_visible()
    for replica in (stack.b, stack.a):
        refused = as_person(replica, cookie, "GET", "/v1/secrets", headers={"hatchway-organization": "acme"})
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "session_expired"
        assert as_person(replica, cookie, "GET", "/ui/session").status_code == 401
    assert session_cookie(context, stack.a) is None  # and the browser was told to forget it
    assert ("auth.sign_out", "sso:alice") in [
        (e.action, e.actor) for e in stack.audit(stack.acme.org_id, since)
    ]


def test_an_expired_or_idle_session_is_refused(
    stack: Stack, new_context: Callable[[], BrowserContext]
) -> None:
    expired_context, idle_context = new_context(), new_context()
    page = sign_in(expired_context, stack.a, "alice")
    sign_in(idle_context, stack.b, "alice")
    expired, idle = session_cookie(expired_context, stack.a), session_cookie(idle_context, stack.b)
    assert expired and idle and expired != idle
    now = datetime.now(UTC)
    stack.change_session(expired, expires_at=now - timedelta(seconds=1))  # past session_seconds
    stack.change_session(idle, last_seen=now - timedelta(hours=1, seconds=1))  # unused past idle_seconds
    for cookie in (expired, idle):
        for replica in (stack.a, stack.b):
            refused = as_person(replica, cookie, "GET", "/v1/logs")
            assert refused.status_code == 401 and refused.json()["error"]["code"] == "session_expired"
    page.reload()
    expect(page.get_by_role("link", name="Sign in with SSO")).to_be_visible()


def test_a_person_without_a_mapped_role_gets_no_session(
    stack: Stack, new_context: Callable[[], BrowserContext]
) -> None:
    since = datetime.now(UTC) - timedelta(seconds=1)
    context = new_context()
    page = context.new_page()
    page.goto(f"{stack.a.url}/ui/")
    page.get_by_role("link", name="Sign in with SSO").click()
    fill_provider_login(page, "mallory")
    expect(page.get_by_role("heading", name="No access to this gateway")).to_be_visible()
    expect(page.locator("#sso-problem")).to_contain_text("role_mappings")
    assert session_cookie(context, stack.a) is None
    denied = [(e.action, e.actor, e.outcome) for e in stack.audit("platform", since)]
    assert ("auth.denied", "sso:mallory", "denied") in denied


def test_a_platform_person_acts_in_every_organisation(
    stack: Stack, new_context: Callable[[], BrowserContext]
) -> None:
    context = new_context()
    page = sign_in(context, stack.a, "pat")
    expect(page.locator("#org-picker option", has_text="globex (platform)")).to_have_count(1)
    cookie = session_cookie(context, stack.a)
    assert cookie is not None
    orgs = as_person(stack.a, cookie, "GET", "/v1/admin/orgs")
    assert orgs.status_code == 200 and {"acme", "globex"} <= {o["name"] for o in orgs.json()["data"]}
    keys = as_person(stack.b, cookie, "GET", "/v1/admin/orgs/globex/keys")
    assert keys.status_code == 200 and [k["name"] for k in keys.json()["data"]] == ["default"]


def test_an_api_key_still_signs_in_for_its_own_scope(
    stack: Stack, new_context: Callable[[], BrowserContext]
) -> None:
    page = new_context().new_page()
    page.goto(f"{stack.a.url}/ui/")
    expect(page.get_by_role("link", name="Sign in with SSO")).to_be_visible()
    page.get_by_label("API key").fill(stack.globex.key)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("link", name="Keys").click()
    expect(page.get_by_role("heading", name="Keys of globex")).to_be_visible()
    expect(page.locator("#who")).to_be_hidden()


def test_login_csrf_a_callback_begun_in_another_browser_is_refused(
    stack: Stack, new_context: Callable[[], BrowserContext]
) -> None:
    attacker, victim = new_context(), new_context()
    harvested = held_callback(attacker, stack.a, "victor")  # the attacker's own sign-in, unfinished

    page = victim.new_page()
    page.goto(f"{stack.a.url}/ui/login")  # the victim has begun a sign-in of their own, too
    page.wait_for_url(re.compile(r"/interaction/"))
    answer = page.goto(harvested)
    assert answer is not None and answer.status == 400
    expect(page.locator("#sso-problem")).to_contain_text("not started in this browser")
    assert session_cookie(victim, stack.a) is None

    own = attacker.new_page().goto(harvested)  # in the browser that began it, the same URL signs in
    assert own is not None and own.status == 200 and session_cookie(attacker, stack.a) is not None


def test_a_forged_or_altered_state_is_refused_and_a_state_serves_once(
    stack: Stack, new_context: Callable[[], BrowserContext]
) -> None:
    context = new_context()
    real = held_callback(context, stack.a, "alice")
    page = context.new_page()
    query = {k: v[0] for k, v in parse_qs(urlsplit(real).query).items()}
    altered = query["state"][:-1] + ("A" if query["state"][-1] != "A" else "B")
    forgeries = [
        {**query, "state": altered},
        {**query, "state": "forged-by-someone"},
        {"code": query["code"]},
    ]
    for forged in forgeries:
        answer = page.goto(f"{stack.a.url}/ui/callback?{urlencode(forged)}")
        assert answer is not None and answer.status == 400, forged
        expect(page.locator("#sso-problem")).to_contain_text("Sign-in failed")
    assert session_cookie(context, stack.a) is None

    page.goto(f"{stack.a.url}/ui/login")  # the forgeries spent nothing: a new sign-in goes through
    page.wait_for_url(f"{stack.a.url}/ui/**")  # (the provider remembers alice: no login page)
    assert session_cookie(context, stack.a) is not None
    replay = page.goto(real)  # the first state, redeemed by nobody, is now another browser's pre-login
    assert replay is not None and replay.status == 400


def test_a_cookie_planted_before_sign_in_is_never_the_session_after_it(
    stack: Stack, new_context: Callable[[], BrowserContext]
) -> None:
    attacker, victim = new_context(), new_context()
    sign_in(attacker, stack.a, "victor")
    planted = session_cookie(attacker, stack.a)
    assert planted is not None
    for value in (planted, "attacker-chosen-value"):
        victim.clear_cookies()
        victim.add_cookies([{"name": COOKIE, "value": value, "url": stack.a.url}])
        page = victim.new_page()
        page.goto(f"{stack.a.url}/ui/login")
        fill_provider_login(page, "alice")
        page.wait_for_url(f"{stack.a.url}/ui/**")
        after = session_cookie(victim, stack.a)
        assert after is not None and after != value
        me = as_person(stack.a, after, "GET", "/ui/session")
        assert me.json()["subject"] == "alice"
        page.close()
    # The attacker's own session, carried into the victim's sign-in, was ended there: never alice's.
    assert as_person(stack.a, planted, "GET", "/ui/session").status_code == 401
    assert as_person(stack.a, "attacker-chosen-value", "GET", "/ui/session").status_code == 401


@pytest.mark.parametrize(
    "target",
    [
        "https://evil.example/",
        "//evil.example/",
        "/\\evil.example/",
        "/ui/\\\\evil.example",
        "https:evil.example",
    ],
)
def test_no_redirect_off_the_gateway_after_sign_in(
    stack: Stack, new_context: Callable[[], BrowserContext], target: str
) -> None:
    context = new_context()
    off_site: list[str] = []
    context.route(
        lambda url: "evil.example" in (urlsplit(url).hostname or ""),
        lambda r: (off_site.append(r.request.url), r.abort()),
    )
    page = context.new_page()
    page.goto(f"{stack.a.url}/ui/login?next={quote(target, safe='')}")
    fill_provider_login(page, "alice")
    page.wait_for_url(f"{stack.a.url}/ui/**")
    assert page.url == f"{stack.a.url}/ui/" and off_site == []
    expect(page.locator("#who")).to_have_text("Signed in as Alice Admin")


def test_over_https_the_cookies_are_secure_and_host_only(stack: Stack) -> None:
    """Behind a TLS-terminating proxy (uvicorn trusts loopback's X-Forwarded-Proto), as a browser sees it."""
    answer = httpx.get(f"{stack.a.url}/ui/login", headers={"x-forwarded-proto": "https"}, timeout=60)
    assert answer.status_code == 303 and answer.headers["location"].startswith(
        f"{stack.provider.issuer}/auth?"
    )
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith("__Host-hatchway_login=")
    attributes = {part.strip().lower() for part in cookie.split(";")[1:]}
    assert {"secure", "httponly", "samesite=lax", "path=/"} <= attributes
    assert not any(a.startswith("domain") for a in attributes)
    location = parse_qs(urlsplit(answer.headers["location"]).query)
    assert location["code_challenge_method"] == ["S256"] and location["nonce"] and location["state"]
    assert location["redirect_uri"] == [f"https://127.0.0.1:{stack.a.server.port}/ui/callback"]
