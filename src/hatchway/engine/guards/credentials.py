"""The secret detector: credentials in a tool result — cloud, VCS, chat and payment tokens, private
keys, JWTs, passwords in URLs and authorization headers.

The patterns are detect-secrets', which its maintainers keep up to date with the providers' formats,
each anchored at the start of a token (a pattern tried at every offset of a long run of token
characters costs the square of its length), plus the gateway's own where detect-secrets' miss common
forms (an AWS secret key in a credentials file, GitHub's fine-grained tokens, Slack app tokens,
encrypted PKCS#8 and PuTTY 3 keys, ``Authorization:`` values) or backtrack or flag ordinary text
(JWT, Telegram, Discord, Basic auth). Its scanner is not used: it works line by line through every
plugin and its filters (40–90 ms on 20,000 characters) and flags every long identifier by entropy.

A found secret is cut whole: a token's match runs on to the end of its token (a newer, longer format
of the same prefix), a private key to its END line, and the longest values are cut first so a
secret inside another leaves nothing behind."""

from __future__ import annotations

import dataclasses
import importlib
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache

from hatchway.engine.guards.findings import MAX_SCANNED, Finding

_START = r"(?<![A-Za-z0-9_-])"
"""Where a token may begin: not inside a run of token characters."""
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_TOKEN_TAIL = re.compile(r"[A-Za-z0-9_-]{0,512}")
_PEM_END = re.compile(
    r"-----END [A-Z0-9 ]{1,40}-----|---- END SSH2 ENCRYPTED PRIVATE KEY ----|Private-MAC: *\w*"
)
MAX_PER_RULE = 100
"""Distinct secrets one pattern reports (each detector still runs: a flood of one kind cannot hide
another)."""
_WINDOWS = 256
MAX_CANDIDATES = 2_000
"""Matches of one pattern looked at in a result."""


@dataclass(frozen=True, slots=True)
class _Rule:
    kind: str
    pattern: re.Pattern[str]
    triggers: tuple[str, ...]
    """Literals (lower case) of which the pattern needs one; empty: always tried."""
    shape: str = "token"
    """``token`` (the match, run on to its token's end), ``group`` (its last group: a password, a
    key after its name), ``pem`` (a key block to its END line) or ``jwt``."""
    valid: Callable[[str], bool] | None = None
    at_token_start: bool = False
    """Keep a match only where a token begins (checked after the match: a pattern that begins with
    a lookbehind loses the regular-expression engine's search for its literal prefix, 2× the cost)."""
    window: int = 0
    """When set, the pattern starts at a trigger: it is tried only on the ``window`` characters from
    each of the triggers' first ``_WINDOWS`` occurrences (a text of more is not looked at further by
    this pattern: the detector is bounded, not exhaustive)."""


def _own(
    kind: str, pattern: str, triggers: tuple[str, ...], shape: str = "token", flags: int = 0, window: int = 0
) -> _Rule:
    return _Rule(kind, re.compile(pattern, flags), triggers, shape, window=window)


_OWN: dict[str, list[_Rule]] = {
    "AWSKeyDetector": [
        _own(
            "aws_secret_access_key",
            r"(?<![A-Za-z0-9])aws_?secret_?(?:access_?)?key[\"']?\s{0,4}[:=]\s{0,4}[\"']?"
            r"([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])",
            ("aws",),
            "group",
            re.I,
            window=100,
        ),
        _own(
            "aws_secret_access_key",
            r"\"(?:SecretAccessKey|SessionToken)\"\s{0,4}:\s{0,4}\"([A-Za-z0-9/+=]{16,4096})\"",
            ("secretaccesskey", "sessiontoken"),
            "group",
        ),
        _own(
            "aws_secret_access_key",
            r"(?<![A-Za-z0-9])aws_?session_?token[\"']?\s{0,4}[:=]\s{0,4}[\"']?([A-Za-z0-9/+=]{16,4096})",
            ("aws",),
            "group",
            re.I,
            window=4200,
        ),
    ],
    "BasicAuthDetector": [
        # scheme://user:password@host — the password may hold any character but whitespace, "/" and
        # "#" ("@" too: the last "@" before the host ends it).
        _own(
            "basic_auth_credentials",
            r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{0,20}://[^\s:/?#@]{1,256}:([^\s/?#]{1,256})"
            r"@[A-Za-z0-9\[]",
            ("://",),
            "group",
        )
    ],
    "DiscordBotTokenDetector": [
        # The first part is a user id (digits) in base64: it holds a digit, which names do not.
        _Rule(
            "discord_bot_token",
            re.compile(r"(?<![\w.-])[MNO][\w-]{23,25}\.[\w-]{6}\.[\w-]{27,38}(?![\w.-])"),
            (".",),
            valid=lambda token: any(c.isdigit() for c in token.split(".", 1)[0]),
        )
    ],
    "GitHubTokenDetector": [
        _own("github_token", _START + r"github_pat_[A-Za-z0-9_]{22,255}", ("github_pat_",))
    ],
    "JwtTokenDetector": [
        _own(
            "json_web_token",
            _START + r"eyJ[A-Za-z0-9_-]{1,8192}\.[A-Za-z0-9_-]{1,8192}(?:\.[A-Za-z0-9_-]{0,8192})?",
            ("eyj",),
            "jwt",
        )
    ],
    "PrivateKeyDetector": [
        _own(
            "private_key", r"BEGIN ENCRYPTED PRIVATE KEY|PuTTY-User-Key-File-3", ("encrypted", "putty"), "pem"
        )
    ],
    "SlackDetector": [_own("slack_token", _START + r"xapp-\d-[A-Za-z0-9-]{10,300}", ("xapp-",))],
    "TelegramBotTokenDetector": [
        _own("telegram_bot_token", r"(?<![\w:])\d{8,10}:AA[0-9A-Za-z_-]{33}(?![\w-])", (":aa",), flags=0)
    ],
    "AuthorizationHeaderDetector": [
        _own(
            "authorization_header",
            r"(?<![\w-])(?:proxy-)?authorization[\"']?\s{0,4}[:=]\s{0,4}[\"']?"
            r"(?:basic|bearer|token|digest)\s{1,4}([A-Za-z0-9._~+/=-]{8,4096})",
            ("authorization",),
            "group",
            re.I,
        )
    ],
}
"""The gateway's own patterns, by the detector name they belong to."""

_DETECT_SECRETS: dict[str, tuple[str, tuple[str, ...]]] = {
    "AWSKeyDetector": ("aws", ("a3t", "abia", "acca", "akia", "asia", "aws")),
    "AzureStorageKeyDetector": ("azure_storage_key", ("accountkey=",)),
    "GitHubTokenDetector": ("github_token", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")),
    "GitLabTokenDetector": (
        "gitlab_token",
        (
            "glpat-",
            "gldt-",
            "glft-",
            "glsoat-",
            "glrt-",
            "gr1348941",
            "glcbt-",
            "glimt-",
            "glptt-",
            "glagent-",
            "gloas-",
        ),
    ),
    "MailchimpDetector": ("mailchimp", ("-us",)),
    "PrivateKeyDetector": ("private_key", ("private key", "putty-user-key")),
    "PypiTokenDetector": ("pypi_token", ("pypi-",)),
    "SendGridDetector": ("sendgrid", ("sg.",)),
    "SlackDetector": ("slack", ("xox", "hooks.slack.com")),
    "SquareOAuthDetector": ("square_oauth", ("sq0csp-",)),
    "StripeDetector": ("stripe", ("k_live_",)),
    "TwilioKeyDetector": ("twilio", ()),
}
"""Detectors that use detect-secrets' patterns: its module in ``detect_secrets.plugins``, and the
literals (lower case) of which each of its patterns needs one — a plugin none of whose literals the
result holds is not run (a substring search in C instead of its regular expressions). The test that
runs every detector on its own sample keeps these true to the patterns."""


@cache
def _rules(name: str) -> tuple[_Rule, ...]:
    rules = list(_OWN.get(name, ()))
    if name in _DETECT_SECRETS:
        module_name, triggers = _DETECT_SECRETS[name]
        plugin = getattr(importlib.import_module(f"detect_secrets.plugins.{module_name}"), name)()
        kind = re.sub(r"[^a-z0-9]+", "_", plugin.secret_type.lower()).strip("_")
        pem = name == "PrivateKeyDetector"
        for pattern in plugin.denylist:
            # PyPI's is unbounded ({70,}) over token characters: tried at each start of a long run it
            # costs the run's square, so only a token's start is tried. The others are bounded.
            anchored = name == "PypiTokenDetector"
            compiled = re.compile(_START + f"(?:{pattern.pattern})", pattern.flags) if anchored else pattern
            group = name == "AWSKeyDetector" and pattern.groups > 0  # its key after the word "aws"
            shape = "pem" if pem else "group" if group else "token"
            window = 100 if group else 0  # "aws", 20 characters, a word, 20 more, the quoted key
            rules.append(
                _Rule(
                    kind,
                    compiled,
                    ("aws",) if group else triggers,
                    shape,
                    at_token_start=not (pem or anchored),
                    window=window,
                )
            )
    if name == "JwtTokenDetector":
        from detect_secrets.plugins.jwt import JwtTokenDetector

        check = JwtTokenDetector().is_formally_valid
        rules = [dataclasses.replace(r, valid=check) for r in rules]
    return tuple(rules)


def _secret(match: re.Match[str], text: str, rule: _Rule) -> str:
    if rule.shape == "pem":  # the header matched: the key runs to its END line (or the end)
        end = _PEM_END.search(text, match.end(), match.end() + 20_000)
        start = text.rfind("-----", max(match.start() - 16, 0), match.start())
        return text[start if start >= 0 else match.start() : end.end() if end else len(text)]
    if rule.shape == "group":
        return match.group(match.lastindex or 0)
    if rule.shape == "jwt":
        return match.group(0)
    tail = _TOKEN_TAIL.match(text, match.end())
    return match.group(0) + (tail.group(0) if tail else "")


def _matches(rule: _Rule, text: str, low: str) -> Iterator[re.Match[str]]:
    if not rule.window:
        yield from rule.pattern.finditer(text)
        return
    starts: list[int] = []
    for trigger in rule.triggers:
        at = low.find(trigger)
        while at >= 0 and len(starts) < _WINDOWS:
            starts.append(at)
            at = low.find(trigger, at + 1)
    for at in sorted(starts):
        yield from rule.pattern.finditer(text, at, at + rule.window)


def scan(text: str, detectors: Sequence[str]) -> list[Finding]:
    """Each distinct credential in ``text`` that one of ``detectors`` recognises."""
    text = text[:MAX_SCANNED]
    found: dict[str, Finding] = {}
    # JSON may escape "/" (PHP, some Java encoders): a key with a slash is found in the unescaped
    # view too, and the guard cuts both forms.
    for view in (text, text.replace("\\/", "/")) if "\\/" in text else (text,):
        _scan(view, detectors, found)
    return list(found.values())


def _scan(text: str, detectors: Sequence[str], found: dict[str, Finding]) -> None:
    low = text.lower()
    for name in detectors:
        for rule in _rules(name):
            if rule.triggers and not any(t in low for t in rule.triggers):
                continue
            count = tried = 0
            for match in _matches(rule, text, low):
                tried += 1
                if tried > MAX_CANDIDATES:  # matches its own check refuses (JWT-shaped junk)
                    break
                start = match.start()
                if rule.at_token_start and start and text[start - 1] in _TOKEN_CHARS:
                    continue
                value = _secret(match, text, rule)
                if len(value) < 4 or value in found:
                    continue
                if rule.valid is not None and not rule.valid(value):
                    continue
                found[value] = Finding("secrets", rule.kind, f"{rule.kind} ({len(value)} characters)", value)
                count += 1
                if count >= MAX_PER_RULE:
                    break
