"""The built-in prompt-injection detector: patterns of text that addresses the model rather than
informs it (overriding instructions, fake closing tags and role markers, role spoofing, exfiltration
requests), also inside base64 that decodes to text. A heuristic: it catches the common and the
copied, not a determined author (docs/security.md says what it misses)."""

from __future__ import annotations

import base64
import binascii
import re
import unicodedata

from hatchway.engine.guards.findings import MAX_SCANNED, Finding

_PATTERNS: list[tuple[str, tuple[str, ...], re.Pattern[str]]] = [
    (
        "override",
        ("ignore", "disregard", "forget", "override", "bypass"),
        re.compile(
            r"\b(ignore|disregard|forget|override|bypass)\b[^.\n]{0,40}\b(previous|prior|above|earlier|all|"
            r"your|the)\b[^.\n]{0,30}\b(instructions?|prompts?|rules|directives|guidelines|context)\b",
            re.I,
        ),
    ),
    (
        "new_instructions",
        ("instruction", "directive", "orders"),
        re.compile(
            r"\b(new|updated|real|actual|important)\s+(system\s+)?(instructions?|directives?|orders)\s*[:!]",
            re.I,
        ),
    ),
    (
        "role_change",
        ("you are now", "you are no longer", "act as"),
        re.compile(r"\byou are (now|no longer)\b|\bact as (an?|the) (admin|system|developer)\b", re.I),
    ),
    (
        "fake_markup",
        (
            "system>",
            "assistant>",
            "developer>",
            "tool_output>",
            "tool_result>",
            "instruction>",
            "instructions>",
            "im_start",
            "im_end",
            "<|",
            "inst]",
            "sys]",
            "sys>>",
        ),
        re.compile(
            r"</?\s*(system|assistant|developer|tool_output|tool_result|instructions?|im_start|im_end)\s*>"
            r"|<\|(im_start|im_end|system|assistant|endoftext)\|>|\[/?(INST|SYS)\]|<<\s*/?\s*SYS\s*>>",
            re.I,
        ),
    ),
    (
        "role_spoofing",
        ("system:", "assistant:", "developer:", "system :", "assistant :"),
        re.compile(r"(^|\n)\s*(system|assistant|developer)\s*:\s*\S", re.I),
    ),
    (
        "hidden_from_user",
        ("do not", "don't", "dont", "never"),
        re.compile(
            r"\b(do not|don'?t|never)\s+(tell|inform|mention|reveal|show)\b[^.\n]{0,30}\b(user|human)\b", re.I
        ),
    ),
    (
        "exfiltration",
        ("send", "post", "upload", "forward", "email", "exfiltrate", "transmit"),
        re.compile(
            # The destination right after "to"/"at": a URL, or an address bounded on both sides (an
            # unbounded \S+@\S+ after two gaps backtracks cubically: 0.7 s on 280 characters).
            r"\b(send|post|upload|forward|email|exfiltrate|transmit)\b[^.\n]{0,60}?\b(to|at)\s{1,4}"
            r"(?:the\s{1,4}|this\s{1,4}|my\s{1,4})?(?:address\s{1,4}|url\s{1,4}|endpoint\s{1,4})?"
            r"(https?://|[^\s@]{1,64}@[\w-]{1,63}\.\w)",
            re.I,
        ),
    ),
    (
        "tool_directive",
        ("tool", "function"),
        re.compile(
            r"\b(call|invoke|run|execute|use)\s+(the\s+)?(tool|function)\b[^.\n]{0,40}\b(now|immediately|first)\b",
            re.I,
        ),
    ),
]
"""(kind, triggers, pattern): a pattern is tried only in windows around its triggers' occurrences (a
substring search in C), so a result costs little when it holds none and a hostile one full of
triggers costs at most ``_WINDOWS`` windows per trigger — never a backtracking scan of the whole."""
_WINDOWS = 32
_BEFORE, _AFTER = 80, 200
_BASE64 = re.compile(r"[A-Za-z0-9+/]{24,}={0,2}")
_PUNCTUATION = "\"'`.,;:()[]{}<>!?"


def _windows(text: str, low: str, triggers: tuple[str, ...]) -> list[str]:
    """The pieces of ``text`` around the first ``_WINDOWS`` occurrences of each trigger."""
    out = []
    for trigger in triggers:
        at, seen = low.find(trigger), 0
        while at >= 0 and seen < _WINDOWS:
            out.append(text[max(0, at - _BEFORE) : at + _AFTER])
            at, seen = low.find(trigger, at + len(trigger)), seen + 1
    return out


def _matches(text: str, encoded: bool) -> list[Finding]:
    out = []
    low = text.lower()
    for kind, triggers, pattern in _PATTERNS:
        for window in _windows(text, low, triggers):
            match = pattern.search(window)
            if match is not None:
                name = f"{kind}_base64" if encoded else kind
                out.append(Finding("heuristic", name, match.group(0)[:80], match.group(0)))
                break
    return out


_INVISIBLE = (
    "\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180e\u200b\u200c\u200d\u200e\u200f"
    "\u2060\u2061\u2062\u2063\u2064\u206a\u206b\u206c\u206d\u206e\u206f\u3164\ufeff\uffa0"
)
"""Characters that print as nothing (zero-width spaces and joiners, soft hyphens, bidi marks…):
dropped, so "ig\u200bnore" reads as "ignore"."""
_LOOK_ALIKES = {
    # Cyrillic and Greek letters drawn like the Latin ones the patterns spell with. Unicode's
    # confusables table (its "skeleton") has thousands of entries and a per-character algorithm; the
    # patterns here are Latin words, so the letters that can stand in for theirs are enough, folded
    # by one str.translate in C (the heuristic's cost stays within docs/security.md's figures).
    "а": "a", "в": "b", "е": "e", "ё": "e", "к": "k", "м": "m", "н": "h", "о": "o", "р": "p", "с": "c",
    "т": "t", "у": "y", "х": "x", "ѕ": "s", "і": "i", "ї": "i", "ј": "j", "ԁ": "d", "ӏ": "l", "ԛ": "q",
    "ԝ": "w", "һ": "h", "ɡ": "g", "А": "A", "В": "B", "Е": "E", "К": "K", "М": "M", "Н": "H", "О": "O",
    "Р": "P", "С": "C", "Т": "T", "У": "Y", "Х": "X", "Ѕ": "S", "І": "I", "Ј": "J",
    "α": "a", "ε": "e", "ι": "i", "κ": "k", "ν": "v", "ο": "o", "ρ": "p", "τ": "t", "υ": "u", "χ": "x",
    "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M", "Ν": "N", "Ο": "O",
    "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X",
}  # fmt: skip
_FOLD = str.maketrans({**dict.fromkeys(_INVISIBLE, None), **_LOOK_ALIKES})
_FOLDABLE = re.compile(
    "[\u00a0\u00a8\u00aa\u00ad\u00af\u00b2-\u00b5\u00b8-\u00ba\u00bc-\u00be\u0100-\U0010ffff]"
)
"""A character that ``_fold`` may change: the few of Latin-1 that NFKC rewrites (ª, º, ², a no-break
space…) or drops (the soft hyphen), and any above it. Text with none — ASCII, or Latin-1 prose such
as Portuguese's "à" — folds to itself: one search in C tells, where folding 20,000 characters and
scanning them again cost ~0.9 ms (docs/security.md's figures)."""


def _fold(text: str) -> str:
    """``text`` as a disguised spelling reads: NFKC (fullwidth and other compatibility forms to
    their plain letters), characters that print as nothing dropped, look-alike letters folded."""
    return unicodedata.normalize("NFKC", text).translate(_FOLD)


def _folded_findings(text: str, findings: list[Finding]) -> list[Finding]:
    """What the patterns find only once ``text`` is folded, each with the original characters it
    spans (what ``redact`` cuts); nothing for text that folding leaves as it is."""
    if text.isascii() or _FOLDABLE.search(text) is None:
        return []
    folded = _fold(text)
    if folded == text:
        return []
    found = [f for f in _matches(folded, encoded=False) if f not in findings]
    if not found:
        return []
    spans = [(finding, folded.find(finding.value)) for finding in found]
    reach = max(at + len(finding.value) for finding, at in spans)
    # Where each folded character came from, up to the last match only: one pass, only for a text
    # that holds a disguised match.
    origin: list[int] = []
    for i, char in enumerate(text):
        if len(origin) >= reach:
            break
        origin.extend([i] * len(_fold(char)))
    out = []
    for finding, at in spans:
        if at < 0 or at + len(finding.value) > len(origin):
            continue
        start, end = origin[at], origin[at + len(finding.value) - 1] + 1
        out.append(Finding(finding.detector, f"{finding.kind}_disguised", finding.excerpt, text[start:end]))
    return out


def _base64_blobs(text: str) -> list[str]:
    """Whitespace-separated tokens of 24 characters or more that are base64 (a split in C, then a
    check of the few long tokens: a regex over the whole text costs a millisecond per 20,000)."""
    tokens = (t.strip(_PUNCTUATION) for t in text.split() if len(t) >= 24)
    return [t for t in tokens if len(t) >= 24 and _BASE64.fullmatch(t)]


def scan(text: str) -> list[Finding]:
    """Every pattern the text holds, plainly or inside base64 that decodes to UTF-8 text."""
    text = text[:MAX_SCANNED]
    findings = _matches(text, encoded=False)
    findings += _folded_findings(text, findings)
    for blob in _base64_blobs(text)[:50]:
        try:
            decoded = base64.b64decode(blob + "=" * (-len(blob) % 4), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            continue
        # What redact cuts is the base64 itself: the decoded text is not in the result.
        findings += [
            Finding(f.detector, f.kind, f.excerpt, blob)
            for f in _matches(decoded, encoded=True)
            if f not in findings
        ]
    return findings
