"""Turn YAML files into pydantic models, and any failure into a ConfigError with field paths."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from hatchway.config.yaml_loader import YamlLimitExceeded, load_yaml
from hatchway.errors import ConfigError

M = TypeVar("M", bound=BaseModel)


class StrictModel(BaseModel):
    """Base for configuration models: unknown keys are errors, values are validated on assignment.

    A field's docstring (the string literal under it) is its description in the JSON Schemas and in
    docs/configuration.md, so document a field there rather than in a comment.
    """

    model_config = ConfigDict(
        extra="forbid", validate_assignment=True, populate_by_name=True, use_attribute_docstrings=True
    )


def format_loc(loc: tuple[int | str, ...], prefix: str = "") -> str:
    """``("providers", 0, "base_url")`` → ``providers[0].base_url``."""
    path = prefix
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part.startswith(("function-", "tagged-union", "literal[")):  # pydantic's internal union arms
            continue
        else:
            path += f".{part}" if path else str(part)
    return path


# A model validator may name a deeper field as "sub.path[0]: message".
_NESTED = re.compile(r"^(?:Value error, )?([A-Za-z_][\w.\[\]]*): (.*)$", re.DOTALL)


def _message(error: Any) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        return "unknown key: remove it or check its spelling"
    if kind == "missing":
        return "required: add this key"
    msg = str(error["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    shown = error.get("input")
    if kind != "value_error" and (isinstance(shown, str | int | float | bool) or shown is None):
        msg = f"{msg} (got {shown!r})"
    return msg


def validation_problems(exc: ValidationError, prefix: str = "") -> list[tuple[str, str]]:
    """Flatten a ValidationError into ``(field path, message)`` pairs."""
    problems = []
    for error in exc.errors(include_url=False):
        path = format_loc(tuple(error["loc"]), prefix)
        msg = _message(error)
        if error["type"] == "value_error" and (nested := _NESTED.match(msg)):
            sub, msg = nested.groups()
            path = f"{path}.{sub}" if path else sub
        problems.append((path, msg))
    return problems


def parse_yaml_text(text: str, source: str, *, untrusted: bool = False) -> Any:
    """Parse YAML, reporting the line and column of a syntax error or of a limit passed.

    ``untrusted``: the text comes from an API caller, and is parsed within ``yaml_loader``'s limits.
    """
    try:
        return load_yaml(text, untrusted=untrusted)
    except RecursionError:  # PyYAML's composer recurses per level: about 1,000 levels of nesting
        raise ConfigError(
            source, [("", "nested too deeply to read (keep it under a few hundred levels)")]
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        if not isinstance(exc, YamlLimitExceeded):
            problem = f"not valid YAML ({problem})"
        raise ConfigError(source, [("", f"{where}{problem}")]) from None


def read_config_text(path: Path) -> str:
    """A configuration file's text; a missing, unreadable or non-UTF-8 file is a ConfigError saying so."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(str(path), [("", f"cannot read the file ({exc.strerror})")]) from None
    except UnicodeDecodeError as exc:
        where = f"byte {exc.start + 1} (0x{exc.object[exc.start]:02x})"
        raise ConfigError(str(path), [("", f"not UTF-8 text at {where}; save the file as UTF-8")]) from None


def load_yaml_model(model: type[M], path: str | Path, *, prefix: str = "", context: Any = None) -> M:
    """Read ``path`` and validate it as ``model``; every failure becomes a ConfigError naming the file."""
    path = Path(path)
    text = read_config_text(path)
    return validate_document(
        model, parse_yaml_text(text, str(path)), str(path), prefix=prefix, context=context
    )


def validate_document(model: type[M], data: Any, source: str, *, prefix: str = "", context: Any = None) -> M:
    """Validate already-parsed data as ``model``."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            source, [(prefix, f"expected a mapping at the top level (got {type(data).__name__})")]
        )
    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        raise ConfigError(source, validation_problems(exc, prefix)) from None
