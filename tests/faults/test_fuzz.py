"""Fuzzing, bounded to well under a minute: schemathesis drives every operation of the served
OpenAPI document against ``hatchway serve`` (coverage, fuzzing and stateful phases' inputs, bodies,
parameters and headers) and no answer may be a server error; hypothesis feeds the YAML loaders
arbitrary text and none may raise anything but a ConfigError / a 400."""

from __future__ import annotations

import base64
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hatchway.config.loading import parse_yaml_text, validate_document
from hatchway.config.plugin import parse_plugin
from hatchway.config.settings import Settings
from hatchway.engine.tools.mcp.binding import decode_inline_plugin
from hatchway.errors import ConfigError, InvalidRequest
from hatchway.principal import Role
from tests.security.conftest import start_serve
from tests.support.replicas import ServeProcess
from tests.support.scripted_llm import Reply, ScriptedLLM

SCHEMATHESIS = [sys.executable, "-m", "schemathesis.cli"]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServeProcess, str]]:
    llm = ScriptedLLM().start()
    llm.handler = lambda _: Reply(text="ok")
    # A platform key: every route of the document is open to it (an admin's own organisation only
    # would leave the platform routes answering nothing but 403)
    replicas, process, key = start_serve(tmp_path_factory.mktemp("fuzz"), llm, role=Role.PLATFORM)
    # FastAPI builds the document on its first request (1.3 s here, over schemathesis' 10 s for
    # loading it on a loaded CI machine); built once, it is served in milliseconds.
    httpx.get(f"{process.url}/openapi.json", timeout=120).raise_for_status()
    yield process, key
    replicas.stop()
    llm.stop()


@pytest.mark.timeout(300)  # some 20 s here; a loaded CI machine has taken over 120 s
def test_every_answer_conforms_to_the_served_openapi(served: tuple[ServeProcess, str]) -> None:
    """Every check schemathesis has: no server error; every status, content type, header and body
    as the document says (the OpenAI-compatible routes against the official SDK's models); schema-
    violating input refused; ``Allow`` on a 405 naming exactly the documented methods. All but one:
    ``positive_data_acceptance`` also sends inputs that break rules JSON Schema cannot state (``until``
    after ``since``, ``tool_choice`` naming one of ``tools``, the grammar of input items), which the
    gateway rightly refuses with a 400 naming the field."""
    process, key = served
    # The CLI rather than schemathesis' pytest plugin, which does not load under this pytest.
    # A request that hangs fails as itself (--request-timeout), named in schemathesis' report.
    command = [
        *SCHEMATHESIS,
        *("run", f"{process.url}/openapi.json", "--header", f"Authorization: Bearer {key}"),
        *("--checks", "all", "--exclude-checks", "positive_data_acceptance", "--request-timeout", "15"),
        *("--max-examples", "15", "--workers", "1", "--seed", "1", "--no-color"),
    ]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=270)
    except subprocess.TimeoutExpired as slow:
        output = slow.stdout.decode(errors="replace") if isinstance(slow.stdout, bytes) else slow.stdout
        pytest.fail(f"schemathesis ran over 270 s; its output so far:\n{(output or '')[-4000:]}")
    report = result.stdout[-4000:] + result.stderr[-2000:]
    assert result.returncode == 0, report
    assert "passed" in report and "Selected: 46/46" in report, report
    assert "Traceback" not in process.log()


YAMLISH = st.text(alphabet=st.sampled_from([*"[]{}:,-&*!|>'\"#%@` \n\tab01.", "\x00", "é"]), max_size=400)


@given(text=st.one_of(YAMLISH, st.text(max_size=200)))
@settings(max_examples=300, deadline=None, database=None)
def test_the_yaml_loaders_answer_any_text_with_a_config_error_at_worst(text: str) -> None:
    for load in (
        lambda: parse_plugin(text, "fuzz.yaml"),
        lambda: validate_document(Settings, parse_yaml_text(text, "hatchway.yaml"), "hatchway.yaml"),
    ):
        try:
            load()
        except ConfigError:
            pass


@given(raw=st.binary(max_size=600))
@settings(max_examples=300, deadline=None, database=None)
def test_an_inline_plugin_header_of_any_bytes_is_a_plugin_or_a_400(raw: bytes) -> None:
    try:
        decode_inline_plugin("hatchway-mcp-plugin", base64.b64encode(raw).decode())
    except InvalidRequest as exc:
        assert exc.code == "invalid_plugin"
