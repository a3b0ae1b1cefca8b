"""``hatchway serve``."""

from __future__ import annotations

from typing import Annotated

import typer

from hatchway.cli.app import DEFAULT_CONFIG, ConfigOption, app, fail, settings_from
from hatchway.errors import HatchwayError


@app.command()
def serve(
    config: ConfigOption = DEFAULT_CONFIG,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8080,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
) -> None:
    """Start the gateway (migrations are applied at start)."""
    import uvicorn

    from hatchway.api.app import create_app

    settings = settings_from(config)
    try:
        asgi = create_app(settings)  # loads (or makes) the master key: a bad one stops here, no traceback
    except HatchwayError as exc:
        raise fail(exc.message) from None
    uvicorn.run(asgi, host=host, port=port, log_level=log_level, access_log=False)
