"""The audit trail reaches the OpenTelemetry logs pipeline: an admin action over HTTP becomes an OTel
log record (an injected ``LoggerProvider`` with an in-memory exporter stands for the OTLP one) with the
entry's organisation, action, actor and outcome as attributes, and never a secret's value."""

from __future__ import annotations

from typing import Any

import httpx
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

from tests.support.gateway import RunningGateway
from tests.support.servers import wait_until


def test_an_admin_action_is_an_otel_log_record(gateway_factory: Any) -> None:
    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    gateway: RunningGateway = gateway_factory(gateway_options={"logger_provider": provider})
    assert gateway.org is not None
    headers = {"authorization": f"Bearer {gateway.key}"}
    made = httpx.post(
        f"{gateway.url}/v1/admin/orgs/{gateway.org.org_name}/keys", json={"name": "otel"}, headers=headers
    )
    assert made.status_code == 201, made.text
    put = httpx.put(f"{gateway.url}/v1/secrets/otel", json={"value": "otel-secret-9f3e1"}, headers=headers)
    assert put.status_code == 201

    def records() -> list[Any]:
        return [r.log_record for r in exporter.get_finished_logs()]

    wait_until(lambda: len(records()) >= 2, timeout=30, message="two audit log records")
    by_action = {r.attributes["audit.action"]: r for r in records()}
    created = by_action["key.create"]
    assert created.attributes["audit.org_id"] == gateway.org.org_id
    assert created.attributes["audit.outcome"] == "success"
    assert str(created.attributes["audit.actor"]).startswith("key:")
    assert by_action["secret.put"].attributes["audit.target"] == "secret:otel"
    assert all("otel-secret-9f3e1" not in str(r.body) for r in records())
