"""The PII detector: personal data in a tool result — e-mail addresses, phone numbers in
international form, payment card numbers, IBANs, Brazilian CPF and CNPJ numbers, US social security
numbers. Candidates are found by patterns anchored at a boundary (a long run of digits or letters is
tried from its start, not from every offset), and the numbers are kept only when python-stdnum
validates their check digits (Luhn, ISO 7064, the CPF's and the CNPJ's).

Not Presidio: it needs a spaCy language model (hundreds of megabytes, downloaded apart from PyPI) and
milliseconds per result, for names and addresses that no pattern finds reliably; this finds the
identifiers whose format or checksum makes them certain."""

from __future__ import annotations

import bisect
import functools
import importlib
import re
from collections.abc import Callable, Sequence

from hatchway.engine.guards.findings import MAX_SCANNED, Finding

_DIGITS = re.compile(r"\D")


def _digits(text: str) -> str:
    return _DIGITS.sub("", text)


_ISSUERS = re.compile(
    r"4|5[1-5]|2(?:2[2-9]|[3-6]|7[01]|720)|3[47]|3(?:0[0-5]|[68])|35(?:2[89]|[3-8])|6(?:011|5|4[4-9]|2)"
)
"""The issuer prefixes of Visa, Mastercard, Amex, Diners, JCB, Discover and UnionPay: a Luhn-valid
number of another prefix is an id."""


def _stdnum(module: str) -> Callable[[str], bool]:
    """python-stdnum's ``is_valid`` of ``module``, imported when the first candidate is checked:
    ``stdnum.util`` builds a table from the Unicode database at import (about 2 MiB resident with
    what it imports), which a gateway whose results hold no such number never needs."""

    @functools.cache
    def load() -> Callable[[str], bool]:
        return importlib.import_module(f"stdnum.{module}").is_valid  # type: ignore[no-any-return]

    return lambda text: load()(text)


_luhn = _stdnum("luhn")


def _card(text: str) -> bool:
    digits = _digits(text)
    return 13 <= len(digits) <= 19 and _ISSUERS.match(digits) is not None and _luhn(digits)


def _phone(text: str) -> bool:
    return 8 <= len(_digits(text)) <= 15


_KINDS: dict[str, tuple[re.Pattern[str], Callable[[str], bool] | None]] = {
    # kind: (its pattern, the check a match must pass)
    "email": (
        re.compile(
            r"(?<![\w.+%-])[\w.+%-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63}){0,8}\.[A-Za-z]{2,24}\b"
        ),
        lambda t: t.rsplit(".", 1)[1].lower() not in _NOT_TLDS,  # logo@2x.png is a file
    ),
    "iban": (
        re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?(?![A-Za-z0-9])"),
        _stdnum("iban"),
    ),
    "cnpj": (re.compile(r"(?<![\w./-])\d{2}\.\d{3}\.\d{3}/\d{4}-\d{2}(?!\w)"), _stdnum("br.cnpj")),
    "cpf": (re.compile(r"(?<![\w./-])\d{3}\.?\d{3}\.?\d{3}-?\d{2}(?![\w/])"), _stdnum("br.cpf")),
    # 13–19 digits, plain or in groups of one separator (4-4-4-4, Amex's 4-6-5), not inside a
    # hexadecimal or alphanumeric token (a hash, a UUID).
    "card": (
        re.compile(
            r"(?<![\w-])(?:\d{13,19}|\d{4}([ -])\d{4}\1\d{4}\1\d{1,7}|\d{4}([ -])\d{6}\2\d{4,5})(?![\w-])"
        ),
        _card,
    ),
    # Dashed, and named: a bare ddd-dd-dddd is as often a part number.
    "ssn": (
        re.compile(
            r"(?i)\b(?:ssn|social security(?: number| no\.?)?|tin)\b[^\n\d]{0,16}"
            r"(?<![\d-])((?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4})(?![\d-])"
        ),
        None,
    ),
    "phone": (
        re.compile(r"(?<![\w+])\+\d[\d ().-]{6,20}\d(?!\d)|(?<![\d)])\(\d{2}\) ?9?\d{4}-?\d{4}(?!\d)"),
        _phone,
    ),
}
"""In this order: a match that overlaps an earlier one is not looked at again (a CNPJ is not also a
card number)."""
_NUMERIC = ("cnpj", "cpf", "card", "phone")
_NOT_TLDS = {"png", "jpg", "jpeg", "gif", "svg", "webp", "ico", "bmp", "avif", "pdf"}
_NUMBERS = re.compile(r"\d(?:[\d ./()-]*\d)?")
"""Runs of digits and the separators those kinds use: each numeric pattern is tried only on the runs
of 9 characters or more (a result of short ids and dates holds none), one C scan for all of them."""
MAX_FINDINGS = 100
MAX_CANDIDATES = 2_000
"""Candidates of one kind checked in a result (a result of 50,000 numbers is checked for the first
2,000 of each kind: the cost stays bounded)."""
_ATS = 64


def _around_ats(text: str) -> list[tuple[str, int, int]]:
    """Where an e-mail address may be: around each "@" (the longest local part before it, the
    longest domain after), or the whole text when it holds more than ``_ATS`` of them."""
    ats, at = [], text.find("@")
    while at >= 0 and len(ats) <= _ATS:
        ats.append(at)
        at = text.find("@", at + 1)
    if len(ats) > _ATS:
        return [("email", 0, len(text))]
    return [("email", max(a - 66, 0), min(a + 700, len(text))) for a in ats]


def _spans(text: str, kinds: Sequence[str]) -> list[tuple[str, int, int]]:
    """Where each kind's pattern may match: the whole text, or the long runs of digits."""
    out = [("iban", 0, len(text))] if "iban" in kinds else []
    if "ssn" in kinds and "-" in text:
        out.append(("ssn", 0, len(text)))
    if "email" in kinds:
        out += _around_ats(text)
    numeric = [k for k in _NUMERIC if k in kinds]
    if numeric:
        runs = [(m.start(), m.end()) for m in _NUMBERS.finditer(text) if m.end() - m.start() >= 9]
        # Two characters before a run (a phone's "+" or "(") and one after, for the patterns'
        # boundary checks; a pattern still sees the whole text around its window.
        out += [(k, max(s - 2, 0), min(e + 1, len(text))) for k in numeric for s, e in runs]
    return out


def scan(text: str, kinds: Sequence[str]) -> list[Finding]:
    """Each distinct piece of personal data of ``kinds`` in ``text``."""
    text = text[:MAX_SCANNED]
    taken: list[tuple[int, int]] = []  # sorted, not overlapping
    found: dict[str, Finding] = {}
    tried: dict[str, int] = {}
    for kind, pos, endpos in _spans(text, kinds):
        pattern, valid = _KINDS[kind]
        for match in pattern.finditer(text, pos, endpos):
            if tried.get(kind, 0) >= MAX_CANDIDATES:
                break
            tried[kind] = tried.get(kind, 0) + 1
            value = match.group(match.lastindex or 0) if kind == "ssn" else match.group(0)
            start, end = match.span(match.lastindex or 0) if kind == "ssn" else match.span()
            at = bisect.bisect_left(taken, (start, end))
            overlaps = (at > 0 and taken[at - 1][1] > start) or (at < len(taken) and taken[at][0] < end)
            if value in found or overlaps or (valid is not None and not valid(value)):
                continue
            taken.insert(at, (start, end))
            found[value] = Finding("pii", kind, f"{kind} ({len(value)} characters)", value)
            if len(found) >= MAX_FINDINGS:
                return list(found.values())
    return list(found.values())
