"""The lifespan of the benchmarks' raw ASGI servers (no imports: an upstream stays small)."""

from __future__ import annotations


async def asgi_lifespan(receive, send) -> None:  # type: ignore[no-untyped-def]
    """Answer an ASGI lifespan scope (the benchmarks' raw ASGI servers have nothing to start)."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
