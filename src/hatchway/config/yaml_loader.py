"""The YAML loader every configuration file and inline plugin goes through.

Python refuses ``int()`` of a decimal string longer than ``sys.get_int_max_str_digits()`` (4,300
digits by default) and PyYAML lets that ValueError out of its constructor; here it is a
``YamlLimitExceeded`` at the integer's line and column.
"""

from __future__ import annotations

import sys
from typing import Any

import yaml


class YamlLimitExceeded(yaml.MarkedYAMLError):
    """A document went past a limit, Python's own included; ``problem`` names the limit."""


def load_yaml(text: str) -> Any:
    """The one document in ``text``; a failure is a ``yaml.YAMLError`` with its line and column."""
    return yaml.load(text, Loader=_FileLoader)


def _exceeded(problem: str, mark: Any) -> YamlLimitExceeded:
    return YamlLimitExceeded(problem=problem, problem_mark=mark)


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    try:
        return yaml.SafeLoader.construct_yaml_int(loader, node)
    except ValueError:  # only Python's digit limit: YAML's int pattern matched the scalar already
        digits = sum(c.isdigit() for c in node.value)
        problem = f"an integer of {digits} digits (Python reads at most {sys.get_int_max_str_digits()})"
        raise _exceeded(problem, node.start_mark) from None


class _FileLoader(yaml.SafeLoader):
    """PyYAML's safe loader, pure Python, as hatchway.yaml and its files have always been read."""


_FileLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)
