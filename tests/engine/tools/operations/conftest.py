"""The example agent's tools and policies, for the operations tests."""

from __future__ import annotations

import pytest

from hatchway.config.agent_files import AgentTools, agent_files_in, load_agent_tools
from tests.support.paths import EXAMPLE_AGENT


@pytest.fixture
def agent_tools() -> AgentTools:
    return load_agent_tools(agent_files_in(EXAMPLE_AGENT))
