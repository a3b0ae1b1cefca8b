"""Signed-in people's sessions on each database (SQLite and, when configured, PostgreSQL), time moved by
an injected clock: the cookie's value is never stored, a session ends at its lifetime, after its idle
time, or when ended; a person acts only in an organisation a group grants them (a platform person in
any), and a change needs the session's CSRF token. The browser-level story is tests/ui/test_sso.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from hatchway.access.people import People, SessionCredentials
from hatchway.access.sessions import Grants, SsoSessionRow, SsoSessions
from hatchway.api.sso import safe_next
from hatchway.config.access import SsoSettings
from hatchway.errors import CsrfFailed, InsufficientRole, InvalidRequest, NotFound, SessionEnded
from hatchway.principal import Role
from hatchway.store.db import Database
from hatchway.store.orgs import OrgStore

pytestmark = pytest.mark.anyio
SETTINGS = SsoSettings(
    issuer="https://idp.example", client_id="hatchway", session_seconds=3600, idle_seconds=600
)


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2030, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


async def test_the_cookie_value_is_not_stored_and_names_the_session(db: Database) -> None:
    sessions = SsoSessions(db, SETTINGS, clock=Clock())
    grants = Grants().with_role("org_1", "acme", Role.ADMIN)
    value, created = await sessions.create("alice", "Alice", "alice@example.com", grants)
    found = await sessions.find(value)
    assert found is not None and found.subject == "alice" and found.grants == grants
    assert found.csrf_token == created.csrf_token and len(found.csrf_token) >= 32
    async with db.session() as s:
        stored = list(await s.scalars(select(SsoSessionRow.id_hash)))
    assert value not in stored and len(stored) == 1
    assert await sessions.find(stored[0]) is None  # the stored hash is not a cookie
    assert await sessions.find("made-up") is None and await sessions.find("x" * 10_000) is None


async def test_a_session_ends_at_its_lifetime_after_idle_time_and_when_ended(db: Database) -> None:
    clock = Clock()
    sessions = SsoSessions(db, SETTINGS, clock=clock)
    grants = Grants(platform=True)
    kept, _ = await sessions.create("alice", None, None, grants)
    idle, _ = await sessions.create("bob", None, None, grants)
    ended, _ = await sessions.create("carol", None, None, grants)
    for _ in range(5):  # kept in use: each use within the idle time keeps it
        clock.advance(500)
        assert await sessions.find(kept) is not None
    assert await sessions.find(idle) is None  # 2,500 s unused > 600 s
    assert (await sessions.end(ended)) is None  # already idle too long: nothing live to end
    fresh, _ = await sessions.create("dave", None, None, grants)
    assert (await sessions.end(fresh)) is not None
    assert await sessions.find(fresh) is None and await sessions.end(fresh) is None
    clock.advance(500)
    assert await sessions.find(kept) is not None
    clock.advance(500)  # 3,500 s after sign-in: still inside the hour…
    assert await sessions.find(kept) is not None
    clock.advance(200)  # …and now past it, however recently used
    assert await sessions.find(kept) is None


def test_of_two_roles_in_one_organisation_the_broader_stays() -> None:
    grants = Grants().with_role("o1", "acme", Role.VIEWER).with_role("o1", "acme", Role.APP)
    assert grants.find("acme") is not None and grants.find("acme").role is Role.VIEWER  # type: ignore[union-attr]
    grants = grants.with_role("o1", "acme", Role.ADMIN).with_role("o2", "globex", Role.APP)
    assert [(g.name, g.role) for g in grants.orgs] == [("acme", Role.ADMIN), ("globex", Role.APP)]
    assert not Grants() and Grants(platform=True)


async def test_a_person_acts_only_where_granted_and_changes_need_the_csrf_token(db: Database) -> None:
    orgs = OrgStore(db)
    acme, globex, initech = [await orgs.create_org(n) for n in ("acme", "globex", "initech")]
    sessions = SsoSessions(db, SETTINGS, clock=Clock())
    people = People(sessions, orgs)
    one = Grants().with_role(acme.id, "acme", Role.ADMIN)
    two = one.with_role(globex.id, "globex", Role.VIEWER)
    alone, alone_session = await sessions.create("alice", None, None, one)
    both, both_session = await sessions.create("bob", None, None, two)
    boss, boss_session = await sessions.create("pat", None, None, Grants(platform=True))

    mine = await people.principal(SessionCredentials(alone), "GET", "/v1/secrets")  # the only org
    assert (mine.org_id, mine.role, mine.subject, mine.key_id, mine.actor) == (
        acme.id,
        Role.ADMIN,
        "alice",
        None,
        "sso:alice",
    )
    with pytest.raises(InvalidRequest, match="Hatchway-Organization"):  # two: which one?
        await people.principal(SessionCredentials(both), "GET", "/v1/secrets")
    for ref in ("globex", globex.id):
        there = await people.principal(SessionCredentials(both, organization=ref), "GET", "/v1/secrets")
        assert (there.org_id, there.role) == (globex.id, Role.VIEWER)
    path = await people.principal(
        SessionCredentials(both, organization="globex", path_organization="acme"),
        "GET",
        "/v1/admin/orgs/{org}",
    )
    assert path.org_id == acme.id  # the route's own organisation wins over the header
    with pytest.raises(InsufficientRole, match="no role in the organisation 'initech'"):
        await people.principal(SessionCredentials(alone, organization="initech"), "GET", "/v1/secrets")

    anywhere = await people.principal(SessionCredentials(boss, organization="initech"), "GET", "/v1/secrets")
    assert (anywhere.org_id, anywhere.role) == (initech.id, Role.PLATFORM)
    listing = await people.principal(SessionCredentials(boss), "GET", "/v1/admin/orgs")
    assert listing.role is Role.PLATFORM
    with pytest.raises(NotFound):
        await people.principal(SessionCredentials(boss, organization="nowhere"), "GET", "/v1/secrets")

    for method in ("POST", "PUT", "PATCH", "DELETE"):
        with pytest.raises(CsrfFailed) as refused:
            await people.principal(SessionCredentials(alone), method, "/v1/secrets/{name}")
        assert refused.value.code == "csrf_failed" and refused.value.status_code == 403
        with pytest.raises(CsrfFailed):
            wrong = SessionCredentials(alone, csrf_token=both_session.csrf_token)  # another session's token
            await people.principal(wrong, method, "/v1/secrets/{name}")
    right = SessionCredentials(alone, csrf_token=alone_session.csrf_token)
    assert (await people.principal(right, "PUT", "/v1/secrets/{name}")).org_id == acme.id
    assert boss_session.grants.platform

    await sessions.end(alone)
    with pytest.raises(SessionEnded) as ended:
        await people.principal(right, "GET", "/v1/secrets")
    assert ended.value.status_code == 401 and ended.value.code == "session_expired"


@pytest.mark.parametrize(
    ("asked", "kept"),
    [
        ("/ui/#/secrets", "/ui/#/secrets"),
        ("/ui", "/ui"),
        ("/ui/", "/ui/"),
        (None, "/ui/"),
        ("https://evil.example/ui/", "/ui/"),
        ("//evil.example", "/ui/"),
        ("/ui//evil.example", "/ui/"),
        ("/\\evil.example", "/ui/"),
        ("/ui/\\\\evil.example", "/ui/"),
        ("/ui/../../evil", "/ui/"),
        ("/v1/secrets", "/ui/"),
        ("/uix", "/ui/"),
        ("/ui/\r\nLocation: https://evil.example", "/ui/"),
        ("javascript:alert(1)", "/ui/"),
        ("/ui/" + "a" * 600, "/ui/"),
    ],
)
def test_only_a_dashboard_path_is_kept_as_the_page_after_sign_in(asked: str | None, kept: str) -> None:
    assert safe_next(asked) == kept
