"""A durable local spool for run records the database could not take: append-only JSON-lines files.

Each process appends to a file of its own, ``run-records-<database>-<time>-<random>.jsonl``, which it
holds under an exclusive ``flock`` while it lives: the operating system releases the lock when the
process ends, however it ends (SIGKILL included), so any later process of the same database finds
the file unlocked and replays it. ``<database>`` is a hash of the database URL (password left out):
gateways of different databases sharing one directory never replay each other's records.

Lines are written a batch at a time, one ``write`` and one ``fsync`` per batch; a batch cut short by
a crash leaves at most a torn last line, which ``read`` skips. The files of one database together
stay under ``max_bytes``: what does not fit is refused, and the caller counts it as dropped.
Every method does blocking file I/O: call them from a thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson
from sqlalchemy.engine.url import make_url

logger = logging.getLogger(__name__)

SUFFIX = ".jsonl"


def database_key(url: str) -> str:
    """Names a database in spool file names without revealing its URL."""
    shown = make_url(url).render_as_string(hide_password=True)
    return hashlib.sha256(shown.encode()).hexdigest()[:12]


@dataclass(slots=True)
class SpoolFile:
    """A spool file this process holds the lock of (its own, or one a dead process left)."""

    path: Path
    handle: IO[bytes]


class RecordSpool:
    """Rows of one database kept on local disk until the database takes them."""

    def __init__(self, directory: Path, database: str, *, max_bytes: int) -> None:
        self.directory = directory
        self.prefix = f"run-records-{database}-"
        self.max_bytes = max_bytes
        self._current: SpoolFile | None = None
        self._held: dict[Path, SpoolFile] = {}
        """Files of dead processes this one has locked, until replayed."""
        self._bytes: int | None = None

    def append(self, rows: list[dict[str, Any]]) -> int:
        """Write ``rows`` durably (fsync'd); returns how many fitted under ``max_bytes`` (the first ones)."""
        lines = [orjson.dumps(row, option=orjson.OPT_NON_STR_KEYS) + b"\n" for row in rows]
        used = self._used()
        kept = 0
        for line in lines:
            if used + len(line) > self.max_bytes:
                break
            used += len(line)
            kept += 1
        if kept:
            current = self._current or self._open()
            current.handle.write(b"".join(lines[:kept]))
            current.handle.flush()
            os.fsync(current.handle.fileno())
            self._bytes = used
        return kept

    def pending(self) -> list[SpoolFile]:
        """Files to replay, oldest first: this process's own (closed for appending: the next append
        opens a new file) and every unlocked one of this database (its writer is gone)."""
        if self._current is not None:
            self._held[self._current.path] = self._current
            self._current = None
        for path in self._paths():
            if path not in self._held and (claimed := _claim(path)) is not None:
                self._held[path] = claimed
        return sorted(self._held.values(), key=lambda f: f.path.name)

    def read(self, spooled: SpoolFile) -> Iterator[dict[str, Any]]:
        """The rows of a file; a line that does not parse (torn by a crash) is skipped and logged."""
        spooled.handle.seek(0)
        for number, line in enumerate(spooled.handle, 1):
            try:
                yield orjson.loads(line)
            except orjson.JSONDecodeError:
                logger.warning("%s: line %d is not a whole record; skipped", spooled.path.name, number)

    def remove(self, spooled: SpoolFile) -> None:
        """A replayed file: deleted, then its lock released."""
        with contextlib.suppress(FileNotFoundError):
            spooled.path.unlink()
        spooled.handle.close()
        self._held.pop(spooled.path, None)
        self._bytes = None

    def close(self) -> None:
        """Release every file (what is in them stays, for the next start)."""
        for spooled in [*self._held.values(), *([self._current] if self._current else [])]:
            spooled.handle.close()
        self._held.clear()
        self._current = None

    def _open(self) -> SpoolFile:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        name = f"{self.prefix}{time.time_ns():020d}-{uuid.uuid4().hex[:8]}{SUFFIX}"
        path = self.directory / name
        # Records are the run log's content (redacted, but an organisation's): the owner's only.
        handle = os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600), "a+b")
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)  # a new name: nobody else holds it
        self._current = SpoolFile(path, handle)
        return self._current

    def _paths(self) -> list[Path]:
        if not self.directory.is_dir():
            return []
        return sorted(self.directory.glob(f"{self.prefix}*{SUFFIX}"))

    def _used(self) -> int:
        if self._bytes is None:
            total = 0
            for path in self._paths():
                with contextlib.suppress(FileNotFoundError):
                    total += path.stat().st_size
            self._bytes = total
        return self._bytes


def _claim(path: Path) -> SpoolFile | None:
    """The file, locked by this process, if no live process holds it and it is still there."""
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        # Replayed and deleted by another process between our open and our lock: nothing to do.
        if os.fstat(handle.fileno()).st_ino != path.stat().st_ino:
            raise FileNotFoundError(path)
    except (BlockingIOError, FileNotFoundError):
        handle.close()
        return None
    return SpoolFile(path, handle)
