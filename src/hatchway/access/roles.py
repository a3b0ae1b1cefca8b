"""The route × role table: every route names the roles it grants, and one not named is refused.

The table is the one home of "who may call what" for every entry point (FastAPI routes, the hot
ASGI routes, the MCP endpoints, the WebSocket); each calls ``check_route`` with the route's method
and path template. Objects of one end user (operations, connections) are narrowed further where they
are read: an ``app`` key reaches only its own end user's (``check_own_end_user``).
"""

from __future__ import annotations

from hatchway.errors import InsufficientRole
from hatchway.principal import Principal, Role

APP = frozenset({Role.APP, Role.ADMIN, Role.PLATFORM})
"""Inference and its own end users' objects."""
READ = frozenset({Role.APP, Role.VIEWER, Role.ADMIN, Role.PLATFORM})
"""What every role may read."""
VIEW = frozenset({Role.VIEWER, Role.ADMIN, Role.PLATFORM})
"""The organisation's records: logs, usage, every response, drift."""
ADMIN = frozenset({Role.ADMIN, Role.PLATFORM})
PLATFORM = frozenset({Role.PLATFORM})

WEBSOCKET = "WEBSOCKET"
"""The method ``check_route`` is given for a WebSocket route."""

ROUTE_ROLES: dict[tuple[str, str], frozenset[Role]] = {
    # inference
    ("POST", "/v1/chat/completions"): APP,
    ("POST", "/v1/messages"): APP,
    ("POST", "/v1/messages/count_tokens"): APP,
    ("POST", "/v1/responses"): APP,
    (WEBSOCKET, "/v1/responses"): APP,
    ("POST", "/v1/responses/compact"): APP,
    ("POST", "/v1/responses/{response_id}/cancel"): APP,
    ("DELETE", "/v1/responses/{response_id}"): APP,
    ("POST", "/mcp/{name}"): APP,
    ("GET", "/mcp/{name}"): APP,
    ("DELETE", "/mcp/{name}"): APP,
    ("POST", "/a2a/{agent}"): APP,  # A2A (api/a2a.py): sending messages, cancelling tasks
    ("GET", "/a2a/{agent}"): APP,  # …and reading them (HTTP+JSON binding): tasks are per end user
    ("DELETE", "/a2a/{agent}"): APP,  # …and deleting a task's push notification config (HTTP+JSON)
    ("GET", "/v1/responses/{response_id}"): READ,
    ("GET", "/v1/responses/{response_id}/input_items"): READ,
    ("GET", "/v1/models"): READ,
    ("GET", "/v1/mcp/servers"): READ,
    ("GET", "/v1/mcp/endpoints"): READ,
    # one end user's objects (an app key: its own end user's only)
    ("GET", "/v1/operations"): READ,
    ("GET", "/v1/operations/{operation_id}"): READ,
    ("POST", "/v1/operations/{operation_id}/confirm"): APP,
    ("POST", "/v1/operations/{operation_id}/cancel"): APP,
    # approvals: decided by verified people (engine/tools/operations/approvals.py); a viewer reads
    ("GET", "/v1/approvals"): READ,
    ("GET", "/v1/approvals/{operation_id}"): READ,
    ("POST", "/v1/approvals/{operation_id}/approve"): APP,
    ("POST", "/v1/approvals/{operation_id}/reject"): APP,
    ("GET", "/v1/connections"): READ,
    ("DELETE", "/v1/connections/{server}"): APP,
    # the organisation's records
    ("GET", "/v1/responses"): VIEW,
    ("GET", "/v1/logs"): VIEW,
    ("GET", "/v1/logs/{log_id}"): VIEW,
    ("GET", "/v1/usage"): VIEW,
    ("GET", "/v1/tools/drift"): VIEW,
    # the organisation's configuration
    ("GET", "/v1/secrets"): ADMIN,
    ("PUT", "/v1/secrets/{name}"): ADMIN,
    ("DELETE", "/v1/secrets/{name}"): ADMIN,
    ("POST", "/v1/tools/drift/{server}/approve"): ADMIN,
    # the admin API (api/admin.py): an organisation's admin in its own, a platform admin in any
    ("GET", "/v1/admin/me"): READ,
    ("GET", "/v1/admin/orgs"): PLATFORM,
    ("POST", "/v1/admin/orgs"): PLATFORM,
    ("GET", "/v1/admin/orgs/{org}"): ADMIN,
    ("GET", "/v1/admin/orgs/{org}/keys"): ADMIN,
    ("POST", "/v1/admin/orgs/{org}/keys"): ADMIN,
    ("GET", "/v1/admin/orgs/{org}/keys/{key_id}"): ADMIN,
    ("PATCH", "/v1/admin/orgs/{org}/keys/{key_id}"): ADMIN,
    ("DELETE", "/v1/admin/orgs/{org}/keys/{key_id}"): ADMIN,
    ("POST", "/v1/admin/orgs/{org}/keys/{key_id}/rotate"): ADMIN,
    ("GET", "/v1/admin/orgs/{org}/limits"): ADMIN,
    ("PUT", "/v1/admin/orgs/{org}/limits"): PLATFORM,
    ("DELETE", "/v1/admin/orgs/{org}/limits"): PLATFORM,
    ("GET", "/v1/admin/orgs/{org}/settings"): ADMIN,
    ("GET", "/v1/admin/orgs/{org}/audit"): ADMIN,
}
"""(method, path template) → the roles granted. A route missing here is refused to every key."""

_NEEDED = {APP: "app", READ: "app or viewer", VIEW: "viewer", ADMIN: "admin", PLATFORM: "platform"}


def check_route(principal: Principal, method: str, path: str) -> None:
    """InsufficientRole (403) unless the principal's role is granted ``method path``."""
    granted = ROUTE_ROLES.get((method, path))
    if granted is None:
        raise InsufficientRole(f"{method} {path} is not granted to any key role.", param="role")
    if principal.role not in granted:
        raise InsufficientRole(
            f"{method} {path} needs a key with the {_NEEDED.get(granted, 'admin')} role "
            f"(this {'person' if principal.subject else 'key'} is {principal.role.value}).",
            param="role",
        )


def check_org(principal: Principal, org_id: str) -> None:
    """An organisation's admin manages its own organisation only; a platform admin any."""
    if principal.role is not Role.PLATFORM and principal.org_id != org_id:
        raise InsufficientRole("This key manages its own organisation only.", param="org")


def check_model(principal: Principal, model: str) -> None:
    """InsufficientRole unless the key may call ``model`` (its ``allowed_models``)."""
    allowed = principal.allowed_models
    if allowed is not None and model not in allowed:
        raise InsufficientRole(
            f"model: this key may call only {', '.join(sorted(allowed)) or 'no model'} (got {model!r}).",
            param="model",
        )


def check_endpoint(principal: Principal, name: str) -> None:
    """InsufficientRole unless the key may use the MCP endpoint ``name`` (its ``allowed_mcp_endpoints``)."""
    allowed = principal.allowed_mcp_endpoints
    if allowed is not None and name not in allowed:
        raise InsufficientRole(f"This key may not use the MCP endpoint '{name}'.", param="endpoint")


def narrows_to_end_user(principal: Principal) -> bool:
    """Whether the principal sees only its own end user's objects (an ``app`` key)."""
    return principal.role is Role.APP
