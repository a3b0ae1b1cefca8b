"""``fit_row``: every value made one its column accepts, from the table definition alone."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import JSON, BigInteger, Column, MetaData, SmallInteger, String, Table, Text

from hatchway.store.columns import fit_row
from hatchway.store.logs import LogRecord
from hatchway.store.tables import RequestLog

LOGS = RequestLog.__table__


def record(**values: object) -> LogRecord:
    base = {"id": "log_1", "org_id": "org_1", "route": "chat.completions", "status": "ok"}
    return LogRecord(**(base | {"http_status": 200, "latency_ms": 1.5} | values))  # type: ignore[arg-type]


def test_an_ordinary_record_is_stored_as_it_is() -> None:
    steps = [{"type": "model_call", "round": 1}]
    source = record(model="gpt-4o", finish_reason="stop", prompt_tokens=3, steps=steps, error="é")
    row = fit_row(LOGS, source)
    assert row == {c.key: getattr(source, c.key) for c in LOGS.columns}
    assert row["steps"] is steps


def test_strings_are_cut_to_their_column_and_cleaned_of_what_postgresql_refuses() -> None:
    row = fit_row(
        LOGS,
        record(
            model="m" * 300, agent="a\x00b", key_name="k\udc80", finish_reason="x" * 33, error="e\x00" * 3
        ),
    )
    assert row["model"] == "m" * 255 + "…" and len(row["model"]) == 256
    assert row["agent"] == "a\ufffdb" and row["key_name"] == "k\ufffd"
    assert row["finish_reason"] == "x" * 31 + "…"
    assert row["error"] == "e\ufffd" * 3  # Text: cleaned, never cut


def test_values_of_the_wrong_type_are_coerced_or_given_the_default() -> None:
    row = fit_row(
        LOGS,
        {
            "id": "log_1",
            "org_id": None,  # NOT NULL, no default: the type's empty value
            "route": b"chat",
            "status": "ok",
            "http_status": "200",
            "latency_ms": float("nan"),
            "finish_reason": 7,
            "key_name": {"name": "ci"},
            "prompt_tokens": 2**40,
            "completion_tokens": "many",
            "total_tokens": 12.9,
            "has_tool_calls": "true",
            "max_rounds_hit": None,
            "steps": None,
            "created_at": "2026-01-31T10:00:00",
        },
    )
    assert row["org_id"] == "" and row["route"] == "chat" and row["http_status"] == 200
    assert row["latency_ms"] == 0.0 and row["finish_reason"] == "7" and row["key_name"] == '{"name":"ci"}'
    assert (row["prompt_tokens"], row["completion_tokens"], row["total_tokens"]) == (2**31 - 1, 0, 12)
    assert row["has_tool_calls"] is True and row["max_rounds_hit"] is False and row["steps"] == []
    assert row["created_at"] == datetime(2026, 1, 31, 10, tzinfo=UTC)
    assert row["key_id"] is None and fit_row(LOGS, {})["id"] is None  # a key column is never invented


def test_deep_fitting_rebuilds_json_values() -> None:
    class Opaque:
        def __str__(self) -> str:
            return "opaque\x00"

    steps = [{"text": "a\udc80", "n": 2**70, "what": Opaque(), 3: (1, float("inf"))}]
    assert fit_row(LOGS, record(steps=steps))["steps"] is steps  # cheap fitting leaves JSON alone
    assert fit_row(LOGS, record(steps=steps), deep=True)["steps"] == [
        {"text": "a\ufffd", "n": str(2**70), "what": "opaque\ufffd", "3": [1, None]}
    ]


def test_the_fitting_follows_the_table_definition() -> None:
    table = Table(
        "t",
        MetaData(),
        Column("code", String(4), primary_key=True),
        Column("note", Text, nullable=False),
        Column("small", SmallInteger),
        Column("big", BigInteger),
        Column("data", JSON),
    )
    row = fit_row(table, {"code": "abcdef", "small": 10**6, "big": 10**30, "data": "x\x00"})
    assert row == {"code": "abc…", "note": "", "small": 2**15 - 1, "big": 2**63 - 1, "data": "x\ufffd"}
