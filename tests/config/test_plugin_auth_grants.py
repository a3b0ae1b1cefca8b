"""Plugin validation of the auth modes added for DPoP, workload identity and ID-JAG: each key is
accepted where its grant uses it, refused elsewhere with the field path and the fix."""

from __future__ import annotations

from typing import Any

import pytest

from hatchway.config.plugin import validate_plugin
from hatchway.errors import ConfigError


def _plugin(**auth: Any) -> dict[str, Any]:
    return {"version": "1", "mcp_servers": [{"id": "s", "url": "https://mcp.example.com/mcp", "auth": auth}]}


WIF = {"type": "oauth", "grant": "jwt_bearer", "token_url": "https://as.example.com/token"}
XAA = {
    "type": "oauth",
    "grant": "identity_assertion",
    "token_url": "https://as.example.com/token",
    "client_id": "crm",
    "secret_ref": "secret.crm",
    "audience": "https://as.example.com",
    "idp_token_url": "https://idp.example.com/oauth2/token",
    "subject_token_ref": "secret.alice_id_token",
}


@pytest.mark.parametrize(
    "auth",
    [
        {"type": "oauth", "grant": "authorization_code", "dpop": True},
        {**WIF, "assertion_ref": "file:/var/run/secrets/tokens/mcp"},
        {**WIF, "assertion_ref": "env:MCP_ASSERTION", "client_id": "wl"},
        {**WIF, "assertion_ref": "secret.wl", "client_id": "wl", "secret_ref": "secret.wl_client"},
        XAA,
        {**XAA, "idp_client_id": "gateway", "subject_token_type": "saml2"},
    ],
)
def test_each_grant_takes_its_keys(auth: dict[str, Any]) -> None:
    server = validate_plugin(_plugin(**auth), "p.yaml").mcp_servers[0]
    assert server.auth.grant == auth["grant"]


A = "mcp_servers[0].auth"


@pytest.mark.parametrize(
    ("auth", "expected"),
    [
        (
            {"type": "oauth", "grant": "client_credentials", "token_url": "https://as/t", "client_id": "c",
             "secret_ref": "secret.s", "dpop": True},
            f"{A}.dpop: only with type oauth and grant authorization_code",
        ),
        (WIF, f"{A}.assertion_ref: required for grant jwt_bearer"),
        ({**WIF, "assertion_ref": "var/token"}, f"{A}.assertion_ref: must be secret.<name>, env:<NAME>"),
        ({**WIF, "assertion_ref": "env:1BAD"}, f"{A}.assertion_ref: an env reference needs a variable"),
        ({**WIF, "assertion_ref": "file:token"}, f"{A}.assertion_ref: a file reference needs an absolute"),
        ({**WIF, "assertion_ref": "secret.a", "secret_ref": "secret.s"}, f"{A}.client_id: required when"),
        ({**XAA, "audience": None}, f"{A}.audience: required for grant identity_assertion"),
        ({**XAA, "idp_token_url": "http://idp.example.com/t"}, f"{A}.idp_token_url: must be https"),
        ({**XAA, "secret_ref": None}, f"{A}.secret_ref: required"),
        ({"type": "bearer", "secret_ref": "secret.s", "assertion_ref": "env:A"},
         f"{A}.assertion_ref: token_url, client_id"),
    ],
)  # fmt: skip
def test_misplaced_or_missing_keys_are_named(auth: dict[str, Any], expected: str) -> None:
    auth = {k: v for k, v in auth.items() if v is not None}
    with pytest.raises(ConfigError) as failed:
        validate_plugin(_plugin(**auth), "p.yaml")
    rendered = "\n".join(f"{path}: {message}" for path, message in failed.value.problems)
    assert expected in rendered, rendered
