"""The one redactor: every secret value the gateway knows, in every form it can take, → ``[REDACTED]``.

A secret rarely leaves as itself. A tool echoes it inside JSON (``"`` and ``\\`` escaped), a token
endpoint echoes the HTTP Basic header it received (base64 of ``client_id:secret``), a form body
(URL-encoded), the gateway serialises a structured result again. So each value is registered once
(``Redactor.add``) and its forms are computed then (``secret_forms``, cached per value):

- itself, and as Python's ``repr`` shows it (a log line of a dict or a model);
- JSON-escaped: ``json.dumps`` with and without ``ensure_ascii``, with ``/`` escaped as ``\\/`` too,
  and escaped twice (JSON inside a JSON string);
- URL-encoded: ``quote`` and ``quote_plus``, with ``/`` kept or encoded, upper- or lower-case hex;
- base64, standard and URL-safe, padded or not, at any offset inside a longer base64 text: of the
  value, and of its ``quote_plus`` form (RFC 6749 §2.3.1 encodes the client secret before HTTP
  Basic). Any framing (``user:secret``, ``Bearer …``) is covered, since only the characters that
  depend on the value alone are matched; the one or two characters it shares with its neighbours
  are taken with it, so no bit of the value is left beside the marker.

``redact(text)`` replaces them in a string, longest first (a value containing another is redacted
whole); ``redact_value(obj)`` walks a JSON-like value (keys too), so a structured result is scrubbed
as its strings, whatever escaping a later serialisation adds.

Cost: a redactor with nothing registered returns at once, so a run that resolved no secret pays
nothing. A small set checks each form with one ``in`` (C speed); a large one — the process-wide set
the log filter uses, up to thousands of values — first finds candidate forms with one pass over the
text through an index of their first characters, so its cost grows with the text, not the set.
"""

from __future__ import annotations

import base64
import functools
import json
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, quote_plus

REDACTED = "[REDACTED]"
MIN_BASE64_CHARS = 6
"""Base64 runs shorter than this are not matched (too likely to occur by chance)."""
_ANCHOR = 6
_INDEX_FROM = 256
"""Forms from which one pass over the text (the index) is cheaper than one ``in`` per form."""
_UPPER_HEX = re.compile(r"%[0-9A-F]{2}")
_B64_CHAR = "[A-Za-z0-9+/_-]"
"""A character of either base64 alphabet (the neighbours taken with a match)."""
_URLSAFE = str.maketrans("+/", "-_")


@dataclass(frozen=True, slots=True)
class SecretForm:
    """One way a value can appear: ``literal`` is looked for; ``pattern``, when set, is replaced
    (the literal and the neighbouring characters that carry some of its bits)."""

    literal: str
    pattern: re.Pattern[str] | None = None

    def scrub(self, text: str) -> str:
        if self.pattern is not None:
            return self.pattern.sub(REDACTED, text)
        return text.replace(self.literal, REDACTED)


@functools.lru_cache(maxsize=8192)
def secret_forms(value: str) -> tuple[SecretForm, ...]:
    """Every form of ``value`` the redactor looks for, longest first."""
    if not value:
        return ()
    literals = {value, repr(value)[1:-1], *_json_forms(value), *_url_forms(value)}
    forms = [SecretForm(literal) for literal in literals]
    seen = set(literals)
    for source in dict.fromkeys((value, quote_plus(value, safe=""))):
        for form in _base64_forms(source.encode()):
            if form.literal not in seen:
                seen.add(form.literal)
                forms.append(form)
    return tuple(sorted(forms, key=lambda f: len(f.literal), reverse=True))


def _json_escaped(value: str, *, ascii_only: bool) -> str:
    return json.dumps(value, ensure_ascii=ascii_only)[1:-1]


def _json_forms(value: str) -> set[str]:
    forms = set()
    for ascii_only in (False, True):
        once = _json_escaped(value, ascii_only=ascii_only)
        forms |= {once, once.replace("/", "\\/"), _json_escaped(once, ascii_only=ascii_only)}
    return forms


def _url_forms(value: str) -> set[str]:
    forms = set()
    for safe in ("", "/"):
        for encoded in (quote(value, safe=safe), quote_plus(value, safe=safe)):
            forms |= {encoded, _UPPER_HEX.sub(lambda m: m.group().lower(), encoded)}
    return forms


def _base64_forms(raw: bytes) -> list[SecretForm]:
    """The base64 characters that depend on ``raw`` alone, for each of the three offsets it can
    start at inside a longer byte string, in both alphabets."""
    forms = []
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + raw).decode().rstrip("=")
        # The characters before ``start`` carry bits of the bytes before ``raw``; so does the last
        # one when ``raw`` ends inside a 3-byte group (with the bytes after, or the padding).
        start = (0, 2, 3)[offset]
        shared_end = (offset + len(raw)) % 3 != 0
        core = encoded[start : len(encoded) - shared_end]
        if len(core) < MIN_BASE64_CHARS:
            continue
        before = f"{_B64_CHAR}?" if offset else ""
        after = f"{_B64_CHAR}?={{0,2}}" if shared_end else ""
        for literal in dict.fromkeys((core, core.translate(_URLSAFE))):
            pattern = re.compile(before + re.escape(literal) + after) if before or after else None
            forms.append(SecretForm(literal, pattern))
    return forms


@dataclass(frozen=True, slots=True)
class _Compiled:
    """A redactor's forms as ``redact`` reads them (rebuilt when a value is added)."""

    forms: tuple[SecretForm, ...]
    """Longest first."""
    index: dict[str, tuple[int, ...]] | None = None
    """First ``_ANCHOR`` characters → positions in ``forms`` (large sets only)."""
    unindexed: tuple[int, ...] = ()
    """Positions of forms shorter than an anchor (always checked)."""

    @classmethod
    def of(cls, forms: Iterable[SecretForm]) -> _Compiled:
        ordered = tuple(sorted(set(forms), key=lambda f: len(f.literal), reverse=True))
        if len(ordered) < _INDEX_FROM:
            return cls(ordered)
        index: dict[str, list[int]] = {}
        unindexed = []
        for i, form in enumerate(ordered):
            if len(form.literal) >= _ANCHOR:
                index.setdefault(form.literal[:_ANCHOR], []).append(i)
            else:
                unindexed.append(i)
        return cls(ordered, {k: tuple(v) for k, v in index.items()}, tuple(unindexed))

    def candidates(self, text: str) -> Iterable[SecretForm]:
        if self.index is None:
            return self.forms
        get, hits = self.index.get, set(self.unindexed)
        for i in range(len(text) - _ANCHOR + 1):
            found = get(text[i : i + _ANCHOR])
            if found is not None:
                hits.update(found)
        return [self.forms[i] for i in sorted(hits)]

    def scrub(self, text: str) -> str:
        for form in self.candidates(text):
            if form.literal in text:
                text = form.scrub(text)
        return text


_EMPTY = _Compiled(())


class Redactor:
    """Secret values and their forms; ``redact`` scrubs a string, ``redact_value`` a JSON-like value.

    ``base`` is redacted too (a run's redactor over the gateway's provider keys). ``limit`` bounds
    the values kept, the oldest dropped first (the process-wide set: tokens rotate). Safe to use
    from any thread: readers take an immutable snapshot, rebuilt on the first read after an add.
    """

    def __init__(
        self, values: Iterable[str] = (), *, base: Redactor | None = None, limit: int | None = None
    ) -> None:
        self._base = base
        self._limit = limit
        self._values: dict[str, None] = {}
        self._lock = threading.Lock()
        self._compiled: _Compiled | None = _EMPTY
        for value in values:
            self.add(value)

    def add(self, value: str) -> None:
        """Register ``value`` (a no-op for an empty one or one already known, which stays newest)."""
        if not value:
            return
        with self._lock:
            if value in self._values:
                if self._limit is not None:  # keep it newest; the set is unchanged
                    del self._values[value]
                    self._values[value] = None
                return
            self._values[value] = None
            if self._limit is not None:
                while len(self._values) > self._limit:
                    del self._values[next(iter(self._values))]
            self._compiled = None

    def values(self) -> set[str]:
        """The raw values registered here and in ``base``."""
        own = set(self._values)
        return own | self._base.values() if self._base is not None else own

    def __contains__(self, value: object) -> bool:
        return value in self._values or (self._base is not None and value in self._base)

    def __bool__(self) -> bool:
        return bool(self._values) or bool(self._base)

    def redact(self, text: str) -> str:
        """``text`` with every form of every value replaced by ``[REDACTED]``."""
        compiled = self._compiled
        if compiled is None:
            compiled = self._compile()
        if compiled.forms and text:
            text = compiled.scrub(text)
        if self._base is not None:
            text = self._base.redact(text)
        return text

    def redact_value(self, value: Any) -> Any:
        """A JSON-like value with every string (keys included) redacted; other values as they are."""
        if not self:
            return value
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, dict):
            return {self.redact_value(k): self.redact_value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.redact_value(v) for v in value]
        return value

    def _compile(self) -> _Compiled:
        with self._lock:
            if self._compiled is None:
                self._compiled = _Compiled.of(f for v in self._values for f in secret_forms(v))
            return self._compiled
