"""The MCP client pool the plugin-client tests share."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from hatchway.engine.tools.mcp.pool import McpServerPool


@pytest.fixture
async def pool() -> AsyncIterator[McpServerPool]:
    """A pool for one test (``@pytest.mark.anyio``), closed at teardown."""
    pool = McpServerPool()
    yield pool
    await pool.aclose()  # before the servers stop: their open event streams end with it
