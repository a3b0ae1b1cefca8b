"""The Typer application and what every command shares: loading the config, friendly failures."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console

from hatchway.config.settings import DEFAULT_CONFIG_PATH, Settings, load_settings
from hatchway.errors import ConfigError, HatchwayError
from hatchway.store.db import database_unreachable

T = TypeVar("T")

app = typer.Typer(
    name="hatchway",
    help="Hatchway: an OpenAI-compatible agent gateway with server-side tools over MCP.\n\n"
    "Every command reads hatchway.yaml (--config, or HATCHWAY_CONFIG; default ./hatchway.yaml).",
    epilog="First steps:\n\n"
    "hatchway serve --config examples/hatchway.yaml\n\n"
    "hatchway orgs create acme --config examples/hatchway.yaml\n\n"
    "hatchway keys create --org acme --config examples/hatchway.yaml\n\n"
    "Run `hatchway COMMAND --help` for a command's options and examples.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(asked: bool) -> None:
    if asked:
        from hatchway import __version__

        typer.echo(f"hatchway {__version__}")
        raise typer.Exit()


@app.callback()
def _group(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    # The program is a group of commands even when only the one being run is imported
    # (hatchway/cli/__init__.py): Typer would run a lone command as the program itself.
    pass


console = Console()
err_console = Console(stderr=True)

ConfigOption = Annotated[
    Path, typer.Option("--config", "-c", help="Path to hatchway.yaml.", envvar="HATCHWAY_CONFIG")
]
DEFAULT_CONFIG = Path(DEFAULT_CONFIG_PATH)


def examples(*lines: str) -> str:
    """A help epilog listing example command lines (one paragraph each, as Typer's help keeps them)."""
    return "Examples:\n\n" + "\n\n".join(lines)


def fail(message: str, code: int = 1) -> typer.Exit:
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def settings_from(config: Path) -> Settings:
    """Load hatchway.yaml or exit non-zero with the file, the field paths and no traceback."""
    if not config.exists():
        raise fail(
            f"{config}: no such file (pass --config or create hatchway.yaml; see examples/hatchway.yaml)", 2
        )
    try:
        return load_settings(config)
    except ConfigError as exc:
        err_console.print(f"[bold red]error:[/] {exc.render()}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


def run_async(factory: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine; Hatchway errors, and a database that cannot be reached, become one red line
    and exit code 1."""
    try:
        return asyncio.run(factory())  # type: ignore[arg-type]
    except HatchwayError as exc:
        raise fail(exc.message) from None
    except Exception as exc:
        if not database_unreachable(exc):
            raise
        reason = str(getattr(exc, "orig", None) or exc).splitlines()[0][:200]
        raise fail(
            f"the database could not be reached ({reason}); is it running, and is database_url right?"
        ) from None


def as_json(value: Any) -> str:
    import orjson

    return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()


def configure_logging(level: str) -> None:
    """Hatchway's own log lines (and the job queue's) on stderr at ``level``; uvicorn keeps its own.

    Secret values are scrubbed from the MCP SDK's and HTTP clients' lines, which at DEBUG carry
    tool arguments, results and headers."""
    import logging

    from hatchway.observability.log_redaction import install_log_redaction

    install_log_redaction()
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for name in ("hatchway", "saq"):
        logger = logging.getLogger(name)
        logger.setLevel(level.upper())
        logger.addHandler(handler)
