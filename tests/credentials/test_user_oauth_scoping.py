"""An inline plugin's per-user OAuth server may not take a vault client secret: its token endpoint is
named by the server at run time and cannot be checked against the secret's ``allowed_hosts``."""

from __future__ import annotations

import pytest

from hatchway.credentials.scoping import check_scope
from hatchway.errors import PermissionDenied
from hatchway.vault.store import Secret
from tests.support.server_configs import server


def test_a_client_secret_never_goes_to_a_token_endpoint_an_inline_server_names() -> None:
    per_user = server(
        "tickets",
        "https://mcp.example.com/mcp",
        type="oauth",
        grant="authorization_code",
        client_id="app",
        secret_ref="secret.idp",
    )
    secret = Secret(name="idp", value="s3cret", allowed_hosts=["mcp.example.com", "idp.example.com"])
    with pytest.raises(PermissionDenied) as refused:
        check_scope(secret, per_user)
    assert refused.value.code == "secret_host_not_allowed" and "public client" in refused.value.message
    assert "s3cret" not in refused.value.message
    bearer = server("tickets", "https://mcp.example.com/mcp", type="bearer", secret_ref="secret.idp")
    check_scope(secret, bearer)  # the same secret to a host it lists: fine
