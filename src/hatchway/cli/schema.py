"""``hatchway schema plugin|tools|policies|config``: the JSON Schema of one kind of YAML file."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from hatchway.cli.program import app, console, examples
from hatchway.config.schema import SCHEMA_KINDS
from hatchway.docs.generate import schema_text


class SchemaKind(StrEnum):
    plugin = "plugin"
    tools = "tools"
    policies = "policies"
    config = "config"


@app.command(
    "schema",
    rich_help_panel="Check configuration",
    epilog=examples(
        "hatchway schema plugin > plugin.schema.json",
        "hatchway schema config --output docs/schemas/config.schema.json",
        "Then, first line of a YAML file: # yaml-language-server: $schema=plugin.schema.json",
    ),
)
def schema(
    kind: Annotated[
        SchemaKind,
        typer.Argument(
            help="plugin (plugin YAML), tools (tools.yaml), policies (tool_policies.yaml) or config "
            "(hatchway.yaml)."
        ),
    ],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the schema to this file instead of stdout.")
    ] = None,
) -> None:
    """Print the JSON Schema of one kind of YAML file, for editors and CI validation."""
    text = schema_text(kind.value)
    if output is None:
        typer.echo(text, nl=False)
        return
    output.write_text(text, encoding="utf-8")
    console.print(f"wrote the {SCHEMA_KINDS[kind.value].title} schema to {output}", highlight=False)
