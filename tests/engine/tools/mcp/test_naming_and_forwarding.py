"""Tool names the model sees, and which client headers reach an MCP server."""

from __future__ import annotations

import re

import pytest

from hatchway.engine.tools.mcp.forwarding import forwarded_headers
from hatchway.engine.tools.mcp.naming import MAX_TOOL_NAME, namespaced_name
from hatchway.errors import InvalidRequest

PROVIDER_SAFE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def test_short_names_are_server_double_underscore_tool() -> None:
    assert namespaced_name("pesquisa_web", "search_web") == "pesquisa_web__search_web"


def test_long_names_are_cut_to_64_and_stay_unique() -> None:
    a = namespaced_name("s" * 40, "t" * 40 + "_one")
    b = namespaced_name("s" * 40, "t" * 40 + "_two")
    assert len(a) == len(b) == MAX_TOOL_NAME and a != b
    assert PROVIDER_SAFE.match(a) and a.startswith("s" * 40 + "__")
    assert namespaced_name("s" * 40, "t" * 40 + "_one") == a  # stable


def test_characters_providers_refuse_are_replaced_and_hashed() -> None:
    name = namespaced_name("files", "read.file/v2")
    assert PROVIDER_SAFE.match(name) and name.startswith("files__read_file_v2_")
    assert name != namespaced_name("files", "read_file_v2")


def test_only_listed_headers_are_forwarded_and_never_credentials() -> None:
    request = {"x-tenant-id": "t1", "x-trace-id": "tr", "authorization": "Bearer hw-secret", "cookie": "c=1"}
    assert forwarded_headers(["X-Tenant-Id", "Authorization", "cookie", "x-missing"], request) == {
        "x-tenant-id": "t1"
    }


def test_values_with_cr_or_lf_are_refused() -> None:
    with pytest.raises(InvalidRequest) as caught:
        forwarded_headers(["x-tenant-id"], {"x-tenant-id": "t1\r\nx-evil: 1"})
    assert caught.value.param == "x-tenant-id"
