"""OpenTelemetry: the gateway's tracer, exported over OTLP when configured and off otherwise.

A tracer provider may be injected (tests pass one with an ``InMemorySpanExporter``); else one is
built when ``otel.endpoint`` is set in hatchway.yaml or ``OTEL_EXPORTER_OTLP_ENDPOINT`` /
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is in the environment. Without either, ``Tracing.tracer``
is None and nothing on the request path creates spans at all — and the SDK is not even imported
(the request path needs only the API; the SDK is imported when a provider is built).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from opentelemetry.trace import Tracer

from hatchway import __version__
from hatchway.config.settings import Settings

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

logger = logging.getLogger(__name__)

TRACER_NAME = "hatchway"


class Tracing:
    """Owns the tracer provider it built (and shuts it down); an injected one stays the caller's."""

    def __init__(self, provider: TracerProvider | None, *, owned: bool = False) -> None:
        self.provider = provider
        self.owned = owned
        self.tracer: Tracer | None = provider.get_tracer(TRACER_NAME, __version__) if provider else None

    @property
    def enabled(self) -> bool:
        return self.tracer is not None

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        provider: TracerProvider | None = None,
        environ: Mapping[str, str] = os.environ,
    ) -> Tracing:
        """The injected provider, else an OTLP exporter when configured, else tracing off."""
        if provider is not None:
            return cls(provider)
        endpoint = otlp_endpoint(settings, environ)
        if endpoint is None:
            return cls(None)
        return cls(build_otlp_provider(settings, endpoint), owned=True)

    def shutdown(self) -> None:
        """Flush and stop an owned provider (the batch processor sends what is queued)."""
        if self.owned and self.provider is not None:
            self.provider.shutdown()


def otlp_endpoint(settings: Settings, environ: Mapping[str, str]) -> str | None:
    """The OTLP/HTTP traces URL: hatchway.yaml first, then the standard environment variables."""
    if settings.otel.endpoint:
        return _traces_url(settings.otel.endpoint)
    if url := environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return url  # the standard says this one is used as given
    if url := environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return _traces_url(url)
    return None


def _traces_url(base: str) -> str:
    base = base.rstrip("/")
    return base if base.endswith("/v1/traces") else f"{base}/v1/traces"


def build_otlp_provider(settings: Settings, endpoint: str) -> TracerProvider:
    """An SDK provider exporting in batches over OTLP/HTTP (protobuf)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    service = settings.otel.service_name or os.environ.get("OTEL_SERVICE_NAME") or "hatchway"
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    exporter = OTLPSpanExporter(endpoint=endpoint, headers=dict(settings.otel.headers) or None)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    logger.info("OpenTelemetry: exporting spans to %s as service %s", endpoint, service)
    return provider
