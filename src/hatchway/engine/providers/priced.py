"""A provider whose every answer carries its cost, from the gateway's price table."""

from __future__ import annotations

from collections.abc import AsyncIterator

from hatchway.engine.items import Usage
from hatchway.engine.pricing import ProviderPrices
from hatchway.engine.providers.base import ModelProvider, ModelRequest, ModelResponse, StreamDone, StreamEvent


class PricedProvider(ModelProvider):
    """Prices each response of ``inner``: ``usage.cost_usd`` and ``priced_as``, or one of
    ``usage.unpriced_calls`` when no entry of the table prices the model."""

    def __init__(self, inner: ModelProvider, prices: ProviderPrices) -> None:
        self.inner = inner
        self.id = inner.id
        self.prices = prices

    async def request(self, req: ModelRequest) -> ModelResponse:
        return self._priced(req, await self.inner.request(req))

    async def stream(self, req: ModelRequest) -> AsyncIterator[StreamEvent]:
        inner = self.inner.stream(req)
        try:
            async for event in inner:
                yield (
                    StreamDone(self._priced(req, event.response)) if isinstance(event, StreamDone) else event
                )
        finally:
            aclose = getattr(inner, "aclose", None)
            if aclose is not None:
                await aclose()

    def _priced(self, req: ModelRequest, response: ModelResponse) -> ModelResponse:
        # In place: the response and its usage were made for this call by the inner provider (and
        # ``dataclasses.replace`` costs more than the rest of pricing, on every call).
        price = self.prices.price(req.model, response.model, response.usage)
        if price is None:
            response.usage.unpriced_calls = 1
        else:
            response.usage.cost_usd = price.usd
            response.priced_as = price.priced_as
        return response

    def estimate_cost(self, model: str, usage: Usage) -> float | None:
        price = self.prices.price(model, "", usage)
        return price.usd if price is not None else None

    async def aclose(self) -> None:
        await self.inner.aclose()
