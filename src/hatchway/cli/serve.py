"""``hatchway serve``."""

from __future__ import annotations

from typing import Annotated

import typer

from hatchway.cli.app import (
    DEFAULT_CONFIG,
    ConfigOption,
    app,
    configure_logging,
    err_console,
    fail,
    settings_from,
)
from hatchway.errors import ConfigError, HatchwayError


@app.command()
def serve(
    config: ConfigOption = DEFAULT_CONFIG,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8080,
    log_level: Annotated[str, typer.Option(help="Log level (uvicorn's and Hatchway's).")] = "info",
) -> None:
    """Start the gateway (migrations are applied at start)."""
    import uvicorn

    from hatchway.api.app import create_app

    settings = settings_from(config)
    configure_logging(log_level)
    try:
        asgi_app = create_app(settings)  # loads plugins and the master key: bad ones stop here
    except ConfigError as exc:  # a plugin file named in hatchway.yaml is broken
        err_console.print(f"[bold red]error:[/] {exc.render()}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    except HatchwayError as exc:  # e.g. a master key that does not match
        raise fail(exc.message) from None
    uvicorn.run(asgi_app, host=host, port=port, log_level=log_level, access_log=False)
