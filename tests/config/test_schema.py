"""The JSON Schemas of the YAML files: every example validates against the schema its modeline names,
broken files are rejected (by the schema and by the loader alike), and ``hatchway schema`` prints them."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator
from typer.testing import CliRunner

from hatchway.cli import app
from hatchway.config.agents import PoliciesFile, ToolsFile
from hatchway.config.loading import validate_document
from hatchway.config.plugin import validate_plugin
from hatchway.config.schema import SCHEMA_KINDS, json_schema
from hatchway.config.settings import Settings
from hatchway.errors import ConfigError
from tests.support.paths import ROOT

EXAMPLES = sorted((ROOT / "examples").rglob("*.yaml"))
MODELINE = re.compile(r"^# yaml-language-server: \$schema=(\S+)$")


def schema_of(path: Path) -> tuple[str, dict[str, Any]]:
    """The kind and the committed schema named by the file's first line."""
    first = path.read_text(encoding="utf-8").splitlines()[0]
    match = MODELINE.match(first)
    assert match, f"{path}: the first line must be `# yaml-language-server: $schema=…`"
    schema_file = (path.parent / match.group(1)).resolve()
    assert schema_file.parent == ROOT / "docs" / "schemas", schema_file
    kind = next(k for k, spec in SCHEMA_KINDS.items() if spec.file_name == schema_file.name)
    return kind, json.loads(schema_file.read_text(encoding="utf-8"))


def errors(schema: dict[str, Any], document: Any) -> list[str]:
    return [e.message for e in Draft202012Validator(schema).iter_errors(document)]


def loader_accepts(kind: str, document: Any) -> bool:
    """What the gateway itself says about the same document."""
    try:
        if kind == "plugin":
            validate_plugin(document, "test")
        else:
            model = {"config": Settings, "tools": ToolsFile, "policies": PoliciesFile}[kind]
            validate_document(model, document, "test")
    except ConfigError:
        return False
    return True


def test_there_are_examples_of_every_kind() -> None:
    assert {schema_of(p)[0] for p in EXAMPLES} == set(SCHEMA_KINDS)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_example_validates_against_the_schema_its_modeline_names(path: Path) -> None:
    kind, schema = schema_of(path)
    Draft202012Validator.check_schema(schema)
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert errors(schema, document) == []
    assert loader_accepts(kind, document)


def _plugin() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "examples" / "plugins" / "research.yaml").read_text(encoding="utf-8"))


def _policies() -> dict[str, Any]:
    path = ROOT / "examples" / "agents" / "contas" / "tool_policies.yaml"
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _config() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "examples" / "hatchway.yaml").read_text(encoding="utf-8"))


def _tools() -> dict[str, Any]:
    return yaml.safe_load(
        (ROOT / "examples" / "agents" / "contas" / "tools.yaml").read_text(encoding="utf-8")
    )


def _broken(base: dict[str, Any], change: Any) -> dict[str, Any]:
    document = copy.deepcopy(base)
    change(document)
    return document


BROKEN = {
    "plugin: unknown key": ("plugin", _broken(_plugin(), lambda d: d["mcp_servers"][0].update(timeout=5))),
    "plugin: wrong type": ("plugin", _broken(_plugin(), lambda d: d["agent"].update(max_rounds="ten"))),
    "plugin: url and command": (
        "plugin",
        _broken(_plugin(), lambda d: d["mcp_servers"][0].update(command="python")),
    ),
    "plugin: bearer without secret_ref": (
        "plugin",
        _broken(_plugin(), lambda d: d["mcp_servers"][0].update(auth={"type": "bearer"})),
    ),
    "plugin: version 2": ("plugin", _broken(_plugin(), lambda d: d.update(version="2"))),
    "config: no providers": ("config", _broken(_config(), lambda d: d.pop("providers"))),
    "config: tools without plugin": ("config", _broken(_config(), lambda d: d["agents"][1].pop("plugin"))),
    "tools: multi_item key": (
        "tools",
        _broken(_tools(), lambda d: d["tools"]["cancelar_vas_avulso"].update(multi_item=True)),
    ),
    "policies: both spellings": (
        "policies",
        _broken(
            _policies(), lambda d: d["tool_policies"]["cancelar_vas_avulso"].update(type="transactional")
        ),
    ),
    "policies: unknown operation type": (
        "policies",
        _broken(
            _policies(), lambda d: d["tool_policies"]["consultar_pedidos"].update(operation_type="write")
        ),
    ),
}


@pytest.mark.parametrize("case", BROKEN)
def test_a_broken_file_is_rejected_by_the_schema_and_by_the_loader(case: str) -> None:
    kind, document = BROKEN[case]
    assert errors(json_schema(kind), document), f"{case}: the schema accepted it"
    assert not loader_accepts(kind, document), f"{case}: the loader accepted it"


def test_alternative_spellings_are_valid_alone() -> None:
    policies = _broken(
        _policies(),
        lambda d: d["tool_policies"]["cancelar_vas_lote"].update(
            type=d["tool_policies"]["cancelar_vas_lote"].pop("operation_type"),
            requires_confirmation=d["tool_policies"]["cancelar_vas_lote"].pop("require_confirmation"),
        ),
    )
    assert errors(json_schema("policies"), policies) == [] and loader_accepts("policies", policies)
    oauth = {
        "type": "oauth",
        "token_url": "https://idp.example.com/token",
        "client_id": "agent",
        "secret_ref": "secret.client",
        "token_endpoint_auth_method": "client_secret_post",
    }
    plugin = _broken(_plugin(), lambda d: d["mcp_servers"][0].update(auth=oauth))
    assert errors(json_schema("plugin"), plugin) == [] and loader_accepts("plugin", plugin)
    shorthand = _broken(
        _tools(), lambda d: d["tools"]["consultar_pedidos"].update(args_schema={"ids": "list"})
    )
    assert errors(json_schema("tools"), shorthand) == [] and loader_accepts("tools", shorthand)


@pytest.mark.parametrize("kind", SCHEMA_KINDS)
def test_hatchway_schema_prints_the_committed_schema(kind: str, tmp_path: Path) -> None:
    committed = (ROOT / "docs" / "schemas" / SCHEMA_KINDS[kind].file_name).read_text(encoding="utf-8")
    printed = CliRunner().invoke(app, ["schema", kind])
    assert printed.exit_code == 0, printed.output
    assert printed.stdout == committed
    written = tmp_path / "out.json"
    assert CliRunner().invoke(app, ["schema", kind, "-o", str(written)]).exit_code == 0
    assert written.read_text(encoding="utf-8") == committed


def test_an_unknown_kind_is_refused_with_the_choices() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "hatchway", "schema", "agents"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2 and "plugin" in result.stderr and "policies" in result.stderr
