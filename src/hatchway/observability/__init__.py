"""Run logs with steps, redaction, OpenTelemetry spans, Prometheus metrics."""
