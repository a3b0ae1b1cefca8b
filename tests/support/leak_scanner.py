"""A reusable check that secret values never leak: into logs, console output, responses or the database.

Use the ``secret_scanner`` fixture: ``secret_scanner.watch(value)`` for every secret the test
creates, ``watch_database(url)`` for every database it writes, ``observe(where, text)`` for
anything else it receives (response bodies, a subprocess's output). At the end of the test the
fixture scans all of it plus every log record (root logger at DEBUG, and uvicorn's own loggers)
and everything written to stdout/stderr, and fails the test naming each place a value showed up.

Every value is looked for in each form it can leave in (``encodings``): itself, JSON-escaped
(``json.dumps`` with and without ``ensure_ascii``, and escaped twice), URL-encoded (``quote`` and
``quote_plus``, either hex case), base64 (standard and URL-safe, at any offset inside a longer base64
text: ``base64("user:" + value)`` counts), the base64 of its ``quote_plus`` form (HTTP Basic as RFC
6749 sends a client secret), and hex (how ``bytea`` prints). These are written here, apart from the
gateway's redactor, so a form the redactor forgets is still found.

Database scans read the raw bytes of a SQLite file and its WAL/journal, or every table of a
PostgreSQL database as text.
``watch_redis(url)`` scans every ``hatchway:`` key of a Redis database (the shared cache).
Ask for ``secret_scanner`` before the fixtures that start servers, so it is torn down after them:
servers then have stopped and flushed their request logs when the scan runs.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, quote_plus

import pytest
from sqlalchemy.engine.url import make_url

if TYPE_CHECKING:
    from tests.support.gateway import RunningGateway

_FORMAT = logging.Formatter("%(name)s %(levelname)s %(message)s")
_UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access")  # they do not propagate to root


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(_FORMAT.format(record))


def encodings(value: str) -> dict[str, str]:
    """``{form: how value looks in it}`` for every form a leak is looked for in."""
    forms = {"raw": value, "hex": value.encode().hex()}
    for ascii_only in (True, False):
        once = json.dumps(value, ensure_ascii=ascii_only)[1:-1]
        forms[f"json(ensure_ascii={ascii_only})"] = once
        forms[f"json twice (ensure_ascii={ascii_only})"] = json.dumps(once, ensure_ascii=ascii_only)[1:-1]
    for name, encoded in (("quote", quote(value, safe="")), ("quote_plus", quote_plus(value))):
        forms[name] = encoded
        forms[f"{name}, lower-case hex"] = re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), encoded)
    for source, raw in (("", value.encode()), (" of quote_plus", quote_plus(value).encode())):
        for before in range(3):  # the value's offset in its 3-byte group decides its characters
            text = base64.b64encode(b"x" * before + raw).decode().rstrip("=")
            shares_last = (before + len(raw)) % 3 != 0
            core = text[(0, 2, 3)[before] : len(text) - shares_last]  # the value's bits alone
            if len(core) >= 8:
                forms[f"base64{source} (offset {before})"] = core
                forms[f"base64url{source} (offset {before})"] = core.translate(str.maketrans("+/", "-_"))
    return forms


class SecretScanner:
    """Secret values to look for, and places to look in."""

    def __init__(self) -> None:
        self.values: set[str] = set()
        self.texts: list[tuple[str, str]] = []
        self.database_urls: list[str] = []
        self.redis_urls: list[str] = []

    def watch(self, *values: str) -> None:
        """Fail the test if any of ``values`` appears anywhere scanned."""
        self.values.update(v for v in values if v)

    def observe(self, where: str, text: str | bytes) -> None:
        """Scan ``text`` too (a response body, a subprocess's output…); ``where`` names it in failures."""
        self.texts.append((where, text.decode("utf-8", "replace") if isinstance(text, bytes) else text))

    def watch_database(self, url: str) -> None:
        """Scan this database's raw content at the end of the test."""
        if url not in self.database_urls:
            self.database_urls.append(url)

    def watch_redis(self, url: str) -> None:
        """Scan the values of this Redis database's ``hatchway:`` keys at the end of the test."""
        if url not in self.redis_urls:
            self.redis_urls.append(url)

    def findings(self) -> list[str]:
        """``"<value prefix>… in <where>"`` (``… as <form> in …`` when encoded) for each leak found."""
        found = []
        stores = [(u, _database_text(u)) for u in self.database_urls]
        stores += [(f"redis {u}", _redis_text(u)) for u in self.redis_urls]
        forms = {value: encodings(value) for value in self.values}
        for where, text in self.texts + stores:
            lowered = text.lower()
            for value, shapes in forms.items():
                name = next((n for n, v in shapes.items() if v in (lowered if n == "hex" else text)), None)
                if name is not None:
                    found.append(
                        f"{value[:4]}… in {where}" if name == "raw" else f"{value[:4]}… as {name} in {where}"
                    )
        return found

    def assert_clean(self) -> None:
        if leaks := self.findings():
            pytest.fail("secret values leaked:\n  " + "\n  ".join(leaks), pytrace=False)


def _database_text(url: str) -> str:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        path = Path(parsed.database or "")
        parts = [path, Path(f"{path}-wal"), Path(f"{path}-journal")]
        raw = b"".join(p.read_bytes() for p in parts if p.exists())
        return raw.decode("latin-1")  # every byte kept as one character, so hex and text both match
    return asyncio.run(
        _postgres_text(parsed.set(drivername="postgresql").render_as_string(hide_password=False))
    )


def _redis_text(url: str) -> str:
    import redis

    client = redis.Redis.from_url(url)
    try:
        chunks = []
        for key in client.scan_iter(match="hatchway:*", count=500):
            value = client.get(key) if client.type(key) == b"string" else None
            if value is not None:
                chunks.append(f"{key.decode('latin-1')} {value.decode('latin-1')}")
        return "\n".join(chunks)
    finally:
        client.close()


async def _postgres_text(dsn: str) -> str:
    import asyncpg

    conn = await asyncpg.connect(dsn)
    try:
        tables = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        chunks = []
        for (table,) in tables:
            rows = await conn.fetch(f'SELECT t::text FROM "{table}" t')
            chunks.append(f"[{table}]\n" + "\n".join(r[0] for r in rows))
        return "\n".join(chunks)
    finally:
        await conn.close()


@pytest.fixture
def secret_scanner(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> Iterator[SecretScanner]:
    """A SecretScanner whose findings fail the test at teardown."""
    caplog.set_level(logging.DEBUG)
    collect = _Collect()
    for name in _UVICORN_LOGGERS:
        logging.getLogger(name).addHandler(collect)
    scanner = SecretScanner()
    try:
        yield scanner
    finally:
        for name in _UVICORN_LOGGERS:
            logging.getLogger(name).removeHandler(collect)
    records = [
        _FORMAT.format(r) for phase in ("setup", "call", "teardown") for r in caplog.get_records(phase)
    ]
    scanner.observe("log records", "\n".join(records + collect.lines))
    out, err = capfd.readouterr()
    scanner.observe("stdout", out)
    scanner.observe("stderr", err)
    scanner.assert_clean()


def put_secret(
    gateway: RunningGateway,
    key: str,
    name: str,
    value: str,
    scanner: SecretScanner,
    hosts: list[str] | None = None,
) -> None:
    """``PUT /v1/secrets/{name}`` as ``key``'s organisation, the response handed to ``scanner``."""
    response = gateway.put_secret(name, value, key=key, allowed_hosts=hosts)
    scanner.observe(f"PUT /v1/secrets/{name}", response.text)
    assert response.status_code in (200, 201), response.text
