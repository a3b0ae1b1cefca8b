"""What ``hatchway mcp probe`` does; imported only when the command runs (the MCP SDK is heavy).

Exit codes: 0 connected (and the call, if any, succeeded); 1 the called tool reported an error or
something else failed; 2 bad options (URL, JSON, missing secret); 3 authentication failed; 4 the
server could not be reached or did not answer in time; 5 the server broke the protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path
from typing import Any

import orjson
import typer
from rich.table import Table

from hatchway.cli.mcp_target import (
    PROBE_SERVER_ID,
    OAuthInputs,
    SecretInputs,
    Target,
    TokenSource,
    build_server,
)
from hatchway.cli.oauth_discovery import AuthorizationServer
from hatchway.cli.probe_session import (
    GivenSecrets,
    ProbeGrants,
    ProbeReport,
    ToolCall,
    failure_kind,
    probe_context,
    probe_server,
)
from hatchway.cli.program import console, err_console, fail, settings_from
from hatchway.config.plugin import McpServerConfig, load_plugin
from hatchway.credentials import VaultCredentials
from hatchway.credentials.consent import HeadlessConsent, LoopbackConsent
from hatchway.engine.tools.mcp.inputs import GivenAnswers
from hatchway.errors import ConfigError, HatchwayError, ToolError
from hatchway.store.cache import MemoryCache
from hatchway.store.db import Database
from hatchway.store.orgs import OrgStore
from hatchway.vault import Vault, load_master_key

EXIT_TOOL_ERROR, EXIT_USAGE, EXIT_AUTH, EXIT_UNREACHABLE, EXIT_PROTOCOL = 1, 2, 3, 4, 5
_EXIT_BY_KIND = {"auth": EXIT_AUTH, "unreachable": EXIT_UNREACHABLE, "protocol": EXIT_PROTOCOL}


def run_probe(
    *,
    url: str | None,
    sse: bool,
    command: str | None,
    arg: list[str] | None,
    bearer_env: str | None,
    bearer_stdin: bool,
    oauth_token_url: str | None,
    client_id: str | None,
    client_secret_stdin: bool,
    client_secret_env: str | None,
    private_key_file: Path | None,
    private_key_stdin: bool,
    client_auth: str | None,
    scope: list[str] | None,
    kid: str | None,
    audience: str | None,
    plugin: Path | None,
    server: str | None,
    org: str | None,
    calls: list[str],
    args: list[str],
    timeout: float,
    config: Path,
    oauth: bool = False,
    oauth_headless: bool = False,
    client_metadata_url: str | None = None,
    redirect_port: int = 8976,
    open_browser: bool = True,
    answer: str | None = None,
    assertion: TokenSource | None = None,
    subject_token: TokenSource | None = None,
    idp_token_url: str | None = None,
    idp_client_id: str | None = None,
    dpop: bool = False,
    json_output: bool = False,
) -> None:
    """The body of ``hatchway mcp probe`` (see ``cli/mcp.py`` for the options)."""
    tool_calls = _tool_calls(calls, args)
    answerer = GivenAnswers(_json_object(answer, "--answer") if answer is not None else None)
    target = Target(url=url, sse=sse, command=command, args=arg or [], timeout_ms=int(timeout * 1000))
    grant = "authorization_code" if oauth or oauth_headless else None
    consent = _consent(oauth, oauth_headless, redirect_port, timeout, open_browser=open_browser)
    inputs = SecretInputs(
        bearer_env,
        bearer_stdin,
        client_secret_env,
        client_secret_stdin,
        private_key_file,
        private_key_stdin,
        assertion or TokenSource(),
        subject_token or TokenSource(),
    )
    try:
        token_refs = inputs.token_refs()
    except HatchwayError as exc:
        raise fail(exc.message, EXIT_USAGE) from None
    oauth_inputs = OAuthInputs(
        oauth_token_url,
        grant,
        client_id,
        client_auth,
        scope or [],
        kid,
        audience,
        dpop=dpop,
        idp_token_url=idp_token_url,
        idp_client_id=idp_client_id,
        token_refs=token_refs,
    )
    if plugin is not None:
        run = _from_plugin(plugin, server, org, config, tool_calls, answerer, timeout)
    else:
        try:
            secrets = inputs.read(sys.stdin)  # before the spinner: stdin may be a terminal
        except HatchwayError as exc:
            raise fail(exc.message, EXIT_USAGE) from None
        grants = None
        if consent is not None:
            grants = ProbeGrants(
                consent,
                redirect_uri=consent.redirect_uri,
                client_id=client_id,
                client_metadata_url=client_metadata_url,
                auth_method=client_auth,
            )
        run = _from_options(target, oauth_inputs, secrets, tool_calls, answerer, grants, timeout)
    label = url or command or f"{plugin}#{server or ''}"
    # The loopback consent prints a link the person must follow: no spinner over it.
    status = err_console.status(f"Connecting to {label}…") if not oauth else contextlib.nullcontext()
    with status:
        report = _run(run, label)
    if json_output:
        _print_json(report)
    else:
        _print(report)
    failed = any(isinstance(outcome, ToolError) or outcome.is_error for _call, outcome in report.results)
    if failed:
        raise typer.Exit(EXIT_TOOL_ERROR)


def _consent(oauth: bool, headless: bool, port: int, timeout: float, *, open_browser: bool = True) -> Any:
    if oauth and headless:
        raise fail("give --oauth or --oauth-headless, not both", EXIT_USAGE)
    if headless:
        return HeadlessConsent(redirect_uri=f"http://127.0.0.1:{port}/callback", timeout=timeout)
    if oauth:
        return LoopbackConsent(
            port=port,
            announce=lambda link: err_console.print(
                f"Open this link to authorize:\n{link}", highlight=False, soft_wrap=True
            ),
            open_browser=open_browser,
            timeout=timeout,
        )
    return None


def _json_object(text: str, option: str) -> dict[str, Any]:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise fail(f"{option}: not valid JSON ({exc})", EXIT_USAGE) from None
    if not isinstance(value, dict):
        raise fail(f"{option}: must be a JSON object, e.g. '{{\"a\": 1}}'", EXIT_USAGE)
    return value


def _tool_calls(calls: list[str], args: list[str]) -> list[ToolCall]:
    if len(args) > len(calls):
        raise fail("--args needs a --call TOOL before it (one --args per --call)", EXIT_USAGE)
    arguments = [_json_object(text, "--args") for text in args]
    arguments += [{}] * (len(calls) - len(arguments))
    return [ToolCall(name, given) for name, given in zip(calls, arguments, strict=True)]


def _run(coroutine: Any, label: str) -> ProbeReport:
    try:
        return asyncio.run(coroutine)
    except ConfigError as exc:
        raise fail(exc.render().replace("\n", "; "), EXIT_USAGE) from None
    except ToolError as exc:
        # Errors name the server by its plugin id; a server given by URL is better named by it.
        message = exc.message.replace(f"{PROBE_SERVER_ID}: ", f"{label}: ", 1)
        raise fail(message, _EXIT_BY_KIND.get(failure_kind(exc), 1)) from None
    except HatchwayError as exc:
        raise fail(exc.message, EXIT_USAGE if exc.status_code < 500 else 1) from None


async def _from_options(
    target: Target,
    oauth: OAuthInputs,
    secrets: dict[str, str],
    calls: list[ToolCall],
    answerer: GivenAnswers,
    grants: ProbeGrants | None,
    seconds: float,
) -> ProbeReport:
    server, discovered = await build_server(target, oauth, secrets)
    if discovered is not None:
        _print_discovery(discovered)
    credentials = VaultCredentials(
        GivenSecrets(secrets), MemoryCache(), allow_private_hosts=True, user_grants=grants
    )
    ctx = probe_context(timeout=seconds)
    return await probe_server(server, credentials, ctx, calls=calls, answerer=answerer)


async def _from_plugin(
    path: Path,
    server_id: str | None,
    org: str | None,
    config: Path,
    calls: list[ToolCall],
    answerer: GivenAnswers,
    seconds: float,
) -> ProbeReport:
    server = _plugin_server(path, server_id)
    if server.auth.type == "none":
        credentials = VaultCredentials(GivenSecrets({}), MemoryCache())
        ctx = probe_context(timeout=seconds)
        return await probe_server(server, credentials, ctx, calls=calls, answerer=answerer)
    if org is None:
        raise fail(
            f"server '{server.id}' uses auth {server.auth.type}: give --org (and --config) for the vault", 2
        )
    settings = settings_from(config)
    db = Database(settings.database_url)
    try:
        await db.migrate()
        org_row = await OrgStore(db).get_org(org)
        vault = Vault(db, load_master_key(settings.master_key_file))
        credentials = VaultCredentials(vault, MemoryCache(), allow_private_hosts=True)
        ctx = probe_context(org_row.id, org_row.name, timeout=seconds)
        return await probe_server(server, credentials, ctx, calls=calls, answerer=answerer)
    finally:
        await db.close()


def _plugin_server(path: Path, server_id: str | None) -> McpServerConfig:
    plugin = load_plugin(path)
    ids = ", ".join(s.id for s in plugin.mcp_servers) or "none"
    if server_id is None:
        if len(plugin.mcp_servers) != 1:
            raise fail(f"{path}: give --server (servers: {ids})", EXIT_USAGE)
        return plugin.mcp_servers[0]
    found = plugin.server(server_id)
    if found is None:
        raise fail(f"{path}: no server '{server_id}' (servers: {ids})", EXIT_USAGE)
    return found


def _print_discovery(found: AuthorizationServer) -> None:
    err_console.print(
        f"discovered token endpoint {found.token_endpoint} (issuer {found.issuer}); "
        "put it in the plugin's auth.token_url",
        highlight=False,
    )


def _print_json(report: ProbeReport) -> None:
    """The report for scripts: the tools exactly as the client holds them (every schema keyword the
    server sent, ``$schema``/``$defs``/``$ref`` included), then each call's outcome."""
    results = []
    for call, outcome in report.results:
        if isinstance(outcome, ToolError):
            results.append({"tool": call.name, "error": {"code": outcome.code, "message": outcome.message}})
        else:
            results.append({"tool": call.name, "is_error": outcome.is_error, "text": outcome.text})
    document = {
        "server": {
            "name": report.server_name,
            "version": report.server_version,
            "protocol_version": report.protocol_version,
        },
        "tools": [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in report.tools],
        "calls": results,
    }
    sys.stdout.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")


def _print(report: ProbeReport) -> None:
    name = report.server_name or "(unnamed server)"
    version = f" {report.server_version}" if report.server_version else ""
    console.print(
        f"[bold]{name}[/]{version} — protocol {report.protocol_version or 'unknown'}", highlight=False
    )
    table = Table(title=f"{len(report.tools)} tools", title_justify="left")
    table.add_column("name", style="bold")
    table.add_column("description")
    table.add_column("arguments")
    for tool in report.tools:
        properties = (tool.input_schema or {}).get("properties") or {}
        required = set((tool.input_schema or {}).get("required") or [])
        arguments = ", ".join(f"{p}{'*' if p in required else ''}" for p in properties)
        table.add_row(tool.name, (tool.description or "").strip().split("\n")[0], arguments)
    console.print(table)
    for call, outcome in report.results:
        if isinstance(outcome, ToolError):
            console.print(f"call {call.name}: [red]failed[/] ({outcome.code})", highlight=False)
            console.print(outcome.message, highlight=False, markup=False, soft_wrap=True)
            continue
        status = "[red]error[/]" if outcome.is_error else "[green]ok[/]"
        console.print(f"call {call.name}: {status}", highlight=False)
        console.print(outcome.text, highlight=False, markup=False, soft_wrap=True)
