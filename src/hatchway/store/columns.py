"""Values fitted to their columns before an insert, from the table definition alone.

A run's record carries strings the gateway did not choose (a client's model name, an upstream's
``finish_reason``, a tool's output in ``steps``). PostgreSQL refuses a string longer than its
``VARCHAR(n)``, a NUL character and, like every driver, a lone surrogate (not encodable as UTF-8);
asyncpg refuses an ``int`` where a string is expected and an integer outside ``INTEGER``'s range.
One refused value fails the whole statement, so ``fit_row`` makes every value one its column accepts:
strings cleaned and cut to the column's length (the cut marked with ``…``), non-strings written as
strings, numbers coerced and clamped, a missing or unreadable value given the column's default.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime
from typing import Any

import orjson
from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    Integer,
    SmallInteger,
    String,
    Table,
)

REFUSED = re.compile("[\x00\ud800-\udfff]")
"""Characters no backend stores: NUL (PostgreSQL) and lone surrogates (not UTF-8)."""
REPLACEMENT = "\ufffd"
CUT = "…"
_INT_RANGES = {SmallInteger: 2**15, BigInteger: 2**63, Integer: 2**31}
_JSON_INT = 2**63  # orjson refuses wider integers

Fit = Callable[[Any], Any]


def fit_row(table: Table, source: Mapping[str, Any] | object, *, deep: bool = False) -> dict[str, Any]:
    """``source``'s values (a mapping, or an object with the columns as attributes) as ``table``
    accepts them: one entry per column, each fitted to its type, defaults for what is missing.

    With ``deep``, JSON values are rebuilt too (strings cleaned, what JSON cannot hold written as a
    string): costlier, for a row the database has already refused.
    """
    if isinstance(source, Mapping):
        row = {key: fit(source.get(key)) for key, fit, _ in _plan(table)}
    else:
        row = {key: fit(getattr(source, key, None)) for key, fit, _ in _plan(table)}
    if deep:
        for key, _, json_column in _plan(table):
            if json_column and row[key] is not None:
                row[key] = clean_json(row[key])
    return row


def clean_text(value: str, length: int | None = None) -> str:
    """``value`` without the characters no backend stores, cut to ``length`` characters."""
    if not value.isascii() or "\x00" in value:
        value = REFUSED.sub(REPLACEMENT, value)
    if length is not None and len(value) > length:
        value = value[: length - 1] + CUT
    return value


@functools.cache
def _plan(table: Table) -> tuple[tuple[str, Fit, bool], ...]:
    return tuple((c.key, _fit_for(c), isinstance(c.type, JSON)) for c in table.columns)


def _fit_for(column: Column[Any]) -> Fit:
    """The function that fits one value to ``column``. A value the column takes as it is returns
    after one inline check (the common case: no further call per column); another is coerced, and
    what cannot be becomes the column's default."""
    kind = getattr(column.type, "impl_instance", column.type)  # a TypeDecorator stores its impl's
    coerce, empty = _coercion(kind)
    default = column.default
    make: Callable[[], Any]
    if default is not None and default.is_callable:  # type: ignore[attr-defined]
        make = functools.partial(default.arg, None)  # type: ignore[attr-defined]
    else:  # NOT NULL without a default: the type's empty value (a key column stays refused)
        value = default.arg if default is not None else None  # type: ignore[attr-defined]
        if value is None and not (column.nullable or column.primary_key):
            value = empty
        make = functools.partial(_same, value)
    slow = functools.partial(_coerce, coerce=coerce, default=make)
    return _fast_path(kind, slow)


def _fast_path(kind: Any, slow: Fit) -> Fit:
    """The fit of one column type: its common case checked inline, anything else to ``slow``."""
    if isinstance(kind, String):  # Text too: a String without a length
        length = kind.length or 2**62

        def text(value: Any) -> Any:
            if type(value) is str and len(value) <= length and value.isascii() and "\x00" not in value:
                return value
            return slow(value)

        return text
    if isinstance(kind, Boolean):

        def boolean(value: Any) -> Any:
            return value if type(value) is bool else slow(value)

        return boolean
    if isinstance(kind, Integer):
        bound = next(b for t, b in _INT_RANGES.items() if isinstance(kind, t))

        def integer(value: Any) -> Any:
            return value if type(value) is int and -bound <= value < bound else slow(value)

        return integer
    if isinstance(kind, Float):

        def number(value: Any) -> Any:
            return value if type(value) is float and math.isfinite(value) else slow(value)

        return number
    if isinstance(kind, JSON):

        def structure(value: Any) -> Any:
            return value if type(value) is list or type(value) is dict else slow(value)

        return structure
    if isinstance(kind, DateTime):

        def moment(value: Any) -> Any:
            return value if isinstance(value, datetime) and value.tzinfo is not None else slow(value)

        return moment
    return lambda value: slow(value) if value is None else value


def _coercion(kind: Any) -> tuple[Fit, Any]:
    """How a value becomes one of column type ``kind`` (None: it cannot), and the type's empty value."""
    if isinstance(kind, String):
        return functools.partial(_text, length=kind.length), ""
    if isinstance(kind, Boolean):
        return _boolean, False
    if isinstance(kind, Integer):
        bound = next(b for t, b in _INT_RANGES.items() if isinstance(kind, t))
        return functools.partial(_integer, low=-bound, high=bound - 1), 0
    if isinstance(kind, Float):
        return _float, 0.0
    if isinstance(kind, DateTime):
        return _datetime, None
    if isinstance(kind, JSON):
        return clean_json, None
    return _same, None


def _coerce(value: Any, *, coerce: Fit, default: Callable[[], Any]) -> Any:
    if value is not None:
        value = coerce(value)
    return default() if value is None else value


def _same(value: Any) -> Any:
    return value


def _text(value: Any, *, length: int | None) -> str | None:
    if value is None:
        return None
    if type(value) is not str:
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        elif isinstance(value, dict | list | tuple):
            value = orjson.dumps(clean_json(value), option=orjson.OPT_NON_STR_KEYS).decode()
        else:
            value = str(value)
    return clean_text(value, length)


def _integer(value: Any, *, low: int, high: int) -> int | None:
    if type(value) is not int:
        try:
            value = int(float(value)) if isinstance(value, str | float) else int(value)
        except (TypeError, ValueError, OverflowError):
            return None
    return min(max(value, low), high)


def _float(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None  # SQLite stores NaN as NULL


def _boolean(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return bool(value)
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return None


def _datetime(value: Any) -> datetime | None:
    if isinstance(value, str):  # read back from JSON (the record spool)
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return None
    if not isinstance(value, datetime):
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def clean_json(value: Any) -> Any:
    """``value`` rebuilt from what JSON holds, every string cleaned; anything else as its string."""
    if isinstance(value, str):
        return clean_text(value)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if -_JSON_INT <= value < _JSON_INT else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {clean_text(str(k)): clean_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean_json(v) for v in value]
    if isinstance(value, date):
        return value.isoformat()
    return clean_text(str(value))
