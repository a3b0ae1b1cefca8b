"""``hatchway mcp probe``: connect to one MCP server with the gateway's own client and show what it offers.

Only the command's options live here; ``cli/mcp_probe.py`` holds the work and is imported when the
command runs, so other commands (and ``--help``) don't load the MCP SDK.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hatchway.cli.program import DEFAULT_CONFIG, ConfigOption, app, examples

mcp_app = typer.Typer(help="MCP servers: diagnose one with the gateway's own client.", no_args_is_help=True)
app.add_typer(mcp_app, name="mcp", rich_help_panel="Check configuration")


@mcp_app.command(
    "probe",
    epilog=examples(
        'hatchway mcp probe http://127.0.0.1:8766/mcp --call search_web --args \'{"query": "MCP"}\'',
        "hatchway mcp probe http://127.0.0.1:3001/sse --sse",
        "hatchway mcp probe --command npx --arg=-y --arg=@modelcontextprotocol/server-everything",
        "PROBE_TOKEN=… hatchway mcp probe https://mcp.example.com/mcp --bearer-env PROBE_TOKEN",
        "hatchway mcp probe --plugin plugins/billing.yaml --server billing --org acme",
        "hatchway mcp probe https://mcp.example.com/mcp --oauth --dpop",
        "hatchway mcp probe https://mcp.example.com/mcp --client-id wl --assertion-file "
        "/var/run/secrets/tokens/mcp",
        "hatchway mcp probe https://mcp.example.com/mcp --client-id app --client-secret-env SECRET "
        "--idp-token-url https://idp.example.com/token --subject-token-file id_token.jwt",
        "hatchway mcp probe http://127.0.0.1:8766/mcp --json",
    )
    + "\n\nExit codes: 0 ok; 1 the called tool returned an error; 2 bad options; 3 authentication "
    "failed; 4 unreachable or no answer in time; 5 protocol error.",
)
def probe(
    url: Annotated[
        str | None, typer.Argument(help="The server's URL (streamable HTTP unless --sse).")
    ] = None,
    sse: Annotated[bool, typer.Option("--sse", help="Use the legacy HTTP+SSE transport.")] = False,
    command: Annotated[str | None, typer.Option("--command", help="Run a stdio server.")] = None,
    arg: Annotated[list[str] | None, typer.Option("--arg", help="An argument of --command (repeat).")] = None,
    bearer_env: Annotated[
        str | None, typer.Option("--bearer-env", help="Env var holding a bearer token.")
    ] = None,
    bearer_stdin: Annotated[
        bool, typer.Option("--bearer-stdin", help="Read a bearer token on stdin.")
    ] = False,
    oauth_token_url: Annotated[
        str | None, typer.Option("--oauth-token-url", help="OAuth token endpoint (discovered when omitted).")
    ] = None,
    client_id: Annotated[str | None, typer.Option("--client-id", help="OAuth client id.")] = None,
    client_secret_stdin: Annotated[
        bool, typer.Option("--client-secret-stdin", help="Read the OAuth client secret on stdin.")
    ] = False,
    client_secret_env: Annotated[
        str | None, typer.Option("--client-secret-env", help="Env var holding the OAuth client secret.")
    ] = None,
    private_key_file: Annotated[
        Path | None, typer.Option("--private-key-file", help="PEM key (private_key_jwt).")
    ] = None,
    private_key_stdin: Annotated[
        bool, typer.Option("--private-key-stdin", help="Read the PEM key (private_key_jwt) on stdin.")
    ] = False,
    client_auth: Annotated[
        str | None,
        typer.Option("--client-auth", help="client_secret_basic, client_secret_post or private_key_jwt."),
    ] = None,
    scope: Annotated[list[str] | None, typer.Option("--scope", help="OAuth scope (repeat).")] = None,
    kid: Annotated[str | None, typer.Option("--kid", help="Key id for private_key_jwt.")] = None,
    audience: Annotated[
        str | None, typer.Option("--audience", help="Assertion audience for private_key_jwt.")
    ] = None,
    plugin: Annotated[
        Path | None, typer.Option("--plugin", help="Take the server from this plugin file.")
    ] = None,
    server: Annotated[str | None, typer.Option("--server", help="The server id in --plugin.")] = None,
    org: Annotated[str | None, typer.Option("--org", help="Whose vault holds --plugin's secrets.")] = None,
    assertion_file: Annotated[
        Path | None,
        typer.Option(
            "--assertion-file", help="A workload's assertion (jwt_bearer grant), re-read per exchange."
        ),
    ] = None,
    assertion_env: Annotated[
        str | None,
        typer.Option("--assertion-env", help="Env var holding a workload's assertion (jwt_bearer)."),
    ] = None,
    assertion_stdin: Annotated[
        bool, typer.Option("--assertion-stdin", help="Read a workload's assertion (jwt_bearer) on stdin.")
    ] = False,
    idp_token_url: Annotated[
        str | None,
        typer.Option(
            "--idp-token-url", help="Enterprise IdP token endpoint: exchange an identity token for an ID-JAG."
        ),
    ] = None,
    idp_client_id: Annotated[
        str | None, typer.Option("--idp-client-id", help="The client id at the enterprise IdP.")
    ] = None,
    subject_token_file: Annotated[
        Path | None,
        typer.Option("--subject-token-file", help="The identity token exchanged at --idp-token-url."),
    ] = None,
    subject_token_env: Annotated[
        str | None,
        typer.Option("--subject-token-env", help="Env var holding the identity token (--idp-token-url)."),
    ] = None,
    subject_token_stdin: Annotated[
        bool,
        typer.Option("--subject-token-stdin", help="Read the identity token (--idp-token-url) on stdin."),
    ] = False,
    dpop: Annotated[
        bool,
        typer.Option("--dpop", help="--oauth: ask for DPoP-bound tokens and prove them on each request."),
    ] = False,
    oauth: Annotated[
        bool,
        typer.Option(
            "--oauth",
            help="Authorize as yourself (authorization code + PKCE): prints the link, opens a browser "
            "and waits for the redirect on a loopback port.",
        ),
    ] = False,
    oauth_headless: Annotated[
        bool,
        typer.Option(
            "--oauth-headless",
            help="Like --oauth, but follow the authorization endpoint's redirect without a browser "
            "(test authorization servers that approve at once).",
        ),
    ] = False,
    client_metadata_url: Annotated[
        str | None,
        typer.Option(
            "--client-metadata-url", help="--oauth: an https Client ID Metadata Document to use as client id."
        ),
    ] = None,
    no_browser: Annotated[
        bool, typer.Option("--no-browser", help="--oauth: print the link only; do not open a browser.")
    ] = False,
    redirect_port: Annotated[
        int,
        typer.Option("--redirect-port", help="--oauth: the loopback port of the redirect.", min=1, max=65535),
    ] = 8976,
    call: Annotated[
        list[str] | None, typer.Option("--call", help="Call this tool after listing (repeat for several).")
    ] = None,
    args: Annotated[
        list[str] | None,
        typer.Option("--args", help="The arguments of the --call in the same position, as a JSON object."),
    ] = None,
    answer: Annotated[
        str | None,
        typer.Option(
            "--answer",
            help="Accept the tools' questions (MRTR elicitation) with this JSON object over the "
            "schema's defaults; without it they are declined.",
        ),
    ] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds for the whole probe.", min=0.1)] = 30.0,
    json_output: Annotated[
        bool,
        typer.Option(
            "--json", help="Print the server, its tools (schemas as received) and the calls as JSON."
        ),
    ] = False,
    config: ConfigOption = DEFAULT_CONFIG,
) -> None:
    """Connect to one MCP server as the gateway would: print its name, version, protocol and tools."""
    from hatchway.cli.mcp_probe import run_probe
    from hatchway.cli.mcp_target import TokenSource

    run_probe(
        url=url,
        sse=sse,
        command=command,
        arg=arg,
        bearer_env=bearer_env,
        bearer_stdin=bearer_stdin,
        oauth_token_url=oauth_token_url,
        client_id=client_id,
        client_secret_stdin=client_secret_stdin,
        client_secret_env=client_secret_env,
        private_key_file=private_key_file,
        private_key_stdin=private_key_stdin,
        client_auth=client_auth,
        scope=scope,
        kid=kid,
        audience=audience,
        assertion=TokenSource(assertion_file, assertion_env, assertion_stdin),
        subject_token=TokenSource(subject_token_file, subject_token_env, subject_token_stdin),
        idp_token_url=idp_token_url,
        idp_client_id=idp_client_id,
        dpop=dpop,
        json_output=json_output,
        plugin=plugin,
        server=server,
        org=org,
        oauth=oauth,
        oauth_headless=oauth_headless,
        client_metadata_url=client_metadata_url,
        redirect_port=redirect_port,
        open_browser=not no_browser,
        calls=call or [],
        args=args or [],
        answer=answer,
        timeout=timeout,
        config=config,
    )


@mcp_app.command(
    "endpoints",
    epilog=examples("hatchway mcp endpoints --config hatchway.yaml"),
)
def endpoints(config: ConfigOption = DEFAULT_CONFIG) -> None:
    """List the virtual MCP servers hatchway.yaml serves at /mcp/<name> (mcp_endpoints)."""
    from rich.table import Table

    from hatchway.cli.program import console, settings_from

    settings = settings_from(config)
    table = Table(title=f"{len(settings.mcp_endpoints)} MCP endpoints", title_justify="left")
    for column in ("path", "tools of", "tools", "organisations"):
        table.add_column(column)
    for endpoint in settings.mcp_endpoints:
        source = f"agent {endpoint.agent}" if endpoint.agent else f"plugin {endpoint.plugin}"
        tools = "*" if endpoint.tools == "*" else ", ".join(endpoint.tools)
        orgs = ", ".join(endpoint.organisations) if endpoint.organisations is not None else "all"
        table.add_row(f"/mcp/{endpoint.name}", source, tools, orgs)
    console.print(table)
