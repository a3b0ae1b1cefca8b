"""`make bench`: every benchmark, one after the other, printing its figures."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import mcp_rounds, observability_overhead, passthrough, replicas


def main() -> None:
    passthrough.print_table(passthrough.measure(requests=2000, latency_ms=20.0))
    print()
    mcp_rounds.print_table(mcp_rounds.measure(requests=300, model_latency_ms=20.0, tool_latency_ms=20.0))
    print()
    observability_overhead.main()
    print()
    replicas.run_if_configured(requests=4000, concurrency=64, latency_ms=20.0)


if __name__ == "__main__":
    main()
