"""Idle pooled upstream connections: does a gateway return 5xx after the upstream closed one?

The upstream is uvicorn with its default keep-alive timeout (5 s): an upstream connection idle for
5 s is closed by the upstream. A gateway that reuses it without care fails the next request. Each
request here goes on a fresh client connection (so the client→gateway hop, whose keep-alive
timeout is also uvicorn's 5 s, cannot race), after a gap since the previous response:

- gaps of 5.5 s (the pooled connection is closed by then);
- gaps just around the timeout (4.90 … 5.10 s), where the request and the close race.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from bench.load import Target

GAPS = (5.5, 4.9, 4.95, 5.0, 5.05, 5.1, 5.5, 4.97, 5.0, 5.03)
QUICK_GAPS = (5.5, 5.0, 5.05)


def _check(target: Target, body: bytes, gaps: tuple[float, ...]) -> dict[str, object]:
    statuses: list[int | str] = []
    limits = httpx.Limits(max_keepalive_connections=0)  # a new connection per request
    with httpx.Client(timeout=30, limits=limits) as client:

        def send() -> int | str:
            try:
                return client.post(target.url, content=body, headers=target.headers()).status_code
            except httpx.TransportError as exc:
                return type(exc).__name__

        for _ in range(4):  # several pooled upstream connections, all going idle together
            send()
        for gap in gaps:
            time.sleep(gap)
            statuses.append(send())
    return {
        "requests": len(statuses),
        "gaps_s": list(gaps),
        "statuses": statuses,
        "5xx": sum(1 for s in statuses if isinstance(s, int) and s >= 500),
        "other_errors": sum(1 for s in statuses if not isinstance(s, int) or 300 <= s < 500),
    }


def check(targets: list[Target], body: bytes, *, quick: bool = False) -> dict[str, dict[str, object]]:
    """All targets at once (each on its own thread and pooled connections): the run takes one
    series of gaps, not one per target."""
    gaps = QUICK_GAPS if quick else GAPS
    with ThreadPoolExecutor(len(targets)) as pool:
        futures = {t.name: pool.submit(_check, t, body, gaps) for t in targets}
        return {name: f.result() for name, f in futures.items()}
