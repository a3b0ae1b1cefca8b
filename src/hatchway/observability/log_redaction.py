"""Secret values kept out of third-party log lines (the MCP SDK, the A2A SDK, httpx/httpcore).

At DEBUG the MCP SDK logs every JSON-RPC message it sends and receives — tool arguments and
results, where a secret may travel — and httpcore logs response headers. ``SecretLogFilter`` rewrites
each record of those libraries before any handler sees it: every secret value this process has
resolved (``SECRETS``: vault secrets, provider keys, OAuth access tokens), raw or encoded (JSON-escaped,
URL-encoded, base64: ``redaction.py``), becomes ``[REDACTED]``, and so do
credentials in the shapes these libraries print them (``Bearer …``, ``(b'authorization', b'…')``).

A filter on a logger does not see its children's records, so ``install_log_redaction()`` puts the
filter on every logger of those libraries that exists, plus the modules known to log payloads
before they are imported. It is idempotent; the MCP pool calls it again when it opens a connection,
after the SDK's client modules have been imported.
"""

from __future__ import annotations

import logging
import re

from hatchway.redaction import REDACTED, Redactor

LIBRARIES = ("mcp", "a2a", "httpx", "httpx2", "httpcore", "httpcore2")
_PAYLOAD_LOGGERS = (
    "mcp.client.streamable_http",  # "Sending client message: …", "SSE message: …"
    "mcp.client.sse",  # "Received server message: …", "Sending client message: …"
    "mcp.client.stdio",
    "mcp.client.session",
    "mcp.client.auth.oauth2",
    "mcp.shared.jsonrpc_dispatcher",
    "a2a.server.routes.jsonrpc_dispatcher",  # "Request body: {…}": a push config's token, credentials
    "httpx",
    "httpx2",
    "httpcore.http11",  # "receive_response_headers.complete return_value=(…, [headers])"
    "httpcore.http2",
    "httpcore2.http11",
    "httpcore2.http2",
)
_CREDENTIALS = (
    (re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=-]{8,}"), rf"\1\2{REDACTED}"),
    (
        re.compile(r"(?i)(\(b'(?:authorization|proxy-authorization|cookie|set-cookie|x-api-key)', b')[^']*'"),
        rf"\1{REDACTED}'",
    ),
    # A value under a "token" or "credentials" key (the A2A SDK logs request bodies, push configs
    # included: a client's own secrets, which the gateway has not resolved and cannot list).
    (
        re.compile(r"""(?i)(['"](?:token|credentials)['"]\s*:\s*(['"]))(?:\\.|(?!\2)[^\\])*\2"""),
        rf"\1{REDACTED}\2",
    ),
)


SECRETS = Redactor(limit=4096)
"""Every secret value this process resolved (vault secrets, provider keys, OAuth tokens), newest
kept: tokens rotate. Each value is matched in all its forms (``redaction.py``)."""


def redact_line(text: str) -> str:
    """A log line without credentials or known secret values (in any of their forms). The
    credentials' shapes first: a short secret value (a one-letter test key) redacted inside
    ``set-cookie`` first left the pattern nothing to match, and the cookie in clear."""
    for pattern, replacement in _CREDENTIALS:
        text = pattern.sub(replacement, text)
    return SECRETS.redact(text)


class SecretLogFilter(logging.Filter):
    """Rewrites a record's message (and traceback text) with ``SECRETS.redact``; drops nothing."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a record whose args do not fit its format: logging reports it itself
            return True
        clean = redact_line(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_line(record.exc_text)
        return True


_FILTER = SecretLogFilter()


def install_log_redaction() -> None:
    """Put ``SecretLogFilter`` on every logger of ``LIBRARIES`` (idempotent)."""
    names = set(_PAYLOAD_LOGGERS) | set(LIBRARIES)
    names.update(
        name
        for name in list(logging.root.manager.loggerDict)
        if any(name.startswith(f"{library}.") for library in LIBRARIES)
    )
    for name in names:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
