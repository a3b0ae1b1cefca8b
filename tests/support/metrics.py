"""Reading a gateway's ``GET /metrics`` as samples."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.support.gateway import RunningGateway


def scrape(
    gateway: RunningGateway, client: httpx.Client | None = None
) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of ``/metrics`` as {(name, labels): value}; no key is needed. A test that scrapes
    often passes its ``client`` (a new one costs ~0.1 s of TLS set-up)."""
    response = (client or httpx).get(f"{gateway.url}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    """The sample ``name`` with exactly ``labels`` (0 when the series has none yet)."""
    return samples.get((name, frozenset(labels.items())), 0.0)
