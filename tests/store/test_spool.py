"""``RecordSpool``: fsync'd JSON lines per process, bounded, replayed only by a process of the same
database once their writer is gone."""

from __future__ import annotations

from pathlib import Path

from hatchway.store.spool import RecordSpool, database_key

DB = database_key("postgresql+asyncpg://hatchway:secret@db:5432/hatchway")


def rows(n: int, start: int = 0) -> list[dict[str, object]]:
    return [{"id": f"log_{i:04d}", "model": "gpt-4o"} for i in range(start, start + n)]


def test_the_database_key_hides_the_password_and_tells_databases_apart() -> None:
    assert "secret" not in DB and len(DB) == 12
    assert database_key("postgresql+asyncpg://hatchway:other@db:5432/hatchway") == DB  # the password
    assert database_key("postgresql+asyncpg://hatchway:secret@db:5432/staging") != DB


def test_rows_come_back_in_order_and_a_replayed_file_is_gone(tmp_path: Path) -> None:
    spool = RecordSpool(tmp_path, DB, max_bytes=1 << 20)
    assert spool.pending() == [] and not tmp_path.joinpath("x").exists()
    assert spool.append(rows(3)) == 3
    assert spool.append(rows(2, start=3)) == 2
    [path] = tmp_path.iterdir()
    assert path.stat().st_mode & 0o777 == 0o600  # the run log's content: the owner's only
    [own] = spool.pending()  # closed for appending: the next rows open a new file
    assert spool.append(rows(1, start=5)) == 1
    files = spool.pending()
    assert [f.path for f in files][:1] == [own.path] and len(files) == 2
    assert [r["id"] for f in files for r in spool.read(f)] == [f"log_{i:04d}" for i in range(6)]
    for f in files:
        spool.remove(f)
    assert list(tmp_path.iterdir()) == [] and spool.pending() == []


def test_what_does_not_fit_under_max_bytes_is_refused(tmp_path: Path) -> None:
    line = len(b'{"id":"log_0000","model":"gpt-4o"}\n')
    spool = RecordSpool(tmp_path, DB, max_bytes=line * 5)
    assert spool.append(rows(3)) == 3
    assert spool.append(rows(3, start=3)) == 2  # the spool is full after two more
    assert spool.append(rows(1, start=6)) == 0
    later = RecordSpool(tmp_path, DB, max_bytes=line * 5)  # the next process counts what is there
    assert later.append(rows(1, start=7)) == 0
    spool.close()


def test_a_file_is_replayed_by_another_process_only_once_its_writer_is_gone(tmp_path: Path) -> None:
    writer = RecordSpool(tmp_path, DB, max_bytes=1 << 20)
    writer.append(rows(2))
    other_database = RecordSpool(tmp_path, database_key("sqlite+aiosqlite:///other.db"), max_bytes=1 << 20)
    other_database.append(rows(1, start=9))
    other_database.close()
    successor = RecordSpool(tmp_path, DB, max_bytes=1 << 20)
    assert successor.pending() == []  # the writer holds its file's lock; the other file is not ours
    writer.close()  # as its process ending would (SIGKILL included: the kernel drops the lock)
    [claimed] = successor.pending()
    assert [r["id"] for r in successor.read(claimed)] == ["log_0000", "log_0001"]
    successor.close()


def test_a_line_torn_by_a_crash_is_skipped(tmp_path: Path) -> None:
    writer = RecordSpool(tmp_path, DB, max_bytes=1 << 20)
    writer.append(rows(2))
    [path] = tmp_path.iterdir()
    with path.open("ab") as torn:
        torn.write(b'{"id":"log_9')
    writer.close()
    successor = RecordSpool(tmp_path, DB, max_bytes=1 << 20)
    [claimed] = successor.pending()
    assert [r["id"] for r in successor.read(claimed)] == ["log_0000", "log_0001"]
    successor.close()
