"""config/yaml_loader.py: an untrusted document is walked within limits before it is built, with
libyaml's parser and with the pure-Python fallback; an integer past Python's digit limit is an error at
its line and column in any file."""

from __future__ import annotations

import time

import pytest
import yaml

from hatchway.config import yaml_loader
from hatchway.config.yaml_loader import YamlLimitExceeded, load_yaml

TOO_DEEP = "nested deeper than 64 levels"


@pytest.fixture(params=["libyaml", "pure Python"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test below runs with both parsers an untrusted document may be walked with."""
    if request.param == "pure Python":  # what PyYAML built without libyaml uses
        monkeypatch.setattr(yaml_loader, "_UNTRUSTED_LOADER", yaml_loader._FlowBoundedLoader)
    elif not yaml.__with_libyaml__:
        pytest.skip("PyYAML was built without libyaml")
    return request.param


def refusal(text: str) -> tuple[YamlLimitExceeded, float]:
    started = time.thread_time()
    with pytest.raises(YamlLimitExceeded) as caught:
        load_yaml(text, untrusted=True)
    return caught.value, time.thread_time() - started


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("agent: " + "[" * 16_000 + "]" * 16_000, 1),
        ("agent: " + "[{a: " * 3_000, 1),
        ("agent:\n" + "- " * 16_000 + "1", 2),
        ("".join(" " * i + "a:\n" for i in range(100)), 65),
    ],
    ids=["flow sequences", "flow mappings", "block sequences on one line", "indented mappings"],
)
def test_nesting_past_64_levels_is_refused_where_it_happens(parser: str, text: str, line: int) -> None:
    error, cpu = refusal(text)
    assert error.problem == TOO_DEEP and error.problem_mark.line + 1 == line
    assert cpu < 0.1, f"{parser}: {cpu * 1000:.0f} ms to refuse"  # refused as level 65 is read: ~3 ms


def test_aliases_are_refused(parser: str) -> None:
    error, _ = refusal("a: &x [1, 2]\nb: *x\n")
    assert "aliases" in error.problem and error.problem_mark.line == 1


def test_the_walk_stops_at_its_cpu_budget(parser: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(yaml_loader, "CPU_SECONDS", 0.001)  # 9,000 nodes take a few ms with either parser
    error, _ = refusal("[" + ",".join(["1"] * 9_000) + "]")
    assert error.problem == "took more than 1 ms of CPU to parse"


# Pure Python walks some 250 KB a second: it spends its CPU budget well before 10,000 nodes or 27 KB.
with_libyaml = pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML was built without libyaml")


@with_libyaml
def test_more_than_10_000_nodes_are_refused() -> None:
    error, cpu = refusal("[" + ",".join(["1"] * 15_000) + "]")
    assert error.problem == "more than 10,000 nodes" and cpu < 0.1


@with_libyaml
def test_an_ordinary_27_kb_plugin_is_within_every_limit() -> None:
    plugin = {
        "version": "1",
        "mcp_servers": [
            {
                "id": f"server_{i}",
                "url": f"https://mcp{i}.example.com/mcp/v1/search",
                "auth": {"type": "bearer", "secret_ref": f"secret.mcp_key_{i}"},
                "tools": ["search_web", "fetch_page", "summarise"],
                "forward_headers": ["x-tenant-id"],
                "timeout_ms": 5000,
            }
            for i in range(120)
        ],
    }
    text = yaml.safe_dump(plugin)
    assert len(text) > 27_000 and load_yaml(text, untrusted=True) == plugin


@pytest.mark.parametrize("untrusted", [False, True], ids=["file", "untrusted"])
def test_an_integer_past_pythons_digit_limit_is_an_error_at_its_place(untrusted: bool) -> None:
    with pytest.raises(YamlLimitExceeded) as caught:
        load_yaml("agent:\n  max_rounds: " + "9" * 5_000 + "\n", untrusted=untrusted)
    assert caught.value.problem.startswith("an integer of 5000 digits (Python reads at most ")
    assert (caught.value.problem_mark.line, caught.value.problem_mark.column) == (1, 14)
