"""The YAML loader every configuration file and inline plugin goes through.

Two things PyYAML leaves to its caller. Python refuses ``int()`` of a decimal string longer than
``sys.get_int_max_str_digits()`` (4,300 digits by default) and PyYAML lets that ValueError out of its
constructor; here it is a ``YamlLimitExceeded`` at the integer's line and column.

And a document from an API caller can be built to cost whatever it likes. PyYAML's pure-Python
scanner re-checks every open flow level for each character it reads ahead (up to 1,024 per possible
key): 12 KB of ``[[[…]]]`` took 15 s. Its composer recurses once per level, and every node becomes an
object to build and validate. So ``load_yaml(text, untrusted=True)`` first walks the document's event
stream — lazily, so refusing at level 65 costs little — against ``MAX_DEPTH``, ``MAX_NODES`` and
``CPU_SECONDS`` (and refuses aliases), with libyaml's parser when PyYAML has it (an ordinary 27 KB
plugin: 8 ms, against 113 ms in pure Python), and builds only a document that passed the walk.
Configuration files are the operator's: read as before, with PyYAML's pure-Python safe loader.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from typing import Any

import yaml

MAX_DEPTH = 64
"""Collections inside collections, flow (``[…]``, ``{…}``) and block alike, in an untrusted document.
A plugin needs four; the composer and the constructor recurse once per level."""
MAX_NODES = 10_000
"""Scalars and collections in an untrusted document (a 27 KB plugin of 120 servers has 2,500).
Each one is an object to build and validate: 10,000 take about 50 ms."""
CPU_SECONDS = 0.1
"""Thread CPU time the walk of an untrusted document may take, for what the other limits do not
foresee (libyaml walks 32 KiB within the other limits in about 10 ms)."""
_CLOCK_EVERY = 64
"""Events between two reads of the thread's CPU clock, which cost about a microsecond each."""

_TOO_DEEP = f"nested deeper than {MAX_DEPTH} levels"


class YamlLimitExceeded(yaml.MarkedYAMLError):
    """A document went past one of the limits above, or Python's own; ``problem`` names the limit."""


def load_yaml(text: str, *, untrusted: bool = False) -> Any:
    """The one document in ``text``; a failure is a ``yaml.YAMLError`` with its line and column.

    ``untrusted`` (the document comes from an API caller): walked within the limits first, built after.
    """
    if not untrusted:
        return yaml.load(text, Loader=_FileLoader)
    _walk(text)
    return yaml.load(text, Loader=_UNTRUSTED_LOADER)


def _walk(text: str) -> None:
    """Raise ``YamlLimitExceeded`` at the first event past a limit: depth, nodes, an alias, CPU time."""
    started = time.thread_time()
    depth = nodes = 0
    for count, event in enumerate(_events(text), start=1):
        if isinstance(event, yaml.AliasEvent):  # a few hundred bytes of aliases expand exponentially
            raise _exceeded("YAML aliases (*name) are not allowed: write the value out", event.start_mark)
        if isinstance(event, yaml.NodeEvent):
            nodes += 1
            if nodes > MAX_NODES:
                raise _exceeded(f"more than {MAX_NODES:,} nodes", event.start_mark)
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise _exceeded(_TOO_DEEP, event.start_mark)
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        if count % _CLOCK_EVERY == 0 and time.thread_time() - started > CPU_SECONDS:
            raise _exceeded(f"took more than {CPU_SECONDS * 1000:.0f} ms of CPU to parse", event.start_mark)


def _events(text: str) -> Iterator[yaml.Event]:
    try:
        yield from yaml.parse(text, Loader=_UNTRUSTED_LOADER)
    except yaml.MarkedYAMLError as exc:
        if "maximum nesting depth" in str(exc.problem):  # libyaml's own (1,000), met as it reads ahead
            raise _exceeded(_TOO_DEEP, exc.problem_mark) from None
        raise


def _exceeded(problem: str, mark: Any) -> YamlLimitExceeded:
    """``mark``: PyYAML's ``Mark`` or libyaml's, which is another class with the same fields."""
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


class _FlowBoundedLoader(yaml.SafeLoader):
    """The pure-Python loader refusing a flow collection past ``MAX_DEPTH`` as its scanner meets it:
    the look-ahead would otherwise cost O(depth) per character before the walk sees an event."""

    def fetch_flow_collection_start(self, TokenClass: type) -> None:
        if self.flow_level >= MAX_DEPTH:
            raise _exceeded(_TOO_DEEP, self.get_mark())
        super().fetch_flow_collection_start(TokenClass)


if yaml.__with_libyaml__:

    class _LibyamlLoader(yaml.CSafeLoader):
        """libyaml's parser with PyYAML's safe constructor."""

    _UNTRUSTED_LOADER: type = _LibyamlLoader
else:  # PyYAML built without libyaml: slower, so the CPU budget refuses large plugins sooner
    _UNTRUSTED_LOADER = _FlowBoundedLoader

for _loader in (_FileLoader, _UNTRUSTED_LOADER):
    _loader.add_constructor("tag:yaml.org,2002:int", _construct_int)
