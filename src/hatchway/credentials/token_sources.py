"""Where the assertion of a JWT bearer grant, or the subject token of an identity assertion grant,
is read: ``secret.<name>`` (the organisation's vault), ``env:<NAME>`` or ``file:<absolute path>``.

A workload's identity token is short-lived and rotated under the same name by whatever issues it
(a Kubernetes projected service account token is rewritten in place), so it is read again at every
exchange, never kept. ``env:`` and ``file:`` read the gateway's own environment: a plugin sent in a
request could name ``file:/etc/…`` and have it posted to a token endpoint of its choosing, so only
plugins from hatchway.yaml may use them. The syntax is ``config/token_endpoints.token_source_problem``.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from hatchway.errors import McpAuthError, PermissionDenied

MAX_TOKEN_BYTES = 64 * 1024


def local_source(ref: str) -> bool:
    """Whether ``ref`` reads the gateway's own environment (``env:`` / ``file:``), not the vault."""
    return ref.startswith(("env:", "file:"))


def refuse_untrusted(ref: str, where: str) -> None:
    """PermissionDenied for an ``env:`` / ``file:`` source in a plugin sent with a request."""
    if local_source(ref):
        raise PermissionDenied(
            f"{where}: an {ref.split(':', 1)[0]} source reads the gateway's environment, which only "
            "plugins declared in hatchway.yaml may do; a plugin sent in the request uses secret.<name>",
            code="token_source_not_allowed",
        )


async def read_local(ref: str, where: str) -> str:
    """The token an ``env:`` or ``file:`` source holds now; McpAuthError (never the value) if none."""
    kind, _, name = ref.partition(":")
    if kind == "env":
        value = os.environ.get(name, "").strip()
        if not value:
            raise McpAuthError(
                f"{where}: the environment variable {name} is not set or empty",
                code="oauth_assertion_unreadable",
            )
        return value
    try:
        data = await asyncio.to_thread(_read_capped, Path(name))
    except OSError as exc:
        raise McpAuthError(
            f"{where}: cannot read {name} ({exc.strerror or type(exc).__name__})",
            code="oauth_assertion_unreadable",
        ) from None
    value = data.decode("utf-8", errors="replace").strip()
    if not value or len(data) > MAX_TOKEN_BYTES:
        problem = "is empty" if not value else f"is over {MAX_TOKEN_BYTES // 1024} KiB"
        raise McpAuthError(f"{where}: {name} {problem}", code="oauth_assertion_unreadable")
    return value


def _read_capped(path: Path) -> bytes:
    with path.open("rb") as handle:
        return handle.read(MAX_TOKEN_BYTES + 1)
