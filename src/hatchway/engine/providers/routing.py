"""Public model names → (provider, upstream model)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial

from hatchway.config.settings import Settings
from hatchway.engine.pricing import PriceTable
from hatchway.engine.providers.anthropic import AnthropicProvider
from hatchway.engine.providers.base import ModelProvider
from hatchway.engine.providers.failover import Breaker, FailoverProvider, Target
from hatchway.engine.providers.gemini import GeminiProvider
from hatchway.engine.providers.openai_compat import OpenAICompatProvider
from hatchway.engine.providers.pooled import PooledProvider
from hatchway.engine.providers.priced import PricedProvider
from hatchway.environment import env_value
from hatchway.errors import ConfigError, ModelNotFound
from hatchway.redaction import Redactor


@dataclass(frozen=True, slots=True)
class ResolvedModel:
    public_name: str
    provider: ModelProvider
    upstream_model: str


PROVIDER_TYPES: dict[str, type[PooledProvider]] = {
    "openai": OpenAICompatProvider,
    "anthropic": AnthropicProvider,
    "gemini": GeminiProvider,
}
"""``providers[].type`` → its client."""

SecretLookup = Callable[[str], Awaitable[str]]
"""``secret.<name>`` → its value (the vault's ``system`` organisation); raises when it is missing."""


def resolve_api_key(value: str | None) -> str | None:
    """A provider key from a literal or ``env:NAME``; ``secret.<name>`` is resolved later, on first use."""
    if not value or value.startswith("secret."):
        return None
    if value.startswith("env:"):
        return env_value(value[4:])  # or the file NAME_FILE names (a Docker or Kubernetes secret)
    return value


class ModelRouter:
    """Builds one provider client per configured provider, each pricing its calls (``PriceTable``),
    and resolves model names to them."""

    def __init__(self, settings: Settings, secret_lookup: SecretLookup | None = None) -> None:
        self.settings = settings
        self.prices = PriceTable(settings)
        self.providers: dict[str, ModelProvider] = {}
        self.secrets = Redactor()
        """Every provider's API key once known (literal and ``env:`` at start, ``secret.`` on first
        use): scrubbed from upstream errors and, as every run's ``known_secrets``, from runs."""
        for i, cfg in enumerate(settings.providers):
            if cfg.api_key and cfg.api_key.startswith("env:") and env_value(cfg.api_key[4:]) is None:
                raise ConfigError(
                    "hatchway.yaml",
                    [
                        (
                            f"providers[{i}].api_key",
                            f"environment variable {cfg.api_key[4:]} (or {cfg.api_key[4:]}_FILE) is not set",
                        )
                    ],
                )
            key_source = None
            if cfg.api_key and cfg.api_key.startswith("secret."):
                if secret_lookup is None:
                    raise ConfigError(
                        "hatchway.yaml", [(f"providers[{i}].api_key", "secret.<name> needs the vault")]
                    )
                key_source = partial(secret_lookup, cfg.api_key)
            client = PROVIDER_TYPES[cfg.type](
                cfg.id,
                cfg.base_url,
                api_key=resolve_api_key(cfg.api_key),
                api_key_source=key_source,
                timeout=cfg.timeout_seconds,
                connect_timeout=cfg.connect_timeout_seconds,
                max_connections=cfg.max_connections,
                headers=cfg.headers,
                secrets=self.secrets,
            )
            self.providers[cfg.id] = PricedProvider(client, self.prices.for_provider(cfg.id))
        self._models: dict[str, ResolvedModel] = {}
        self._breakers: dict[tuple[str, str], Breaker] = {}
        for model in settings.models:
            targets = self._targets(model.name)
            if len(targets) == 1 and not model.fallbacks:  # the common case: no wrapper on the hot path
                resolved = ResolvedModel(model.name, targets[0].provider, targets[0].upstream_model)
            else:
                fallbacks = [self._targets(name) for name in model.fallbacks]
                routed = FailoverProvider(model.name, targets, fallbacks, settings.failover)
                resolved = ResolvedModel(model.name, routed, targets[0].upstream_model)
            self._models[model.name] = resolved

    def _targets(self, name: str) -> list[Target]:
        model = next(m for m in self.settings.models if m.name == name)
        out = []
        for deployment in model.deployments():
            upstream = deployment.upstream_model or model.name
            breaker = self._breakers.setdefault(
                (deployment.provider, upstream),
                Breaker(self.settings.failover.breaker_failures, self.settings.failover.breaker_open_seconds),
            )
            out.append(Target(self.providers[deployment.provider], upstream, deployment.weight, breaker))
        return out

    def resolve(self, name: str) -> ResolvedModel:
        """The provider and upstream name for a public model name or ``<provider>/<model>``."""
        resolved = self._models.get(name)
        if resolved is not None:
            return resolved
        provider_id, sep, target = name.partition("/")
        if sep and target and provider_id in self.providers:
            return ResolvedModel(name, self.providers[provider_id], target)
        raise ModelNotFound(name)

    def public_models(self) -> list[str]:
        return list(self._models)

    async def aclose(self) -> None:
        for provider in self.providers.values():
            await provider.aclose()
