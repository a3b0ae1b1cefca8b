"""Hatchway as an MCP server: the service behind each ``mcp_endpoints`` entry, over the engine.

An endpoint (``endpoint.py``) serves one plugin's or one agent's tools through the engine's one MCP
catalog (listing, pins, names, routing), each call a run of its own (admitted, recorded, traced);
an agent's operations and their confirmation through MCP are ``operations.py``'s, an upstream's
requests for input put to the endpoint's client ``relay.py``'s, resources and prompts
``passthrough.py``'s, what goes back to the client (redacted, in one error shape) ``results.py``'s,
and the sessions told of tool changes ``listeners.py``'s.

The ASGI side — authentication, the DNS-rebinding checks, routing a request to its endpoint, the
protected resource metadata — is the API layer's (``api/mcp_endpoints``), which builds each
``Endpoint`` with its collaborators (``EndpointDeps``).
"""
