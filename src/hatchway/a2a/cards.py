"""An agent's Agent Card: who it is, where its two bindings answer, what it can do, and that a
Hatchway key is the way in."""

from __future__ import annotations

from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
)
from a2a.utils.constants import PROTOCOL_VERSION_CURRENT, TransportProtocol

from hatchway import __version__
from hatchway.config.settings import AgentConfig

PREFIX = "/a2a/"
REST = "/rest"
"""Where an agent's HTTP+JSON binding answers, under its JSON-RPC URL."""
SCHEME = "hatchway_key"
MEDIA_TYPES = ["text/plain", "application/json"]


def jsonrpc_path(agent: str) -> str:
    return f"{PREFIX}{agent}"


def rest_path(agent: str) -> str:
    return f"{PREFIX}{agent}{REST}"


def card_path(agent: str) -> str:
    return f"{PREFIX}{agent}/.well-known/agent-card.json"


def agent_card(agent: AgentConfig, base_url: str) -> AgentCard:
    base = base_url.rstrip("/")
    # Never the instructions: the card is public, and a system prompt is not for strangers to read.
    description = agent.a2a.description or f"The Hatchway agent {agent.name}."
    card = AgentCard(
        name=agent.name,
        description=description,
        version=__version__,
        provider=AgentProvider(organization="Hatchway", url=base),
        supported_interfaces=[
            AgentInterface(
                url=f"{base}{jsonrpc_path(agent.name)}",
                protocol_binding=TransportProtocol.JSONRPC.value,
                protocol_version=PROTOCOL_VERSION_CURRENT,
            ),
            AgentInterface(
                url=f"{base}{rest_path(agent.name)}",
                protocol_binding=TransportProtocol.HTTP_JSON.value,
                protocol_version=PROTOCOL_VERSION_CURRENT,
            ),
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=True, extended_agent_card=False),
        default_input_modes=MEDIA_TYPES,
        default_output_modes=["text/plain"],
        skills=_skills(agent, description),
    )
    card.security_schemes[SCHEME].CopyFrom(
        SecurityScheme(
            http_auth_security_scheme=HTTPAuthSecurityScheme(
                scheme="bearer",
                bearer_format="Hatchway API key",
                description="A Hatchway API key of the organisation (`hatchway keys create`).",
            )
        )
    )
    requirement = SecurityRequirement()
    requirement.schemes[SCHEME].SetInParent()
    card.security_requirements.append(requirement)
    return card


def _skills(agent: AgentConfig, description: str) -> list[AgentSkill]:
    if agent.a2a.skills:
        return [
            AgentSkill(
                id=s.id, name=s.name, description=s.description or s.name, tags=s.tags, examples=s.examples
            )
            for s in agent.a2a.skills
        ]
    return [AgentSkill(id=agent.name, name=agent.name, description=description, tags=["hatchway"])]
