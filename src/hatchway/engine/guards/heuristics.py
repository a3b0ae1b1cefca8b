"""The built-in prompt-injection detector: patterns of text that addresses the model rather than
informs it (overriding instructions, fake closing tags and role markers, role spoofing, exfiltration
requests), also inside base64 that decodes to text. A heuristic: it catches the common and the
copied, not a determined author (docs/security.md says what it misses)."""

from __future__ import annotations

import base64
import binascii
import re

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


def _base64_blobs(text: str) -> list[str]:
    """Whitespace-separated tokens of 24 characters or more that are base64 (a split in C, then a
    check of the few long tokens: a regex over the whole text costs a millisecond per 20,000)."""
    tokens = (t.strip(_PUNCTUATION) for t in text.split() if len(t) >= 24)
    return [t for t in tokens if len(t) >= 24 and _BASE64.fullmatch(t)]


def scan(text: str) -> list[Finding]:
    """Every pattern the text holds, plainly or inside base64 that decodes to UTF-8 text."""
    text = text[:MAX_SCANNED]
    findings = _matches(text, encoded=False)
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
