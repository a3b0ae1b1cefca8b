"""``proxy``: the session's PostgreSQL behind an ``OutageProxy`` (``proxy.url(pg_database_url)``), for
database outages on demand; ``serve``: ``hatchway serve`` on loopback (``tests/security``'s)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.security.conftest import serve
from tests.support.backends import PG_URL
from tests.support.outage_proxy import OutageProxy

__all__ = ["proxy", "serve"]


@pytest.fixture
def proxy() -> Iterator[OutageProxy]:
    if not PG_URL:
        pytest.skip("PostgreSQL not configured: set HATCHWAY_TEST_DATABASE_URL")
    host, _, port = PG_URL.partition("@")[2].partition("/")[0].partition(":")
    with OutageProxy(host, int(port or 5432)) as running:
        yield running
