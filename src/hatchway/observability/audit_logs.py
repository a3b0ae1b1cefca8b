"""The audit trail on the OpenTelemetry logs pipeline: each entry the ``hatchway.audit`` logger writes
(``audit/trail.py``) becomes an OTel log record, exported over OTLP/HTTP to ``<otel.endpoint>/v1/logs``
when an endpoint is configured (hatchway.yaml's ``otel.endpoint`` or ``OTEL_EXPORTER_OTLP_ENDPOINT`` /
``OTEL_EXPORTER_OTLP_LOGS_ENDPOINT``), in batches, with the same service name as the spans. A
``LoggerProvider`` may be injected instead (tests pass one with an in-memory exporter). Off (and the
logs SDK not imported) otherwise; the entries still reach the process's own log handlers.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from hatchway.config.settings import Settings

if TYPE_CHECKING:
    from opentelemetry.sdk._logs import LoggerProvider

AUDIT_LOGGER = "hatchway.audit"
logger = logging.getLogger(__name__)


class AuditLogExport:
    """Attaches an OTel ``LoggingHandler`` to the audit logger for as long as the gateway runs."""

    def __init__(self, provider: LoggerProvider | None, *, owned: bool = False) -> None:
        self.provider = provider
        self.owned = owned
        self.handler: logging.Handler | None = None
        if provider is not None:
            from opentelemetry.instrumentation.logging.handler import LoggingHandler

            self.handler = LoggingHandler(level=logging.INFO, logger_provider=provider)
            audit = logging.getLogger(AUDIT_LOGGER)
            audit.addHandler(self.handler)
            if audit.getEffectiveLevel() > logging.INFO:
                audit.setLevel(logging.INFO)  # the entries are INFO; a quieter root must not drop them

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        provider: LoggerProvider | None = None,
        environ: Mapping[str, str] = os.environ,
    ) -> AuditLogExport:
        """The injected provider, else an OTLP exporter when configured and wanted, else off."""
        if provider is not None:
            return cls(provider)
        endpoint = _logs_url(settings, environ)
        if endpoint is None or not settings.audit.otel_logs:
            return cls(None)
        return cls(_otlp_provider(settings, endpoint), owned=True)

    def shutdown(self) -> None:
        """Detach the handler; flush and stop an owned provider."""
        if self.handler is not None:
            logging.getLogger(AUDIT_LOGGER).removeHandler(self.handler)
            self.handler = None
        if self.owned and self.provider is not None:
            self.provider.shutdown()


def _logs_url(settings: Settings, environ: Mapping[str, str]) -> str | None:
    if url := (settings.otel.endpoint or None):
        return url.rstrip("/") + "/v1/logs"
    if url := environ.get("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"):
        return url
    if url := environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return url.rstrip("/") + "/v1/logs"
    return None


def _otlp_provider(settings: Settings, endpoint: str) -> LoggerProvider:
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    from opentelemetry.sdk.resources import Resource

    service = settings.otel.service_name or os.environ.get("OTEL_SERVICE_NAME") or "hatchway"
    provider = LoggerProvider(resource=Resource.create({"service.name": service}))
    exporter = OTLPLogExporter(endpoint=endpoint, headers=dict(settings.otel.headers) or None)
    provider.add_log_record_processor(BatchLogRecordProcessor(exporter))
    logger.info("OpenTelemetry: exporting the audit trail to %s", endpoint)
    return provider
