"""Plugin YAML v1: the seed's schema, defaults, and precise errors with field paths."""

from __future__ import annotations

import pytest

from hatchway.config.plugin import PluginConfig, load_plugin, parse_plugin
from hatchway.errors import ConfigError

SEED_EXAMPLE = """
version: "1"
mcp_servers:
  - id: pesquisa_web
    url: "https://mcp.example.com/search"
    auth:
      type: bearer
      secret_ref: "secret.mcp_search_api_key"
    tools: [search_web, fetch_page]
    forward_headers: ["x-tenant-id", "x-trace-id"]
    timeout_ms: 5000
    max_retries: 2
  - id: interpretador_codigo
    url: "https://mcp.example.com/code"
    auth: {type: api_key, header: "X-Api-Key", secret_ref: "secret.mcp_code_api_key"}
    tools: "*"
    timeout_ms: 15000
  - id: billing_tools
    url: "https://mcp.example.com/billing"
    auth:
      type: oauth
      token_url: "https://idp.example.com/oauth/token"
      client_id: "floopy-agent"
      secret_ref: "secret.mcp_oauth_client_secret"
      scopes: ["billing.read", "billing.write"]
    tools: "*"
agent:
  max_rounds: 10
  stream_mode: final_only
  tool_call_parallel: true
  tool_cache_ttl_seconds: 300
  prompt_guard_on_tool_output: true
"""


def problems(text: str) -> dict[str, str]:
    with pytest.raises(ConfigError) as caught:
        parse_plugin(text, "plugin.yaml")
    return dict(caught.value.problems)


def test_the_seed_example_is_valid_and_read_as_written() -> None:
    plugin = parse_plugin(SEED_EXAMPLE, "seed")
    search, code, billing = plugin.mcp_servers
    assert search.tools == ["search_web", "fetch_page"] and search.exposes("search_web")
    assert not search.exposes("delete_everything")
    assert search.forward_headers == ["x-tenant-id", "x-trace-id"] and search.timeout_ms == 5000
    assert code.tools == "*" and code.exposes("anything") and code.auth.header == "X-Api-Key"
    assert billing.auth.scopes == ["billing.read", "billing.write"] and billing.kind == "streamable_http"
    assert billing.auth.client_auth is None and billing.auth.method == "client_secret_basic"  # RFC 6749
    assert plugin.agent.tool_cache_ttl_seconds == 300 and plugin.agent.prompt_guard_on_tool_output


def test_defaults() -> None:
    plugin = parse_plugin('version: "1"\nmcp_servers: [{id: s, url: "http://mcp.local/mcp"}]\n', "p")
    [server] = plugin.mcp_servers
    assert (server.timeout_ms, server.max_retries, server.tools, server.auth.type) == (10_000, 2, "*", "none")
    assert server.kind == "streamable_http"
    agent = plugin.agent
    assert (agent.max_rounds, agent.stream_mode, agent.tool_call_parallel, agent.tool_cache_ttl_seconds) == (
        10,
        "final_only",
        True,
        0,
    )
    assert PluginConfig.model_validate({"version": 1}).version == "1"


def test_stdio_and_sse_servers() -> None:
    plugin = parse_plugin(
        'version: "1"\nmcp_servers:\n'
        "  - {id: local, command: python, args: [server.py]}\n"
        "  - {id: legacy, url: 'http://mcp.local/sse', transport: sse}\n",
        "p",
    )
    assert [s.kind for s in plugin.mcp_servers] == ["stdio", "sse"]


@pytest.mark.parametrize(
    ("server", "path", "fragment"),
    [
        ("{id: s, url: 'http://x', colour: red}", "mcp_servers[0].colour", "unknown key"),
        ("{id: s, url: 'http://x', timeout_ms: '5000'}", "mcp_servers[0].timeout_ms", "integer"),
        ("{id: s, url: 'http://x', max_retries: -1}", "mcp_servers[0].max_retries", "greater than"),
        ("{id: s, url: 'http://x', tools: search}", "mcp_servers[0].tools", 'or "*"'),
        ("{id: s}", "mcp_servers[0].url", "exactly one of url"),
        ("{id: s, url: 'ftp://x'}", "mcp_servers[0].url", "http(s) URL"),
        ("{id: 'a b', url: 'http://x'}", "mcp_servers[0].id", "pattern"),
        (
            "{id: s, url: 'http://x', auth: {type: bearer, secret_ref: 'secret.a/b'}}",
            "mcp_servers[0].auth.secret_ref",
            "secret.a/b",
        ),
        (
            "{id: s, url: 'http://x', auth: {type: bearer, secret_ref: 'secret.a.b'}}",
            "mcp_servers[0].auth.secret_ref",
            "secret.a.b",
        ),
        (
            "{id: s, url: 'http://x', auth: {type: bearer, secret_ref: 'secret.%s'}}" % ("k" * 65),
            "mcp_servers[0].auth.secret_ref",
            "at most 64",
        ),
        (
            "{id: s, url: 'http://x', auth: {type: bearer, secret_ref: 'mcp_key'}}",
            "mcp_servers[0].auth.secret_ref",
            "secret.<name>",
        ),
        ("{id: s, url: 'http://x', auth: {type: bearer}}", "mcp_servers[0].auth.secret_ref", "required"),
        ("{id: s, url: 'http://x', auth: {type: magic}}", "mcp_servers[0].auth.type", "'oauth'"),
        (
            "{id: s, url: 'http://x', auth: {type: oauth, client_id: c, secret_ref: secret.s}}",
            "mcp_servers[0].auth.token_url",
            "required",
        ),
        (
            "{id: s, url: 'http://x', auth: {type: oauth, token_url: 'https://idp/t', secret_ref: secret.s}}",
            "mcp_servers[0].auth.client_id",
            "required",
        ),
        (
            "{id: s, url: 'http://x', auth: {type: oauth, token_url: 'https://idp/t', client_id: c}}",
            "mcp_servers[0].auth.secret_ref",
            "required",
        ),
        (
            "{id: s, url: 'http://x', auth: {type: oauth, token_url: 'https://u:p@idp/t', client_id: c, "
            "secret_ref: secret.s}}",
            "mcp_servers[0].auth.token_url",
            "must not carry credentials",
        ),
        (
            "{id: s, url: 'http://x', auth: {type: oauth, token_url: 'https://idp/t', client_id: c, "
            "secret_ref: secret.s, token_endpoint_auth_method: tls_client_auth}}",
            "mcp_servers[0].auth.token_endpoint_auth_method",
            "'client_secret_post'",
        ),
        (
            "{id: s, url: 'http://x', auth: {type: bearer, secret_ref: secret.s, "
            "token_endpoint_auth_method: client_secret_post}}",
            "mcp_servers[0].auth.client_auth",
            "only apply to auth type oauth",
        ),
        (
            "{id: s, url: 'http://x', auth: {type: oauth, token_url: 'https://idp/t', client_id: c, "
            "secret_ref: secret.s, scopes: ['billing.read billing.write']}}",
            "mcp_servers[0].auth.scopes[0]",
            "one scope per entry",
        ),
        (
            "{id: s, command: python, auth: {type: bearer, secret_ref: secret.k}}",
            "mcp_servers[0].auth.type",
            "stdio",
        ),
        ("{id: s, url: 'http://x', args: [a]}", "mcp_servers[0].args", "stdio"),
        (
            "{id: s, url: 'http://x', auth: {type: oauth, token_url: 'https://idp/t', client_id: c, "
            "client_auth: private_key_jwt}}",
            "mcp_servers[0].auth.private_key_ref",
            "required with client_auth private_key_jwt",
        ),
        (
            "{id: s, url: 'http://x', auth: {type: oauth, token_url: 'https://idp/t', client_id: c, "
            "client_auth: private_key_jwt, private_key_ref: secret.k, secret_ref: secret.s}}",
            "mcp_servers[0].auth.secret_ref",
            "not used with client_auth private_key_jwt",
        ),
        (
            "{id: s, url: 'http://x', auth: {type: oauth, token_url: 'https://idp/t', client_id: c, "
            "secret_ref: secret.s, kid: k1}}",
            "mcp_servers[0].auth.kid",
            "only used with client_auth private_key_jwt",
        ),
        (
            "{id: s, url: 'http://x', auth: {type: oauth, token_url: 'https://idp/t', client_id: c, "
            "client_auth: mtls, secret_ref: secret.s}}",
            "mcp_servers[0].auth.client_auth",
            "private_key_jwt",
        ),
        (
            "{id: s, url: 'http://x', auth: {type: bearer, secret_ref: secret.s, "
            "client_auth: private_key_jwt}}",
            "mcp_servers[0].auth.client_auth",
            "only apply to auth type oauth",
        ),
        (
            "{id: s, url: 'http://x', auth: {type: oauth, token_url: 'https://idp/t', client_id: c, "
            "client_auth: private_key_jwt, private_key_ref: key.pem}}",
            "mcp_servers[0].auth.private_key_ref",
            "secret.<name>",
        ),
    ],
)
def test_each_mistake_is_reported_at_its_field_path(server: str, path: str, fragment: str) -> None:
    found = problems(f'version: "1"\nmcp_servers:\n  - {server}\n')
    assert path in found, found
    assert fragment in found[path]


def test_oauth_token_url_must_be_https_with_the_seed_message() -> None:
    text = (
        'version: "1"\nmcp_servers:\n  - {id: a, url: "https://a"}\n'
        "  - {id: b, url: 'https://b', auth: {type: oauth, token_url: 'http://idp.local/token', "
        "client_id: c, secret_ref: secret.s}}\n"
    )
    with pytest.raises(ConfigError) as caught:
        parse_plugin(text, "plugin.yaml")
    assert "mcp_servers[1].auth.token_url: must be https (got http://idp.local/token)" in caught.value.message


@pytest.mark.parametrize(
    "header",
    [
        "Authorization",
        "proxy-authorization",
        "Cookie",
        "host",
        "Connection",
        "content-length",
        "transfer-encoding",
        "te",
        "upgrade",
        "keep-alive",
    ],
)
def test_never_forwarded_headers_are_accepted_and_dropped(header: str) -> None:
    plugin = parse_plugin(
        f'version: "1"\nmcp_servers:\n  - {{id: s, url: "http://x", forward_headers: [x-ok, {header}]}}\n',
        "p.yaml",
    )
    assert plugin.mcp_servers[0].dropped_headers == [header.lower()]


def test_api_key_header_cannot_be_forwarded_too() -> None:
    found = problems(
        'version: "1"\nmcp_servers:\n  - {id: s, url: "http://x", forward_headers: [x-api-key], '
        "auth: {type: api_key, secret_ref: secret.k}}\n"
    )
    assert "API key" in found["mcp_servers[0].forward_headers[0]"]


def test_every_problem_is_reported_at_once_including_duplicate_ids() -> None:
    found = problems(
        'version: "1"\nmcp_servers:\n'
        "  - {id: a, url: 'http://a'}\n"
        "  - {id: a, url: 'http://b', timeout_ms: fast}\n"
        "agent: {max_rounds: 0, stream_mode: always, surprise: 1}\n"
    )
    assert set(found) == {
        "mcp_servers[1].id",
        "mcp_servers[1].timeout_ms",
        "agent.max_rounds",
        "agent.stream_mode",
        "agent.surprise",
    }
    assert "duplicate" in found["mcp_servers[1].id"]


def test_duplicate_ids_alone() -> None:
    found = problems('version: "1"\nmcp_servers: [{id: a, url: "http://a"}, {id: a, url: "http://b"}]\n')
    assert found == {"mcp_servers[1].id": "duplicate server id 'a'"}


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("mcp_servers: []\n", "version"),
        ('version: "2"\n', "version"),
        ('version: "1"\nagent: {max_rounds: "10"}\n', "agent.max_rounds"),
        ('version: "1"\nagent: {tool_call_parallel: "yes"}\n', "agent.tool_call_parallel"),
        ('version: "1"\nagent: {tool_cache_ttl_seconds: -1}\n', "agent.tool_cache_ttl_seconds"),
        ('version: "1"\nmcp_servers: {id: a}\n', "mcp_servers"),
    ],
)
def test_top_level_and_agent_mistakes(text: str, path: str) -> None:
    assert path in problems(text)


def test_bad_yaml_names_line_and_column() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_plugin('version: "1"\nmcp_servers: [{id: a\n', "plugin.yaml")
    assert "line" in caught.value.message and "not valid YAML" in caught.value.message


def test_private_key_jwt_takes_a_key_from_the_vault_and_a_loopback_token_url() -> None:
    plugin = parse_plugin(
        'version: "1"\nmcp_servers:\n'
        "  - id: erp\n"
        "    url: https://erp.example.com/mcp\n"
        "    auth: {type: oauth, token_url: 'http://127.0.0.1:8081/token', client_id: erp-agent,\n"
        "           client_auth: private_key_jwt, private_key_ref: secret.erp_key, kid: k-2026,\n"
        "           audience: 'http://127.0.0.1:8081'}\n",
        "p",
    )
    auth = plugin.mcp_servers[0].auth
    assert (auth.method, auth.private_key_ref, auth.kid, auth.secret_ref) == (
        "private_key_jwt",
        "secret.erp_key",
        "k-2026",
        None,
    )


def test_an_integer_longer_than_python_reads_is_a_config_error_naming_its_line(tmp_path) -> None:
    path = tmp_path / "plugin.yaml"
    path.write_text('version: "1"\nagent:\n  max_rounds: ' + "9" * 5_000 + "\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_plugin(path)
    assert caught.value.message.startswith(f"{path}: line 3, column 15: an integer of 5000 digits")
