"""The secret detector: credentials in a tool result — cloud, VCS, chat and payment tokens, private
keys, JWTs, passwords in URLs — found with detect-secrets' patterns, which its maintainers keep up to
date with the providers' formats. Its scanner is not used: it works line by line through every plugin
and its filters (40–90 ms on 20,000 characters), and flags every long identifier by entropy; the
patterns alone cost a couple of milliseconds. Only the plugins whose patterns are linear on any text
are offered (``SecretDetector`` in config/settings.py says which are not, and why)."""

from __future__ import annotations

import importlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

from hatchway.engine.guards.findings import MAX_SCANNED, Finding

_PLUGINS: dict[str, tuple[str, tuple[str, ...]]] = {
    "AWSKeyDetector": ("aws", ("a3t", "abia", "acca", "akia", "asia", "aws")),
    "AzureStorageKeyDetector": ("azure_storage_key", ("accountkey=",)),
    "BasicAuthDetector": ("basic_auth", ("://",)),
    "DiscordBotTokenDetector": ("discord", ()),
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
    "JwtTokenDetector": ("jwt", ("eyj",)),
    "MailchimpDetector": ("mailchimp", ("-us",)),
    "PrivateKeyDetector": ("private_key", ("private key", "putty-user-key")),
    "PypiTokenDetector": ("pypi_token", ("pypi-",)),
    "SendGridDetector": ("sendgrid", ("sg.",)),
    "SlackDetector": ("slack", ("xox", "hooks.slack.com")),
    "SquareOAuthDetector": ("square_oauth", ("sq0csp-",)),
    "StripeDetector": ("stripe", ("k_live_",)),
    "TelegramBotTokenDetector": ("telegram_token", ()),
    "TwilioKeyDetector": ("twilio", ()),
}
"""Each offered plugin's module in ``detect_secrets.plugins``, and the literals (lower case) of which
each of its patterns needs one: a plugin none of whose literals the result holds is not run (a
substring search in C instead of its regular expressions; empty: always run). The test that runs
every plugin on its own sample keeps these true to the patterns."""
_PEM_END = re.compile(r"-----END [A-Z0-9 ]*-----|---- END SSH2 ENCRYPTED PRIVATE KEY ----")
_JWT = re.compile(r"[A-Za-z0-9_=-]+\.[A-Za-z0-9_=-]+(\.[A-Za-z0-9_+/=-]*)?")
_MIN_GROUP = 6
"""A pattern's last group is the secret when it is at least this long (AWS's secret key, Basic
auth's password); a shorter one is a prefix (GitHub's ``ghp``) and the whole match is cut."""


@dataclass(frozen=True, slots=True)
class _Plugin:
    kind: str
    """detect-secrets' name for what it finds, snake-cased: ``aws_access_key``, ``github_token``…"""
    patterns: tuple[re.Pattern[str], ...]
    valid: object | None
    """The plugin's own check of a match's form (JWT: it decodes), where it has one."""
    triggers: tuple[str, ...]
    name: str


@cache
def _plugin(name: str) -> _Plugin:
    module_name, triggers = _PLUGINS[name]
    plugin = getattr(importlib.import_module(f"detect_secrets.plugins.{module_name}"), name)()
    kind = re.sub(r"[^a-z0-9]+", "_", plugin.secret_type.lower()).strip("_")
    check = getattr(plugin, "is_formally_valid", None)
    return _Plugin(kind, tuple(plugin.denylist), check, triggers, name)


def _secret(match: re.Match[str], text: str, plugin: _Plugin) -> str:
    if plugin.name == "PrivateKeyDetector":  # the header matched: the key runs to its END line
        end = _PEM_END.search(text, match.end(), match.end() + 20_000)
        start = text.rfind("-----", 0, match.start())
        start = start if start >= 0 and match.start() - start < 16 else match.start()
        return text[start : end.end() if end else len(text)]
    if plugin.name == "JwtTokenDetector":  # the pattern stops lazily before the signature
        return _JWT.match(text, match.start()).group(0)  # type: ignore[union-attr]
    groups = [g for g in match.groups() if g]
    if groups and len(groups[-1]) >= _MIN_GROUP:
        return groups[-1]
    return match.group(0).strip(" \t\r\n\"'=:")


def scan(text: str, detectors: Sequence[str]) -> list[Finding]:
    """Each distinct credential in ``text`` that one of ``detectors`` (plugin names) recognises."""
    text = text[:MAX_SCANNED]
    low = text.lower()
    found: dict[str, Finding] = {}
    for name in detectors:
        plugin = _plugin(name)
        if plugin.triggers and not any(t in low for t in plugin.triggers):
            continue
        for pattern in plugin.patterns:
            for match in pattern.finditer(text):
                value = _secret(match, text, plugin)
                if len(value) < 4 or value in found:
                    continue
                if callable(plugin.valid) and not plugin.valid(value):
                    continue
                excerpt = f"{plugin.kind} ({len(value)} characters)"
                found[value] = Finding("secrets", plugin.kind, excerpt, value)
                if len(found) >= 100:
                    return list(found.values())
    return list(found.values())
