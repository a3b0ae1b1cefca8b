"""The leak scanner finds what it is meant to find (a scanner that cannot fail proves nothing)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import quote_plus, urlencode

from sqlalchemy import text

from hatchway.store.db import Database
from tests.support.leak_scanner import SecretScanner
from tests.support.paths import ROOT


def test_it_finds_a_value_in_observed_text_and_in_hex() -> None:
    scanner = SecretScanner()
    scanner.watch("s3cr3t-value")
    scanner.observe("clean body", '{"name": "x"}')
    assert scanner.findings() == []
    scanner.observe("a response", b'{"echo": "s3cr3t-value"}')
    scanner.observe("a bytea dump", "\\x" + b"s3cr3t-value".hex().upper())
    assert scanner.findings() == ["s3cr… in a response", "s3cr… as hex in a bytea dump"]


def test_it_finds_a_value_json_escaped_url_encoded_or_in_base64_at_any_offset() -> None:
    value = 'sk-"q"\\é/+ x-0123456789'
    scanner = SecretScanner()
    scanner.watch(value)
    scanner.observe("json", json.dumps({"k": value}))
    scanner.observe("json, ascii", json.dumps({"k": value}, ensure_ascii=True))
    scanner.observe("nested json", json.dumps({"k": json.dumps({"k": value})}))
    scanner.observe("form", urlencode({"k": value}))
    scanner.observe("basic", "Basic " + base64.b64encode(f"user:{quote_plus(value)}".encode()).decode())
    scanner.observe("b64url", base64.urlsafe_b64encode(f"ab{value}tail".encode()).decode().rstrip("="))
    scanner.observe("redacted", json.dumps({"k": "[REDACTED]", "b": base64.b64encode(b"other").decode()}))
    assert [f.rsplit(" in ", 1)[1] for f in scanner.findings()] == [
        "json",
        "json, ascii",
        "nested json",
        "form",
        "basic",
        "b64url",
    ]


def test_it_finds_a_plaintext_row_in_the_database(database_url: str) -> None:
    value = f"plain-{uuid.uuid4().hex}"
    table = f"leak_{uuid.uuid4().hex[:8]}"

    async def write() -> None:
        db = Database(database_url)
        try:
            async with db.session() as s:
                await s.execute(text(f"CREATE TABLE {table} (v TEXT)"))
                await s.execute(text(f"INSERT INTO {table} VALUES (:v)"), {"v": value})
        finally:
            await db.close()

    asyncio.run(write())
    scanner = SecretScanner()
    scanner.watch(value)
    scanner.watch_database(database_url)
    try:
        assert len(scanner.findings()) == 1
    finally:
        asyncio.run(_drop(database_url, table))


async def _drop(url: str, table: str) -> None:
    db = Database(url)
    try:
        async with db.session() as s:
            await s.execute(text(f"DROP TABLE {table}"))
    finally:
        await db.close()


_LEAKY_TESTS = """
import logging, sys

def test_logs_it(secret_scanner):
    secret_scanner.watch("leaky-123")
    logging.getLogger("hatchway.anything").debug("token is %s", "leaky-123")

def test_prints_it(secret_scanner):
    secret_scanner.watch("leaky-456")
    sys.stderr.write("oops leaky-456\\n")

def test_stays_clean(secret_scanner):
    secret_scanner.watch("leaky-789")
    logging.getLogger("hatchway.anything").warning("nothing to see")
"""


def test_the_fixture_fails_a_test_that_logs_or_prints_a_watched_value(tmp_path: Path) -> None:
    (tmp_path / "test_leaky.py").write_text(_LEAKY_TESTS)
    args = [
        "-p",
        "tests.support.leak_scanner",
        "-c",
        os.devnull,
        "--rootdir",
        str(tmp_path),
        "-q",
        "-p",
        "no:cacheprovider",
    ]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", *args, str(tmp_path / "test_leaky.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "3 passed, 2 errors" in result.stdout, result.stdout
    assert "leak… in log records" in result.stdout and "leak… in stderr" in result.stdout
    assert "test_stays_clean" not in result.stdout.split("short test summary")[-1]
