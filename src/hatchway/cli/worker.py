"""``hatchway worker``: run background responses off the Redis job queue, without serving HTTP.

Exit codes: 0 after SIGTERM/SIGINT (running responses get ``background.shutdown_grace_seconds`` to
finish), 1 when the database or Redis is unreachable at start or the worker stops by itself,
2 for a configuration problem (including no ``redis_url``). It logs one ``ready`` line once it takes
jobs; replicas count it in ``/readyz`` (``queue_workers``).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import TYPE_CHECKING, Annotated

import typer

from hatchway.cli.program import (
    DEFAULT_CONFIG,
    ConfigOption,
    app,
    configure_logging,
    err_console,
    examples,
    fail,
    settings_from,
)
from hatchway.errors import ConfigError, HatchwayError

if TYPE_CHECKING:
    from hatchway.gateway import Gateway

logger = logging.getLogger("hatchway.worker")


@app.command(
    rich_help_panel="Run",
    epilog=examples(
        "hatchway worker --config /etc/hatchway/hatchway.yaml",
        "hatchway worker --config hatchway.yaml --concurrency 4 --log-level warning",
    ),
)
def worker(
    config: ConfigOption = DEFAULT_CONFIG,
    concurrency: Annotated[
        int | None,
        typer.Option(min=1, help="Responses run at once (default: background.worker_concurrency)."),
    ] = None,
    log_level: Annotated[
        str, typer.Option(help="Log level: critical, error, warning, info or debug.")
    ] = "info",
) -> None:
    """Run background responses from the Redis job queue, without serving HTTP (needs redis_url)."""
    from hatchway.gateway import Gateway

    settings = settings_from(config)
    if not settings.redis_url:
        raise fail(
            f"{config}: redis_url is not set: hatchway worker runs background responses from the Redis "
            "job queue (without Redis they run inside hatchway serve)",
            2,
        )
    configure_logging(log_level)
    try:
        gw = Gateway(settings)
    except ConfigError as exc:
        err_console.print(f"[bold red]error:[/] {exc.render()}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    except HatchwayError as exc:
        raise fail(exc.message) from None
    code = asyncio.run(_work(gw, concurrency or settings.background.worker_concurrency))
    raise typer.Exit(code)


async def _work(gw: Gateway, concurrency: int) -> int:
    assert gw.jobs is not None
    try:
        await gw.db.ping()
        await gw.jobs.ping()
        await gw.start()
    except Exception as exc:  # unreachable database or Redis: say which, exit 1
        logger.error("cannot start: %s", _reason(exc))
        await gw.close()
        return 1
    worker = gw.responses.background.worker(concurrency)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    running = asyncio.create_task(worker.run(), name="hatchway:worker")
    logger.info("worker %s ready: queue %s, %d at a time", gw.replica_id, gw.jobs.queue.name, concurrency)
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopped_by_signal = stop.is_set()
    logger.info("worker %s stopping", gw.replica_id)
    await worker.stop()
    stopping.cancel()
    await asyncio.gather(running, stopping, return_exceptions=True)
    await gw.close()
    return 0 if stopped_by_signal else 1


def _reason(exc: BaseException) -> str:
    return exc.message if isinstance(exc, HatchwayError) else f"{type(exc).__name__}: {exc}"
