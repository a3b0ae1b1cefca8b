"""The PII detector: personal data in a tool result — e-mail addresses, phone numbers in
international form, payment card numbers, IBANs, Brazilian CPF and CNPJ numbers, US social security
numbers. Candidates are found by patterns anchored at a boundary (a long run of digits or letters is
tried from its start, not from every offset), and the numbers are kept only when python-stdnum
validates their check digits (Luhn, ISO 7064, the CPF's and the CNPJ's).

Not Presidio: it needs a spaCy language model (hundreds of megabytes, downloaded apart from PyPI) and
milliseconds per result, for names and addresses that no pattern finds reliably; this finds the
identifiers whose format or checksum makes them certain."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from stdnum import iban, luhn
from stdnum.br import cnpj, cpf

from hatchway.engine.guards.findings import MAX_SCANNED, Finding

_DIGITS = re.compile(r"\D")


def _digits(text: str) -> str:
    return _DIGITS.sub("", text)


def _card(text: str) -> bool:
    digits = _digits(text)
    return 13 <= len(digits) <= 19 and digits[0] in "23456" and luhn.is_valid(digits)


def _phone(text: str) -> bool:
    return 8 <= len(_digits(text)) <= 15


_KINDS: dict[str, tuple[re.Pattern[str], Callable[[str], bool] | None]] = {
    # kind: (its pattern, the check a match must pass)
    "email": (
        re.compile(
            r"(?<![\w.+%-])[\w.+%-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63}){0,8}\.[A-Za-z]{2,24}\b"
        ),
        None,
    ),
    "iban": (
        re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?(?![A-Za-z0-9])"),
        iban.is_valid,
    ),
    "cnpj": (re.compile(r"(?<![\d./-])\d{2}\.\d{3}\.\d{3}/\d{4}-\d{2}(?!\d)"), cnpj.is_valid),
    "cpf": (re.compile(r"(?<![\d./-])\d{3}\.?\d{3}\.?\d{3}-?\d{2}(?![\d/])"), cpf.is_valid),
    "card": (re.compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])"), _card),
    "ssn": (re.compile(r"(?<![\d-])(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?![\d-])"), None),
    "phone": (
        re.compile(r"(?<![\w+])\+\d[\d ().-]{6,20}\d(?!\d)|(?<![\d)])\(\d{2}\) ?9?\d{4}-?\d{4}(?!\d)"),
        _phone,
    ),
}
"""In this order: a match that overlaps an earlier one is not looked at again (a CNPJ is not also a
card number)."""
_NUMERIC = ("cnpj", "cpf", "card", "ssn", "phone")
_NUMBERS = re.compile(r"\d(?:[\d ./()-]*\d)?")
"""Runs of digits and the separators those kinds use: each numeric pattern is tried only on the runs
of 9 characters or more (a result of short ids and dates holds none), one C scan for all of them."""
MAX_FINDINGS = 100
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
    taken: list[tuple[int, int]] = []
    found: dict[str, Finding] = {}
    for kind, pos, endpos in _spans(text, kinds):
        pattern, valid = _KINDS[kind]
        for match in pattern.finditer(text, pos, endpos):
            value, start, end = match.group(0), match.start(), match.end()
            if value in found or any(s < end and start < e for s, e in taken):
                continue
            if valid is not None and not valid(value):
                continue
            taken.append((start, end))
            found[value] = Finding("pii", kind, f"{kind} ({len(value)} characters)", value)
            if len(found) >= MAX_FINDINGS:
                return list(found.values())
    return list(found.values())
