"""``hatchway serve``."""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable
from typing import Annotated

import typer

from hatchway.cli.program import (
    DEFAULT_CONFIG,
    ConfigOption,
    app,
    configure_logging,
    console,
    err_console,
    examples,
    fail,
    run_async,
    settings_from,
)
from hatchway.config.settings import Settings
from hatchway.errors import ConfigError, HatchwayError
from hatchway.store.db import Database


@app.command(
    rich_help_panel="Run",
    epilog=examples(
        "hatchway serve --config examples/hatchway.yaml",
        "hatchway serve --host 0.0.0.0 --port 8080 --config /etc/hatchway/hatchway.yaml",
    ),
)
def serve(
    config: ConfigOption = DEFAULT_CONFIG,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8080,
    log_level: Annotated[
        str, typer.Option(help="Log level of uvicorn and Hatchway: critical, error, warning, info or debug.")
    ] = "info",
) -> None:
    """Start the gateway: apply the database migrations, then serve the API and /ui."""
    import uvicorn

    from hatchway.api.app import create_app
    from hatchway.api.http_protocol import HatchwayHttpProtocol, HttpLimits

    settings = settings_from(config)
    if settings.public_base_url is None:  # per-user OAuth links point at where this serves
        settings.public_base_url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"
    configure_logging(log_level)
    try:
        # Loads plugins and the master key: bad ones stop here.
        asgi_app = create_app(settings, freeze_heap=True)
    except ConfigError as exc:  # a plugin file named in hatchway.yaml is broken
        err_console.print(f"[bold red]error:[/] {exc.render()}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    except HatchwayError as exc:  # e.g. a master key that does not match
        raise fail(exc.message) from None
    _migrate(settings)
    err_console.print(f"serving on http://{host}:{port} (dashboard: /ui)", highlight=False)
    # After its graceful shutdown uvicorn raises the SIGTERM it caught again, under the handler it
    # found: the default one would end the process by the signal (exit 143), which container
    # runtimes and Kubernetes report as a failure. A drained stop is a clean exit: 0.
    signal.signal(signal.SIGTERM, lambda _signum, _frame: None)
    # uvloop and httptools named, not left to "auto": the C event loop and HTTP parser are a large
    # part of the gateway's per-request budget, and a missing one should fail loudly here.
    uvicorn.run(
        asgi_app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=False,
        loop="uvloop",
        http=HatchwayHttpProtocol.with_limits(HttpLimits.of(settings)),
        ws_max_size=settings.max_request_body_bytes,
        timeout_keep_alive=settings.keep_alive_timeout_seconds,
        # SIGTERM: stop accepting, let requests in flight finish this long, then close them.
        timeout_graceful_shutdown=settings.drain_seconds,
    )


def _migrate(settings: Settings) -> None:
    """Bring the database schema up to date before listening, showing that it is happening (the
    gateway's own start applies them again, a no-op by then, for processes not started here). With
    ``migrate_on_start: false``, only check that ``hatchway migrate`` has brought it there."""
    if not settings.migrate_on_start:
        run_async(lambda: _on_database(settings, Database.require_current))
        return
    shown = _shown(settings.database_url)
    with err_console.status(f"Applying database migrations to {shown}…"):
        run_async(lambda: _on_database(settings, Database.migrate))
    err_console.print(f"database ready: {shown}", highlight=False)


@app.command(
    rich_help_panel="Run",
    epilog=examples(
        "hatchway migrate --config /etc/hatchway/hatchway.yaml",
        "HATCHWAY_DATABASE_URL=postgresql+asyncpg://hatchway@db/hatchway hatchway migrate",
    ),
)
def migrate(config: ConfigOption = DEFAULT_CONFIG) -> None:
    """Apply the database migrations this release needs, once per rollout (a Job, an init container)."""
    settings = settings_from(config)
    shown = _shown(settings.database_url)

    async def upgrade() -> tuple[frozenset[str], frozenset[str]]:
        db = Database(settings.database_url)
        try:
            # Under a lock on PostgreSQL: two at once apply them once, and the one that waited finds
            # (and reports) the schema the other left, not the one it saw before the lock.
            before = await db.migrate()
            return before, await db.applied_revisions()
        finally:
            await db.close()

    with err_console.status(f"Applying database migrations to {shown}…"):
        before, after = run_async(upgrade)
    if before == after:
        console.print(f"{shown}: already at {', '.join(sorted(after))}", highlight=False, soft_wrap=True)
    else:
        was = ", ".join(sorted(before)) or "an empty database"
        console.print(
            f"{shown}: migrated from {was} to {', '.join(sorted(after))}", highlight=False, soft_wrap=True
        )


async def _on_database(settings: Settings, action: Callable[[Database], Awaitable[object]]) -> None:
    db = Database(settings.database_url)
    try:
        await action(db)
    finally:
        await db.close()


def _shown(database_url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(database_url).render_as_string(hide_password=True)
