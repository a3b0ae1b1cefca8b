"""The price table: hatchway.yaml's ``models[].price`` first, then genai-prices' own figures (checked
against ``genai_prices.calc_price``, never a number written here), and unknown is None."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import genai_prices
import pytest
from genai_prices.data_snapshot import get_snapshot

from hatchway.config.loading import validate_document
from hatchway.config.settings import Settings
from hatchway.engine import pricing
from hatchway.engine.items import Usage
from hatchway.engine.pricing import PriceTable
from hatchway.errors import ConfigError


def settings(*models: dict[str, Any], **provider: Any) -> Settings:
    upstream = {"id": "up", "base_url": "http://127.0.0.1:9000/v1", **provider}
    return validate_document(Settings, {"providers": [upstream], "models": list(models)}, "hatchway.yaml")


def table_price(usage: Usage, model: str, **where: str) -> float:
    counted = genai_prices.Usage(
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.completion_tokens,
        cache_read_tokens=usage.cached_tokens,
    )
    return float(genai_prices.calc_price(counted, model, **where).total_price)


USAGE = Usage(prompt_tokens=12_000, completion_tokens=3_000)


def test_a_self_hosted_upstream_prices_a_known_model_by_its_vendor() -> None:
    prices = PriceTable(settings()).for_provider("up")
    price = prices.price("gpt-4o-mini", "", USAGE)
    assert price is not None
    assert price.usd == pytest.approx(table_price(USAGE, "gpt-4o-mini", provider_id="openai"), abs=1e-12)
    assert price.priced_as == "genai-prices:openai/gpt-4o-mini"


def test_the_model_the_upstream_reports_is_priced_before_the_one_asked_for() -> None:
    prices = PriceTable(settings()).for_provider("up")
    price = prices.price("my-alias", "gpt-4o-2024-08-06", USAGE)
    assert price is not None and price.priced_as == "genai-prices:openai/gpt-4o"
    assert price.usd == pytest.approx(table_price(USAGE, "gpt-4o-2024-08-06"), abs=1e-12)
    asked = prices.price("gpt-4o-mini", "/models/served-from-disk", USAGE)  # reported: unknown
    assert asked is not None and asked.priced_as == "genai-prices:openai/gpt-4o-mini"


def test_cached_prompt_tokens_are_priced_at_the_cache_read_price() -> None:
    usage = Usage(prompt_tokens=10_000, completion_tokens=1_000, cached_tokens=8_000)
    price = PriceTable(settings()).for_provider("up").price("gpt-4o", "", usage)
    assert price is not None
    assert price.usd == pytest.approx(table_price(usage, "gpt-4o"), abs=1e-12)
    assert price.usd < table_price(Usage(prompt_tokens=10_000, completion_tokens=1_000), "gpt-4o")


def test_the_base_url_picks_the_provider_and_a_model_it_does_not_list_is_unknown() -> None:
    groq = PriceTable(settings(base_url="https://api.groq.com/openai/v1")).for_provider("up")
    llama = groq.price("llama-3.1-8b-instant", "", USAGE)
    assert llama is not None and llama.priced_as == "genai-prices:groq/llama-3.1-8b-instant"
    assert llama.usd == pytest.approx(
        table_price(USAGE, "llama-3.1-8b-instant", provider_api_url="https://api.groq.com/openai/v1"),
        abs=1e-12,
    )
    assert groq.price("claude-sonnet-4-5", "", USAGE) is None  # Groq does not sell it: no guess


def test_price_provider_names_the_table_or_turns_it_off() -> None:
    named = PriceTable(settings(price_provider="anthropic")).for_provider("up")
    price = named.price("claude-sonnet-4-5", "", USAGE)
    assert price is not None and price.priced_as == "genai-prices:anthropic/claude-sonnet-4-5"
    off = PriceTable(settings(price_provider="none")).for_provider("up")
    assert off.price("gpt-4o-mini", "", USAGE) is None
    with pytest.raises(ConfigError) as raised:
        PriceTable(settings(price_provider="no-such-vendor"))
    assert "providers[0].price_provider" in str(raised.value)


def test_an_override_prices_a_self_hosted_model_and_wins_over_the_table() -> None:
    local = {"input_per_mtok": 0.2, "output_per_mtok": 0.6, "cached_input_per_mtok": 0.05}
    table = PriceTable(
        settings(
            {"name": "local", "provider": "up", "upstream_model": "llama-local", "price": local},
            {"name": "mini", "provider": "up", "upstream_model": "gpt-4o-mini", "price": local},
        )
    ).for_provider("up")
    usage = Usage(prompt_tokens=10_000, completion_tokens=2_000, cached_tokens=4_000)
    price = table.price("llama-local", "llama-local", usage)
    assert price is not None and price.priced_as == "hatchway.yaml:models[0]"
    assert price.usd == pytest.approx((6_000 * 0.2 + 4_000 * 0.05 + 2_000 * 0.6) / 1e6, abs=1e-12)
    assert table.price("gpt-4o-mini", "", usage).priced_as == "hatchway.yaml:models[1]"  # type: ignore[union-attr]


def test_a_model_neither_prices_is_unknown() -> None:
    prices = PriceTable(settings()).for_provider("up")
    assert prices.price("llama-unknown", "llama-unknown", USAGE) is None
    assert prices.price("gpt-4o-2024", "", USAGE) is None  # close to a known name is not a match


def test_one_upstream_model_priced_two_ways_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as raised:
        settings(
            {
                "name": "a",
                "provider": "up",
                "upstream_model": "m",
                "price": {"input_per_mtok": 1, "output_per_mtok": 2},
            },
            {
                "name": "b",
                "provider": "up",
                "upstream_model": "m",
                "price": {"input_per_mtok": 1, "output_per_mtok": 3},
            },
        )
    assert "models[1].price" in str(raised.value)


def test_the_vendor_index_is_the_installed_tables_and_matches_as_it_does() -> None:
    """price_vendors.json is what the pinned genai-prices says (regenerate it with
    ``python -m hatchway.engine.pricing`` after an upgrade), and its clauses pick the same vendor as the
    package's own ``is_match`` for every model name the table lists, in either case."""
    assert json.loads(pricing.VENDORS_FILE.read_text()) == pricing.vendor_index()
    table = get_snapshot().providers
    names = {ref for p in table for m in p.models for ref in (m.id, m.id.upper(), f"{p.id}/{m.id}")}
    names |= {"bench", "llama-local", "my-alias", "Claude-Opus", "x-gpt-4o"}
    index = pricing._vendors()
    assert [p.id for p in table] == list(index)
    for provider in table:
        match = index[provider.id][1]
        expected = [n for n in sorted(names) if provider.model_match and provider.model_match.is_match(n)]
        assert [n for n in sorted(names) if pricing._matches(match, n)] == expected, provider.id


def test_a_call_no_vendor_can_price_never_loads_the_table() -> None:
    """In a fresh interpreter (the table is cached once loaded): a loopback upstream's unknown model
    is priced None without importing the table's module (~6 MiB), a known one loads it."""
    script = (
        "import sys; from hatchway.engine.pricing import PriceTable; "
        "from hatchway.engine.items import Usage; "
        "from tests.engine.test_pricing import settings; "
        "p = PriceTable(settings()).for_provider('up'); u = Usage(prompt_tokens=5, completion_tokens=5); "
        "print(p.price('bench', 'bench-model', u), 'genai_prices.data' in sys.modules); "
        "print(p.price('gpt-4o-mini', '', u) is not None, 'genai_prices.data' in sys.modules)"
    )
    root = Path(__file__).parents[2]
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=root)
    assert out.stdout.split("\n")[:2] == ["None False", "True True"]
