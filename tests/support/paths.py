"""Where the tests find the checkout's files."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The repository checkout (``src/``, ``examples/``, ``docs/``, ``deploy/``)."""

EXAMPLE_AGENT = ROOT / "examples" / "agents" / "contas"
"""The example ``contas`` agent's files (tools.yaml, tool_policies.yaml, plugin.yaml)."""
