"""JSON Schemas of the YAML files, generated from their pydantic models (``hatchway schema KIND``).

The models stay the single source of truth: descriptions are the fields' docstrings, and what a
model accepts beyond its annotations (plugin ``version: 1``, ``args_schema`` shorthands) is declared
beside the validator that accepts it, with ``json_schema_extra``. This module adds what pydantic
leaves out: the alternative spellings of ``AliasChoices`` fields (``type`` for ``operation_type``,
``token_endpoint_auth_method`` for ``client_auth``…), each allowed alone but never together.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import Any

from pydantic import AliasChoices, BaseModel

from hatchway.config.agents import PoliciesFile, ToolsFile
from hatchway.config.plugin import PluginConfig
from hatchway.config.settings import Settings

DRAFT = "https://json-schema.org/draft/2020-12/schema"


@dataclass(frozen=True)
class SchemaKind:
    """One YAML file type: its model, what it is called, and its committed schema file."""

    model: type[BaseModel]
    title: str
    file_name: str


SCHEMA_KINDS: dict[str, SchemaKind] = {
    "config": SchemaKind(Settings, "hatchway.yaml", "config.schema.json"),
    "plugin": SchemaKind(PluginConfig, "Plugin YAML (version 1)", "plugin.schema.json"),
    "tools": SchemaKind(ToolsFile, "tools.yaml", "tools.schema.json"),
    "policies": SchemaKind(PoliciesFile, "tool_policies.yaml", "policies.schema.json"),
}


def json_schema(kind: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of ``config``, ``plugin``, ``tools`` or ``policies`` files."""
    spec = SCHEMA_KINDS[kind]
    schema = spec.model.model_json_schema(mode="validation")
    for model in models_in(spec.model):
        definition = schema if model is spec.model else schema["$defs"].get(model.__name__)
        if definition is not None:
            add_aliases(definition, model)
    return {"$schema": DRAFT, "title": spec.title, **{k: v for k, v in schema.items() if k != "title"}}


def models_in(root: type[BaseModel]) -> list[type[BaseModel]]:
    """``root`` and every model reachable from its fields, each once, in the order first met."""
    found: list[type[BaseModel]] = []

    def visit(annotation: Any) -> None:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation not in found:
                found.append(annotation)
                for field in annotation.model_fields.values():
                    visit(field.annotation)
            return
        if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is not None:
            for arg in typing.get_args(annotation):
                visit(arg)

    visit(root)
    return found


def alias_spellings(model: type[BaseModel]) -> dict[str, list[str]]:
    """Field name → its other accepted spellings (from ``AliasChoices``)."""
    spellings = {}
    for name, field in model.model_fields.items():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices):
            others = [c for c in alias.choices if isinstance(c, str) and c != name]
            if others:
                spellings[name] = others
    return spellings


def add_aliases(definition: dict[str, Any], model: type[BaseModel]) -> None:
    """Declare each alias as a property of its own, and forbid giving two spellings at once."""
    properties = definition.get("properties", {})
    exclusive = []
    for name, others in alias_spellings(model).items():
        for other in others:
            properties[other] = {
                **{k: v for k, v in properties[name].items() if k not in ("default", "title")},
                "description": f"Another spelling of `{name}` (give only one of them).",
            }
            exclusive.append({"not": {"required": [name, other]}})
    if exclusive:
        definition.setdefault("allOf", []).extend(exclusive)
