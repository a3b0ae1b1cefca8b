"""Signed outbound notifications of approvals: written to the delivery log, sent by any replica.

``announce`` writes one ``pending`` delivery per webhook that wants the event, its body already
built (``notification_payloads.py``: only what the policy's ``notify`` names of the arguments, never
the confirmation message, the validator's answer, items, results or a secret). ``dispatch_due``,
which ``run`` calls on every replica, claims due deliveries and POSTs them:

    X-Hatchway-Event: approval.requested
    X-Hatchway-Delivery: whd_…                (the same on every retry: deduplicate on it)
    X-Hatchway-Timestamp: 1767225600          (unix seconds of this attempt)
    X-Hatchway-Signature: v1=<hex HMAC-SHA256(key, f"{timestamp}.{body}")>

2xx is delivered; 5xx, 408, 429, timeouts and connection errors are retried with backoff
(``deliveries.RetrySchedule``, a ``Retry-After`` in seconds honoured); any other answer fails the
delivery at once. Redirects are not followed and nothing of an incoming request is ever forwarded.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import orjson

if TYPE_CHECKING:  # httpx loads when a webhook is sent (a gateway without webhooks never loads it)
    import httpx

from hatchway.config.agents import APPROVAL_EVENTS, ApprovalSettings, ApprovalWebhook
from hatchway.engine.tools.operations.deliveries import (
    ApprovalDeliveries,
    ApprovalDelivery,
    DeliveryDraft,
    DeliveryStatus,
    RetrySchedule,
    delivery_to_dict,
    dispatcher_id,
    new_delivery_id,
)
from hatchway.engine.tools.operations.models import OperationRecord
from hatchway.engine.tools.operations.notification_payloads import FORMATS, approval_payload, wants
from hatchway.environment import env_value
from hatchway.errors import ConfigError, SecretNotFound
from hatchway.store.columns import clean_json
from hatchway.store.db import Database
from hatchway.store.tables import utcnow
from hatchway.vault.store import Vault

logger = logging.getLogger(__name__)

SIGNATURE_VERSION = "v1"
SIGNATURE_TOLERANCE_SECONDS = 300
"""Receivers refuse a timestamp further than this from their clock (a replayed request)."""
BATCH = 20
"""Deliveries one dispatcher claims and sends at a time."""
CLAIM_MARGIN_SECONDS = 30.0
"""A claim outlives one attempt's timeout by this much (resolving the key, recording the outcome)."""
_RETRIED = frozenset({408, 429})


def sign(key: bytes, timestamp: int, body: bytes) -> str:
    """``X-Hatchway-Signature``: ``v1=`` + hex HMAC-SHA256 of ``f"{timestamp}.{body}"`` under ``key``."""
    digest = hmac.new(key, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"{SIGNATURE_VERSION}={digest}"


def verify_signature(
    secret: str | bytes,
    timestamp: str | int,
    body: bytes,
    signature_header: str,
    *,
    now: float | None = None,
    tolerance: float = SIGNATURE_TOLERANCE_SECONDS,
) -> bool:
    """Whether ``signature_header`` (``v1=<hex>``, several separated by spaces during a key change)
    signs ``body`` at ``timestamp`` under ``secret``, and ``timestamp`` is within ``tolerance``
    seconds of ``now`` (default: this machine's clock). Compared in constant time."""
    try:
        sent_at = int(timestamp)
    except (TypeError, ValueError):
        return False
    if abs((time.time() if now is None else now) - sent_at) > tolerance:
        return False
    key = secret.encode() if isinstance(secret, str) else secret
    expected = sign(key, sent_at, body).encode()
    matched = False
    for candidate in signature_header.split():
        matched |= hmac.compare_digest(candidate.encode(), expected)
    return matched


@dataclass(frozen=True, slots=True)
class AttemptOutcome:
    """How one POST went: delivered when ``error`` is None."""

    status_code: int | None = None
    error: str | None = None
    retry: bool = True
    retry_after: float | None = None


def classify_answer(status_code: int, retry_after: str | None) -> AttemptOutcome:
    """A receiver's status code as an outcome: 2xx delivered; 5xx, 408 and 429 retried (honouring a
    ``Retry-After`` in seconds); 3xx and any other 4xx not retried."""
    if 200 <= status_code < 300:
        return AttemptOutcome(status_code)
    if status_code >= 500 or status_code in _RETRIED or status_code < 200:
        return AttemptOutcome(status_code, f"HTTP {status_code}", retry_after=_seconds(retry_after))
    if 300 <= status_code < 400:
        why = "redirects are not followed: set the webhook's url to the final address"
    else:
        why = "the receiver refused the notification; not retried"
    return AttemptOutcome(status_code, f"HTTP {status_code}: {why}", retry=False)


def _seconds(value: str | None) -> float | None:
    return float(value) if value is not None and value.strip().isdigit() else None


class SigningKeyMissing(Exception):
    """The webhook's key cannot be read now (retried: an operator may store it meanwhile)."""


class ApprovalNotifier:
    """Writes approval notifications to the delivery log and sends the due ones (from any replica)."""

    def __init__(
        self,
        db: Database,
        settings: ApprovalSettings,
        *,
        vault: Vault,
        http: httpx.AsyncClient | None = None,
        clock: Callable[[], datetime] = utcnow,
        owner: str | None = None,
    ) -> None:
        """``http`` replaces the client this notifier would open (and close when ``run`` ends);
        ``owner`` names this dispatcher in the claims (default: host, pid and a nonce)."""
        _check_environment(settings)
        self.db = db
        self.settings = settings
        self.vault = vault
        self.clock = clock
        self.owner = owner or dispatcher_id()
        self.webhooks = {hook.name: hook for hook in settings.webhooks}
        schedule = RetrySchedule(
            settings.delivery_attempts,
            settings.delivery_backoff_seconds,
            settings.delivery_max_backoff_seconds,
        )
        self.store = ApprovalDeliveries(db, schedule, clock=clock)
        self._http = http
        self._own_http: httpx.AsyncClient | None = None

    # -- writing ---------------------------------------------------------------------------------

    async def announce(
        self, op: OperationRecord, event: str, *, org_name: str | None = None, collected: int = 0
    ) -> int:
        """Write a pending delivery of ``event`` about ``op`` for each webhook that wants it; how many.

        ``event``: ``approval.requested``, ``approval.escalated`` or ``approval.decided``;
        ``org_name``: the organisation's (a webhook's ``orgs`` may name it); ``collected``: the
        approvals that count so far (``approval_store.ApprovalRecords.approvers_of``)."""
        if event not in APPROVAL_EVENTS:
            raise ValueError(f"event: one of {', '.join(APPROVAL_EVENTS)} (got {event!r})")
        if not self.settings.webhooks:
            return 0
        approval = op.approval or {}
        hooks = [h for h in self.settings.webhooks if wants(h, event, op.org_id, org_name, approval)]
        if not hooks:
            return 0
        now = self.clock()
        drafts = []
        for hook in hooks:
            delivery_id = new_delivery_id()
            payload = approval_payload(op, event, delivery_id, org_name, self.settings, now, collected)
            body = clean_json(FORMATS[hook.format](payload))
            drafts.append(DeliveryDraft(delivery_id, op.org_id, op.id, hook.name, event, body))
        await self.store.insert(drafts)
        return len(drafts)

    # -- reading ---------------------------------------------------------------------------------

    async def deliveries(self, org_id: str, operation_id: str) -> list[dict[str, Any]]:
        """The operation's deliveries as the API shows them: status, attempts, codes and times."""
        return [delivery_to_dict(row) for row in await self.store.for_operation(org_id, operation_id)]

    # -- sending ---------------------------------------------------------------------------------

    async def run(self) -> None:
        """Send due deliveries every ``dispatch_interval_seconds`` until cancelled (a failed round is
        logged and the next one comes); a full batch is followed at once by the next."""
        try:
            while True:
                sent = 0
                try:
                    sent = await self.dispatch_due()
                except Exception:
                    logger.exception("approval notifications: a dispatch round failed")
                if sent < BATCH:
                    await asyncio.sleep(self.settings.dispatch_interval_seconds)
        finally:
            await self.aclose()

    async def dispatch_due(self) -> int:
        """Claim up to ``BATCH`` due deliveries, send them together and record each outcome; how many."""
        lease = self.settings.delivery_timeout_seconds + CLAIM_MARGIN_SECONDS
        rows = await self.store.claim_due(self.owner, limit=BATCH, lease_seconds=lease)
        if rows:
            await asyncio.gather(*(self._deliver(row) for row in rows))
        return len(rows)

    async def aclose(self) -> None:
        """Close the HTTP client this notifier opened (not one it was given)."""
        if self._own_http is not None:
            client, self._own_http = self._own_http, None
            await client.aclose()

    async def _deliver(self, row: ApprovalDelivery) -> None:
        hook = self.webhooks.get(row.webhook)
        try:
            if hook is None:
                outcome = AttemptOutcome(error=f"webhook {row.webhook!r} is not configured on this replica")
            else:
                outcome = await self._attempt(hook, row)
        except Exception as exc:  # a bug or the vault: recorded, so the attempts stay bounded
            logger.exception("approval notification %s: the attempt failed", row.id)
            outcome = AttemptOutcome(error=f"internal error ({type(exc).__name__})")
        await self._record(row, outcome)

    async def _attempt(self, hook: ApprovalWebhook, row: ApprovalDelivery) -> AttemptOutcome:
        try:
            key = await self._signing_key(hook, row.org_id)
        except SigningKeyMissing as exc:
            return AttemptOutcome(error=str(exc))
        body = orjson.dumps(row.payload)
        headers = _headers(row, body, key, int(self.clock().timestamp()))
        import httpx

        timeout = self.settings.delivery_timeout_seconds
        try:
            async with self._client().stream(
                "POST", hook.url, content=body, headers=headers, timeout=timeout, follow_redirects=False
            ) as response:
                return classify_answer(response.status_code, response.headers.get("retry-after"))
        except httpx.TimeoutException:
            return AttemptOutcome(error=f"timed out after {timeout:g} s")
        except httpx.HTTPError as exc:  # nothing of the exception's text: it may carry the URL
            return AttemptOutcome(error=f"could not reach the receiver ({type(exc).__name__})")

    async def _record(self, row: ApprovalDelivery, outcome: AttemptOutcome) -> None:
        where = f"webhook {row.webhook!r} ({_host(self.webhooks.get(row.webhook))})"
        if outcome.error is None:
            await self.store.record_success(row, self.owner, outcome.status_code or 200)
            logger.info("approval notification %s (%s) delivered to %s", row.id, row.event, where)
            return
        status = await self.store.record_failure(
            row,
            self.owner,
            error=outcome.error,
            status_code=outcome.status_code,
            retry=outcome.retry,
            retry_after=outcome.retry_after,
        )
        log = logger.warning if status is DeliveryStatus.FAILED else logger.info
        log(
            "approval notification %s (%s) to %s: %s; now %s", row.id, row.event, where, outcome.error, status
        )

    async def _signing_key(self, hook: ApprovalWebhook, org_id: str) -> bytes | None:
        """The webhook's key: ``env:NAME``, or ``secret.<name>`` from the organisation's vault (else
        the ``system`` organisation's, where hatchway.yaml's secrets live)."""
        ref = hook.secret
        if ref is None:
            return None
        if ref.startswith("env:"):
            value = env_value(ref[4:])
            if not value:
                raise SigningKeyMissing(f"environment variable {ref[4:]} is not set")
            return value.encode()
        name = ref.removeprefix("secret.")
        try:
            return (await self.vault.get(org_id, name)).value.encode()
        except SecretNotFound:
            pass
        try:
            return (await self.vault.system_secret(ref)).encode()
        except SecretNotFound:
            raise SigningKeyMissing(
                f"secret {name!r} is in neither the organisation's vault nor the system organisation's"
            ) from None

    def _client(self) -> httpx.AsyncClient:
        if self._http is not None:
            return self._http
        if self._own_http is None:
            import httpx

            self._own_http = httpx.AsyncClient(follow_redirects=False, trust_env=False)
        return self._own_http


def _headers(row: ApprovalDelivery, body: bytes, key: bytes | None, timestamp: int) -> dict[str, str]:
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Hatchway-Webhooks/1",
        "X-Hatchway-Event": row.event,
        "X-Hatchway-Delivery": row.id,
        "X-Hatchway-Timestamp": str(timestamp),
    }
    if key is not None:
        headers["X-Hatchway-Signature"] = sign(key, timestamp, body)
    return headers


def _host(hook: ApprovalWebhook | None) -> str:
    """Where a webhook goes, for a log line: scheme and host only (a Slack or Teams URL's path and
    query are its credential)."""
    if hook is None:
        return "not configured"
    parts = urlsplit(hook.url)
    return f"{parts.scheme}://{parts.hostname}"


def _check_environment(settings: ApprovalSettings) -> None:
    """ConfigError naming each webhook whose ``env:`` key is not set: caught at start, not at 3 a.m."""
    problems = [
        (f"operations.approvals.webhooks[{i}].secret", f"environment variable {hook.secret[4:]} is not set")
        for i, hook in enumerate(settings.webhooks)
        if hook.secret is not None and hook.secret.startswith("env:") and not env_value(hook.secret[4:])
    ]
    if problems:
        raise ConfigError("hatchway.yaml", problems)
