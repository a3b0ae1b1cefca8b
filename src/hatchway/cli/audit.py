"""``hatchway audit verify`` and ``hatchway audit export``: check and take out the audit trail.

Both read the database and the master key named by hatchway.yaml. Neither ever creates a master key:
without one, chains are still checked entry by entry, but no signature is, and the summary says so.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path
from typing import IO, Annotated, TypeVar

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn

from hatchway.audit import AuditTrail, OrgVerification, VerifyReport, verify_export
from hatchway.cli.logs import parse_time
from hatchway.cli.program import (
    DEFAULT_CONFIG,
    ConfigOption,
    app,
    console,
    err_console,
    examples,
    fail,
    run_async,
    settings_from,
)
from hatchway.config.settings import Settings
from hatchway.environment import env_value
from hatchway.errors import ConfigError, MasterKeyError, NotFound
from hatchway.store.db import Database
from hatchway.store.orgs import OrgStore
from hatchway.vault.master_key import ENV_VAR, MasterKey, decode_key, read_key_file

T = TypeVar("T")

audit_app = typer.Typer(help="The tamper-evident audit trail: verify it, export it.", no_args_is_help=True)
app.add_typer(audit_app, name="audit", rich_help_panel="Observe")

OrgOption = Annotated[
    str | None, typer.Option("--org", help="Organisation name or id (an id with --file); default: all.")
]


def existing_master_key(settings: Settings | None) -> MasterKey | None:
    """``HATCHWAY_MASTER_KEY`` (or ``_FILE``), else the key file when it exists; None rather than a new
    key. A key that cannot be read (malformed, too widely readable) exits with the reason."""
    try:
        if value := env_value(ENV_VAR):  # or HATCHWAY_MASTER_KEY_FILE
            return decode_key(value, ENV_VAR)
        if settings is not None and Path(settings.master_key_file).exists():
            return read_key_file(Path(settings.master_key_file))
    except (MasterKeyError, ConfigError) as exc:
        raise fail(exc.message) from None
    return None


async def _with_trail(
    settings: Settings,
    key: MasterKey | None,
    org: str | None,
    action: Callable[[AuditTrail, str | None, dict[str, str]], Awaitable[T]],
) -> T:
    """Run ``action`` with the trail, ``org`` resolved to an id, and organisation names by id."""
    db = Database(settings.database_url)
    try:
        await db.migrate()
        orgs = OrgStore(db)
        names = {o.id: o.name for o in await orgs.list_orgs()}
        org_id = org
        if org is not None:
            try:
                org_id = (await orgs.get_org(org)).id
            except NotFound:
                pass  # an organisation deleted since keeps its trail: its id still reads it
        return await action(AuditTrail(db, key, settings.audit), org_id, names)
    finally:
        await db.close()


def _label(org: OrgVerification, names: dict[str, str]) -> str:
    name = names.get(org.org_id)
    return f"{name} ({org.org_id})" if name else org.org_id or "the file"


def report_verification(report: VerifyReport, names: dict[str, str], *, key: MasterKey | None) -> None:
    """A line per organisation; exit 1 when any chain is broken, naming its first bad entry."""
    if not report.organisations:
        console.print("no audit entries")
    for org in report.organisations:
        if org.problem is not None:
            err_console.print(
                f"[bold red]error:[/] {_label(org, names)}: entry {org.problem.seq} "
                f"{org.problem.reason.replace('_', ' ')} — {org.problem.message}",
                highlight=False,
                soft_wrap=True,
            )
            continue
        signed = f"{org.signatures_checked} signature{'s' if org.signatures_checked != 1 else ''} checked"
        notes = "".join(f"; {note}" for note in org.not_checkable)
        console.print(
            f"ok: {_label(org, names)}: {org.entries} entries intact up to {org.last_seq}, {signed}{notes}",
            highlight=False,
            soft_wrap=True,
        )
    if key is None and report.organisations:
        err_console.print("note: no master key was found, so no signature was checked", highlight=False)
    if not report.ok:
        raise typer.Exit(1)


@audit_app.command(
    "verify",
    epilog=examples(
        "hatchway audit verify --config hatchway.yaml",
        "hatchway audit verify --org acme",
        "hatchway audit verify --file audit-acme.jsonl    (an export, offline)",
    ),
)
def audit_verify(
    org: OrgOption = None,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file", help="Verify this export (JSON Lines) instead of the database.", dir_okay=False
        ),
    ] = None,
    config: ConfigOption = DEFAULT_CONFIG,
) -> None:
    """Verify the audit trail: exit 0 when every chain is intact, 1 naming the first bad entry."""
    if file is not None:
        settings = settings_from(config) if config.exists() else None
        key = existing_master_key(settings)
        try:
            with file.open(encoding="utf-8") as lines:
                report = verify_export(lines, key, org)
        except (OSError, UnicodeDecodeError) as exc:
            raise fail(f"{file}: cannot read the export ({exc})", 2) from None
        report_verification(report, {}, key=key)
        return

    async def verify(
        trail: AuditTrail, org_id: str | None, names: dict[str, str]
    ) -> tuple[VerifyReport, dict[str, str]]:
        return await trail.verify(org_id), names

    settings = settings_from(config)
    key = existing_master_key(settings)
    report, names = run_async(lambda: _with_trail(settings, key, org, verify))
    report_verification(report, names, key=key)


async def _export(
    trail: AuditTrail, org_id: str | None, since: datetime | None, out: IO[str]
) -> tuple[int, int]:
    """Write every record as one JSON line; the entries and organisations written."""
    entries = orgs = 0
    columns = (SpinnerColumn(), TextColumn("exporting the audit trail: {task.completed} entries"))
    with Progress(*columns, console=err_console, transient=True, disable=not err_console.is_terminal) as bar:
        task = bar.add_task("export", total=None)
        async for record in trail.export(org_id, since):
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            if record["type"] == "entry":
                entries += 1
                bar.update(task, completed=entries)
            elif record["type"] == "head":
                orgs += 1
    return entries, orgs


@audit_app.command(
    "export",
    epilog=examples(
        "hatchway audit export --output audit.jsonl",
        "hatchway audit export --org acme --since 2026-01-01T00:00:00Z > audit-acme.jsonl",
    ),
)
def audit_export(
    org: OrgOption = None,
    since: Annotated[
        str | None, typer.Option("--since", help="ISO 8601 time (UTC if no offset): entries from then on.")
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write here instead of standard output.", dir_okay=False),
    ] = None,
    config: ConfigOption = DEFAULT_CONFIG,
) -> None:
    """Export the audit trail as JSON Lines, with its signed heads and checkpoints, for offline checks."""
    since_time = parse_time("--since", since)
    settings = settings_from(config)
    # A file is written beside its name and moved there once whole: a failed export leaves no half file.
    partial = output.with_name(f".{output.name}.part") if output else None
    with ExitStack() as stack:
        out = stack.enter_context(partial.open("w", encoding="utf-8")) if partial else sys.stdout
        if partial is not None:
            stack.callback(partial.unlink, missing_ok=True)
        entries, orgs = run_async(
            lambda: _with_trail(
                settings, None, org, lambda trail, org_id, _: _export(trail, org_id, since_time, out)
            )
        )
        out.flush()
        if partial is not None and output is not None:
            partial.replace(output)
    where = str(output) if output else "standard output"
    err_console.print(f"exported {entries} entries of {orgs} organisations to {where}", highlight=False)
