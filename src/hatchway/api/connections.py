"""Per-user OAuth routes: the consent link, the authorization server's redirect, the Client ID
Metadata Document, and ``GET/DELETE /v1/connections`` (the caller's end user's grants).

``/oauth/connect/{id}`` and ``/oauth/callback`` are opened by the end user's browser, which holds no
Hatchway key: the consent id and the ``state`` are the capabilities (random, single use, expiring,
bound to the organisation, the end user and the server; see ``credentials/grants.py``). Their answers
are short HTML pages that say what happened and never echo a code or a token.
"""

from __future__ import annotations

import html
import logging
from typing import Annotated
from urllib.parse import urlsplit

import orjson
from fastapi import APIRouter, Depends, Path, Request
from starlette.responses import HTMLResponse, Response

from hatchway.access.roles import narrows_to_end_user
from hatchway.api.auth import audit, authenticate, gateway_of
from hatchway.config.plugin import McpServerConfig, PluginConfig
from hatchway.credentials.grants import CLIENT_METADATA_PATH, CONNECT_PATH
from hatchway.credentials.store import OAuthConsentRow
from hatchway.engine.context import RunContext
from hatchway.errors import HatchwayError, InvalidRequest, NotFound
from hatchway.principal import Principal, end_user_of

logger = logging.getLogger(__name__)
router = APIRouter()
_COMPLETE_SECONDS = 30.0
ConsentId = Annotated[str, Path(max_length=64, json_schema_extra={"pattern": "^oc_[A-Za-z0-9_-]+$"})]


def _page(title: str, text: str, status: int = 200) -> HTMLResponse:
    body = (
        "<!doctype html><html><head><meta charset='utf-8'><title>"
        f"{html.escape(title)}</title></head><body><h1>{html.escape(title)}</h1>"
        f"<p>{html.escape(text)}</p></body></html>"
    )
    return HTMLResponse(body, status_code=status, headers={"cache-control": "no-store"})


@router.get(CONNECT_PATH + "/{consent_id}", include_in_schema=False)
async def connect(request: Request, consent_id: ConsentId) -> Response:
    """A page naming what is being connected, for whom, and where the person will sign in, with the
    way on to the authorization server (not a bare redirect: the link is not a way to send anyone
    anywhere on the gateway's name, and a forwarded link says whose account it would connect)."""
    found = await gateway_of(request).user_grants.pending_consent(consent_id)
    if found is None:
        return _page(
            "Link expired", "This link has expired or was already used. Ask again in the conversation.", 404
        )
    url, row = found
    host = urlsplit(url).hostname or "?"
    body = (
        "<!doctype html><html><head><meta charset='utf-8'><title>Connect an account</title></head><body>"
        f"<h1>Connect {html.escape(row.server_id)}</h1>"
        f"<p>This connects your account on {html.escape(row.server_id)} to the assistant for the user "
        f"<strong>{html.escape(row.end_user)}</strong>. Continue only if that is you.</p>"
        f"<p>You will sign in at <strong>{html.escape(host)}</strong>.</p>"
        f"<p><a id='continue' href='{html.escape(url, quote=True)}'>Continue to {html.escape(host)}</a></p>"
        "</body></html>"
    )
    return HTMLResponse(body, headers={"cache-control": "no-store", "referrer-policy": "no-referrer"})


@router.get("/oauth/callback", include_in_schema=False)
async def callback(request: Request) -> Response:
    """The authorization server's redirect: the grant is completed at once, then the user goes back."""
    query = request.query_params
    if "error" in query:  # not echoed: anyone can put any text in this URL
        return _page("Not connected", "The authorization server did not grant access.", 400)
    state, code = query.get("state"), query.get("code")
    if not state or not code:
        return _page("Not connected", "The redirect carries no code or state.", 400)
    gw = gateway_of(request)
    row = await gw.user_grants.accept_callback(state, code, query.get("iss"))
    if row is None:
        return _page("Not connected", "This authorization is unknown, expired or already used.", 400)
    try:
        await _complete(request, row)
    except HatchwayError as exc:
        logger.info("per-user OAuth: completing %s for %s failed (%s)", row.server_id, row.org_id, exc.code)
        return _page("Not connected", f"The authorization could not be completed ({exc.code}).", 502)
    return _page("Connected", f"Your account is connected to {row.server_id}. Go back to the conversation.")


async def _complete(request: Request, row: OAuthConsentRow) -> None:
    """Redeem the code now, through the client code every call uses (a listing of the tools)."""
    from hatchway.engine.tools.mcp.plugin_client import PluginMcpClient  # the MCP SDK: see mcp/pool.py

    gw = gateway_of(request)
    server = McpServerConfig.model_validate(await gw.user_grants.consent_server(row))
    org = await gw.orgs.get_org(row.org_id)
    ctx = RunContext.from_headers(
        Principal(org_id=org.id, org_name=org.name),
        {"x-on-behalf-of": row.end_user},
        deadline_seconds=_COMPLETE_SECONDS,
    )
    # This user's listing may still be fresh from before: dropped, so the request below reaches the
    # server and redeems the code now, while it is valid.
    await gw.mcp_pool.listing(server, org.id, trusted=row.trusted, user=row.end_user).forget()
    client = PluginMcpClient(
        PluginConfig(version="1", mcp_servers=[server]),
        trusted=row.trusted,
        pool=gw.mcp_pool,
        credentials=gw.mcp_credentials,
        guard_egress=not row.trusted and not gw.settings.allow_private_mcp_urls,
    )
    await client.list_tools(server, ctx)


@router.get(CLIENT_METADATA_PATH, include_in_schema=False)
async def client_metadata(request: Request) -> Response:
    """Hatchway's Client ID Metadata Document: its URL is the client id authorization servers see."""
    grants = gateway_of(request).user_grants
    url = grants.client_metadata_url
    if url is None:
        raise NotFound("no client metadata document: public_base_url is not https")
    document = {
        "client_id": url,
        "client_name": "Hatchway",
        "redirect_uris": [grants.redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    }
    return Response(orjson.dumps(document), media_type="application/json")


def _end_user(request: Request, principal: Principal) -> str:
    user = end_user_of(principal, request.headers)
    if not user:
        raise InvalidRequest(
            "X-On-Behalf-Of: required; connections belong to an end user", param="X-On-Behalf-Of"
        )
    return user


@router.get("/v1/connections")
async def list_connections(
    request: Request, principal: Annotated[Principal, Depends(authenticate)]
) -> Response:
    """Per-user OAuth connections: the end user's (``X-On-Behalf-Of``), or without it the whole
    organisation's (the dashboard's view: a viewer or admin key; an app key must name its end user);
    server, scopes, expiry, never a token."""
    if narrows_to_end_user(principal):
        user: str | None = _end_user(request, principal)
    else:
        user = end_user_of(principal, request.headers)
    found = await gateway_of(request).user_grants.connections(principal.org_id, user)
    payload = {"object": "list", "data": [c.to_dict() for c in found]}
    return Response(orjson.dumps(payload), media_type="application/json")


@router.delete("/v1/connections/{server}")
async def revoke_connection(
    request: Request,
    server: Annotated[str, Path(max_length=128)],
    principal: Annotated[Principal, Depends(authenticate)],
) -> Response:
    """Forget the end user's grant of ``server``: the next call asks them to connect again."""
    user = _end_user(request, principal)
    removed = await gateway_of(request).user_grants.revoke(principal.org_id, user, server)
    if not removed:
        raise NotFound(f"no connection to '{server}' for this user")
    await audit(request, principal, "connection.revoke", f"connection:{server}", {"end_user": user})
    payload = {"object": "connection.deleted", "server": server, "deleted": True}
    return Response(orjson.dumps(payload), media_type="application/json")
