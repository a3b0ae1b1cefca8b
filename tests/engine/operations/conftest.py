"""Shared pieces for operations tests: a migrated database, the example agent's service."""

from __future__ import annotations

import pytest

from hatchway.config.agent_files import AgentTools, agent_files_in, load_agent_tools
from hatchway.engine.context import Principal, RunContext
from tests.support.paths import EXAMPLE_AGENT


@pytest.fixture
def agent_tools() -> AgentTools:
    return load_agent_tools(agent_files_in(EXAMPLE_AGENT))


def make_ctx(
    org_id: str = "org_a", session: str | None = "sess-1", user: str | None = "user-7"
) -> RunContext:
    return RunContext(principal=Principal(org_id, org_id), session_key=session, on_behalf_of=user)
