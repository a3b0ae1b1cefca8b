"""What a model call costs: genai-prices' table, overridden per model in hatchway.yaml.

A call is priced, first match wins, by:

1. the ``price`` of a ``models[]`` entry for the same provider and upstream model the request
   named (USD per million tokens: a self-hosted model, a negotiated rate);
2. genai-prices (the pinned package's bundled snapshot, never fetched at run time), for the model
   the upstream says answered (``model`` of its reply), else the one the request named. Its
   provider is ``providers[].price_provider`` when set, else the one whose API URL the provider's
   ``base_url`` is (``https://api.openai.com/v1``: openai), else the vendor the model's name
   belongs to (``gpt-…``: openai, ``claude-…``: anthropic).

Anything else costs None: unknown, never a guess (docs/limits.md, "Spend").

Which vendor a URL or a model name is comes first from ``price_vendors.json``: each genai-prices
provider's ``api_pattern`` and ``model_match``, taken from the pinned package's table. The table itself
(~6 MiB resident) loads only once a call has a vendor, so a gateway in front of self-hosted or proxied
models it cannot price never holds it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hatchway.config.settings import ModelPrice, ProviderConfig, Settings
from hatchway.engine.items import Usage
from hatchway.errors import ConfigError

if TYPE_CHECKING:
    from genai_prices.types import ModelInfo, Provider

logger = logging.getLogger(__name__)

NO_TABLE = "none"
"""``price_provider: none``: the upstream's models are priced by ``models[].price`` only."""
OVERRIDE = "hatchway.yaml"
GENAI_PRICES = "genai-prices"
_MAX_MATCHES = 1024
"""Model names remembered per provider (with ``<provider>/<model>`` a client chooses the name)."""
_MTOK = 1_000_000
VENDORS_FILE = Path(__file__).with_name("price_vendors.json")
"""``vendor_index()`` of the pinned genai-prices, written by ``python -m hatchway.engine.pricing``
(tests/engine/test_pricing.py fails when it no longer matches the installed package)."""


@dataclass(frozen=True, slots=True)
class Price:
    """One call's cost, and the price-table entry that gave it."""

    usd: float
    priced_as: str
    """``genai-prices:<provider>/<model>`` or ``hatchway.yaml:models[<i>]``."""


def call_cost(_model: str, usage: Usage) -> float | None:
    """A model call's cost as its provider priced it (``Usage.cost``): for ``LoopSettings.price``."""
    return usage.cost


class PriceTable:
    """The prices of every configured provider's models."""

    def __init__(self, settings: Settings) -> None:
        """Raises ConfigError for a ``price_provider`` genai-prices does not know."""
        overrides: dict[str, dict[str, tuple[int, ModelPrice]]] = {}
        for i, model in enumerate(settings.models):
            for target in model.deployments() if model.price is not None else ():
                upstream = target.upstream_model or model.name
                overrides.setdefault(target.provider, {}).setdefault(upstream, (i, model.price))
        self.providers = {
            cfg.id: ProviderPrices(cfg, overrides.get(cfg.id, {})) for cfg in settings.providers
        }
        problems = [
            (f"providers[{i}].price_provider", f"genai-prices knows no provider {cfg.price_provider!r}")
            for i, cfg in enumerate(settings.providers)
            if cfg.price_provider not in (None, NO_TABLE) and _provider_by_id(cfg.price_provider) is None
        ]
        if problems:
            raise ConfigError("hatchway.yaml", problems)

    def for_provider(self, provider_id: str) -> ProviderPrices:
        return self.providers[provider_id]


class ProviderPrices:
    """The prices of one provider's models: its ``models[].price`` entries, then genai-prices."""

    def __init__(self, cfg: ProviderConfig, overrides: dict[str, tuple[int, ModelPrice]]) -> None:
        self.provider_id = cfg.id
        self.base_url = cfg.base_url
        self.price_provider = cfg.price_provider
        self.overrides = overrides
        self._vendor_id: str | None = None
        self._vendor_known = False
        self._matches: dict[str, tuple[Provider, ModelInfo] | None] = {}

    def price(self, requested: str, reported: str, usage: Usage) -> Price | None:
        """The cost of one call that asked for ``requested`` and was answered by ``reported`` (the
        reply's ``model``, or empty), or None when no entry prices it."""
        override = self.overrides.get(requested)
        if override is not None:
            index, price = override
            return Price(_priced(price, usage), f"{OVERRIDE}:models[{index}]")
        if self.price_provider == NO_TABLE:
            return None
        for ref in dict.fromkeys(r for r in (reported, requested) if r):
            match = self._match(ref)
            if match is not None:
                return _from_table(*match, usage)
        return None

    def _match(self, ref: str) -> tuple[Provider, ModelInfo] | None:
        ref = ref.lower()
        if ref in self._matches:
            return self._matches[ref]
        match = self._find(ref)
        if len(self._matches) < _MAX_MATCHES:
            self._matches[ref] = match
        return match

    def _find(self, ref: str) -> tuple[Provider, ModelInfo] | None:
        vendor_id = self._fixed_vendor()
        if vendor_id is None:  # a self-hosted or proxied upstream: the model's own vendor, if its name says
            vendor_id = next((v for v, (_, match) in _vendors().items() if _matches(match, ref)), None)
        if vendor_id is None:
            return None
        vendor = _provider_by_id(vendor_id)  # the table loads here
        if vendor is None:  # VENDORS_FILE names a provider the installed table lacks (the test says so)
            return None
        model = vendor.find_model(ref, all_providers=_table())
        return (vendor, model) if model is not None else None

    def _fixed_vendor(self) -> str | None:
        """The genai-prices provider this upstream is, by configuration or by its URL (None: neither)."""
        if not self._vendor_known:
            if self.price_provider is not None:  # a named vendor is priced by the table: load it
                vendor = _provider_by_id(self.price_provider)
                self._vendor_id = vendor.id if vendor is not None else None
            else:
                vendors = _vendors().items()
                self._vendor_id = next((v for v, (url, _) in vendors if re.match(url, self.base_url)), None)
            self._vendor_known = True
        return self._vendor_id


def _priced(price: ModelPrice, usage: Usage) -> float:
    cached = min(usage.cached_tokens, usage.prompt_tokens) if price.cached_input_per_mtok is not None else 0
    usd = (
        (usage.prompt_tokens - cached) * price.input_per_mtok
        + cached * (price.cached_input_per_mtok or 0.0)
        + usage.completion_tokens * price.output_per_mtok
    ) / _MTOK
    return round(usd, 10)


def _from_table(provider: Provider, model: ModelInfo, usage: Usage) -> Price | None:
    from genai_prices import Usage as TableUsage

    counted = TableUsage(
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.completion_tokens,
        cache_read_tokens=usage.cached_tokens,
        cache_write_tokens=usage.cache_write_tokens,
    )
    try:
        calculation = model.calc_price(counted, provider)
    except Exception as exc:  # usage the table cannot price (more cached than prompt tokens): unknown
        logger.warning("genai-prices could not price %s/%s: %s", provider.id, model.id, type(exc).__name__)
        return None
    return Price(round(float(calculation.total_price), 10), f"{GENAI_PRICES}:{provider.id}/{model.id}")


def _table() -> list[Any]:
    """genai-prices' providers, loaded on the first call that has a vendor, not at start-up (~6 MiB,
    the HTTP client its package imports included)."""
    from genai_prices.data_snapshot import get_snapshot

    return get_snapshot().providers


def _provider_by_id(provider_id: str) -> Provider | None:
    from genai_prices.data_snapshot import find_provider_by_id

    return find_provider_by_id(_table(), provider_id)


@functools.cache
def _vendors() -> dict[str, tuple[str, Any]]:
    """Each genai-prices provider's id: its ``api_pattern`` and ``model_match`` (VENDORS_FILE)."""
    entries = json.loads(VENDORS_FILE.read_text(encoding="utf-8"))["providers"]
    return {e["id"]: (e["api_pattern"], e["model_match"]) for e in entries}


def _matches(clause: dict[str, Any] | None, text: str) -> bool:
    """genai-prices' ``MatchLogic.is_match``, on the clauses as VENDORS_FILE keeps them. Written here
    because the package evaluates only the clauses of its loaded table (the test checks both agree
    on every name the table lists)."""
    if clause is None:
        return False
    (kind, value), folded = next(iter(clause.items())), text.lower()
    if kind == "or_":
        return any(_matches(c, text) for c in value)
    if kind == "and_":
        return all(_matches(c, text) for c in value)
    if kind == "regex":
        return re.search(value, text) is not None
    if kind == "starts_with":
        return folded.startswith(value.lower())
    if kind == "ends_with":
        return folded.endswith(value.lower())
    if kind == "contains":
        return value.lower() in folded
    return kind == "equals" and folded == value.lower()


def vendor_index() -> dict[str, Any]:
    """What VENDORS_FILE holds, from the installed genai-prices' table."""
    from importlib.metadata import version

    providers = [
        {
            "id": p.id,
            "api_pattern": p.api_pattern,
            "model_match": dataclasses.asdict(p.model_match) if p.model_match is not None else None,
        }
        for p in _table()
    ]
    return {"genai_prices": version("genai-prices"), "providers": providers}


def table_version() -> str:
    """``genai-prices <version>``: whose snapshot prices the calls."""
    from importlib.metadata import version

    return f"{GENAI_PRICES} {version('genai-prices')}"


if __name__ == "__main__":  # python -m hatchway.engine.pricing: rewrite VENDORS_FILE after an upgrade
    VENDORS_FILE.write_text(json.dumps(vendor_index(), indent=1) + "\n", encoding="utf-8")
    print(f"wrote {VENDORS_FILE}")
